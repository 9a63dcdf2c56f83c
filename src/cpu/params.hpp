#pragma once
// The plain parameters every CPU kernel takes: pointers, sizes, strides (elements), flags.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "heed/dtype.hpp"
#include "plan/problem.hpp"

namespace heed::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using Strides = std::array<std::int64_t, 4>;

struct MaskParams {
  const void* data = nullptr;
  DType dtype = DType::Bool;
  plan::MaskKind kind = plan::MaskKind::None;
  Strides strides{};  // [b, h, i, j]; zero along broadcast dimensions
};

struct KeyRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;  // exclusive; begin >= end: no key visible
};

struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  DType dtype = DType::Float32;
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  Strides q_strides{}, k_strides{}, v_strides{}, out_strides{};
  float scale = 1.0f;
  bool causal = false;
  std::int64_t window = 0;
  MaskParams mask;
  const void* sinks = nullptr;
  DType sinks_dtype = DType::Float32;
  std::int64_t sinks_stride = 1;

  std::int64_t group() const { return q_heads / kv_heads; }

  // Keys that causal and window geometry leave visible to query row i (bottom-right aligned).
  KeyRange keys_for_row(std::int64_t i) const {
    const std::int64_t diagonal = i + (kv_len - q_len);
    KeyRange range{0, kv_len};
    if (causal) range.end = std::clamp<std::int64_t>(diagonal + 1, 0, kv_len);
    if (window > 0) range.begin = std::clamp<std::int64_t>(diagonal - window + 1, 0, kv_len);
    return range;
  }
};

}  // namespace heed::cpu
