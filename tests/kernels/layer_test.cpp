// heed::MultiHeadAttention on the CPU against a float64 reference of the whole layer
// (kernels/layer_cases.hpp: projections, attention with the key padding mask, output
// projection, padded positions zeroed), with MHA, GQA and MQA, odd sizes, fully padded
// sequences, strided and transposed tensors, the workspace promise, and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/layer_cases.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

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
