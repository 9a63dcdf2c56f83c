// The serving forms on the CPU against the float64 oracle (cpu/reference/serving_oracle.hpp):
// ragged batches and paged KV caches over hand-chosen sequence lengths (empty, length 1, Lq > Lk
// under causal), GQA and MQA, windows, sinks, softcap, D != Dv and strided tensors, on each dtype
// and forced route, every call with and without an lse output; and their memory model. Outputs
// are poisoned (NaN) before each call and their gaps must stay untouched.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference/serving_oracle.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

// ---------------------------------------------------------------------------------------------
// Ragged batches.

struct RaggedCase {
  std::string name;
  std::vector<std::int64_t> q_lens, kv_lens;
  std::int64_t q_heads = 4, kv_heads = 2, head_dim = 64, value_dim = 64;
  bool causal = false;
  std::optional<std::int64_t> window;
  bool sinks = false;
  std::optional<float> softcap;
  Layout layout = Layout::Contiguous;      // of q, k and v
  Layout out_layout = Layout::Contiguous;  // of out and lse
  bool head_major = false;                 // q, k and v stored [H, total, E]
  bool empty_rows = false;                 // some rows see no key
  bool heads_together = false;             // the vector route folds every key head in one task
  DType dtype = DType::Float32;
  RouteChoice route = RouteChoice::Auto;
};

// Where a case expects the vector route to fold all key heads of a row together, its plan says so.
void expect_heads_together(const AttentionPlan& plan, bool expected, RouteChoice route) {
  if (!expected || (route != RouteChoice::Auto && route != RouteChoice::Vector)) return;
  EXPECT_NE(plan.explain().find("key heads together"), std::string::npos);
}

void PrintTo(const RaggedCase& c, std::ostream* os) { *os << c.name; }

// Oracle cost: each case below ~1e7 double multiply-adds.
std::vector<RaggedCase> ragged_shapes() {
  return {
      // Lengths far apart; a sequence without queries, one without keys (rows of zeros, lse -inf).
      {.name = "mixed_lengths", .q_lens = {1, 37, 0, 5, 130}, .kv_lens = {200, 37, 9, 0, 140}, .empty_rows = true},
      // Lq > Lk under causal: the first Lq - Lk rows of a sequence see no key. MQA.
      {.name = "causal_lq_gt_lk_mqa", .q_lens = {20, 1, 7, 33}, .kv_lens = {8, 1, 0, 40}, .q_heads = 3,
       .kv_heads = 1, .causal = true, .empty_rows = true},
      {.name = "gqa_window", .q_lens = {17, 64, 1}, .kv_lens = {129, 64, 300}, .q_heads = 8, .kv_heads = 2,
       .causal = true, .window = 32},
      {.name = "window_lq_gt_lk", .q_lens = {40, 3}, .kv_lens = {30, 50}, .q_heads = 2, .kv_heads = 2,
       .causal = true, .window = 5, .empty_rows = true},
      {.name = "sinks_softcap", .q_lens = {9, 0, 31, 12}, .kv_lens = {50, 0, 17, 0}, .q_heads = 4, .kv_heads = 4,
       .causal = true, .sinks = true, .softcap = 5.0f, .empty_rows = true},
      {.name = "d96_dv40", .q_lens = {3, 18}, .kv_lens = {70, 18}, .q_heads = 2, .kv_heads = 1, .head_dim = 96,
       .value_dim = 40},
      {.name = "padded_sinks", .q_lens = {16, 5, 1}, .kv_lens = {33, 100, 1}, .causal = true, .sinks = true,
       .layout = Layout::Padded, .out_layout = Layout::Padded},
      {.name = "head_major_strided_out", .q_lens = {12, 40}, .kv_lens = {12, 77}, .q_heads = 4, .kv_heads = 1,
       .head_dim = 32, .value_dim = 32, .out_layout = Layout::StridedLast, .head_major = true},
      // A long decode beside a short one: the vector route splits the long one's keys into blocks.
      {.name = "long_decode_split", .q_lens = {1, 2}, .kv_lens = {4000, 3}, .q_heads = 4, .kv_heads = 1,
       .causal = true, .sinks = true},
      // Decode rows over [total, Hkv, E] keys: one task folds every key head; the long sequence's
      // keys in blocks, merged.
      {.name = "decode_heads_together", .q_lens = {1, 2, 0, 1}, .kv_lens = {700, 1500, 5, 0}, .q_heads = 8,
       .kv_heads = 4, .causal = true, .sinks = true, .empty_rows = true, .heads_together = true},
      {.name = "single_1x1", .q_lens = {1}, .kv_lens = {1}, .q_heads = 1, .kv_heads = 1, .head_dim = 32,
       .value_dim = 32},
      // No sequence has a key: zeros everywhere, lse the sinks' logits.
      {.name = "no_keys_sinks", .q_lens = {3, 4}, .kv_lens = {0, 0}, .sinks = true, .empty_rows = true},
  };
}

std::vector<RaggedCase> ragged_cases() {
  std::vector<RaggedCase> cases;
  for (const RaggedCase& shape : ragged_shapes()) {
    for (DType dtype : kDtypes) {
      for (const NamedRoute& r : kFusedRoutes) {
        RaggedCase c = shape;
        c.name += std::string("_") + short_name(dtype) + "_" + r.name;
        c.dtype = dtype;
        c.route = r.route;
        cases.push_back(c);
      }
      // Ragged batches also take the composed route (their keys are one BLAS matrix per sequence).
      RaggedCase c = shape;
      c.name += std::string("_") + short_name(dtype) + "_composed";
      c.dtype = dtype;
      c.route = RouteChoice::Composed;
      cases.push_back(c);
    }
  }
  return cases;
}

class Ragged : public ::testing::TestWithParam<RaggedCase> {};

TEST_P(Ragged, MatchesOracle) {
  const RaggedCase& c = GetParam();
  ASSERT_EQ(c.q_lens.size(), c.kv_lens.size());
  std::mt19937_64 rng(seed_of(c.name));
  const std::int64_t total_q = sum(c.q_lens), total_k = sum(c.kv_lens);
  const Tensor q = filled(Shape{total_q, c.q_heads, c.head_dim}, c.dtype, c.layout, c.head_major, rng, 1.5);
  const Tensor k = filled(Shape{total_k, c.kv_heads, c.head_dim}, c.dtype, c.layout, c.head_major, rng, 1.5);
  const Tensor v = filled(Shape{total_k, c.kv_heads, c.value_dim}, c.dtype, c.layout, c.head_major, rng, 1.0);
  IntTensor cu_q(Shape{static_cast<std::int64_t>(c.q_lens.size()) + 1}, cumulative(c.q_lens));
  IntTensor cu_k(Shape{static_cast<std::int64_t>(c.kv_lens.size()) + 1}, cumulative(c.kv_lens));
  const RaggedBatch batch{cu_q.view(), cu_k.view(), std::nullopt, std::nullopt};

  AttentionOptions options;
  options.causal = c.causal;
  options.window = c.window;
  options.softcap = c.softcap;
  options.route = c.route;
  std::optional<Tensor> sinks;
  if (c.sinks) {
    sinks.emplace(sink_logits(c.q_heads, total_k / std::max<std::int64_t>(total_q, 1), rng));
    options.sinks = sinks->view();
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const reference::AttentionResult ref =
      reference::attention_varlen(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), scale, options);

  CallOutputs o(Shape{total_q, c.q_heads, c.value_dim}, Shape{total_q, c.q_heads}, c.dtype, c.out_layout);
  {
    SCOPED_TRACE("without lse");
    attention_varlen(q.view(), k.view(), v.view(), batch, o.out.view(), scale, options);
    expect_matches(o, ref, c.dtype, false, c.empty_rows);
  }
  o.poison();
  options.lse = o.lse.view();
  const AttentionPlan plan = plan_attention_varlen(q.view(), k.view(), v.view(), batch, options);
  SCOPED_TRACE(plan.explain());
  expect_route(plan, c.route);
  expect_heads_together(plan, c.heads_together, c.route);
  EXPECT_NE(plan.explain().find("ragged: " + std::to_string(c.q_lens.size()) + " sequences"), std::string::npos);
  attention_varlen(q.view(), k.view(), v.view(), batch, o.out.view(), scale, options);
  expect_matches(o, ref, c.dtype, true, c.empty_rows);
}

INSTANTIATE_TEST_SUITE_P(Serving, Ragged, ::testing::ValuesIn(ragged_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Paged KV caches.

struct PagedCase {
  std::string name;
  std::vector<std::int64_t> kv_lens;
  std::optional<std::vector<std::int64_t>> q_lens;  // chunked prefill with cu_seqlens_q; none: decode
  std::int64_t page_size = 16;
  std::int64_t q_heads = 4, kv_heads = 2, head_dim = 64, value_dim = 64;
  bool causal = false;
  std::optional<std::int64_t> window;
  bool sinks = false;
  std::optional<float> softcap;
  std::int64_t shared_pages = 0;            // sequences b > 0 begin with sequence 0's first pages
  bool head_major = false;                  // pages stored [num_pages, Hkv, page_size, E]
  Layout cache_layout = Layout::Contiguous;
  Layout q_layout = Layout::Contiguous;     // of q, out and lse
  std::int64_t table_pad = 0;               // block-table rows this many entries apart beyond max_pages
  bool empty_rows = false;
  bool heads_together = false;  // the vector route folds every key head in one task
  DType dtype = DType::Float32;
  RouteChoice route = RouteChoice::Auto;
};

void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

std::vector<PagedCase> paged_shapes() {
  return {
      {.name = "decode_ps16_gqa", .kv_lens = {1, 100, 0, 257, 16}, .q_heads = 8, .kv_heads = 2, .empty_rows = true,
       .heads_together = true},
      // One long sequence with its key heads together: key blocks over the batch, merged.
      {.name = "decode_ps16_heads_together_split", .kv_lens = {5000}, .q_heads = 8, .kv_heads = 4,
       .causal = true, .window = 3000, .sinks = true, .heads_together = true},
      {.name = "decode_ps1_mqa_sinks", .kv_lens = {5, 1, 30}, .page_size = 1, .q_heads = 4, .kv_heads = 1,
       .sinks = true},
      {.name = "decode_ps64_shared_window", .kv_lens = {200, 150, 64}, .page_size = 64, .causal = true,
       .window = 50, .shared_pages = 2},
      {.name = "decode_ps256_head_major_softcap", .kv_lens = {300, 17}, .page_size = 256, .q_heads = 4,
       .kv_heads = 4, .softcap = 5.0f, .head_major = true},
      {.name = "prefill_ps16_shared_sinks", .kv_lens = {40, 33, 10, 17}, .q_lens = {{5, 1, 0, 17}},
       .causal = true, .sinks = true, .shared_pages = 1},
      {.name = "prefill_ps64_head_major_window", .kv_lens = {130, 64}, .q_lens = {{30, 2}}, .page_size = 64,
       .q_heads = 6, .kv_heads = 2, .head_dim = 80, .value_dim = 48, .causal = true, .window = 40,
       .head_major = true, .table_pad = 3},
      {.name = "prefill_ps16_lq_gt_lk", .kv_lens = {4, 0, 20}, .q_lens = {{10, 3, 20}}, .causal = true,
       .empty_rows = true},
      // One long sequence: the vector route splits its keys into blocks and merges the partials.
      {.name = "decode_ps16_one_long_split", .kv_lens = {5000}, .q_heads = 8, .kv_heads = 1, .sinks = true,
       .softcap = 5.0f},
      // ... and with a window, most of its blocks see no key.
      {.name = "decode_ps16_one_long_window", .kv_lens = {5000}, .q_heads = 8, .kv_heads = 1, .causal = true,
       .window = 100, .sinks = true},
      // A page size that is no power of two: pages end inside every key tile.
      {.name = "prefill_ps7", .kv_lens = {50, 13}, .q_lens = {{6, 13}}, .page_size = 7, .causal = true},
      {.name = "decode_ps16_padded", .kv_lens = {45, 90}, .cache_layout = Layout::Padded,
       .q_layout = Layout::Padded, .table_pad = 2},
  };
}

std::vector<PagedCase> paged_cases() {
  std::vector<PagedCase> cases;
  for (const PagedCase& shape : paged_shapes()) {
    for (DType dtype : kDtypes) {
      for (const NamedRoute& r : kFusedRoutes) {
        PagedCase c = shape;
        c.name += std::string("_") + short_name(dtype) + "_" + r.name;
        c.dtype = dtype;
        c.route = r.route;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

class Paged : public ::testing::TestWithParam<PagedCase> {};

TEST_P(Paged, MatchesOracle) {
  const PagedCase& c = GetParam();
  std::mt19937_64 rng(seed_of(c.name));
  const auto batch = static_cast<std::int64_t>(c.kv_lens.size());
  const PageAssignment pages = assign_pages(c.kv_lens, c.page_size, c.shared_pages, rng);
  Tensor k_cache = filled(Shape{pages.num_pages, c.page_size, c.kv_heads, c.head_dim}, c.dtype, c.cache_layout,
                          c.head_major, rng, 1.5);
  Tensor v_cache = filled(Shape{pages.num_pages, c.page_size, c.kv_heads, c.value_dim}, c.dtype, c.cache_layout,
                          c.head_major, rng, 1.0);
  poison_unread_pages(k_cache, pages);
  poison_unread_pages(v_cache, pages);
  IntTensor table(Shape{batch, pages.max_pages}, pages.table, c.table_pad);
  IntTensor seqlens(Shape{batch}, c.kv_lens);
  std::optional<IntTensor> cu_q;
  std::int64_t rows = batch;
  if (c.q_lens) {
    ASSERT_EQ(c.q_lens->size(), c.kv_lens.size());
    cu_q.emplace(Shape{batch + 1}, cumulative(*c.q_lens));
    rows = sum(*c.q_lens);
  }
  const Tensor q = filled(Shape{rows, c.q_heads, c.head_dim}, c.dtype, c.q_layout, false, rng, 1.5);
  PagedKv kv{table.view(), seqlens.view(), std::nullopt, std::nullopt, std::nullopt};
  std::optional<TensorView> cu_q_view;
  if (cu_q) cu_q_view = kv.cu_seqlens_q = cu_q->view();

  AttentionOptions options;
  options.causal = c.causal;
  options.window = c.window;
  options.softcap = c.softcap;
  options.route = c.route;
  std::optional<Tensor> sinks;
  if (c.sinks) {
    sinks.emplace(sink_logits(c.q_heads, sum(c.kv_lens) / batch, rng));
    options.sinks = sinks->view();
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const reference::AttentionResult ref = reference::attention_paged(
      q.view(), k_cache.view(), v_cache.view(), table.view(), seqlens.view(), cu_q_view, scale, options);
  for (double value : ref.out) ASSERT_FALSE(std::isnan(value)) << "the oracle read an unread page";

  CallOutputs o(Shape{rows, c.q_heads, c.value_dim}, Shape{rows, c.q_heads}, c.dtype, c.q_layout);
  {
    SCOPED_TRACE("without lse");
    attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, o.out.view(), scale, options);
    expect_matches(o, ref, c.dtype, false, c.empty_rows);
  }
  o.poison();
  options.lse = o.lse.view();
  const AttentionPlan plan = plan_attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, options);
  SCOPED_TRACE(plan.explain());
  expect_route(plan, c.route);
  expect_heads_together(plan, c.heads_together, c.route);
  EXPECT_NE(plan.explain().find("paged: " + std::to_string(batch) + " sequences"), std::string::npos);
  EXPECT_NE(plan.explain().find("pages of " + std::to_string(c.page_size)), std::string::npos);
  attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, o.out.view(), scale, options);
  expect_matches(o, ref, c.dtype, true, c.empty_rows);
}

INSTANTIATE_TEST_SUITE_P(Serving, Paged, ::testing::ValuesIn(paged_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// The memory model of the serving forms, as scratch_test checks the dense one: the measured peak
// within scratch_bytes, none with a caller workspace, a smaller workspace rejected.

struct ServingCall {
  std::string op;  // the error prefix
  std::function<AttentionPlan(const AttentionOptions&)> plan;
  std::function<void(const AttentionOptions&)> run;
  std::function<::testing::AssertionResult()> matches;
  std::function<bool()> out_untouched;
};

void expect_scratch_model(const ServingCall& call, AttentionOptions options) {
  const AttentionPlan plan = call.plan(options);
  SCOPED_TRACE(plan.explain());
  ASSERT_GT(plan.scratch_bytes, 0u) << "the case was chosen to need scratch";
  for (const ScratchBuffer& buffer : plan.buffers) EXPECT_LE(buffer.offset + buffer.bytes, plan.scratch_bytes);
  reset_peak();
  const MemoryStats before = memory_stats();
  call.run(options);
  const MemoryStats after = memory_stats();
  EXPECT_LE(after.peak - before.active, plan.scratch_bytes + plan.buffers.size() * kAllocationAlignment);
  EXPECT_EQ(after.active, before.active);
  EXPECT_TRUE(call.matches());

  std::vector<unsigned char> workspace(plan.scratch_bytes + kAllocationAlignment);
  const auto aligned = (reinterpret_cast<std::uintptr_t>(workspace.data()) + kAllocationAlignment - 1) /
                       kAllocationAlignment * kAllocationAlignment;
  options.workspace = reinterpret_cast<void*>(aligned);
  options.workspace_bytes = plan.scratch_bytes;
  reset_peak();
  const MemoryStats with_before = memory_stats();
  call.run(options);
  EXPECT_EQ(memory_stats().peak - with_before.active, 0u) << "heed allocated despite a workspace";
  EXPECT_TRUE(call.matches());

  options.workspace_bytes = plan.scratch_bytes - 1;
  try {
    call.run(options);
    ADD_FAILURE() << "a workspace of scratch_bytes - 1 was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    EXPECT_EQ(std::string(error.what()).rfind("[" + call.op + "]", 0), 0u) << error.what();
    EXPECT_NE(std::string(error.what()).find(std::to_string(plan.scratch_bytes)), std::string::npos) << error.what();
  }
  EXPECT_TRUE(call.out_untouched()) << "out written on error";
}

TEST(ServingScratch, RaggedAndPagedHoldWhatThePlanSays) {
  std::mt19937_64 rng(seed_of("serving_scratch"));
  for (const NamedRoute& r : {NamedRoute{RouteChoice::Composed, "composed"}, NamedRoute{RouteChoice::Tiled, "tiled"},
                              NamedRoute{RouteChoice::Vector, "vector"}}) {
    SCOPED_TRACE(r.name);
    const std::vector<std::int64_t> q_lens = {40, 1, 70}, kv_lens = {300, 50, 700};
    const Tensor q = filled(Shape{sum(q_lens), 4, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.5);
    const Tensor k = filled(Shape{sum(kv_lens), 2, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.5);
    const Tensor v = filled(Shape{sum(kv_lens), 2, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.0);
    IntTensor cu_q(Shape{4}, cumulative(q_lens)), cu_k(Shape{4}, cumulative(kv_lens));
    const RaggedBatch batch{cu_q.view(), cu_k.view(), std::nullopt, std::nullopt};
    CallOutputs o(Shape{sum(q_lens), 4, 64}, Shape{sum(q_lens), 4}, DType::BFloat16, Layout::Contiguous);
    AttentionOptions options;
    options.causal = true;
    options.route = r.route;
    options.lse = o.lse.view();
    const reference::AttentionResult ref =
        reference::attention_varlen(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), 0.125, options);
    expect_scratch_model(
        {"heed::attention_varlen",
         [&](const AttentionOptions& opts) { return plan_attention_varlen(q.view(), k.view(), v.view(), batch, opts); },
         [&](const AttentionOptions& opts) {
           o.poison();
           attention_varlen(q.view(), k.view(), v.view(), batch, o.out.view(), 0.125f, opts);
         },
         [&] {
           const auto out_ok = matches_reference(as_rank4(o.out.view()), ref.out);
           return out_ok ? lse_matches(o.lse.view(), ref.lse, DType::BFloat16) : out_ok;
         },
         [&] { return o.out.storage() == o.out_before && o.lse.storage() == o.lse_before; }},
        options);
  }
  for (const NamedRoute& r : {NamedRoute{RouteChoice::Tiled, "tiled"}, NamedRoute{RouteChoice::Vector, "vector"}}) {
    SCOPED_TRACE(std::string("paged ") + r.name);
    PagedCase c{.name = "scratch", .kv_lens = {3000, 40, 1200}, .q_lens = {{33, 1, 8}}, .q_heads = 8, .kv_heads = 2,
                .causal = true};
    const PageAssignment pages = assign_pages(c.kv_lens, c.page_size, c.shared_pages, rng);
    const Tensor k_cache = filled(Shape{pages.num_pages, 16, 2, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.5);
    const Tensor v_cache = filled(Shape{pages.num_pages, 16, 2, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.0);
    IntTensor table(Shape{3, pages.max_pages}, pages.table), seqlens(Shape{3}, c.kv_lens);
    IntTensor cu_q(Shape{4}, cumulative(*c.q_lens));
    const PagedKv kv{table.view(), seqlens.view(), cu_q.view(), std::nullopt, std::nullopt};
    const Tensor q = filled(Shape{42, 8, 64}, DType::BFloat16, Layout::Contiguous, false, rng, 1.5);
    CallOutputs o(Shape{42, 8, 64}, Shape{42, 8}, DType::BFloat16, Layout::Contiguous);
    AttentionOptions options;
    options.causal = true;
    options.route = r.route;
    options.lse = o.lse.view();
    const reference::AttentionResult ref = reference::attention_paged(
        q.view(), k_cache.view(), v_cache.view(), table.view(), seqlens.view(), cu_q.view(), 0.125, options);
    expect_scratch_model(
        {"heed::attention_paged",
         [&](const AttentionOptions& opts) {
           return plan_attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, opts);
         },
         [&](const AttentionOptions& opts) {
           o.poison();
           attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, o.out.view(), 0.125f, opts);
         },
         [&] {
           const auto out_ok = matches_reference(as_rank4(o.out.view()), ref.out);
           return out_ok ? lse_matches(o.lse.view(), ref.lse, DType::BFloat16) : out_ok;
         },
         [&] { return o.out.storage() == o.out_before && o.lse.storage() == o.lse_before; }},
        options);
  }
}

// A NaN in one query row reaches that row's out and lse only.
TEST(ServingNaN, NaNQueryReachesItsRowOnly) {
  std::mt19937_64 rng(seed_of("serving_nan"));
  const std::vector<std::int64_t> q_lens = {3, 5}, kv_lens = {20, 9};
  Tensor q = filled(Shape{8, 2, 32}, DType::Float32, Layout::Contiguous, false, rng, 1.5);
  const Tensor k = filled(Shape{29, 1, 32}, DType::Float32, Layout::Contiguous, false, rng, 1.5);
  const Tensor v = filled(Shape{29, 1, 32}, DType::Float32, Layout::Contiguous, false, rng, 1.0);
  q.set((4 * 2 + 1) * 32 + 7, std::numeric_limits<double>::quiet_NaN());  // row 4, head 1
  IntTensor cu_q(Shape{3}, cumulative(q_lens)), cu_k(Shape{3}, cumulative(kv_lens));
  CallOutputs o(Shape{8, 2, 32}, Shape{8, 2}, DType::Float32, Layout::Contiguous);
  AttentionOptions options;
  options.causal = true;
  options.lse = o.lse.view();
  for (const NamedRoute& r : kFusedRoutes) {
    SCOPED_TRACE(r.name);
    options.route = r.route;
    o.poison();
    attention_varlen(q.view(), k.view(), v.view(), {cu_q.view(), cu_k.view(), std::nullopt, std::nullopt},
                     o.out.view(), 0.2f, options);
    const reference::AttentionResult ref =
        reference::attention_varlen(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), 0.2, options);
    ASSERT_TRUE(std::isnan(ref.lse[4 * 2 + 1]));
    EXPECT_EQ(std::count_if(ref.lse.begin(), ref.lse.end(), [](double x) { return std::isnan(x); }), 1);
    EXPECT_TRUE(matches_reference(as_rank4(o.out.view()), ref.out));
    EXPECT_GT(compare(as_rank4(o.out.view()), ref.out).expected_nan, 0);
    EXPECT_TRUE(lse_matches(o.lse.view(), ref.lse, DType::Float32));
  }
}

// Sequence b's rows read only its own keys: NaN in every key and value of its neighbours reaches
// none of its rows (and, NaN in, NaN out, all of theirs).
TEST(RaggedIsolation, NeighboursKeysStayOut) {
  const std::vector<std::int64_t> q_lens = {5, 19, 3}, kv_lens = {40, 37, 21};
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    std::mt19937_64 rng(seed_of(std::string("isolation_") + short_name(dtype)));
    const Tensor q = filled(Shape{27, 4, 64}, dtype, Layout::Contiguous, false, rng, 1.5);
    Tensor k = filled(Shape{98, 2, 64}, dtype, Layout::Contiguous, false, rng, 1.5);
    Tensor v = filled(Shape{98, 2, 64}, dtype, Layout::Contiguous, false, rng, 1.0);
    for (std::int64_t row = 0; row < 98; ++row) {
      if (row >= 40 && row < 77) continue;  // sequence 1's keys
      for (std::int64_t n = row * 128; n < (row + 1) * 128; ++n) {
        k.set(n, std::numeric_limits<double>::quiet_NaN());
        v.set(n, std::numeric_limits<double>::quiet_NaN());
      }
    }
    IntTensor cu_q(Shape{4}, cumulative(q_lens)), cu_k(Shape{4}, cumulative(kv_lens));
    const RaggedBatch batch{cu_q.view(), cu_k.view(), std::nullopt, std::nullopt};
    CallOutputs o(Shape{27, 4, 64}, Shape{27, 4}, dtype, Layout::Contiguous);
    for (bool causal : {false, true}) {
      for (const NamedRoute& r : {kFusedRoutes[0], kFusedRoutes[1], kFusedRoutes[2], {RouteChoice::Composed, "composed"}}) {
        SCOPED_TRACE(std::string(short_name(dtype)) + " " + r.name + (causal ? " causal" : ""));
        AttentionOptions options;
        options.causal = causal;
        options.route = r.route;
        options.lse = o.lse.view();
        const reference::AttentionResult ref =
            reference::attention_varlen(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), 0.125, options);
        o.poison();
        attention_varlen(q.view(), k.view(), v.view(), batch, o.out.view(), 0.125f, options);
        expect_matches(o, ref, dtype, true, false);
        EXPECT_EQ(compare(as_rank4(o.out.view()), ref.out).expected_nan, 8 * 4 * 64) << "sequences 0 and 2 are NaN";
      }
    }
  }
}

// Bounds above the longest sequence (max_seqlen_q / k given) plan for more and answer the same;
// the lse here is a transposed view ([Hq, rows] storage).
TEST(ServingBounds, LooseBoundsGiveTheSameAnswer) {
  std::mt19937_64 rng(seed_of("loose_bounds"));
  const std::vector<std::int64_t> q_lens = {7, 30}, kv_lens = {50, 9};
  const Tensor q = filled(Shape{37, 4, 64}, DType::Float16, Layout::Contiguous, false, rng, 1.5);
  const Tensor k = filled(Shape{59, 2, 64}, DType::Float16, Layout::Contiguous, false, rng, 1.5);
  const Tensor v = filled(Shape{59, 2, 64}, DType::Float16, Layout::Contiguous, false, rng, 1.0);
  const Tensor sinks = sink_logits(4, 30, rng);
  IntTensor cu_q(Shape{3}, cumulative(q_lens)), cu_k(Shape{3}, cumulative(kv_lens));
  const RaggedBatch batch{cu_q.view(), cu_k.view(), 100, 400};

  PagedCase c{.name = "loose", .kv_lens = {50, 9}, .q_lens = q_lens};
  const PageAssignment pages = assign_pages(c.kv_lens, c.page_size, c.shared_pages, rng);
  const Tensor k_cache = filled(Shape{pages.num_pages, 16, 2, 64}, DType::Float16, Layout::Contiguous, false, rng, 1.5);
  const Tensor v_cache = filled(Shape{pages.num_pages, 16, 2, 64}, DType::Float16, Layout::Contiguous, false, rng, 1.0);
  IntTensor table(Shape{2, pages.max_pages}, pages.table), seqlens(Shape{2}, kv_lens);
  const PagedKv kv{table.view(), seqlens.view(), cu_q.view(), 100, 1000};

  for (const NamedRoute& r : kFusedRoutes) {
    SCOPED_TRACE(r.name);
    AttentionOptions options;
    options.causal = true;
    options.sinks = sinks.view();
    options.route = r.route;
    CallOutputs o(Shape{37, 4, 64}, Shape{4, 37}, DType::Float16, Layout::Contiguous);
    o.lse.view() = permuted(o.lse.view(), {1, 0});
    options.lse = o.lse.view();
    attention_varlen(q.view(), k.view(), v.view(), batch, o.out.view(), 0.125f, options);
    expect_matches(o, reference::attention_varlen(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), 0.125, options),
                   DType::Float16, true, false);
    o.poison();
    attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, o.out.view(), 0.125f, options);
    expect_matches(o, reference::attention_paged(q.view(), k_cache.view(), v_cache.view(), table.view(), seqlens.view(),
                                                 cu_q.view(), 0.125, options),
                   DType::Float16, true, false);
  }
}

// Empty batches are legal and write nothing: no sequence at all, or sequences without queries.
TEST(ServingEmpty, EmptyBatchesWriteNothing) {
  std::mt19937_64 rng(seed_of("serving_empty"));
  const Tensor q = filled(Shape{0, 4, 64}, DType::Float32, Layout::Contiguous, false, rng, 1.0);
  const Tensor k = filled(Shape{9, 2, 64}, DType::Float32, Layout::Contiguous, false, rng, 1.0);
  const Tensor k_cache = filled(Shape{2, 16, 2, 64}, DType::Float32, Layout::Contiguous, false, rng, 1.0);
  CallOutputs o(Shape{0, 4, 64}, Shape{0, 4}, DType::Float32, Layout::Contiguous);
  AttentionOptions options;
  options.causal = true;
  options.lse = o.lse.view();
  for (const NamedRoute& r : kFusedRoutes) {
    SCOPED_TRACE(r.name);
    options.route = r.route;
    {
      IntTensor cu_q(Shape{3}, {0, 0, 0}), cu_k(Shape{3}, {0, 5, 9});
      attention_varlen(q.view(), k.view(), k.view(), {cu_q.view(), cu_k.view(), std::nullopt, std::nullopt},
                       o.out.view(), 0.1f, options);
    }
    {
      IntTensor cu_q(Shape{1}, {0}), cu_k(Shape{1}, {0});
      const TensorView no_keys(k.view().data, DType::Float32, Shape{0, 2, 64});
      attention_varlen(q.view(), no_keys, no_keys, {cu_q.view(), cu_k.view(), std::nullopt, std::nullopt},
                       o.out.view(), 0.1f, options);
    }
    {
      IntTensor table(Shape{0, 1}, {}), seqlens(Shape{0}, {});
      attention_paged(q.view(), k_cache.view(), k_cache.view(),
                      {table.view(), seqlens.view(), std::nullopt, std::nullopt, std::nullopt}, o.out.view(), 0.1f,
                      options);
    }
    {
      IntTensor table(Shape{2, 1}, {1, 0}), seqlens(Shape{2}, {16, 3}), cu_q(Shape{3}, {0, 0, 0});
      attention_paged(q.view(), k_cache.view(), k_cache.view(),
                      {table.view(), seqlens.view(), cu_q.view(), std::nullopt, std::nullopt}, o.out.view(), 0.1f,
                      options);
    }
    EXPECT_EQ(o.out.storage(), o.out_before);
    EXPECT_EQ(o.lse.storage(), o.lse_before);
  }
}

}  // namespace
}  // namespace heed::test
