// The kernels' narrowing of contiguous float32 output rows to float16 and bfloat16 (vector
// conversions where the instruction set has them; run again under every HEED_CPU_ISA): bit for
// bit the scalar conversions heed::float_to_half_bits and float_to_bfloat16_bits, i.e. rounding
// to nearest even, overflow to infinity, subnormal results, NaNs quieted with their payload's
// top bits and sign kept.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu_info.hpp"
#include "cpu/kernels.hpp"
#include "heed/dtype.hpp"

namespace heed::test {
namespace {

// Every sign and exponent, each with mantissas at the rounding boundaries of both formats
// (halfway cases, one below and above, odd and even kept bits), then NaN payloads and
// infinities. 65519.99 (rounds to 65504) and 65520 (rounds to infinity) for float16's top.
std::vector<float> special_values() {
  std::vector<std::uint32_t> bits;
  const std::uint32_t mantissas[] = {0x000000, 0x000001, 0x000fff, 0x001000, 0x001001, 0x002000, 0x003000,
                                     0x007fff, 0x008000, 0x008001, 0x010000, 0x018000, 0x3fffff, 0x400000,
                                     0x7fe000, 0x7ff000, 0x7fffff, 0x555555, 0x2aaaaa};
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (std::uint32_t mantissa : mantissas) bits.push_back(sign | exponent << 23 | mantissa);
    }
  }
  std::vector<float> values;
  for (std::uint32_t b : bits) values.push_back(std::bit_cast<float>(b));
  for (float v : {65504.0f, 65519.99f, 65520.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f}) {
    values.push_back(v);
  }
  return values;
}

void expect_bitwise(DType dtype, std::uint16_t (*scalar)(float)) {
  SCOPED_TRACE(to_string(cpu_info().isa));
  const std::vector<float> values = special_values();
  // Every length up to 40 from every start, so that each value passes through the vector body
  // and the scalar tail; then the whole array at once.
  for (std::size_t count = 1; count <= 40; ++count) {
    for (std::size_t first = 0; first + count <= values.size(); first += count) {
      std::vector<std::uint16_t> out(count + 1, 0xdead);
      cpu::run_narrow_row(dtype, values.data() + first, static_cast<std::int64_t>(count), out.data());
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], scalar(values[first + i]))
            << to_string(dtype) << " of bits 0x" << std::hex << std::bit_cast<std::uint32_t>(values[first + i]);
      }
      ASSERT_EQ(out[count], 0xdead) << "written past the row's end";
    }
  }
}

TEST(Float32Precision, NarrowRowToFloat16) { expect_bitwise(DType::Float16, float_to_half_bits); }

TEST(Float32Precision, NarrowRowToBFloat16) { expect_bitwise(DType::BFloat16, float_to_bfloat16_bits); }

}  // namespace
}  // namespace heed::test
