#pragma once
// Device helpers shared by the CUDA kernels: element conversion, 16-byte chunk loads,
// mask and sink reads, the geometry of one query row.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/params.hpp"

namespace heed::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
__device__ __forceinline__ float to_float(T value);
template <>
__device__ __forceinline__ float to_float<float>(float value) { return value; }
template <>
__device__ __forceinline__ float to_float<__half>(__half value) { return __half2float(value); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename T>
__device__ __forceinline__ T from_float(float value);
template <>
__device__ __forceinline__ float from_float<float>(float value) { return value; }
template <>
__device__ __forceinline__ __half from_float<__half>(float value) { return __float2half_rn(value); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float value) { return __float2bfloat16_rn(value); }

// Element `offset` of a tensor of runtime type, as float (Bool: 1 or 0).
__device__ __forceinline__ float load_element(const void* base, ElementType type, std::int64_t offset) {
  switch (type) {
    case ElementType::Float32: return static_cast<const float*>(base)[offset];
    case ElementType::Float16: return __half2float(static_cast<const __half*>(base)[offset]);
    case ElementType::BFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[offset]);
    case ElementType::Bool: return static_cast<const unsigned char*>(base)[offset] != 0 ? 1.0f : 0.0f;
  }
  return 0.0f;
}

__device__ __forceinline__ void store_element(void* base, ElementType type, std::int64_t offset, float value) {
  switch (type) {
    case ElementType::Float32: static_cast<float*>(base)[offset] = value; break;
    case ElementType::Float16: static_cast<__half*>(base)[offset] = __float2half_rn(value); break;
    case ElementType::BFloat16: static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(value); break;
    case ElementType::Bool: break;
  }
}

// Elements [d0, d0 + E) of a row as one 16-byte chunk; zeros beyond `dim`. `wide`: one
// 16-byte load (the caller checked alignment, stride 1 and dim % E == 0).
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const T* row, std::int64_t stride, std::int64_t d0, std::int64_t dim,
                                            bool wide) {
  constexpr int E = 16 / sizeof(T);
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (d0 >= dim) return raw;
  if (wide) return __ldg(reinterpret_cast<const uint4*>(row + d0));
  T* elements = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (d0 + e < dim) elements[e] = row[(d0 + e) * stride];
  }
  return raw;
}

template <typename T>
__device__ __forceinline__ float chunk_element(const uint4& raw, int e) {
  return to_float(reinterpret_cast<const T*>(&raw)[e]);
}

// Keys [begin, end) that causal and window geometry leave visible to query row i.
struct KeyRange {
  std::int64_t begin, end;
};
__device__ __forceinline__ KeyRange keys_for_row(const Geometry& g, std::int64_t i) {
  const std::int64_t diagonal = i + (g.kv_len - g.q_len);
  KeyRange range{0, g.kv_len};
  if (g.causal) range.end = min(max(diagonal + 1, std::int64_t{0}), g.kv_len);
  if (g.window > 0) range.begin = min(max(diagonal - g.window + 1, std::int64_t{0}), g.kv_len);
  return range;
}

// The mask's verdict on score (b, h, i, j): -inf (masked), or the value to add (0 for bool).
__device__ __forceinline__ float mask_term(const MaskArgs& mask, std::int64_t b, std::int64_t h, std::int64_t i,
                                           std::int64_t j) {
  if (mask.kind == MaskType::None) return 0.0f;
  const std::int64_t offset = b * mask.strides.s[0] + h * mask.strides.s[1] + i * mask.strides.s[2] +
                              j * mask.strides.s[3];
  const float value = load_element(mask.data, mask.type, offset);
  if (mask.kind == MaskType::Bool) return value != 0.0f ? 0.0f : -INFINITY;
  return value;
}

__device__ __forceinline__ float sink_logit(const SinkArgs& sinks, std::int64_t h) {
  return load_element(sinks.data, sinks.type, h * sinks.stride);
}

}  // namespace heed::cuda
