// float16 / bfloat16 conversions against an independent definition: decoding by ldexp, and
// rounding checked exhaustively at every midpoint between neighbouring 16-bit values.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <limits>
#include <random>

#include "heed/dtype.hpp"

namespace heed {
namespace {

// (-1)^s * 2^(e - 15) * 1.m, or m * 2^-24 when e == 0.
double decode_half(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// bfloat16 is float32 with 8 bits of precision and the same exponent range.
double decode_bfloat16(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 7) & 0xff, mantissa = bits & 0x7f;
  double magnitude;
  if (exponent == 0xff) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -133);
  } else {
    magnitude = std::ldexp(128 + mantissa, exponent - 134);
  }
  return sign ? -magnitude : magnitude;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

struct Format {
  const char* name;
  std::uint16_t (*encode)(float);
  float (*decode)(std::uint16_t);
  double (*reference_decode)(std::uint16_t);
  std::uint16_t max_finite;  // positive
  std::uint16_t infinity;
};

const Format kHalf{"float16", float_to_half_bits, half_bits_to_float, decode_half, 0x7bff, 0x7c00};
const Format kBFloat16{"bfloat16", float_to_bfloat16_bits, bfloat16_bits_to_float, decode_bfloat16,
                       0x7f7f, 0x7f80};

void PrintTo(const Format& format, std::ostream* os) { *os << format.name; }

class Conversion : public ::testing::TestWithParam<Format> {};

TEST_P(Conversion, DecodesEveryBitPattern) {
  const Format& f = GetParam();
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    ASSERT_TRUE(same_value(f.decode(b), f.reference_decode(b)))
        << f.name << " bits 0x" << std::hex << bits << " decode " << f.decode(b) << " want "
        << f.reference_decode(b);
  }
}

TEST_P(Conversion, RoundTripsEveryBitPattern) {
  const Format& f = GetParam();
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float value = f.decode(b);
    const std::uint16_t again = f.encode(value);
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(f.decode(again))) << f.name << " NaN 0x" << std::hex << bits << " became 0x" << again;
      ASSERT_EQ(again >> 15, b >> 15) << f.name << " NaN sign lost for 0x" << std::hex << bits;
    } else {
      ASSERT_EQ(again, b) << f.name << " 0x" << std::hex << bits << " -> " << value << " -> 0x" << again;
    }
  }
}

// Between every pair of neighbouring finite values (the largest finite one's neighbour being
// infinity): the midpoint rounds to the even pattern, and one float step either side rounds
// to the nearer value.
TEST_P(Conversion, RoundsToNearestEvenAtEveryMidpoint) {
  const Format& f = GetParam();
  int ties_checked = 0;
  for (std::uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
    for (std::uint32_t bits = 0; bits <= f.max_finite; ++bits) {
      const auto low = static_cast<std::uint16_t>(sign | bits);
      const auto high = static_cast<std::uint16_t>(sign | (bits + 1));
      const double low_value = f.reference_decode(low);
      // Past the largest finite value the next step would be max + ulp.
      double upper;
      if (bits + 1 == f.infinity) {
        const double ulp = f.reference_decode(f.max_finite) -
                           f.reference_decode(static_cast<std::uint16_t>(f.max_finite - 1));
        upper = (sign ? -1.0 : 1.0) * (std::abs(low_value) + ulp);
      } else {
        upper = f.reference_decode(high);
      }
      const double mid = (low_value + upper) / 2;
      const auto mid_float = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(mid_float), mid) << "midpoint not representable in float";
      const std::uint16_t even = (low & 1) == 0 ? low : high;
      ASSERT_EQ(f.encode(mid_float), even)
          << f.name << " tie between 0x" << std::hex << low << " and 0x" << high << " at " << mid;
      const float toward_low = std::nextafter(mid_float, static_cast<float>(low_value));
      const float toward_high = std::nextafter(mid_float, sign ? -std::numeric_limits<float>::infinity()
                                                               : std::numeric_limits<float>::infinity());
      ASSERT_EQ(f.encode(toward_low), low) << f.name << " just below midpoint of 0x" << std::hex << low;
      ASSERT_EQ(f.encode(toward_high), high) << f.name << " just above midpoint of 0x" << std::hex << low;
      ++ties_checked;
    }
  }
  EXPECT_EQ(ties_checked, 2 * (f.max_finite + 1));
}

TEST_P(Conversion, OverflowsToInfinityAndKeepsSpecials) {
  const Format& f = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f.encode(inf), f.infinity);
  EXPECT_EQ(f.encode(-inf), f.infinity | 0x8000);
  EXPECT_EQ(f.encode(std::numeric_limits<float>::max()), f.infinity);
  EXPECT_EQ(f.encode(-std::numeric_limits<float>::max()), f.infinity | 0x8000);
  EXPECT_EQ(f.encode(0.0f), 0x0000);
  EXPECT_EQ(f.encode(-0.0f), 0x8000);
  EXPECT_TRUE(std::isinf(f.decode(f.infinity)));
  // NaN stays NaN whatever its payload, including payloads only in the low bits that a
  // truncating conversion would turn into infinity; the sign is kept.
  for (std::uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0x7f802000u, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const float nan = std::bit_cast<float>(nan_bits);
    const std::uint16_t encoded = f.encode(nan);
    EXPECT_TRUE(std::isnan(f.decode(encoded))) << f.name << " NaN 0x" << std::hex << nan_bits << " -> 0x" << encoded;
    EXPECT_EQ(encoded >> 15, nan_bits >> 31) << f.name << " NaN sign of 0x" << std::hex << nan_bits;
  }
}

// Random float32 inputs against rounding in double to the nearest representable value.
TEST_P(Conversion, MatchesNearestOnRandomFloats) {
  const Format& f = GetParam();
  std::mt19937 rng(12345);
  for (int n = 0; n < 200000; ++n) {
    const float value = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(value)) continue;
    const std::uint16_t got = f.encode(value);
    const double got_value = f.reference_decode(got);
    ASSERT_EQ(std::signbit(got_value), std::signbit(value)) << value;
    const std::uint16_t magnitude = got & 0x7fff;
    // No other value lies closer: compare with both neighbours of the result.
    const double error = std::abs(got_value - value);
    if (std::isinf(got_value)) {
      const double max = f.reference_decode(f.max_finite);
      const double ulp = max - f.reference_decode(f.max_finite - 1);
      ASSERT_GE(std::abs(static_cast<double>(value)), max + ulp / 2) << f.name << " " << value;
      continue;
    }
    if (magnitude > 0) {
      const double below = f.reference_decode(static_cast<std::uint16_t>(got - 1));
      ASSERT_LE(error, std::abs(below - value)) << f.name << " " << value;
    }
    if (magnitude < f.max_finite) {
      const double above = f.reference_decode(static_cast<std::uint16_t>(got + 1));
      ASSERT_LE(error, std::abs(above - value)) << f.name << " " << value;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Conversion, ::testing::Values(kHalf, kBFloat16),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Half, Subnormals) {
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: even
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);  // tie 1|2: even
  EXPECT_EQ(float_to_half_bits(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(float_to_half_bits(1e-30f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-1e-30f), 0x8000);
}

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // tie with 65536: even is infinity
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: even
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(static_cast<float>(half(0.333333f)), half_bits_to_float(0x3555));
}

TEST(BFloat16, KnownValues) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: even
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: even
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bfloat16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie
  EXPECT_EQ(float_to_bfloat16_bits(std::bit_cast<float>(0x7f7f8000u)), 0x7f80);  // overflow tie
  EXPECT_EQ(float_to_bfloat16_bits(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(static_cast<float>(bfloat16(3.0f)), 3.0f);
}

TEST(DTypeNames, SizesAndSpellings) {
  EXPECT_EQ(size_of(DType::Float32), 4u);
  EXPECT_EQ(size_of(DType::Float16), 2u);
  EXPECT_EQ(size_of(DType::BFloat16), 2u);
  EXPECT_EQ(size_of(DType::Bool), 1u);
  for (DType d : {DType::Float32, DType::Float16, DType::BFloat16, DType::Bool}) {
    EXPECT_EQ(parse_dtype(to_string(d)), d);
    EXPECT_EQ(parse_dtype(short_name(d)), d);
  }
  EXPECT_STREQ(short_name(DType::BFloat16), "bf16");
  EXPECT_STREQ(to_string(DType::Float16), "float16");
  EXPECT_FALSE(parse_dtype("float64").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
  EXPECT_FALSE(is_floating(DType::Bool));
  EXPECT_TRUE(is_floating(DType::BFloat16));
}

}  // namespace
}  // namespace heed
