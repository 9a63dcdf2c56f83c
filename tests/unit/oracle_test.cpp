// The float64 oracle against hand-computed answers: the tests of the kernels are only as good
// as this definition.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/reference/oracle.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Fills a tensor from values given in logical row-major order.
void fill(Tensor& tensor, const std::vector<double>& values) {
  ASSERT_EQ(static_cast<std::int64_t>(values.size()), tensor.numel());
  for (std::size_t n = 0; n < values.size(); ++n) tensor.set(static_cast<std::int64_t>(n), values[n]);
}

std::vector<double> oracle(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                           const AttentionOptions& options = {}) {
  return reference::attention(q.view(), k.view(), v.view(), scale, options);
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t n = 0; n < got.size(); ++n) EXPECT_NEAR(got[n], want[n], 1e-12) << "at " << n;
}

TEST(Oracle, SingleKeyReturnsItsValue) {
  Tensor q(Shape{1, 1, 2, 2}, DType::Float32), k(Shape{1, 1, 1, 2}, DType::Float32),
      v(Shape{1, 1, 1, 3}, DType::Float32);
  fill(q, {1, 2, -3, 4});
  fill(k, {0.5, -1});
  fill(v, {7, -8, 9});
  expect_near_all(oracle(q, k, v, 0.7), {7, -8, 9, 7, -8, 9});
}

TEST(Oracle, SoftmaxOfTwoKeys) {
  Tensor q(Shape{1, 1, 1, 2}, DType::Float32), k(Shape{1, 1, 2, 2}, DType::Float32),
      v(Shape{1, 1, 2, 1}, DType::Float32);
  fill(q, {1, 0});
  fill(k, {1, 0, 0, 1});
  fill(v, {1, 3});
  // scores 2 and 0 (scale 2): weights e^2 / (e^2 + 1) and 1 / (e^2 + 1).
  const double e2 = std::exp(2.0);
  expect_near_all(oracle(q, k, v, 2.0), {(e2 * 1 + 3) / (e2 + 1)});
}

TEST(Oracle, CausalIsBottomRightAndWindowLimitsKeys) {
  // q = 0: equal weights over the visible keys, so each row is the mean of its visible values.
  Tensor q(Shape{1, 1, 2, 1}, DType::Float32), k(Shape{1, 1, 3, 1}, DType::Float32),
      v(Shape{1, 1, 3, 1}, DType::Float32);
  fill(q, {0, 0});
  fill(k, {1, 2, 3});
  fill(v, {10, 20, 60});
  AttentionOptions causal;
  causal.causal = true;
  // Lk - Lq = 1: row 0 sees keys 0..1, row 1 sees keys 0..2.
  expect_near_all(oracle(q, k, v, 1.0, causal), {15, 30});
  causal.window = 1;  // only key i + 1
  expect_near_all(oracle(q, k, v, 1.0, causal), {20, 60});
  causal.window = 2;
  expect_near_all(oracle(q, k, v, 1.0, causal), {15, 40});
}

TEST(Oracle, CausalWithMoreQueriesThanKeysGivesZeroRows) {
  Tensor q(Shape{1, 1, 3, 1}, DType::Float32), k(Shape{1, 1, 2, 1}, DType::Float32),
      v(Shape{1, 1, 2, 1}, DType::Float32);
  fill(q, {0, 0, 0});
  fill(k, {1, 1});
  fill(v, {4, 8});
  AttentionOptions causal;
  causal.causal = true;
  AttentionOptions with_sinks = causal;
  Tensor sinks(Shape{1}, DType::Float32);
  fill(sinks, {0.0});
  with_sinks.sinks = sinks.view();
  // Lk - Lq = -1: row 0 sees nothing, row 1 key 0, row 2 keys 0..1.
  expect_near_all(oracle(q, k, v, 1.0, causal), {0, 4, 6});
  // Sink logit 0 adds exp(0) = 1 to the denominator; the empty row stays zero.
  expect_near_all(oracle(q, k, v, 1.0, with_sinks), {0, 4.0 / 2, 12.0 / 3});
}

TEST(Oracle, SinksAreUnscaledAndJoinTheMax) {
  Tensor q(Shape{1, 2, 1, 1}, DType::Float32), k(Shape{1, 1, 2, 1}, DType::Float32),
      v(Shape{1, 1, 2, 1}, DType::Float32), sinks(Shape{2}, DType::Float32);
  fill(q, {0, 0});
  fill(k, {1, 1});
  fill(v, {2, 4});
  fill(sinks, {std::log(2.0), 800.0});  // the second would overflow exp without the max shift
  AttentionOptions options;
  options.sinks = sinks.view();
  const auto out = oracle(q, k, v, 10.0, options);
  const double sink = static_cast<float>(std::log(2.0));  // as stored
  EXPECT_NEAR(out[0], (2.0 + 4.0) / (2.0 + std::exp(sink)), 1e-12);
  EXPECT_NEAR(out[1], 0.0, 1e-300);
  EXPECT_FALSE(std::isnan(out[1]));
}

TEST(Oracle, GroupedQueryHeadsReadTheirKeyValueHead) {
  Tensor q(Shape{1, 4, 1, 1}, DType::Float32), k(Shape{1, 2, 1, 1}, DType::Float32),
      v(Shape{1, 2, 1, 1}, DType::Float32);
  fill(q, {1, 1, 1, 1});
  fill(k, {1, 1});
  fill(v, {5, 9});
  expect_near_all(oracle(q, k, v, 1.0), {5, 5, 9, 9});
}

TEST(Oracle, BoolAndAdditiveMasks) {
  Tensor q(Shape{1, 1, 2, 1}, DType::Float32), k(Shape{1, 1, 3, 1}, DType::Float32),
      v(Shape{1, 1, 3, 1}, DType::Float32);
  fill(q, {0, 0});
  fill(k, {0, 0, 0});
  fill(v, {3, 6, 30});
  Tensor bool_mask(Shape{2, 3}, DType::Bool);
  fill(bool_mask, {1, 1, 0, 0, 0, 0});
  AttentionOptions options;
  options.mask = bool_mask.view();
  expect_near_all(oracle(q, k, v, 1.0, options), {4.5, 0});

  Tensor additive(Shape{1, 1, 2, 3}, DType::Float16);
  fill(additive, {0, std::log(2.0f), -kInf, -kInf, -kInf, -kInf});
  options.mask = additive.view();
  const double log2_half = half_bits_to_float(float_to_half_bits(std::log(2.0f)));
  const double w = std::exp(log2_half);
  expect_near_all(oracle(q, k, v, 1.0, options), {(3 + 6 * w) / (1 + w), 0});

  // Causal and mask together: a key must pass both (row 1 sees keys 0..2 by causality).
  Tensor key_padding(Shape{1, 1, 1, 3}, DType::Bool);
  fill(key_padding, {0, 1, 1});
  options.mask = key_padding.view();
  options.causal = true;
  expect_near_all(oracle(q, k, v, 1.0, options), {6, 18});
}

TEST(Oracle, ReadsThroughStridesAndDtypes) {
  std::mt19937_64 rng(7);
  Tensor q(Shape{2, 2, 5, 8}, DType::Float32), k(Shape{2, 1, 9, 8}, DType::Float32),
      v(Shape{2, 1, 9, 4}, DType::Float32);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  const auto contiguous = oracle(q, k, v, 0.3);
  for (Layout layout : {Layout::Padded, Layout::BLHD, Layout::StridedLast, Layout::ReversedL}) {
    Tensor q2(q.view().shape, DType::Float32, layout), k2(k.view().shape, DType::Float32, layout),
        v2(v.view().shape, DType::Float32, layout);
    for (std::int64_t n = 0; n < q.numel(); ++n) q2.set(n, q.get(n));
    for (std::int64_t n = 0; n < k.numel(); ++n) k2.set(n, k.get(n));
    for (std::int64_t n = 0; n < v.numel(); ++n) v2.set(n, v.get(n));
    EXPECT_EQ(oracle(q2, k2, v2, 0.3), contiguous) << to_string(layout);
  }
  // A bfloat16 tensor gives the same answer as float32 holding the same rounded values.
  Tensor qb(q.view().shape, DType::BFloat16), kb(k.view().shape, DType::BFloat16),
      vb(v.view().shape, DType::BFloat16);
  for (std::int64_t n = 0; n < q.numel(); ++n) {
    qb.set(n, q.get(n));
    q.set(n, qb.get(n));
  }
  for (std::int64_t n = 0; n < k.numel(); ++n) {
    kb.set(n, k.get(n));
    k.set(n, kb.get(n));
  }
  for (std::int64_t n = 0; n < v.numel(); ++n) {
    vb.set(n, v.get(n));
    v.set(n, vb.get(n));
  }
  EXPECT_EQ(oracle(qb, kb, vb, 0.3), oracle(q, k, v, 0.3));
}

TEST(Oracle, EmptySizes) {
  Tensor q(Shape{1, 2, 3, 4}, DType::Float32), k(Shape{1, 1, 0, 4}, DType::Float32),
      v(Shape{1, 1, 0, 5}, DType::Float32);
  EXPECT_EQ(oracle(q, k, v, 1.0), std::vector<double>(30, 0.0));
  Tensor q0(Shape{0, 2, 3, 4}, DType::Float32), k0(Shape{0, 1, 6, 4}, DType::Float32),
      v0(Shape{0, 1, 6, 5}, DType::Float32);
  EXPECT_TRUE(oracle(q0, k0, v0, 1.0).empty());
}

}  // namespace
}  // namespace heed::test
