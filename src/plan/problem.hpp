#pragma once
// The validated description of one attention call: what the planner reads. Built by
// validate_problem, the single place where inputs are checked for plan and op alike.

#include <cstdint>
#include <optional>
#include <string>

#include "heed/dtype.hpp"
#include "heed/options.hpp"
#include "heed/shape.hpp"

namespace heed::plan {

inline constexpr const char* kOp = "heed::attention";

enum class MaskKind { None, Bool, Additive };

struct Problem {
  std::int64_t batch = 0;
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;
  std::int64_t head_dim = 0;
  std::int64_t value_dim = 0;
  DType dtype = DType::Float32;
  bool causal = false;
  std::int64_t window = 0;  // 0: no window
  MaskKind mask = MaskKind::None;
  bool sinks = false;
  std::optional<std::int64_t> max_score_bytes;
  RouteChoice route = RouteChoice::Auto;
  // Rows of q, k and v are contiguous and do not overlap (leading dimension >= the row), so
  // BLAS could read them in place were they float32.
  bool rows_contiguous = true;
  // Rows of q, k and v can be read as whole 16-byte chunks: stride-1 last dimension, the other
  // strides and the data pointers multiples of 16 bytes (the CUDA tiled kernel's copies). For
  // shapes alone (contiguous, aligned data): row sizes in whole 16-byte chunks.
  bool rows_wide = true;
  // Batch and head index of q, k and v fold into one: each tensor's batch stride is its heads
  // times its head stride (or B is 1), so (batch, head) pairs sit one head stride apart and one
  // strided-batched GEMM can cover several batches (the CUDA composed route). Shapes alone:
  // contiguous.
  bool batch_folds = true;
  // k's and v's strides along B, H and L are positive wherever the size is above 1 (and below
  // 2^40 bytes): what a TMA tensor map can describe (the Hopper tiled kernel). Shapes alone:
  // contiguous, so true.
  bool kv_strides_positive = true;

  std::int64_t group() const { return kv_heads > 0 ? q_heads / kv_heads : 0; }
  bool empty_output() const { return batch == 0 || q_heads == 0 || q_len == 0 || value_dim == 0; }
  bool operator==(const Problem&) const = default;
};

// The first line of every plan's explanation: "shape: B .., Hq .. / Hkv .. (group ..), ..",
// the dtype, then `device` (e.g. " on cuda:0 (NVIDIA H200, 132 SMs)"; empty on the CPU), then
// the options.
std::string describe(const Problem& p, const std::string& device = "");

// Every check of design.md §1 on shapes, dtypes and options; throws InvalidArgument with
// "[heed::attention] ..." and the values.
Problem validate_problem(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                         DType k_dtype, DType v_dtype, const AttentionOptions& options);

}  // namespace heed::plan
