#pragma once
// Conversions between the caller's strided rows and float32 rows.

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/isa.hpp"
#include "heed/dtype.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {

// float(x) for one float16 x, exactly: the compiler's _Float16 (vcvtph2ps where the ISA has
// F16C) where it has the type; else (clang 14 on x86) F16C's scalar conversion or the bit
// conversion.
[[gnu::always_inline]] inline float half_to_float(std::uint16_t bits) {
#if defined(__FLT16_MANT_DIG__)
  return static_cast<float>(std::bit_cast<_Float16>(bits));
#elif defined(__F16C__)
  return _cvtsh_ss(bits);
#else
  return half_bits_to_float(bits);
#endif
}

inline float load_element(const void* base, DType dtype, std::int64_t offset) {
  switch (dtype) {
    case DType::Float32: return static_cast<const float*>(base)[offset];
    case DType::Float16: return half_bits_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::BFloat16: return bfloat16_bits_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::Bool: return static_cast<const std::uint8_t*>(base)[offset] != 0 ? 1.0f : 0.0f;
    case DType::Int32: return static_cast<float>(static_cast<const std::int32_t*>(base)[offset]);
  }
  return 0.0f;
}

// dst[e] = float(row[e * stride]) for e < count, row starting at element `offset`.
inline void load_row(const void* base, DType dtype, std::int64_t offset, std::int64_t stride,
                     std::int64_t count, float* dst) {
  if (dtype == DType::Float32 && stride == 1) {
    std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  if (dtype == DType::BFloat16) {
    const auto* row = static_cast<const std::uint16_t*>(base) + offset;
    for (std::int64_t e = 0; e < count; ++e) {
      dst[e] = std::bit_cast<float>(static_cast<std::uint32_t>(row[e * stride]) << 16);
    }
    return;
  }
  if (dtype == DType::Float16) {  // IEEE conversion: F16C where the ISA has it
    const auto* row = static_cast<const std::uint16_t*>(base) + offset;
    for (std::int64_t e = 0; e < count; ++e) dst[e] = half_to_float(row[e * stride]);
    return;
  }
  for (std::int64_t e = 0; e < count; ++e) dst[e] = load_element(base, dtype, offset + e * stride);
}

// row[0..count) = half(src[0..count)), rounding to nearest even: 16 or 8 at a time by the
// ISA's conversion (the same results as float_to_half_bits, NaNs quieted with their payload's
// top bits), the tail one at a time.
inline void store_half_row(const float* src, std::int64_t count, std::uint16_t* row) {
  std::int64_t e = 0;
#if defined(__AVX512F__)
  for (; e + 16 <= count; e += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + e),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#elif defined(__F16C__)
  for (; e + 8 <= count; e += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + e),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; e < count; ++e) row[e] = float_to_half_bits(src[e]);
}

// row[0..count) = bfloat16(src[0..count)), rounding to nearest even (float_to_bfloat16_bits
// written so that the compiler vectorises it).
inline void store_bfloat16_row(const float* src, std::int64_t count, std::uint16_t* row) {
  for (std::int64_t e = 0; e < count; ++e) {
    const auto bits = std::bit_cast<std::uint32_t>(src[e]);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    row[e] = static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

// row[e * stride] = dtype(src[e]), rounding to nearest even.
inline void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t stride, std::int64_t count,
                      const float* src) {
  switch (dtype) {
    case DType::Float32: {
      float* row = static_cast<float*>(base) + offset;
      for (std::int64_t e = 0; e < count; ++e) row[e * stride] = src[e];
      return;
    }
    case DType::Float16: {
      auto* row = static_cast<std::uint16_t*>(base) + offset;
      if (stride == 1) return store_half_row(src, count, row);
      for (std::int64_t e = 0; e < count; ++e) row[e * stride] = float_to_half_bits(src[e]);
      return;
    }
    case DType::BFloat16: {
      auto* row = static_cast<std::uint16_t*>(base) + offset;
      if (stride == 1) return store_bfloat16_row(src, count, row);
      for (std::int64_t e = 0; e < count; ++e) row[e * stride] = float_to_bfloat16_bits(src[e]);
      return;
    }
    case DType::Bool:
    case DType::Int32: return;
  }
}

}  // namespace HEED_ISA
}  // namespace heed::cpu
