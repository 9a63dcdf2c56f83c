#pragma once
// Device helpers shared by the CUDA kernels: element conversion and 16-byte chunk loads. The
// score semantics (key range, mask term, transform, finalize) are score/score.hpp's.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/params.hpp"
#include "cuda/ptx.cuh"
#include "score/score.hpp"

namespace heed::cuda {

using score::kLog2e;

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
__device__ __forceinline__ float load_element(const void* base, DType type, std::int64_t offset) {
  return score::load_float(base, type, offset);
}

__device__ __forceinline__ void store_element(void* base, DType type, std::int64_t offset, float value) {
  switch (type) {
    case DType::Float32: static_cast<float*>(base)[offset] = value; break;
    case DType::Float16: static_cast<__half*>(base)[offset] = __float2half_rn(value); break;
    case DType::BFloat16: static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(value); break;
    case DType::Bool:
    case DType::Int32: break;
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

// 2^x on the special-function unit (ex2.approx: relative error 2^-22), for the score header's
// transforms.
struct Exp2Approx {
  __device__ __forceinline__ float operator()(float x) const { return ptx::ex2_approx(x); }
};

// tanh on the special-function unit (tanh.approx.f32: relative error about 2^-11, NaN kept,
// ±1 at the saturations): one MUFU op where the exp2 form takes two. bfloat16's softcap, whose
// weights are rounded to 8 bits anyway (FlashAttention's choice for every 16-bit type); float16
// and float32 keep the exp2 form, whose error is within their tolerance (docs/decisions.md).
struct TanhApprox {
  __device__ __forceinline__ float operator()(float x) const { return ptx::tanh_approx(x); }
};
template <typename T>
using KernelTanh = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, TanhApprox, score::TanhByExp2<Exp2Approx>>;

using score::KeyRange;
using score::keys_for_row;
using score::mask_term;
using score::sink_logit;

}  // namespace heed::cuda
