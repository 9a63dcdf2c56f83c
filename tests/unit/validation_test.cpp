// Every invalid input of design.md §1 is rejected identically by plan_attention (views),
// plan_attention (shapes) and attention: InvalidArgument, the same message, starting with
// "[heed::attention]" and carrying the offending values, and `out` untouched.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "heed/heed.hpp"

namespace heed {
namespace {

constexpr const char* kPrefix = "[heed::attention]";
constexpr std::int64_t kBig = std::int64_t{1} << 31;

// Backing bytes for the views of invalid cases: every valid-looking read stays inside, and an
// invalid case must be rejected before anything is read at all.
std::vector<unsigned char>& backing() {
  static std::vector<unsigned char> bytes(1 << 20, 0);
  return bytes;
}

// Row-major strides that saturate instead of overflowing (shapes here may be absurd).
std::vector<std::int64_t> saturating_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
  std::int64_t stride = 1;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    strides[static_cast<std::size_t>(axis)] = stride;
    const std::int64_t dim = shape[axis] > 1 ? shape[axis] : 1;
    if (__builtin_mul_overflow(stride, dim, &stride)) stride = std::numeric_limits<std::int64_t>::max();
  }
  return strides;
}

TensorView view_of(const Shape& shape, DType dtype) {
  return TensorView(backing().data(), dtype, shape, saturating_strides(shape));
}

struct InvalidCase {
  std::string name;
  Shape q{2, 8, 16, 32}, k{2, 2, 24, 32}, v{2, 2, 24, 48};
  DType q_dtype = DType::Float32, k_dtype = DType::Float32, v_dtype = DType::Float32;
  std::function<void(AttentionOptions&)> configure = [](AttentionOptions&) {};
  std::vector<std::string> expected;  // substrings of the message: the offending values
};

void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name; }

AttentionOptions options_of(const InvalidCase& c) {
  AttentionOptions options;
  c.configure(options);
  return options;
}

TensorView mask_view(Shape shape, DType dtype = DType::Bool) { return view_of(shape, dtype); }

// Shapes that do not fit together.
void add_shape_cases(std::vector<InvalidCase>& cases) {
  auto add = [&](InvalidCase c) { cases.push_back(std::move(c)); };
  InvalidCase c;

  c = {};
  c.name = "q_rank_3";
  c.q = Shape{2, 8, 16};
  c.expected = {"q", "[2, 8, 16]"};
  add(c);
  c = {};
  c.name = "k_rank_5";
  c.k = Shape{2, 2, 24, 32, 1};
  c.expected = {"k", "[2, 2, 24, 32, 1]"};
  add(c);
  c = {};
  c.name = "v_rank_2";
  c.v = Shape{24, 48};
  c.expected = {"v", "[24, 48]"};
  add(c);
  c = {};
  c.name = "batch_mismatch";
  c.k = Shape{3, 2, 24, 32};
  c.v = Shape{3, 2, 24, 48};
  c.expected = {"batch", "2", "3"};
  add(c);
  c = {};
  c.name = "heads_not_multiple";
  c.q = Shape{1, 32, 4, 64};
  c.k = Shape{1, 6, 4, 64};
  c.v = Shape{1, 6, 4, 64};
  c.expected = {"Hq (32) must be a multiple of Hkv (6)"};
  add(c);
  c = {};
  c.name = "zero_kv_heads";
  c.k = Shape{2, 0, 24, 32};
  c.v = Shape{2, 0, 24, 48};
  c.expected = {"Hq (8) must be a multiple of Hkv (0)"};
  add(c);
  c = {};
  c.name = "head_size_differs";
  c.k = Shape{2, 2, 24, 40};
  c.expected = {"32", "40"};
  add(c);
  c = {};
  c.name = "kv_lengths_differ";
  c.v = Shape{2, 2, 25, 48};
  c.expected = {"24", "25"};
  add(c);
  c = {};
  c.name = "kv_heads_differ";
  c.v = Shape{2, 4, 24, 48};
  c.expected = {"2", "4"};
  add(c);
  c = {};
  c.name = "negative_q_len";
  c.q = Shape{2, 8, -1, 32};
  c.expected = {"-1"};
  add(c);
  c = {};
  c.name = "negative_kv_len";
  c.k = Shape{2, 2, -5, 32};
  c.v = Shape{2, 2, -5, 48};
  c.expected = {"-5"};
  add(c);
  c = {};
  c.name = "negative_value_dim";
  c.v = Shape{2, 2, 24, -48};
  c.expected = {"-48"};
  add(c);
}

// Masks, sinks, windows and caps that are wrong for the shapes.
void add_option_cases(std::vector<InvalidCase>& cases) {
  auto add = [&](InvalidCase c) { cases.push_back(std::move(c)); };
  InvalidCase c;
  c = {};
  c.name = "mask_rank_3";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{16, 24, 1}); };
  c.expected = {"mask", "[16, 24, 1]"};
  add(c);
  c = {};
  c.name = "mask_rank_1";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{24}); };
  c.expected = {"mask", "[24]"};
  add(c);
  c = {};
  c.name = "mask_wrong_key_dim";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{2, 8, 16, 23}); };
  c.expected = {"mask", "[2, 8, 16, 23]"};
  add(c);
  c = {};
  c.name = "mask_wrong_batch";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{3, 1, 1, 24}, DType::Float32); };
  c.expected = {"mask", "[3, 1, 1, 24]"};
  add(c);
  c = {};
  c.name = "mask_wrong_heads";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{1, 2, 16, 24}); };
  c.expected = {"mask", "[1, 2, 16, 24]"};
  add(c);
  c = {};
  c.name = "mask_2d_wrong_rows";
  c.configure = [](AttentionOptions& o) { o.mask = mask_view(Shape{15, 24}, DType::Float16); };
  c.expected = {"mask", "[15, 24]"};
  add(c);
  c = {};
  c.name = "sinks_too_long";
  c.configure = [](AttentionOptions& o) { o.sinks = view_of(Shape{9}, DType::Float32); };
  c.expected = {"sinks", "[9]", "8"};
  add(c);
  c = {};
  c.name = "sinks_rank_2";
  c.configure = [](AttentionOptions& o) { o.sinks = view_of(Shape{1, 8}, DType::Float32); };
  c.expected = {"sinks", "[1, 8]"};
  add(c);
  c = {};
  c.name = "sinks_bool";
  c.configure = [](AttentionOptions& o) { o.sinks = view_of(Shape{8}, DType::Bool); };
  c.expected = {"sinks", "bool"};
  add(c);
  c = {};
  c.name = "window_without_causal";
  c.configure = [](AttentionOptions& o) { o.window = 4; };
  c.expected = {"window", "4", "causal"};
  add(c);
  c = {};
  c.name = "window_zero";
  c.configure = [](AttentionOptions& o) {
    o.causal = true;
    o.window = 0;
  };
  c.expected = {"window", "0"};
  add(c);
  c = {};
  c.name = "window_negative";
  c.configure = [](AttentionOptions& o) {
    o.causal = true;
    o.window = -3;
  };
  c.expected = {"window", "-3"};
  add(c);
  struct SoftcapCase {
    const char* name;
    float value;
    const char* text;
  };
  for (const SoftcapCase& bad : {SoftcapCase{"softcap_zero", 0.0f, "0"}, SoftcapCase{"softcap_negative", -50.0f, "-50"},
                                 SoftcapCase{"softcap_nan", std::numeric_limits<float>::quiet_NaN(), "nan"},
                                 SoftcapCase{"softcap_infinite", std::numeric_limits<float>::infinity(), "inf"}}) {
    c = {};
    c.name = bad.name;
    c.configure = [value = bad.value](AttentionOptions& o) { o.softcap = value; };
    c.expected = {"softcap", bad.text};
    add(c);
  }
  c = {};
  c.name = "max_score_bytes_zero";
  c.configure = [](AttentionOptions& o) { o.max_score_bytes = 0; };
  c.expected = {"max_score_bytes", "0"};
  add(c);
  c = {};
  c.name = "max_score_bytes_negative";
  c.configure = [](AttentionOptions& o) { o.max_score_bytes = -100; };
  c.expected = {"max_score_bytes", "-100"};
  add(c);
  c = {};
  c.name = "max_scratch_bytes_zero";
  c.configure = [](AttentionOptions& o) { o.max_scratch_bytes = 0; };
  c.expected = {"max_scratch_bytes", "0"};
  add(c);
}

// Wrong dtypes, and shape products that overflow.
void add_dtype_and_overflow_cases(std::vector<InvalidCase>& cases) {
  auto add = [&](InvalidCase c) { cases.push_back(std::move(c)); };
  InvalidCase c;
  c = {};
  c.name = "q_dtype_bool";
  c.q_dtype = c.k_dtype = c.v_dtype = DType::Bool;
  c.expected = {"q", "bool"};
  add(c);
  c = {};
  c.name = "k_dtype_differs";
  c.k_dtype = DType::Float16;
  c.expected = {"float32", "float16"};
  add(c);
  c = {};
  c.name = "v_dtype_differs";
  c.v_dtype = DType::BFloat16;
  c.expected = {"float32", "bfloat16"};
  add(c);
  c = {};
  c.name = "q_elements_overflow";
  c.q = Shape{kBig, kBig, 4, 64};
  c.k = Shape{kBig, 1, 4, 64};
  c.v = Shape{kBig, 1, 4, 64};
  c.expected = {"2147483648", "overflow"};
  add(c);
  c = {};
  c.name = "score_count_overflow";
  c.q = Shape{1, std::int64_t{1} << 20, std::int64_t{1} << 20, 1};
  c.k = Shape{1, 1, std::int64_t{1} << 30, 1};
  c.v = Shape{1, 1, std::int64_t{1} << 30, 1};
  c.expected = {"overflow"};
  add(c);
  c = {};
  c.name = "q_bytes_overflow";  // 2^62 float32 elements: the element count fits, the bytes do not
  c.q = Shape{1, 1, 1, std::int64_t{1} << 62};
  c.k = Shape{1, 1, 1, std::int64_t{1} << 62};
  c.v = Shape{1, 1, 1, 1};
  c.expected = {"overflow"};
  add(c);
  c = {};
  c.name = "out_elements_overflow";
  c.q = Shape{1, 1, std::int64_t{1} << 40, 1};
  c.k = Shape{1, 1, 1, 1};
  c.v = Shape{1, 1, 1, std::int64_t{1} << 30};
  c.expected = {"overflow"};
  add(c);
}

std::vector<InvalidCase> invalid_cases() {
  std::vector<InvalidCase> cases;
  add_shape_cases(cases);
  add_option_cases(cases);
  add_dtype_and_overflow_cases(cases);
  return cases;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Calls body; returns the heed::Error it throws, or nullopt (and a failure) when none.
std::optional<Error> rejection(const std::function<void()>& body, const std::string& what) {
  try {
    body();
  } catch (const Error& error) {
    return error;
  } catch (const std::exception& other) {
    ADD_FAILURE() << what << ": threw a non-heed exception: " << other.what();
    return std::nullopt;
  }
  ADD_FAILURE() << what << ": accepted an invalid input";
  return std::nullopt;
}

void expect_invalid(const Error& error, const std::vector<std::string>& expected, const std::string& what) {
  EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << what << ": " << error.what();
  const std::string message = error.what();
  EXPECT_EQ(message.rfind(kPrefix, 0), 0u) << what << ": " << message;
  for (const std::string& part : expected) {
    EXPECT_TRUE(contains(message, part)) << what << ": message \"" << message << "\" lacks \"" << part << "\"";
  }
}

// An output view over poisoned bytes; for shapes too large to hold, it still points at them.
struct PoisonedOut {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(1 << 16, 0xA7);
  std::vector<unsigned char> before = bytes;
  TensorView view;
};

class InvalidInput : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidInput, RejectedIdenticallyByPlanAndOp) {
  const InvalidCase& c = GetParam();
  const AttentionOptions options = options_of(c);
  const TensorView q = view_of(c.q, c.q_dtype), k = view_of(c.k, c.k_dtype), v = view_of(c.v, c.v_dtype);

  const auto from_views = rejection([&] { (void)plan_attention(q, k, v, options); }, "plan_attention(views)");
  ASSERT_TRUE(from_views.has_value());
  expect_invalid(*from_views, c.expected, "plan_attention(views)");

  if (c.k_dtype == c.q_dtype && c.v_dtype == c.q_dtype) {  // one dtype: expressible as shapes
    const auto from_shapes =
        rejection([&] { (void)plan_attention(c.q, c.k, c.v, c.q_dtype, options, Device::cpu()); }, "plan_attention(shapes)");
    ASSERT_TRUE(from_shapes.has_value());
    expect_invalid(*from_shapes, c.expected, "plan_attention(shapes)");
    EXPECT_STREQ(from_shapes->what(), from_views->what());
  }

  PoisonedOut out;
  const Shape out_shape = c.q.rank() == 4 && c.v.rank() == 4 ? Shape{c.q[0], c.q[1], c.q[2], c.v[3]}
                                                             : Shape{1, 1, 1, 1};
  out.view = TensorView(out.bytes.data(), c.q_dtype, out_shape, saturating_strides(out_shape));
  const auto from_op = rejection([&] { attention(q, k, v, out.view, 0.125f, options); }, "attention");
  ASSERT_TRUE(from_op.has_value());
  expect_invalid(*from_op, c.expected, "attention");
  EXPECT_STREQ(from_op->what(), from_views->what());
  EXPECT_EQ(out.bytes, out.before) << "attention wrote to out before rejecting";
}

INSTANTIATE_TEST_SUITE_P(Validation, InvalidInput, ::testing::ValuesIn(invalid_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- The valid baseline and inputs that must be accepted ----

struct ValidInputs {
  std::vector<float> q = std::vector<float>(2 * 8 * 16 * 32, 0.25f);
  std::vector<float> k = std::vector<float>(2 * 2 * 24 * 32, 0.5f);
  std::vector<float> v = std::vector<float>(2 * 2 * 24 * 48, 1.0f);
  std::vector<float> out = std::vector<float>(2 * 8 * 16 * 48, std::numeric_limits<float>::quiet_NaN());
  TensorView q_view{q.data(), DType::Float32, Shape{2, 8, 16, 32}};
  TensorView k_view{k.data(), DType::Float32, Shape{2, 2, 24, 32}};
  TensorView v_view{v.data(), DType::Float32, Shape{2, 2, 24, 48}};
  TensorView out_view{out.data(), DType::Float32, Shape{2, 8, 16, 48}};
};

TEST(Validation, BaselineIsAccepted) {
  ValidInputs in;
  const AttentionOptions options;
  EXPECT_NO_THROW((void)plan_attention(in.q_view, in.k_view, in.v_view, options));
  EXPECT_NO_THROW((void)plan_attention(in.q_view.shape, in.k_view.shape, in.v_view.shape, DType::Float32, options, Device::cpu()));
  ASSERT_NO_THROW(attention(in.q_view, in.k_view, in.v_view, in.out_view, 0.125f, options));
  // Equal keys, equal values of 1: every output element is 1.
  for (float x : in.out) ASSERT_FLOAT_EQ(x, 1.0f);
}

TEST(Validation, MaskDtypesBoolAndFloatingAreAccepted) {
  ValidInputs in;
  std::vector<unsigned char> mask_bytes(2 * 8 * 16 * 24 * 4, 0);
  for (DType dtype : {DType::Bool, DType::Float32, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : {Shape{16, 24}, Shape{1, 24}, Shape{2, 8, 16, 24}, Shape{2, 1, 1, 24},
                               Shape{1, 8, 1, 1}, Shape{1, 1, 1, 1}}) {
      AttentionOptions options;
      options.mask = TensorView(mask_bytes.data(), dtype, shape);
      EXPECT_NO_THROW((void)plan_attention(in.q_view, in.k_view, in.v_view, options))
          << to_string(dtype) << " " << shape.to_string();
    }
  }
}

TEST(Validation, SinksOfEachFloatingDtypeAndWindowAreAccepted) {
  ValidInputs in;
  std::vector<unsigned char> sink_bytes(64, 0);
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    AttentionOptions options;
    options.sinks = TensorView(sink_bytes.data(), dtype, Shape{8});
    options.causal = true;
    options.window = 1;
    options.max_score_bytes = 1 << 20;
    EXPECT_NO_THROW((void)plan_attention(in.q_view, in.k_view, in.v_view, options)) << to_string(dtype);
  }
}

// ---- Checks only the op can make: the output, the data pointers and the scale ----

void expect_op_rejects(ValidInputs& in, const std::function<void(TensorView&, TensorView&, float&)>& spoil,
                       const std::vector<std::string>& expected, const std::string& what) {
  TensorView q = in.q_view, out = in.out_view;
  float scale = 0.125f;
  spoil(q, out, scale);
  const std::vector<float> before = in.out;
  const auto error = rejection([&] { attention(q, in.k_view, in.v_view, out, scale, AttentionOptions{}); }, what);
  ASSERT_TRUE(error.has_value());
  expect_invalid(*error, expected, what);
  EXPECT_EQ(std::memcmp(before.data(), in.out.data(), before.size() * sizeof(float)), 0)
      << what << ": out was written";
}

TEST(Validation, OpRejectsWrongOutput) {
  ValidInputs in;
  expect_op_rejects(in, [](TensorView&, TensorView& out, float&) { out.shape = Shape{2, 8, 16, 47}; },
                    {"out", "[2, 8, 16, 47]"}, "out shape");
  expect_op_rejects(
      in, [](TensorView&, TensorView& out, float&) { out = TensorView(out.data, DType::Float32, Shape{2, 8, 16 * 48}); },
      {"out", "[2, 8, 768]"}, "out rank");
  expect_op_rejects(in, [](TensorView&, TensorView& out, float&) { out.dtype = DType::Float16; },
                    {"out", "float16"}, "out dtype");
  expect_op_rejects(in, [](TensorView&, TensorView& out, float&) { out.dtype = DType::Bool; }, {"out", "bool"},
                    "out dtype bool");
}

TEST(Validation, OpRejectsNullDataWithElements) {
  ValidInputs in;
  expect_op_rejects(in, [](TensorView& q, TensorView&, float&) { q.data = nullptr; }, {"q"}, "null q");
  expect_op_rejects(in, [](TensorView&, TensorView& out, float&) { out.data = nullptr; }, {"out"}, "null out");
  ValidInputs in_k;
  TensorView k = in_k.k_view;
  k.data = nullptr;
  const auto error = rejection(
      [&] { attention(in_k.q_view, k, in_k.v_view, in_k.out_view, 0.125f, AttentionOptions{}); }, "null k");
  ASSERT_TRUE(error.has_value());
  expect_invalid(*error, {"k"}, "null k");
}

TEST(Validation, OpRejectsNullMaskOrSinksData) {
  ValidInputs in;
  std::vector<unsigned char> bytes(64, 0);
  for (const char* which : {"mask", "sinks"}) {
    AttentionOptions options;
    if (std::string(which) == "mask") {
      options.mask = TensorView(nullptr, DType::Bool, Shape{16, 24});
    } else {
      options.sinks = TensorView(nullptr, DType::Float32, Shape{8});
    }
    EXPECT_NO_THROW((void)plan_attention(in.q_view, in.k_view, in.v_view, options)) << "planning reads no data";
    const std::vector<float> before = in.out;
    const auto error = rejection([&] { attention(in.q_view, in.k_view, in.v_view, in.out_view, 0.125f, options); },
                                 std::string("null ") + which);
    ASSERT_TRUE(error.has_value());
    expect_invalid(*error, {which}, std::string("null ") + which);
    EXPECT_EQ(std::memcmp(before.data(), in.out.data(), before.size() * sizeof(float)), 0);
  }
}

TEST(Validation, OpRejectsNonFiniteScale) {
  ValidInputs in;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    expect_op_rejects(in, [bad](TensorView&, TensorView&, float& scale) { scale = bad; }, {"scale"},
                      "scale " + std::to_string(bad));
  }
}

TEST(Validation, NullDataIsFineWhenEmpty) {
  AttentionOptions options;
  TensorView q(nullptr, DType::Float32, Shape{0, 8, 16, 32});
  TensorView k(nullptr, DType::Float32, Shape{0, 2, 24, 32});
  TensorView v(nullptr, DType::Float32, Shape{0, 2, 24, 48});
  TensorView out(nullptr, DType::Float32, Shape{0, 8, 16, 48});
  EXPECT_NO_THROW(attention(q, k, v, out, 0.125f, options));
}

TEST(Validation, WorkspaceTooSmallIsRejected) {
  ValidInputs in;
  AttentionOptions options;
  options.route = RouteChoice::Composed;
  const AttentionPlan plan = plan_attention(in.q_view, in.k_view, in.v_view, options);
  ASSERT_GT(plan.scratch_bytes, 0u) << "the composed route materialises scores";
  std::vector<unsigned char> workspace(plan.scratch_bytes, 0);
  options.workspace = workspace.data();
  options.workspace_bytes = plan.scratch_bytes - 1;
  const std::vector<float> before = in.out;
  const auto error = rejection(
      [&] { attention(in.q_view, in.k_view, in.v_view, in.out_view, 0.125f, options); }, "small workspace");
  ASSERT_TRUE(error.has_value());
  expect_invalid(*error, {"workspace", std::to_string(plan.scratch_bytes - 1), std::to_string(plan.scratch_bytes)},
                 "small workspace");
  EXPECT_EQ(std::memcmp(before.data(), in.out.data(), before.size() * sizeof(float)), 0);
}

TEST(Validation, MisalignedWorkspaceIsRejected) {
  ValidInputs in;
  AttentionOptions options;
  options.route = RouteChoice::Composed;
  const AttentionPlan plan = plan_attention(in.q_view, in.k_view, in.v_view, options);
  std::vector<std::uint64_t> storage(plan.scratch_bytes / 8 + 4, 0);
  // 4 bytes past a 16-byte boundary: the composed route's 8-byte entries would be misaligned.
  auto* base = reinterpret_cast<unsigned char*>(storage.data());
  base += (16 - reinterpret_cast<std::uintptr_t>(base) % 16) % 16 + 4;
  options.workspace = base;
  options.workspace_bytes = plan.scratch_bytes;
  const std::vector<float> before = in.out;
  const auto error = rejection(
      [&] { attention(in.q_view, in.k_view, in.v_view, in.out_view, 0.125f, options); }, "misaligned workspace");
  ASSERT_TRUE(error.has_value());
  expect_invalid(*error, {"workspace", "aligned", std::to_string(kWorkspaceAlignment)}, "misaligned workspace");
  EXPECT_EQ(std::memcmp(before.data(), in.out.data(), before.size() * sizeof(float)), 0);
}

// A window of Lk keys or more hides nothing; with Lq = 0 or near INT64_MAX it still plans.
TEST(Validation, WideWindowsAndEmptyQueriesPlan) {
  AttentionOptions options;
  options.causal = true;
  options.window = 4;
  EXPECT_NO_THROW(plan_attention(Shape{1, 1, 0, 16}, Shape{1, 1, 5, 16}, Shape{1, 1, 5, 16}, DType::Float32, options,
                                 Device::cpu()));
  options.window = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t q_len : {0, 1, 7}) {
    const AttentionPlan wide = plan_attention(Shape{1, 2, q_len, 16}, Shape{1, 2, 9, 16}, Shape{1, 2, 9, 16},
                                              DType::Float32, options, Device::cpu());
    AttentionOptions no_window;
    no_window.causal = true;
    const AttentionPlan plain = plan_attention(Shape{1, 2, q_len, 16}, Shape{1, 2, 9, 16}, Shape{1, 2, 9, 16},
                                               DType::Float32, no_window, Device::cpu());
    EXPECT_EQ(wide.kernel, plain.kernel) << q_len;
    EXPECT_EQ(wide.scratch_bytes, plain.scratch_bytes) << q_len;
  }
}

// The plan names the softcap.
TEST(Validation, PlanNamesSoftcap) {
  AttentionOptions options;
  options.softcap = 50.0f;
  const AttentionPlan plan =
      plan_attention(Shape{1, 4, 16, 64}, Shape{1, 2, 32, 64}, Shape{1, 2, 32, 64}, DType::Float32, options,
                     Device::cpu());
  EXPECT_NE(plan.explain().find("softcap 50"), std::string::npos) << plan.explain();
}

}  // namespace
}  // namespace heed
