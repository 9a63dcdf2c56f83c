#pragma once
// Element types and the float16 / bfloat16 conversions (round to nearest even; NaN and
// infinities preserved).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace heed {

// Int32 is for metadata only (cu_seqlens, block tables, lengths).
enum class DType : std::uint8_t { Float32, Float16, BFloat16, Bool, Int32 };

std::size_t size_of(DType dtype);
const char* to_string(DType dtype);          // "float32", "float16", "bfloat16", "bool", "int32"
const char* short_name(DType dtype);         // "f32", "f16", "bf16", "bool", "i32"
std::optional<DType> parse_dtype(std::string_view name);  // accepts both spellings
inline bool is_floating(DType dtype) { return dtype != DType::Bool && dtype != DType::Int32; }

std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(std::uint16_t bits);

// Storage types: 16 bits each, converting through float32.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  explicit half(float value) : bits(float_to_half_bits(value)) {}
  explicit operator float() const { return half_bits_to_float(bits); }
};

struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float value) : bits(float_to_bfloat16_bits(value)) {}
  explicit operator float() const { return bfloat16_bits_to_float(bits); }
};

}  // namespace heed
