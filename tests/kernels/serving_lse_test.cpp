// The lse output of the dense call on every route, merge_states of calls over split keys against
// the whole call, and the serving oracle itself (by hand, and its three forms against each other).
// Outputs are poisoned (NaN) before each call and their gaps must stay untouched.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference/oracle.hpp"
#include "cpu/reference/serving_oracle.hpp"
#include "kernels/grid_cases.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// The dense call's lse on every route, over rows that see no key (fully masked, Lq > Lk under
// causal, key padding), windows, sinks, softcap, strided tensors and a score cap.

std::vector<CaseSpec> dense_lse_cases() {
  const CaseSpec shapes[] = {
      Make("decode_gqa_sinks", 2, 8, 2, 1, 300).sinks(),
      Make("causal_lq_gt_lk_sinks", 1, 4, 2, 40, 25).causal().sinks().masked_rows(),
      Make("additive_masked_rows", 1, 2, 2, 29, 131, 64, 48).mask(MaskKind::Additive).masked_rows(),
      Make("key_padding_window", 3, 2, 1, 7, 100).mask(MaskKind::KeyPadding).window(30).masked_rows(),
      Make("blhd_softcap", 2, 4, 2, 33, 140).layout(Layout::BLHD).out_layout(Layout::BLHD).softcap(5.0f),
  };
  const NamedRoute routes[] = {kFusedRoutes[0], kFusedRoutes[1], kFusedRoutes[2], {RouteChoice::Composed, "composed"}};
  std::vector<CaseSpec> cases;
  for (const CaseSpec& shape : shapes) {
    for (DType dtype : kDtypes) {
      for (const NamedRoute& r : routes) {
        CaseSpec c = shape;
        c.name += std::string("_") + short_name(dtype) + "_" + r.name;
        c.dtype = dtype;
        c.route = r.route;
        cases.push_back(c);
      }
    }
  }
  // Under a cap the composed route runs in blocks of rows.
  for (DType dtype : kDtypes) {
    cases.push_back(Make(std::string("capped_blocks_") + short_name(dtype), 1, 2, 2, 200, 100, 64, 64, dtype)
                        .causal().sinks().cap(100 * 4 * 16).route(RouteChoice::Composed));
  }
  return cases;
}

class DenseLse : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(DenseLse, MatchesOracle) {
  const CaseSpec& spec = GetParam();
  const auto problem = make_problem(spec);
  Tensor lse(Shape{spec.batch, spec.q_heads, spec.q_len}, DType::Float32, Layout::Padded);
  lse.poison();
  const std::vector<unsigned char> lse_before = lse.storage();
  problem->options().lse = lse.view();
  const AttentionPlan plan = problem->plan();
  SCOPED_TRACE(plan.explain());
  expect_route(plan, spec.route);
  if (spec.max_score_bytes) EXPECT_TRUE(std::holds_alternative<route::ComposedBlocks>(plan.kernel));
  problem->run();
  const reference::AttentionResult ref = reference::attention_with_lse(
      problem->q().view(), problem->k().view(), problem->v().view(), problem->scale(), problem->options());
  EXPECT_TRUE(gaps_untouched(problem->out(), problem->out_before()));
  EXPECT_TRUE(matches_reference(problem->out().view(), ref.out));
  EXPECT_TRUE(gaps_untouched(lse, lse_before));
  EXPECT_TRUE(lse_matches(lse.view(), ref.lse, spec.dtype));
  if (spec.expect_masked_rows) {
    EXPECT_GT(compare(problem->out().view(), ref.out).zero_rows, 0) << "the case was meant to have rows that see no key";
  }
}

INSTANTIATE_TEST_SUITE_P(Serving, DenseLse, ::testing::ValuesIn(dense_lse_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// merge_states: two dense calls over disjoint halves of the keys, merged, are the whole call.

// Keys [first, first + count) of a dense [B, H, Lk, E] view (or columns of a [Lq, Lk] mask).
TensorView key_range(const TensorView& view, std::int64_t first, std::int64_t count) {
  const int axis = view.rank() - (view.rank() == 4 ? 2 : 1);
  TensorView part = view;
  part.shape[axis] = count;
  part.data = static_cast<unsigned char*>(view.data) +
              first * view.strides[static_cast<std::size_t>(axis)] * static_cast<std::int64_t>(size_of(view.dtype));
  return part;
}

struct DenseInputs {
  static constexpr std::int64_t kBatch = 2, kQHeads = 4, kKvHeads = 2, kQLen = 13, kKvLen = 90;
  static constexpr std::int64_t kHeadDim = 64, kValueDim = 48, kSplit = 37;
  Tensor q, k, v, mask, sinks;
  float scale = 0.125f;
  DenseInputs(DType dtype, std::mt19937_64& rng)
      : q(Shape{kBatch, kQHeads, kQLen, kHeadDim}, dtype, Layout::BLHD),
        k(Shape{kBatch, kKvHeads, kKvLen, kHeadDim}, dtype, Layout::BLHD),
        v(Shape{kBatch, kKvHeads, kKvLen, kValueDim}, dtype, Layout::BLHD),
        mask(Shape{kQLen, kKvLen}, DType::Bool),
        sinks(sink_logits(kQHeads, kKvLen, rng)) {
    q.fill_random(rng, 1.5);
    k.fill_random(rng, 1.5);
    v.fill_random(rng);
    // Rows i % 5 == 2 see no key of the first part, rows i % 3 == 1 none of the second: row 7
    // sees no key at all.
    mask.fill_random(rng);
    for (std::int64_t i = 0; i < kQLen; ++i) {
      for (std::int64_t j = 0; j < kKvLen; ++j) {
        if ((j < kSplit && i % 5 == 2) || (j >= kSplit && i % 3 == 1)) mask.set(i * kKvLen + j, 0.0);
      }
    }
  }
  Shape out_shape() const { return {kBatch, kQHeads, kQLen, kValueDim}; }
  Shape lse_shape() const { return {kBatch, kQHeads, kQLen}; }
};

class Merge : public ::testing::TestWithParam<DType> {};

TEST_P(Merge, SplitKeysMergeToTheWholeCall) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(seed_of(std::string("merge_") + short_name(dtype)));
  DenseInputs in(dtype, rng);
  constexpr std::int64_t m = DenseInputs::kSplit, rest = DenseInputs::kKvLen - DenseInputs::kSplit;
  for (bool with_sinks : {false, true}) {
    SCOPED_TRACE(with_sinks ? "sinks in the first part" : "no sinks");
    AttentionOptions whole;
    whole.mask = in.mask.view();
    whole.softcap = 20.0f;
    if (with_sinks) whole.sinks = in.sinks.view();
    AttentionOptions first = whole, second = whole;
    first.mask = key_range(in.mask.view(), 0, m);
    second.mask = key_range(in.mask.view(), m, rest);
    second.sinks.reset();  // sinks join one part's denominator only

    const TensorView k_a = key_range(in.k.view(), 0, m), v_a = key_range(in.v.view(), 0, m);
    const TensorView k_b = key_range(in.k.view(), m, rest), v_b = key_range(in.v.view(), m, rest);
    CallOutputs part_a(in.out_shape(), in.lse_shape(), dtype, Layout::Padded);
    CallOutputs part_b(in.out_shape(), in.lse_shape(), dtype, Layout::Contiguous);
    first.lse = part_a.lse.view();
    second.lse = part_b.lse.view();
    attention(in.q.view(), k_a, v_a, part_a.out.view(), in.scale, first);
    attention(in.q.view(), k_b, v_b, part_b.out.view(), in.scale, second);
    {
      SCOPED_TRACE("the dense parts with lse");
      expect_matches(part_a, reference::attention_with_lse(in.q.view(), k_a, v_a, in.scale, first), dtype, true, true);
      expect_matches(part_b, reference::attention_with_lse(in.q.view(), k_b, v_b, in.scale, second), dtype, true, true);
    }

    const reference::AttentionResult ref =
        reference::attention_with_lse(in.q.view(), in.k.view(), in.v.view(), in.scale, whole);
    CallOutputs merged(in.out_shape(), in.lse_shape(), dtype, Layout::Padded);
    merge_states(part_a.out.view(), part_a.lse.view(), part_b.out.view(), part_b.lse.view(), merged.out.view(),
                 merged.lse.view());
    {
      SCOPED_TRACE("merged");
      expect_matches(merged, ref, dtype, true, true);
    }
    // In place: the result over the first part's tensors.
    part_a.out_before = part_a.out.storage();
    part_a.lse_before = part_a.lse.storage();
    merge_states(part_a.out.view(), part_a.lse.view(), part_b.out.view(), part_b.lse.view(), part_a.out.view(),
                 part_a.lse.view());
    {
      SCOPED_TRACE("merged in place");
      expect_matches(part_a, ref, dtype, true, true);
    }
  }
}

// A part with no key (Lk = 0) has zeros and lse -inf, and merging it changes nothing.
TEST_P(Merge, EmptyPartAddsNothing) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(seed_of(std::string("merge_empty_") + short_name(dtype)));
  DenseInputs in(dtype, rng);
  AttentionOptions options;
  options.sinks = in.sinks.view();
  AttentionOptions empty_options;
  CallOutputs full(in.out_shape(), in.lse_shape(), dtype, Layout::Contiguous);
  CallOutputs empty(in.out_shape(), in.lse_shape(), dtype, Layout::StridedLast);
  options.lse = full.lse.view();
  empty_options.lse = empty.lse.view();
  const TensorView k_none = key_range(in.k.view(), 0, 0), v_none = key_range(in.v.view(), 0, 0);
  attention(in.q.view(), in.k.view(), in.v.view(), full.out.view(), in.scale, options);
  attention(in.q.view(), k_none, v_none, empty.out.view(), in.scale, empty_options);
  const reference::AttentionResult none = reference::attention_with_lse(in.q.view(), k_none, v_none, in.scale, {});
  ASSERT_EQ(std::count(none.lse.begin(), none.lse.end(), -kInf), static_cast<std::ptrdiff_t>(none.lse.size()));
  expect_matches(empty, none, dtype, true, true);

  const reference::AttentionResult ref =
      reference::attention_with_lse(in.q.view(), in.k.view(), in.v.view(), in.scale, options);
  for (bool empty_first : {false, true}) {
    CallOutputs merged(in.out_shape(), in.lse_shape(), dtype, Layout::Padded);
    const CallOutputs& a = empty_first ? empty : full;
    const CallOutputs& b = empty_first ? full : empty;
    merge_states(a.out.view(), a.lse.view(), b.out.view(), b.lse.view(), merged.out.view(), merged.lse.view());
    SCOPED_TRACE(empty_first ? "empty part first" : "empty part second");
    expect_matches(merged, ref, dtype, true, false);
  }
}

INSTANTIATE_TEST_SUITE_P(Serving, Merge, ::testing::ValuesIn(kDtypes),
                         [](const auto& info) { return std::string(short_name(info.param)); });

// Rows of [3, 2] by hand: two parts; the first part empty (its values ignored, NaN here); both empty.
TEST(MergeStates, HandComputed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out_a = {1, 2, nan, nan, 5, 5}, out_b = {3, 4, 7, 8, 6, 6};
  std::vector<float> lse_a = {1, -inf, -inf}, lse_b = {2, 0.5f, -inf};
  std::vector<float> out(6, 9.0f), lse(3, 9.0f);
  TensorView out_view(out.data(), DType::Float32, Shape{3, 2});
  TensorView lse_view(lse.data(), DType::Float32, Shape{3});
  merge_states(TensorView(out_a.data(), DType::Float32, Shape{3, 2}), TensorView(lse_a.data(), DType::Float32, Shape{3}),
               TensorView(out_b.data(), DType::Float32, Shape{3, 2}), TensorView(lse_b.data(), DType::Float32, Shape{3}),
               out_view, lse_view);
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  EXPECT_NEAR(lse[0], std::log(e + e2), 1e-6);
  EXPECT_NEAR(out[0], (e * 1 + e2 * 3) / (e + e2), 1e-6);
  EXPECT_NEAR(out[1], (e * 2 + e2 * 4) / (e + e2), 1e-6);
  EXPECT_EQ(lse[1], 0.5f);
  EXPECT_EQ(out[2], 7.0f);
  EXPECT_EQ(out[3], 8.0f);
  EXPECT_EQ(lse[2], -inf);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[5], 0.0f);
}

// ---------------------------------------------------------------------------------------------
// The serving oracle itself: by hand, and against the dense oracle on equal-length sequences.

TEST(ServingOracle, HandComputed) {
  // Sequence 0: one query [1, 0], keys [1, 0] and [0, 1]. Sequence 1: two queries (causal, Lq >
  // Lk), key [1, 1]: row 0 sees no key, row 1 = [2, 0] sees it with score 2.
  std::vector<float> q = {1, 0, 0, 1, 2, 0}, k = {1, 0, 0, 1, 1, 1}, v = {1, 2, 3, 4, 5, 6};
  std::vector<std::int32_t> cu_q = {0, 1, 3}, cu_k = {0, 2, 3};
  const TensorView qv(q.data(), DType::Float32, Shape{3, 1, 2}), kv(k.data(), DType::Float32, Shape{3, 1, 2});
  const TensorView vv(v.data(), DType::Float32, Shape{3, 1, 2});
  const TensorView cq(cu_q.data(), DType::Int32, Shape{3}), ck(cu_k.data(), DType::Int32, Shape{3});
  float sink = 0.5f;
  for (bool with_sink : {false, true}) {
    AttentionOptions options;
    options.causal = true;
    if (with_sink) options.sinks = TensorView(&sink, DType::Float32, Shape{1});
    const reference::AttentionResult r = reference::attention_varlen(qv, kv, vv, cq, ck, 1.0, options);
    const double e = std::exp(1.0), e2 = std::exp(2.0), es = with_sink ? std::exp(0.5) : 0.0;
    EXPECT_NEAR(r.lse[0], std::log(e + 1 + es), 1e-12);
    EXPECT_NEAR(r.out[0], (e * 1 + 3) / (e + 1 + es), 1e-12);
    EXPECT_NEAR(r.out[1], (e * 2 + 4) / (e + 1 + es), 1e-12);
    EXPECT_EQ(r.out[2], 0.0);
    EXPECT_EQ(r.out[3], 0.0);
    EXPECT_EQ(r.lse[1], with_sink ? 0.5 : -kInf);
    EXPECT_NEAR(r.lse[2], std::log(e2 + es), 1e-12);
    EXPECT_NEAR(r.out[4], 5 * e2 / (e2 + es), 1e-12);
    EXPECT_NEAR(r.out[5], 6 * e2 / (e2 + es), 1e-12);
  }
}

// Equal-length sequences stored [B, L, H, E] are at once a dense batch, a ragged batch (rows
// b * L + i) and a paged cache (pages of 5 rows in order): the three oracles agree.
TEST(ServingOracle, DenseRaggedAndPagedAgree) {
  constexpr std::int64_t B = 2, Hq = 4, Hkv = 2, Lq = 9, Lk = 30, D = 16, Dv = 8, page = 5;
  std::mt19937_64 rng(seed_of("oracle_forms"));
  Tensor q(Shape{B, Hq, Lq, D}, DType::Float32, Layout::BLHD), k(Shape{B, Hkv, Lk, D}, DType::Float32, Layout::BLHD);
  Tensor v(Shape{B, Hkv, Lk, Dv}, DType::Float32, Layout::BLHD);
  q.fill_random(rng, 1.5);
  k.fill_random(rng, 1.5);
  v.fill_random(rng);
  Tensor sinks = sink_logits(Hq, Lk, rng);
  AttentionOptions options;
  options.causal = true;
  options.window = 12;
  options.softcap = 3.0f;
  options.sinks = sinks.view();
  const reference::AttentionResult dense = reference::attention_with_lse(q.view(), k.view(), v.view(), 0.25, options);
  const std::vector<double> plain = reference::attention(q.view(), k.view(), v.view(), 0.25, options);
  ASSERT_EQ(plain.size(), dense.out.size());
  for (std::size_t n = 0; n < plain.size(); ++n) EXPECT_NEAR(dense.out[n], plain[n], 1e-12) << n;

  const auto base = [](const Tensor& t) { return t.storage().data(); };
  const TensorView rq(const_cast<unsigned char*>(base(q)), DType::Float32, Shape{B * Lq, Hq, D});
  const TensorView rk(const_cast<unsigned char*>(base(k)), DType::Float32, Shape{B * Lk, Hkv, D});
  const TensorView rv(const_cast<unsigned char*>(base(v)), DType::Float32, Shape{B * Lk, Hkv, Dv});
  IntTensor cu_q(Shape{B + 1}, {0, Lq, 2 * Lq}), cu_k(Shape{B + 1}, {0, Lk, 2 * Lk});
  const reference::AttentionResult ragged =
      reference::attention_varlen(rq, rk, rv, cu_q.view(), cu_k.view(), 0.25, options);

  const TensorView pk(rk.data, DType::Float32, Shape{B * Lk / page, page, Hkv, D});
  const TensorView pv(rv.data, DType::Float32, Shape{B * Lk / page, page, Hkv, Dv});
  std::vector<std::int64_t> entries(B * Lk / page);
  std::iota(entries.begin(), entries.end(), 0);
  IntTensor table(Shape{B, Lk / page}, entries), seqlens(Shape{B}, {Lk, Lk});
  const reference::AttentionResult paged = reference::attention_paged(
      rq, pk, pv, table.view(), seqlens.view(), std::optional<TensorView>(cu_q.view()), 0.25, options);

  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      for (std::int64_t i = 0; i < Lq; ++i) {
        const auto dense_row = static_cast<std::size_t>((b * Hq + h) * Lq + i);
        const auto ragged_row = static_cast<std::size_t>((b * Lq + i) * Hq + h);
        EXPECT_EQ(dense.lse[dense_row], ragged.lse[ragged_row]);
        EXPECT_EQ(dense.lse[dense_row], paged.lse[ragged_row]);
        for (std::size_t e = 0; e < static_cast<std::size_t>(Dv); ++e) {
          EXPECT_EQ(dense.out[dense_row * Dv + e], ragged.out[ragged_row * Dv + e]);
          EXPECT_EQ(dense.out[dense_row * Dv + e], paged.out[ragged_row * Dv + e]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace heed::test
