// heed::MultiHeadAttention against a float64 reference of the whole layer (projections,
// attention with the key padding mask, output projection, padded positions zeroed), with
// MHA, GQA and MQA, odd sizes, fully padded sequences, strided and transposed tensors, the
// workspace promise, and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "support/support.hpp"

namespace heed::test {
namespace {

struct LayerCase {
  std::string name;
  std::int64_t hidden, q_heads, kv_heads, head_dim;
  std::vector<std::int64_t> lengths;  // real tokens per sequence (then padding); empty: no mask
  std::int64_t length;
  bool biases = true;
  Layout layout = Layout::Contiguous;  // of hidden and out
  bool transposed_weights = false;     // weights stored as [in, out] (column-major views)
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

// The layer's tensors, owned; weights scaled by 1/sqrt(fan-in) so activations stay O(1).
struct LayerData {
  LayerCase spec;
  Tensor hidden, out, mask;
  std::vector<Tensor> weights;  // q, k, v, out
  std::vector<Tensor> biases;   // q, k, v, out (empty when the case has none)

  explicit LayerData(const LayerCase& c, std::mt19937_64& rng)
      : spec(c),
        hidden(Shape{batch(), c.length, c.hidden}, DType::Float32, c.layout),
        out(Shape{batch(), c.length, c.hidden}, DType::Float32, c.layout),
        mask(Shape{batch(), c.length}, DType::Bool) {
    hidden.fill_random(rng);
    const std::int64_t qw = c.q_heads * c.head_dim, kvw = c.kv_heads * c.head_dim;
    const std::int64_t rows[4] = {qw, kvw, kvw, c.hidden};
    const std::int64_t cols[4] = {c.hidden, c.hidden, c.hidden, qw};
    for (int i = 0; i < 4; ++i) {
      weights.push_back(make_weight(rows[i], cols[i], rng));
      if (c.biases) {
        biases.emplace_back(Shape{rows[i]}, DType::Float32);
        biases.back().fill_random(rng, 0.5);
      }
    }
    for (std::int64_t b = 0; b < batch(); ++b) {
      for (std::int64_t i = 0; i < c.length; ++i) {
        mask.set(b * c.length + i, c.lengths.empty() || i < c.lengths[static_cast<std::size_t>(b)] ? 1.0 : 0.0);
      }
    }
    out.poison();
  }

  std::int64_t batch() const { return spec.lengths.empty() ? 2 : static_cast<std::int64_t>(spec.lengths.size()); }

  Tensor make_weight(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) const {
    const double stddev = 1.0 / std::sqrt(static_cast<double>(cols));
    if (!spec.transposed_weights) {
      Tensor w(Shape{rows, cols}, DType::Float32);
      w.fill_random(rng, stddev);
      return w;
    }
    // [rows, cols] stored as its transpose: storage [cols, rows], view strides (1, rows).
    Tensor w(Shape{cols, rows}, DType::Float32);
    w.fill_random(rng, stddev);
    TensorView& view = w.view();
    view.shape = Shape{rows, cols};
    view.strides = {1, rows};
    return w;
  }

  MultiHeadAttentionConfig config() const { return {spec.hidden, spec.q_heads, spec.kv_heads, spec.head_dim, {}}; }
  MultiHeadAttentionWeights layer_weights() const {
    MultiHeadAttentionWeights w{weights[0].view(), weights[1].view(), weights[2].view(), weights[3].view(),
                                std::nullopt, std::nullopt, std::nullopt, std::nullopt};
    if (!biases.empty()) {
      w.q_bias = biases[0].view();
      w.k_bias = biases[1].view();
      w.v_bias = biases[2].view();
      w.out_bias = biases[3].view();
    }
    return w;
  }
  std::optional<TensorView> mask_view() const {
    return spec.lengths.empty() ? std::nullopt : std::optional<TensorView>(mask.view());
  }
};

// The weight's element (o, i) through its view.
double weight_at(const Tensor& w, std::int64_t o, std::int64_t i) {
  const TensorView& v = w.view();
  return read_element(v, o * v.strides[0] + i * v.strides[1]);
}

// x [rows, in] · Wᵀ + b in float64.
std::vector<double> linear(const std::vector<double>& x, std::int64_t rows, std::int64_t in, const Tensor& w,
                           const Tensor* bias) {
  const std::int64_t n = w.view().shape[0];
  std::vector<double> y(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < n; ++o) {
      double sum = bias ? bias->get(o) : 0.0;
      for (std::int64_t i = 0; i < in; ++i) sum += x[static_cast<std::size_t>(r * in + i)] * weight_at(w, o, i);
      y[static_cast<std::size_t>(r * n + o)] = sum;
    }
  }
  return y;
}

// The whole layer in float64, [B, L, hidden] contiguous: the definition, written out.
std::vector<double> reference_layer(const LayerData& d) {
  const LayerCase& c = d.spec;
  const std::int64_t B = d.batch(), L = c.length, D = c.head_dim, group = c.q_heads / c.kv_heads;
  const std::int64_t qw = c.q_heads * D, kvw = c.kv_heads * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto bias = [&](int i) { return d.biases.empty() ? nullptr : &d.biases[static_cast<std::size_t>(i)]; };
  std::vector<double> result(static_cast<std::size_t>(B * L * c.hidden), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> x(static_cast<std::size_t>(L * c.hidden));
    for (std::int64_t n = 0; n < L * c.hidden; ++n) x[static_cast<std::size_t>(n)] = d.hidden.get(b * L * c.hidden + n);
    const std::vector<double> q = linear(x, L, c.hidden, d.weights[0], bias(0));
    const std::vector<double> k = linear(x, L, c.hidden, d.weights[1], bias(1));
    const std::vector<double> v = linear(x, L, c.hidden, d.weights[2], bias(2));
    std::vector<double> heads(static_cast<std::size_t>(L * qw), 0.0);
    for (std::int64_t h = 0; h < c.q_heads; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<double> scores(static_cast<std::size_t>(L), -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < L; ++j) {
          if (d.mask.get(b * L + j) == 0.0) continue;
          double dot = 0;
          for (std::int64_t e = 0; e < D; ++e) dot += q[static_cast<std::size_t>(i * qw + h * D + e)] * k[static_cast<std::size_t>(j * kvw + g * D + e)];
          scores[static_cast<std::size_t>(j)] = scale * dot;
          top = std::max(top, scale * dot);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;  // no key: zeros
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - top));
        for (std::int64_t j = 0; j < L; ++j) {
          const double p = scores[static_cast<std::size_t>(j)] / sum;
          for (std::int64_t e = 0; e < D; ++e) heads[static_cast<std::size_t>(i * qw + h * D + e)] += p * v[static_cast<std::size_t>(j * kvw + g * D + e)];
        }
      }
    }
    const std::vector<double> y = linear(heads, L, qw, d.weights[3], bias(3));
    for (std::int64_t i = 0; i < L; ++i) {
      if (d.mask.get(b * L + i) == 0.0) continue;  // padded positions: zeros
      for (std::int64_t o = 0; o < c.hidden; ++o) {
        result[static_cast<std::size_t>((b * L + i) * c.hidden + o)] = y[static_cast<std::size_t>(i * c.hidden + o)];
      }
    }
  }
  return result;
}

// out [B, L, hidden] as the rank-4 view [B, L, 1, hidden] the comparison reads row by row.
TensorView as_rows(const TensorView& out) {
  return TensorView(out.data, out.dtype, Shape{out.shape[0], out.shape[1], 1, out.shape[2]},
                    {out.strides[0], out.strides[1], 0, out.strides[2]});
}

std::vector<LayerCase> layer_cases() {
  return {
      {"mha_padding", 64, 4, 4, 16, {17, 5, 0}, 17},
      {"bert_like_heads", 96, 12, 12, 8, {33, 1, 20}, 33},
      {"gqa_odd", 40, 6, 2, 8, {7, 129, 64}, 129},
      {"gqa_two_blocks", 48, 4, 2, 12, {200, 131}, 257},
      {"mqa", 9, 4, 1, 7, {1, 7, 3}, 7},
      {"mqa_single_position", 16, 8, 1, 4, {1, 0}, 1},
      {"no_mask_no_bias", 32, 2, 1, 16, {}, 19, false},
      {"padded_rows_transposed_weights", 24, 3, 3, 8, {11, 4}, 11, true, Layout::Padded, true},
  };
}

class LayerGrid : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerGrid, MatchesFloat64ReferenceOfTheWholeLayer) {
  std::mt19937_64 rng(0x6a09e667f3bcc908ULL);
  LayerData d(GetParam(), rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  const std::vector<double> reference = reference_layer(d);
  layer.forward(d.hidden.view(), d.mask_view(), d.out.view());
  EXPECT_TRUE(matches_reference(as_rows(d.out.view()), reference));
}

TEST_P(LayerGrid, WorkspaceIsThePlansPromise) {
  std::mt19937_64 rng(7);
  LayerData d(GetParam(), rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  const MultiHeadAttentionPlan plan = layer.plan(d.batch(), d.spec.length, !d.spec.lengths.empty());
  EXPECT_EQ(plan.workspace_bytes, layer.plan(d.batch(), d.spec.length, !d.spec.lengths.empty()).workspace_bytes);

  reset_peak();
  const std::size_t before = memory_stats().active;
  layer.forward(d.hidden.view(), d.mask_view(), d.out.view());
  const MemoryStats measured = memory_stats();
  EXPECT_EQ(measured.active, before);
  EXPECT_LE(measured.peak - before, plan.workspace_bytes + kAllocationAlignment);
  EXPECT_GE(measured.peak - before, plan.workspace_bytes);  // one allocation holds it all

  // The caller's workspace: heed allocates nothing, and the result is the same.
  std::vector<float> workspace(plan.workspace_bytes / sizeof(float) + 1);
  Tensor again(d.out.view().shape, DType::Float32, d.spec.layout);
  again.poison();
  reset_peak();
  layer.forward(d.hidden.view(), d.mask_view(), again.view(), workspace.data(), workspace.size() * sizeof(float));
  EXPECT_EQ(memory_stats().peak, before);
  EXPECT_TRUE(matches_reference(as_rows(again.view()), reference_layer(d)));
}

INSTANTIATE_TEST_SUITE_P(Layer, LayerGrid, ::testing::ValuesIn(layer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Layer, InPlaceOutputMayBeTheHiddenStates) {
  std::mt19937_64 rng(11);
  LayerData d({"in_place", 32, 4, 2, 8, {9, 3}, 9}, rng);
  const std::vector<double> reference = reference_layer(d);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  layer.forward(d.hidden.view(), d.mask_view(), d.hidden.view());
  EXPECT_TRUE(matches_reference(as_rows(d.hidden.view()), reference));
}

TEST(Layer, ProfilerNamesTheStagesAndThePlannedAttention) {
  std::mt19937_64 rng(13);
  LayerData d({"profiled", 32, 4, 4, 8, {20, 9}, 20}, rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  const MultiHeadAttentionPlan plan = layer.plan(2, 20);
  profile::set_mode(profile::Mode::Shapes);
  profile::reset();
  layer.forward(d.hidden.view(), d.mask_view(), d.out.view());
  const std::string report = profile::report();
  profile::set_mode(profile::Mode::Off);
  EXPECT_NE(report.find("heed_cpu_mha_qkv_f32 [1, 3, 2] x1"), std::string::npos) << report;
  EXPECT_NE(report.find("heed_cpu_mha_out_f32 [1, 1, 2] x1"), std::string::npos) << report;
  EXPECT_NE(report.find(plan.attention.kernel_name), std::string::npos) << report;
  EXPECT_NE(plan.explain().find("workspace"), std::string::npos);
}

TEST(Layer, EmptyBatchOrLengthWritesNothingAndHoldsNothing) {
  std::mt19937_64 rng(17);
  LayerData d({"empty", 16, 2, 2, 8, {0, 0}, 0}, rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  EXPECT_EQ(layer.plan(0, 5).workspace_bytes, 0u);
  EXPECT_EQ(layer.plan(3, 0).workspace_bytes, 0u);
  EXPECT_NO_THROW(layer.forward(d.hidden.view(), d.mask_view(), d.out.view()));
}

// Runs `call`, expecting InvalidArgument (or `kind`) with a message containing `text`.
template <typename Call>
void expect_error(Call call, const std::string& text, ErrorKind kind = ErrorKind::InvalidArgument) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[heed::MultiHeadAttention] " + text), std::string::npos) << e.what();
  }
}

TEST(Layer, BadConfigAndWeightsAreRejectedWithTheirValues) {
  std::mt19937_64 rng(19);
  LayerData d({"bad", 32, 4, 2, 8, {5, 2}, 5}, rng);
  const MultiHeadAttentionWeights w = d.layer_weights();
  expect_error([&] { MultiHeadAttention({32, 4, 3, 8, {}}, w); }, "q_heads (4) must be a multiple of kv_heads (3)");
  expect_error([&] { MultiHeadAttention({32, 0, 2, 8, {}}, w); }, "hidden (32), q_heads (0), kv_heads (2) and head_dim (8) must be >= 1");
  expect_error([&] { MultiHeadAttention({32, 4, 2, 8, std::numeric_limits<float>::infinity()}, w); }, "scale must be finite");
  expect_error([&] { MultiHeadAttention({33, 4, 2, 8, {}}, w); }, "q_weight shape [32, 32] must be [32, 33]");
  MultiHeadAttentionWeights swapped = w;
  swapped.k_weight = w.q_weight;
  expect_error([&] { MultiHeadAttention(d.config(), swapped); }, "k_weight shape [32, 32] must be [16, 32]");
  MultiHeadAttentionWeights half = w;
  half.v_weight.dtype = DType::Float16;
  expect_error([&] { MultiHeadAttention(d.config(), half); }, "v_weight has dtype float16; the layer runs in float32 only",
               ErrorKind::Unsupported);
  MultiHeadAttentionWeights strided = w;
  strided.out_weight.strides = {64, 2};
  expect_error([&] { MultiHeadAttention(d.config(), strided); }, "out_weight strides [64, 2] need unit stride");
  MultiHeadAttentionWeights short_bias = w;
  short_bias.out_bias->shape = Shape{31};
  expect_error([&] { MultiHeadAttention(d.config(), short_bias); }, "out_bias shape [31] must be [32]");
  MultiHeadAttentionWeights gpu = w;
  gpu.q_weight.device = Device::cuda(0);
  expect_error([&] { MultiHeadAttention(d.config(), gpu); }, "q_weight is on cuda:0; the layer runs on the CPU",
               ErrorKind::Unsupported);
}

TEST(Layer, BadCallsAreRejectedBeforeAnyWorkAndLeaveOutUntouched) {
  std::mt19937_64 rng(23);
  LayerData d({"bad_call", 32, 4, 2, 8, {5, 2}, 5}, rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  const std::vector<unsigned char> before = d.out.storage();
  const auto untouched = [&] { EXPECT_EQ(d.out.storage(), before); };

  Tensor wrong_mask(Shape{2, 4}, DType::Bool);
  expect_error([&] { layer.forward(d.hidden.view(), wrong_mask.view(), d.out.view()); },
               "key_padding_mask shape [2, 4] must be [2, 5]");
  Tensor float_mask(Shape{2, 5}, DType::Float32);
  expect_error([&] { layer.forward(d.hidden.view(), float_mask.view(), d.out.view()); },
               "key_padding_mask has dtype float32; it must be bool");
  Tensor small_out(Shape{2, 4, 32}, DType::Float32);
  expect_error([&] { layer.forward(d.hidden.view(), d.mask_view(), small_out.view()); },
               "out shape [2, 4, 32] must equal hidden's [2, 5, 32]");
  Tensor narrow(Shape{2, 5, 31}, DType::Float32);
  expect_error([&] { layer.forward(narrow.view(), d.mask_view(), d.out.view()); },
               "hidden shape [2, 5, 31] must be [batch, length, 32]");
  TensorView overlapping = d.hidden.view();
  overlapping.strides = {160, 16, 1};
  expect_error([&] { layer.forward(overlapping, d.mask_view(), d.out.view()); },
               "hidden position stride (16) must be at least hidden (32)");
  TensorView columns = d.out.view();
  columns.strides = {320, 64, 2};
  expect_error([&] { layer.forward(d.hidden.view(), d.mask_view(), columns); },
               "out strides [320, 64, 2] need a contiguous last dimension");
  const std::size_t needed = layer.plan(2, 5).workspace_bytes;
  std::vector<float> workspace(needed / sizeof(float));
  expect_error([&] { layer.forward(d.hidden.view(), d.mask_view(), d.out.view(), workspace.data(), needed - 4); },
               "workspace of " + std::to_string(needed - 4) + " bytes is smaller than the plan's workspace_bytes " +
                   std::to_string(needed));
  expect_error([&] { layer.plan(-1, 5); }, "batch (-1) and length (5) must be >= 0");
  expect_error([&] { layer.plan(std::int64_t{1} << 40, std::int64_t{1} << 40); }, "batch x length overflows");
  untouched();
}

}  // namespace
}  // namespace heed::test
