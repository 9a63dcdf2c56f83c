#include "heed/dtype.hpp"

#include <bit>
#include <cstring>

namespace heed {

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Bool: return 1;
    case DType::Int32: return 4;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Bool: return "bool";
    case DType::Int32: return "int32";
  }
  return "unknown";
}

const char* short_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "f32";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Bool: return "bool";
    case DType::Int32: return "i32";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::Float32, DType::Float16, DType::BFloat16, DType::Bool, DType::Int32}) {
    if (name == to_string(d) || name == short_name(d)) return d;
  }
  return std::nullopt;
}

std::uint16_t float_to_bfloat16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

float bfloat16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_half_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    const bool is_nan = magnitude > 0x7f800000u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | (is_nan ? 0x0200u | ((magnitude >> 13) & 0x3ffu) : 0u));
  }
  // 65520 and above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half: rebias exponent, round mantissa to 10 bits
    const std::uint32_t rebased = magnitude - 0x38000000u;
    const std::uint32_t rounded = rebased + 0x0fffu + ((rebased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half (or zero): value = m * 2^-24 with m = round(value * 2^24).
  const int exponent = static_cast<int>(magnitude >> 23);
  if (exponent < 102) return sign;  // below half the smallest subnormal: rounds to zero
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const int shift = 126 - exponent;  // 14..24
  const std::uint32_t truncated = mantissa >> shift;
  const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  std::uint32_t result = truncated;
  if (remainder > halfway || (remainder == halfway && (truncated & 1u))) result += 1;
  return static_cast<std::uint16_t>(sign | result);
}

float half_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // exact
  return sign ? -magnitude : magnitude;
}

}  // namespace heed
