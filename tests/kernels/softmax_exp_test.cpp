// The softmax's exp on the dispatched instruction set (run again under every HEED_CPU_ISA):
// within 2.5e-7 relative plus |x| × 1.2e-7 (the rounding of x × log2(e) or of x's reduction
// by ln 2, each within 2^-24 of |x|) wherever the result is a normal float, and exact at the
// edges the kernels rely on (exp(-inf) = 0 for masked scores, exp(0) = 1 for a row's maximum).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_info.hpp"
#include "cpu/kernels.hpp"

namespace heed::test {
namespace {

double tolerance(float x) { return 2.5e-7 + 1.2e-7 * std::abs(static_cast<double>(x)); }

TEST(Float32Precision, SoftmaxExpAccuracy) {
  SCOPED_TRACE(to_string(cpu_info().isa));
  // Odd counts so that every call also ends in the scalar tail.
  std::vector<float> x;
  for (double value = -87.0; value < 88.0; value += 0.0013) x.push_back(static_cast<float>(value));
  for (int i = 0; i < 4096; ++i) x.push_back(-1.0f + static_cast<float>(i) * (2.0f / 4096.0f) + 1e-7f * static_cast<float>(i % 7));
  x.push_back(0.0f);
  std::vector<float> out(x.size(), std::numeric_limits<float>::quiet_NaN());
  cpu::run_softmax_exp(x.data(), static_cast<std::int64_t>(x.size()), out.data());
  double worst = 0.0;
  float worst_at = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    const double error = std::abs(static_cast<double>(out[i]) - ref) / ref / tolerance(x[i]);
    if (!(error <= worst)) {
      worst = error;
      worst_at = x[i];
    }
  }
  EXPECT_LE(worst, 1.0) << "error / tolerance at x = " << worst_at;
  EXPECT_EQ(out.back(), 1.0f);
}

TEST(Float32Precision, SoftmaxExpEdges) {
  SCOPED_TRACE(to_string(cpu_info().isa));
  const float inf = std::numeric_limits<float>::infinity();
  // Sixteen values, then the same one by one through the scalar tail.
  const std::vector<float> edges = {-inf, inf, -1e30f, 1e30f, -200.0f, -110.0f, 89.0f, 0.0f,
                                    -0.0f, -88.0f, -95.0f, -1e-30f, 1e-30f, -inf, 0.0f, -3.0f};
  for (const std::size_t count : {edges.size(), std::size_t{1}}) {
    for (std::size_t first = 0; first + count <= edges.size(); first += count) {
      std::vector<float> out(count, 42.0f);
      cpu::run_softmax_exp(edges.data() + first, static_cast<std::int64_t>(count), out.data());
      for (std::size_t i = 0; i < count; ++i) {
        const float x = edges[first + i], got = out[i];
        SCOPED_TRACE(testing::Message() << "exp(" << x << ") = " << got);
        const double ref = std::exp(static_cast<double>(x));
        if (x < -104.0f) {
          EXPECT_EQ(got, 0.0f);  // below half the smallest subnormal
        } else if (x > 88.73f) {
          EXPECT_EQ(got, inf);
        } else if (x < -87.33f) {  // a subnormal result: 0 (flushed) or rounded to its step
          EXPECT_TRUE(got == 0.0f || std::abs(static_cast<double>(got) - ref) <= 1.5e-45 + tolerance(x) * ref);
        } else {
          EXPECT_NEAR(got / ref, 1.0, tolerance(x));
        }
      }
      const float nan = std::numeric_limits<float>::quiet_NaN();
      float got = 0.0f;
      cpu::run_softmax_exp(&nan, 1, &got);
      EXPECT_TRUE(std::isnan(got));
    }
  }
}


// The bfloat16 tiled route's weights, 2^x for x <= 0 (log2 units), as accurate as they are
// kept: one bfloat16 part within 1.1e-4 relative, two within 3.6e-6, three within 2.5e-7; 2^0 = 1
// and 2^-inf = 0 exactly, NaN kept.
TEST(Float32Precision, WeightsExp2Accuracy) {
  SCOPED_TRACE(to_string(cpu_info().isa));
  std::vector<float> x;
  for (double value = -125.0; value <= 0.0; value += 0.000731) x.push_back(static_cast<float>(value));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f, -0.0f, -inf, std::numeric_limits<float>::quiet_NaN(), -1e-30f, -200.0f};
  x.insert(x.end(), edges.begin(), edges.end());
  const double bounds[] = {1.1e-4, 3.6e-6, 2.5e-7};
  for (int parts = 1; parts <= 3; ++parts) {
    SCOPED_TRACE(testing::Message() << parts << " part(s)");
    std::vector<float> out(x.size(), 42.0f);
    if (!cpu::run_weights_exp2(parts, x.data(), static_cast<std::int64_t>(x.size()), out.data())) {
      EXPECT_LT(cpu_info().isa, CpuIsa::Avx512Bf16);
      return;
    }
    double worst = 0.0;
    float worst_at = 0.0f;
    const std::size_t normal = x.size() - edges.size();
    for (std::size_t i = 0; i < normal; ++i) {
      const double ref = std::exp2(static_cast<double>(x[i]));
      const double error = std::abs(static_cast<double>(out[i]) - ref) / ref;
      if (!(error <= worst)) {
        worst = error;
        worst_at = x[i];
      }
    }
    EXPECT_LE(worst, bounds[parts - 1]) << "at x = " << worst_at;
    EXPECT_EQ(out[normal + 0], 1.0f);
    EXPECT_EQ(out[normal + 1], 1.0f);
    EXPECT_EQ(out[normal + 2], 0.0f);
    EXPECT_TRUE(std::isnan(out[normal + 3]));
    EXPECT_NEAR(out[normal + 4], 1.0f, bounds[parts - 1]);
    EXPECT_EQ(out[normal + 5], 0.0f);
  }
}

}  // namespace
}  // namespace heed::test
