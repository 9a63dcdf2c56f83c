// Invalid input to the serving forms (serving.hpp) is rejected before any work: InvalidArgument,
// the same message from plan_attention_varlen / plan_attention_paged and the call, starting with
// the operation and carrying the offending values, and out and lse untouched. Each case changes
// one thing of a valid call (checked to run).

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "heed/heed.hpp"

namespace heed {
namespace {

constexpr float kUntouched = 7.0f;

// Backing for q, k, v and the caches: every valid read stays inside; an invalid case reads nothing.
std::vector<float>& backing() {
  static std::vector<float> values(1 << 16, 0.25f);
  return values;
}

TensorView view_of(const Shape& shape, DType dtype = DType::Float32) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
  std::int64_t stride = 1;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    strides[static_cast<std::size_t>(axis)] = stride;
    stride *= shape[axis] > 1 ? shape[axis] : 1;
  }
  return TensorView(backing().data(), dtype, shape, strides);
}

// Host metadata of `shape` holding `values`, as int32 (or, to test the dtype check, as float32).
struct Metadata {
  std::vector<std::int32_t> ints;
  std::vector<float> floats;
  TensorView view;
  Metadata(const std::vector<std::int64_t>& values, std::optional<Shape> shape, DType dtype) {
    const Shape dims = shape.value_or(Shape{static_cast<std::int64_t>(values.size())});
    for (std::int64_t value : values) {
      ints.push_back(static_cast<std::int32_t>(value));
      floats.push_back(static_cast<float>(value));
    }
    ints.resize(ints.size() + 16, 0);
    floats.resize(floats.size() + 16, 0.0f);
    void* data = dtype == DType::Int32 ? static_cast<void*>(ints.data()) : static_cast<void*>(floats.data());
    view = TensorView(data, dtype, dims);
  }
};

// out and lse filled with kUntouched, to see that an error writes nothing.
struct Outputs {
  std::vector<float> out = std::vector<float>(4096, kUntouched);
  std::vector<float> lse = std::vector<float>(4096, kUntouched);
  bool untouched() const {
    for (float value : out) if (value != kUntouched) return false;
    for (float value : lse) if (value != kUntouched) return false;
    return true;
  }
};

TensorView output_view(std::vector<float>& storage, const Shape& shape, DType dtype) {
  TensorView view = view_of(shape, dtype);
  view.data = storage.data();
  return view;
}

// Calls `call` and returns its error's message; fails unless it is InvalidArgument starting with
// [op] and carrying every string of `expected`.
std::string expect_invalid(const std::function<void()>& call, const std::string& op,
                           const std::vector<std::string>& expected) {
  try {
    call();
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << message;
    EXPECT_EQ(message.rfind("[" + op + "]", 0), 0u) << message;
    for (const std::string& part : expected) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' in " << message;
    return message;
  }
  ADD_FAILURE() << "accepted";
  return {};
}

// ---------------------------------------------------------------------------------------------
// Ragged batches: 3 sequences of (3, 4), (0, 0) and (4, 6) queries and keys.

struct RaggedCall {
  Shape q{7, 4, 8}, k{10, 2, 8}, v{10, 2, 6}, out{7, 4, 6}, lse{7, 4};
  DType dtype = DType::Float32, lse_dtype = DType::Float32;
  std::optional<DType> k_dtype;
  std::vector<std::int64_t> cu_q{0, 3, 3, 7}, cu_k{0, 4, 4, 10};
  std::optional<Shape> cu_q_shape, cu_k_shape;
  DType cu_dtype = DType::Int32;
  std::optional<std::int64_t> max_seqlen_q, max_seqlen_k;
  bool checks_out = false;  // the error is about out, which the plan does not see
  std::function<void(AttentionOptions&)> configure = [](AttentionOptions&) {};
};

struct RaggedCase {
  std::string name;
  std::function<void(RaggedCall&)> change;
  std::vector<std::string> expected;
};

void PrintTo(const RaggedCase& c, std::ostream* os) { *os << c.name; }

// Runs the plan and the call of `r`: both succeed where `expected` is null, else both fail alike.
void run_ragged(const RaggedCall& r, const std::vector<std::string>* expected) {
  Metadata cu_q(r.cu_q, r.cu_q_shape, r.cu_dtype), cu_k(r.cu_k, r.cu_k_shape, r.cu_dtype);
  const RaggedBatch batch{cu_q.view, cu_k.view, r.max_seqlen_q, r.max_seqlen_k};
  Outputs o;
  TensorView out = output_view(o.out, r.out, r.dtype);
  AttentionOptions options;
  options.lse = output_view(o.lse, r.lse, r.lse_dtype);
  r.configure(options);
  const TensorView q = view_of(r.q, r.dtype), k = view_of(r.k, r.k_dtype.value_or(r.dtype));
  const TensorView v = view_of(r.v, r.dtype);
  const auto plan = [&] { plan_attention_varlen(q, k, v, batch, options); };
  const auto call = [&] { attention_varlen(q, k, v, batch, out, 0.3f, options); };
  if (expected == nullptr) {
    EXPECT_NO_THROW(plan());
    EXPECT_NO_THROW(call());
    return;
  }
  const std::string from_call = expect_invalid(call, "heed::attention_varlen", *expected);
  if (!r.checks_out) EXPECT_EQ(expect_invalid(plan, "heed::attention_varlen", *expected), from_call);
  EXPECT_TRUE(o.untouched()) << "out or lse written on error";
}

std::vector<RaggedCase> ragged_cases() {
  using C = RaggedCall;
  return {
      {"cu_q_not_from_zero", [](C& c) { c.cu_q = {1, 3, 3, 7}; }, {"cu_seqlens_q[0] must be 0", "1"}},
      {"cu_k_not_from_zero", [](C& c) { c.cu_k = {-2, 4, 4, 10}; }, {"cu_seqlens_k[0]", "-2"}},
      {"cu_q_decreasing", [](C& c) { c.cu_q = {0, 3, 2, 7}; }, {"cu_seqlens_q", "[2] = 2", "[1] = 3"}},
      {"cu_k_decreasing", [](C& c) { c.cu_k = {0, 6, 4, 10}; }, {"cu_seqlens_k", "[2] = 4", "[1] = 6"}},
      {"cu_q_last_below_total", [](C& c) { c.cu_q = {0, 3, 3, 6}; }, {"cu_seqlens_q[3] = 6", "7"}},
      {"cu_k_last_above_total", [](C& c) { c.cu_k = {0, 4, 4, 11}; }, {"cu_seqlens_k[3] = 11", "10"}},
      {"cu_float32", [](C& c) { c.cu_dtype = DType::Float32; }, {"cu_seqlens_q", "int32", "float32"}},
      {"cu_q_rank_2", [](C& c) { c.cu_q_shape = Shape{1, 4}; }, {"cu_seqlens_q", "[1, 4]"}},
      {"cu_k_wrong_length", [](C& c) { c.cu_k = {0, 4, 10}; }, {"cu_seqlens_k", "[4]", "[3]"}},
      {"q_rank_4", [](C& c) { c.q = Shape{7, 4, 8, 1}; }, {"q", "[7, 4, 8, 1]"}},
      {"k_rank_2", [](C& c) { c.k = Shape{10, 16}; }, {"k", "[10, 16]"}},
      {"heads_not_multiple", [](C& c) { c.q = Shape{7, 3, 8}; c.out = Shape{7, 3, 6}; c.lse = Shape{7, 3}; },
       {"Hq (3) must be a multiple of Hkv (2)"}},
      {"kv_heads_differ", [](C& c) { c.v = Shape{10, 1, 6}; }, {"k", "v", "2", "1"}},
      {"head_size_differs", [](C& c) { c.k = Shape{10, 2, 9}; }, {"8", "9"}},
      {"kv_rows_differ", [](C& c) { c.v = Shape{11, 2, 6}; }, {"10", "11"}},
      {"dtypes_differ", [](C& c) { c.k_dtype = DType::BFloat16; }, {"q float32", "k bfloat16"}},
      {"max_seqlen_q_below_longest", [](C& c) { c.max_seqlen_q = 3; }, {"max_seqlen_q (3)", "4"}},
      {"max_seqlen_k_negative", [](C& c) { c.max_seqlen_k = -1; }, {"max_seqlen_k", "-1"}},
      {"mask", [](C& c) { c.configure = [](AttentionOptions& o) { o.mask = view_of(Shape{7, 10}, DType::Bool); }; },
       {"mask"}},
      {"lse_wrong_shape", [](C& c) { c.lse = Shape{7, 3}; }, {"lse", "[7, 3]", "[7, 4]"}},
      {"lse_rank_3", [](C& c) { c.lse = Shape{7, 4, 1}; }, {"lse", "[7, 4, 1]", "[7, 4]"}},
      {"lse_float16", [](C& c) { c.lse_dtype = DType::Float16; }, {"lse", "float16"}},
      {"out_wrong_shape", [](C& c) { c.out = Shape{7, 4, 5}; c.checks_out = true; }, {"out", "[7, 4, 5]", "[7, 4, 6]"}},
      {"window_without_causal", [](C& c) { c.configure = [](AttentionOptions& o) { o.window = 3; }; }, {"window", "3"}},
      {"sinks_wrong_size",
       [](C& c) { c.configure = [](AttentionOptions& o) { o.sinks = view_of(Shape{3}); }; }, {"sinks", "3", "4"}},
      {"score_cap_too_small", [](C& c) { c.configure = [](AttentionOptions& o) { o.max_score_bytes = 1; }; },
       {"max_score_bytes", "1"}},
      {"scratch_budget_too_small", [](C& c) { c.configure = [](AttentionOptions& o) { o.max_scratch_bytes = 1; }; },
       {"max_scratch_bytes", "1"}},
  };
}

class RaggedValidation : public ::testing::TestWithParam<RaggedCase> {};

TEST(RaggedValidationBaseline, TheUnchangedCallIsValid) { run_ragged(RaggedCall{}, nullptr); }

TEST_P(RaggedValidation, RejectedBeforeAnyWork) {
  RaggedCall r;
  GetParam().change(r);
  run_ragged(r, &GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Serving, RaggedValidation, ::testing::ValuesIn(ragged_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Paged caches: 3 sequences of 6, 3 and 9 keys in 5 pages of 4 rows; the table's unused entries
// are -1, which is valid since no sequence reads them.

struct PagedCall {
  Shape q{3, 4, 8}, k_cache{5, 4, 2, 8}, v_cache{5, 4, 2, 6}, out{3, 4, 6}, lse{3, 4};
  DType dtype = DType::Float32, lse_dtype = DType::Float32;
  std::vector<std::int64_t> table{2, 0, -1, 4, -1, -1, 1, 3, 0};
  Shape table_shape{3, 3};
  DType table_dtype = DType::Int32, seqlens_dtype = DType::Int32;
  std::vector<std::int64_t> seqlens{6, 3, 9};
  std::optional<std::vector<std::int64_t>> cu_q;  // chunked prefill: q [total_q, Hq, D]
  bool checks_out = false;
  std::function<void(AttentionOptions&)> configure = [](AttentionOptions&) {};
};

struct PagedCase {
  std::string name;
  std::function<void(PagedCall&)> change;
  std::vector<std::string> expected;
};

void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

void run_paged(const PagedCall& r, const std::vector<std::string>* expected) {
  Metadata table(r.table, r.table_shape, r.table_dtype), seqlens(r.seqlens, std::nullopt, r.seqlens_dtype);
  std::optional<Metadata> cu_q;
  PagedKv pages{table.view, seqlens.view, std::nullopt, std::nullopt, std::nullopt};
  if (r.cu_q) {
    cu_q.emplace(*r.cu_q, std::nullopt, DType::Int32);
    pages.cu_seqlens_q = cu_q->view;
  }
  Outputs o;
  TensorView out = output_view(o.out, r.out, r.dtype);
  AttentionOptions options;
  options.lse = output_view(o.lse, r.lse, r.lse_dtype);
  r.configure(options);
  const TensorView q = view_of(r.q, r.dtype), k = view_of(r.k_cache, r.dtype), v = view_of(r.v_cache, r.dtype);
  const auto plan = [&] { plan_attention_paged(q, k, v, pages, options); };
  const auto call = [&] { attention_paged(q, k, v, pages, out, 0.3f, options); };
  if (expected == nullptr) {
    EXPECT_NO_THROW(plan());
    EXPECT_NO_THROW(call());
    return;
  }
  const std::string from_call = expect_invalid(call, "heed::attention_paged", *expected);
  if (!r.checks_out) EXPECT_EQ(expect_invalid(plan, "heed::attention_paged", *expected), from_call);
  EXPECT_TRUE(o.untouched()) << "out or lse written on error";
}

// Chunked prefill of 2, 0 and 3 queries.
void chunked(PagedCall& c) {
  c.cu_q = std::vector<std::int64_t>{0, 2, 2, 5};
  c.q = Shape{5, 4, 8};
  c.out = Shape{5, 4, 6};
  c.lse = Shape{5, 4};
}

std::vector<PagedCase> paged_cases() {
  using C = PagedCall;
  return {
      {"table_entry_past_pages", [](C& c) { c.table[7] = 5; }, {"block_table[2, 1] = 5", "num_pages = 5"}},
      {"table_entry_negative", [](C& c) { c.table[1] = -1; }, {"block_table[0, 1] = -1", "num_pages = 5"}},
      {"table_entry_huge", [](C& c) { c.table[3] = 1 << 30; }, {"block_table[1, 0] = 1073741824"}},
      {"seqlens_past_capacity", [](C& c) { c.seqlens = {6, 3, 13}; }, {"seqlens_k[2] = 13", "3 * 4 = 12"}},
      {"seqlens_negative", [](C& c) { c.seqlens = {6, -1, 9}; }, {"seqlens_k[1] = -1"}},
      {"seqlens_float32", [](C& c) { c.seqlens_dtype = DType::Float32; }, {"seqlens_k", "int32", "float32"}},
      {"seqlens_wrong_length", [](C& c) { c.seqlens = {6, 3}; }, {"seqlens_k", "[3]", "[2]"}},
      {"table_float32", [](C& c) { c.table_dtype = DType::Float32; }, {"block_table", "int32", "float32"}},
      {"table_rank_1", [](C& c) { c.table_shape = Shape{9}; }, {"block_table", "[9]"}},
      {"decode_q_sequences_differ", [](C& c) { c.q = Shape{2, 4, 8}; c.out = Shape{2, 4, 6}; c.lse = Shape{2, 4}; },
       {"2", "3"}},
      {"q_rank_4", [](C& c) { c.q = Shape{3, 4, 1, 8}; }, {"q", "[3, 4, 1, 8]"}},
      {"cache_rank_3", [](C& c) { c.k_cache = Shape{5, 4, 16}; }, {"k_cache", "[5, 4, 16]"}},
      {"caches_differ", [](C& c) { c.v_cache = Shape{4, 4, 2, 6}; }, {"k_cache", "v_cache", "[4, 4, 2, 6]"}},
      {"heads_not_multiple", [](C& c) { c.k_cache = Shape{5, 4, 3, 8}; c.v_cache = Shape{5, 4, 3, 6}; },
       {"Hq (4) must be a multiple of Hkv (3)"}},
      {"head_size_differs", [](C& c) { c.k_cache = Shape{5, 4, 2, 7}; }, {"8", "7"}},
      {"page_size_zero", [](C& c) { c.k_cache = Shape{5, 0, 2, 8}; c.v_cache = Shape{5, 0, 2, 6}; c.seqlens = {0, 0, 0}; },
       {"page_size", "0"}},
      {"cu_q_decreasing", [](C& c) { chunked(c); c.cu_q = std::vector<std::int64_t>{0, 2, 1, 5}; },
       {"cu_seqlens_q", "[2] = 1", "[1] = 2"}},
      {"cu_q_last_not_total", [](C& c) { chunked(c); c.cu_q = std::vector<std::int64_t>{0, 2, 2, 4}; },
       {"cu_seqlens_q[3] = 4", "5"}},
      {"cu_q_not_from_zero", [](C& c) { chunked(c); c.cu_q = std::vector<std::int64_t>{1, 2, 2, 5}; },
       {"cu_seqlens_q[0] must be 0", "1"}},
      {"cu_q_wrong_length", [](C& c) { chunked(c); c.cu_q = std::vector<std::int64_t>{0, 5}; },
       {"cu_seqlens_q", "[4]", "[2]"}},
      {"mask", [](C& c) { c.configure = [](AttentionOptions& o) { o.mask = view_of(Shape{1, 9}, DType::Bool); }; },
       {"mask"}},
      {"lse_wrong_shape", [](C& c) { c.lse = Shape{3, 4, 1}; }, {"lse", "[3, 4, 1]", "[3, 4]"}},
      {"lse_bfloat16", [](C& c) { c.lse_dtype = DType::BFloat16; }, {"lse", "bfloat16"}},
      {"lse_chunked_wrong_rows", [](C& c) { chunked(c); c.lse = Shape{3, 4}; }, {"lse", "[3, 4]", "[5, 4]"}},
      {"out_wrong_shape", [](C& c) { c.out = Shape{3, 4, 8}; c.checks_out = true; }, {"out", "[3, 4, 8]", "[3, 4, 6]"}},
      {"score_cap_too_small", [](C& c) { c.configure = [](AttentionOptions& o) { o.max_score_bytes = 1; }; },
       {"max_score_bytes", "1"}},
      {"scratch_budget_too_small", [](C& c) { c.configure = [](AttentionOptions& o) { o.max_scratch_bytes = 1; }; },
       {"max_scratch_bytes", "1"}},
  };
}

class PagedValidation : public ::testing::TestWithParam<PagedCase> {};

TEST(PagedValidationBaseline, TheUnchangedCallsAreValid) {
  run_paged(PagedCall{}, nullptr);
  PagedCall prefill;
  chunked(prefill);
  run_paged(prefill, nullptr);
}

TEST_P(PagedValidation, RejectedBeforeAnyWork) {
  PagedCall r;
  GetParam().change(r);
  run_paged(r, &GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Serving, PagedValidation, ::testing::ValuesIn(paged_cases()),
                         [](const auto& info) { return info.param.name; });

// A paged cache is no BLAS matrix: the composed route is refused with the reason, by plan and call.
TEST(PagedValidationRoutes, ComposedIsUnsupported) {
  PagedCall r;
  Metadata table(r.table, r.table_shape, DType::Int32), seqlens(r.seqlens, std::nullopt, DType::Int32);
  const PagedKv pages{table.view, seqlens.view, std::nullopt, std::nullopt, std::nullopt};
  Outputs o;
  TensorView out = output_view(o.out, r.out, DType::Float32);
  AttentionOptions options;
  options.route = RouteChoice::Composed;
  const TensorView q = view_of(r.q), k = view_of(r.k_cache), v = view_of(r.v_cache);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { plan_attention_paged(q, k, v, pages, options); },
           [&] { attention_paged(q, k, v, pages, out, 0.3f, options); }}) {
    try {
      call();
      ADD_FAILURE() << "route composed accepted for a paged cache";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
      EXPECT_EQ(std::string(error.what()).rfind("[heed::attention_paged]", 0), 0u) << error.what();
      EXPECT_NE(std::string(error.what()).find("composed"), std::string::npos) << error.what();
    }
  }
  EXPECT_TRUE(o.untouched());
}

// merge_states: parts of different shapes or dtypes, an lse that is not out's rows in float32.
TEST(MergeValidation, MismatchedPartsAreRejected) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), la(16, 0.0f), lb(16, 0.0f);
  Outputs o;
  const auto f32 = [](std::vector<float>& s, Shape shape, DType dtype = DType::Float32) {
    return output_view(s, shape, dtype);
  };
  struct Case {
    std::string name;
    TensorView out_a, lse_a, out_b, lse_b, out, lse;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"out_b_shape", f32(a, {4, 2, 8}), f32(la, {4, 2}), f32(b, {4, 2, 7}), f32(lb, {4, 2}), f32(o.out, {4, 2, 8}),
       f32(o.lse, {4, 2}), {"out_b", "[4, 2, 7]", "[4, 2, 8]"}},
      {"out_dtype", f32(a, {4, 2, 8}), f32(la, {4, 2}), f32(b, {4, 2, 8}), f32(lb, {4, 2}),
       f32(o.out, {4, 2, 8}, DType::Float16), f32(o.lse, {4, 2}), {"out", "float16", "float32"}},
      {"lse_a_shape", f32(a, {4, 2, 8}), f32(la, {4, 3}), f32(b, {4, 2, 8}), f32(lb, {4, 2}), f32(o.out, {4, 2, 8}),
       f32(o.lse, {4, 2}), {"lse_a", "[4, 3]", "[4, 2]"}},
      {"lse_dtype", f32(a, {4, 2, 8}), f32(la, {4, 2}), f32(b, {4, 2, 8}), f32(lb, {4, 2}), f32(o.out, {4, 2, 8}),
       f32(o.lse, {4, 2}, DType::BFloat16), {"lse", "float32", "bfloat16"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TensorView out = c.out, lse = c.lse;
    expect_invalid([&] { merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, out, lse); }, "heed::merge_states",
                   c.expected);
  }
  EXPECT_TRUE(o.untouched());
}

}  // namespace
}  // namespace heed
