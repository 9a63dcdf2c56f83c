#pragma once
// The call descriptor: one attention call as validation leaves it. `Problem` is what the planner
// reads (sizes, dtype, options, layout facts; equal problems give equal plans); `Call` adds the
// data (pointers, strides, scale, mask and sink arguments). Plain structs, no CUDA types: the
// CPU kernels read a Call directly, the CUDA launches copy it by value.

#include <cstdint>
#include <optional>

#include "core/host_device.hpp"
#include "heed/dtype.hpp"
#include "heed/options.hpp"

namespace heed::call {

inline constexpr const char* kOp = "heed::attention";

enum class MaskKind : std::uint8_t { None, Bool, Additive };

// Strides in elements of a [b, h, i, j] (or [b, h, l, d]) tensor; zero along broadcast axes.
struct Strides {
  std::int64_t s[4] = {0, 0, 0, 0};
  HEED_HOST_DEVICE std::int64_t operator[](int axis) const { return s[axis]; }
  HEED_HOST_DEVICE std::int64_t& operator[](int axis) { return s[axis]; }
  bool operator==(const Strides&) const = default;
};

struct Mask {
  const void* data = nullptr;
  MaskKind kind = MaskKind::None;
  DType dtype = DType::Bool;
  Strides strides;  // [b, h, i, j]; zero along broadcast dimensions
};

struct Sinks {
  const void* data = nullptr;  // null: no sinks
  DType dtype = DType::Float32;
  std::int64_t stride = 1;
};

struct Problem {
  std::int64_t batch = 0;
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;
  std::int64_t head_dim = 0;
  std::int64_t value_dim = 0;
  std::int64_t group = 0;  // query heads per key head: Hq / Hkv (0 when Hkv is)
  DType dtype = DType::Float32;
  bool causal = false;
  // Sliding window (causal only); 0: none. Validation stores at most Lk: a wider window hides
  // nothing.
  std::int64_t window = 0;
  MaskKind mask_kind = MaskKind::None;
  bool has_sinks = false;
  // Logit softcap c: scores become c · tanh(s / c) after the scale; 0: none.
  float softcap = 0.0f;
  std::optional<std::int64_t> max_score_bytes;
  std::optional<std::int64_t> max_scratch_bytes;
  RouteChoice route = RouteChoice::Auto;
  // Rows of q, k and v are contiguous and do not overlap (leading dimension >= the row), so
  // BLAS could read them in place were they float32.
  bool rows_contiguous = true;
  // Rows of q, k and v can be read as whole 16-byte chunks: stride-1 last dimension, the other
  // strides and the data pointers multiples of 16 bytes. For shapes alone (contiguous, aligned
  // data): row sizes in whole 16-byte chunks.
  bool rows_wide = true;
  // Batch and head index of q, k and v fold into one: each tensor's batch stride is its heads
  // times its head stride (or B is 1), so one strided-batched GEMM can cover several batches.
  bool batch_folds = true;
  // k's and v's strides along B, H and L are positive wherever the size is above 1 (and below
  // 2^40 bytes): what a TMA tensor map can describe.
  bool kv_strides_positive = true;

  HEED_HOST_DEVICE bool empty_output() const {
    return batch == 0 || q_heads == 0 || q_len == 0 || value_dim == 0;
  }
  bool operator==(const Problem&) const = default;
};

struct Call : Problem {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  Strides q_strides, k_strides, v_strides, out_strides;
  float scale = 1.0f;
  Mask mask;
  Sinks sinks;
  bool out_rows_wide = false;  // out's rows take 16-byte stores, as rows_wide says of q, k, v
};

}  // namespace heed::call
