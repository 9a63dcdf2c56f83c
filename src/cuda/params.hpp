#pragma once
// The plain parameters the CUDA kernels take: pointers, sizes, strides (elements), flags.
// No CUDA types: built by host code, copied by value into the launches.

#include <cstdint>

namespace heed::cuda {

enum class ElementType : std::uint8_t { Float32, Float16, BFloat16, Bool };
enum class MaskType : std::uint8_t { None, Bool, Additive };

struct Strides4 {
  std::int64_t s[4] = {0, 0, 0, 0};
};

struct MaskArgs {
  const void* data = nullptr;
  MaskType kind = MaskType::None;
  ElementType type = ElementType::Bool;
  Strides4 strides;  // [b, h, i, j]; zero along broadcast dimensions
};

struct SinkArgs {
  const void* data = nullptr;  // null: no sinks
  ElementType type = ElementType::Float32;
  std::int64_t stride = 1;
};

// What every route reads: shapes, strides, geometry, masks and sinks.
struct Geometry {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, group = 1, q_len = 0, kv_len = 0;
  std::int64_t head_dim = 0, value_dim = 0;
  bool causal = false;
  std::int64_t window = 0;
  MaskArgs mask;
  SinkArgs sinks;
};

// What every CUDA route reads of a call: geometry, element type, the four tensors and their
// strides.
struct CallArgs {
  Geometry g;
  ElementType type = ElementType::Float32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  Strides4 q_strides, k_strides, v_strides, out_strides;
};

struct VectorArgs : CallArgs {
  float scale_log2 = 1.0f;  // scale × log2(e): scores live in the log2 domain
  bool wide_loads = false;  // 16-byte loads: last dimensions contiguous and rows aligned
  int lanes_per_key = 32;
  std::int64_t rows = 0;  // group × Lq
  std::int64_t row_tiles = 1;
  std::int64_t span_begin = 0, span_end = 0;
  std::int64_t partitions = 1, keys_per_partition = 0;
  float* partials = nullptr;  // [B][Hkv][rows][partitions][Dv + 2] when partitions > 1
  // The tensor-core kernel only (cuda/vector_mma.cuh):
  int row_tile = 8;    // query rows per block: 8 or 16
  int k_steps = 0;     // ceil(D / 32): 32-element steps of a K row
  int v_steps = 0;     // ceil(Dv / 64): 64-element steps of a V row
  int ring_items = 2;  // 16-key K or V items per warp in the shared-memory ring
};

}  // namespace heed::cuda
