#pragma once
// The plan of one attention call: which kernel runs, how much scratch it holds and why.
// plan_attention is pure: it reads only shapes, dtype, options and immutable device
// properties (thread count, cache sizes, ISA), so equal inputs give equal plans anywhere.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "heed/device.hpp"
#include "heed/dtype.hpp"
#include "heed/options.hpp"
#include "heed/shape.hpp"
#include "heed/tensor.hpp"

namespace heed {

namespace route {
// Decode: one task per (batch, key head) over all its query rows; keys split into `blocks`
// partitions (1 = single pass). passes = 2 when partial results are merged.
struct Vector {
  static constexpr const char* kName = "vector";
  int passes = 1;
  std::int64_t blocks = 1;
  std::int64_t dispatches = 1;
  friend bool operator==(const Vector&, const Vector&) = default;
};
// Online softmax over key tiles of block_k for query tiles of block_q rows.
struct Tiled {
  static constexpr const char* kName = "tiled";
  std::int64_t block_q = 0;
  std::int64_t block_k = 0;
  friend bool operator==(const Tiled&, const Tiled&) = default;
};
// Scores materialised for all Lq rows of one head, softmax, then P·V.
struct Composed {
  static constexpr const char* kName = "composed";
  friend bool operator==(const Composed&, const Composed&) = default;
};
// The composition over query-row blocks of `rows`, under a score cap.
struct ComposedBlocks {
  static constexpr const char* kName = "composed_blocks";
  std::int64_t rows = 0;
  friend bool operator==(const ComposedBlocks&, const ComposedBlocks&) = default;
};
}  // namespace route

using Kernel = std::variant<route::Vector, route::Tiled, route::Composed, route::ComposedBlocks>;

const char* route_name(const Kernel& kernel);  // "vector", "tiled", "composed", "composed_blocks"

// A kernel's fields by name, in declaration order ({"passes", 2}, {"blocks", 8}, ...): the one
// serialisation that the plan's JSON, the Python module and the benchmarks print.
std::vector<std::pair<const char*, std::int64_t>> kernel_fields(const Kernel& kernel);

// One named region of the scratch arena: `slices` equal parts of bytes / slices (one per
// worker for per-thread buffers), each aligned to kAllocationAlignment.
struct ScratchBuffer {
  std::string name;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::size_t slices = 1;
  friend bool operator==(const ScratchBuffer&, const ScratchBuffer&) = default;
};

struct AttentionPlan {
  Device device;
  DType dtype = DType::Float32;
  Kernel kernel;
  std::string kernel_name;           // the profiler name of the main dispatch
  int workers = 1;                   // threads the call uses
  std::size_t scratch_bytes = 0;     // peak bytes heed holds during the call
  std::size_t max_intermediate_bytes = 0;  // largest score-sized intermediate
  bool capped = false;               // the score cap changed the route or its blocking
  std::vector<ScratchBuffer> buffers;      // the layout of scratch_bytes
  std::vector<std::string> reasons;        // one line per decision, with its numbers

  std::string explain() const;  // reasons, one per line
  std::string to_json() const;
  friend bool operator==(const AttentionPlan&, const AttentionPlan&) = default;
};

// Plans for contiguous inputs of these shapes. Throws InvalidArgument for any input the op
// would reject, with the same message.
AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options,
                             Device device = Device::default_device());

// Plans for these views (their strides decide whether the inputs are copied).
AttentionPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options);

}  // namespace heed
