// heed::MultiHeadAttention on the CPU against a float64 reference of the whole layer
// (kernels/layer_cases.hpp: projections, attention with the key padding mask, output
// projection, padded positions zeroed), with MHA, GQA and MQA, odd sizes, fully padded
// sequences, strided, reversed and transposed tensors, the workspace promise, and the errors.

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

TEST(Layer, BatchesInReverseOrder) {
  std::mt19937_64 rng(29);
  LayerData d({"reversed", 24, 4, 2, 6, {9, 2, 5}, 9}, rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  const std::vector<double> reference = reversed_batches(reference_layer(d), d.batch());
  TensorView out = d.out.view();
  layer.forward(reversed_batches(d.hidden.view()), reversed_batches(d.mask.view()), out);
  EXPECT_TRUE(matches_reference(as_rows(out), reference));
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

// Whether heed was built with its CUDA backend: a CUDA device's plan is then Unsupported for
// want of the device, not of the backend.
bool cuda_built() {
  try {
    (void)plan_attention(Shape{1, 1, 1, 8}, Shape{1, 1, 1, 8}, Shape{1, 1, 1, 8}, DType::Float32, {}, Device::cuda(0));
    return true;
  } catch (const Error& e) {
    return std::string(e.what()).find("no CUDA backend") == std::string::npos;
  }
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

// Empty hidden states and outputs have no rows, so any strides: zeros (numpy's for some empty
// arrays), a broadcast batch, a strided last dimension. The call gives the empty output.
TEST(Layer, EmptyBatchOrLengthTakesAnyStrides) {
  std::mt19937_64 rng(19);
  LayerData d({"empty_strides", 16, 2, 2, 8, {3}, 3}, rng);
  const MultiHeadAttention layer(d.config(), d.layer_weights());
  for (const Shape& shape : {Shape{0, 5, 16}, Shape{3, 0, 16}, Shape{0, 0, 16}}) {
    for (const std::vector<std::int64_t>& strides :
         {std::vector<std::int64_t>{0, 0, 0}, std::vector<std::int64_t>{0, 16, 1}, std::vector<std::int64_t>{7, 3, 2}}) {
      const TensorView hidden(nullptr, DType::Float32, shape, strides);
      TensorView out(nullptr, DType::Float32, shape, strides);
      const TensorView mask(nullptr, DType::Bool, Shape{shape[0], shape[1]}, {0, 0});
      EXPECT_NO_THROW(layer.forward(hidden, std::nullopt, out)) << shape.to_string() << " " << Shape(strides).to_string();
      EXPECT_NO_THROW(layer.forward(hidden, mask, out)) << shape.to_string() << " " << Shape(strides).to_string();
    }
  }
  // An empty batch of more positions than BLAS's int is rejected by name, before the heads'
  // strides (length x q_heads x head_dim) overflow.
  expect_error([&] { layer.plan(0, std::int64_t{1} << 62); }, "length (4611686018427387904) exceeds BLAS's int");
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
  for (TensorView* view : {&half.q_weight, &half.k_weight, &half.v_weight, &half.out_weight, &*half.q_bias,
                           &*half.k_bias, &*half.v_bias, &*half.out_bias}) {
    view->dtype = DType::Float16;
  }
  expect_error([&] { MultiHeadAttention(d.config(), half); },
               "q_weight has dtype float16; the layer runs in float32 on the CPU (float16 and bfloat16 on CUDA)",
               ErrorKind::Unsupported);
  MultiHeadAttentionWeights mixed_dtypes = w;
  mixed_dtypes.v_weight.dtype = DType::BFloat16;
  expect_error([&] { MultiHeadAttention(d.config(), mixed_dtypes); },
               "v_weight has dtype bfloat16 but the layer's weights have float32");
  MultiHeadAttentionWeights strided = w;
  strided.out_weight.strides = {64, 2};
  expect_error([&] { MultiHeadAttention(d.config(), strided); }, "out_weight strides [64, 2] need unit stride");
  MultiHeadAttentionWeights short_bias = w;
  short_bias.out_bias->shape = Shape{31};
  expect_error([&] { MultiHeadAttention(d.config(), short_bias); }, "out_bias shape [31] must be [32]");
  MultiHeadAttentionWeights mixed = w;
  mixed.k_weight.device = Device::cuda(0);
  mixed.k_bias->device = Device::cuda(0);
  expect_error([&] { MultiHeadAttention(d.config(), mixed); },
               cuda_built() ? "k_weight is on cuda:0 but the layer's weights are on cpu"
                            : "k_weight is on cuda:0; this build of heed has no CUDA backend",
               cuda_built() ? ErrorKind::InvalidArgument : ErrorKind::Unsupported);
}

// Host memory labelled cuda:0: without a CUDA build or without a device the layer cannot run
// there (Unsupported); with a device the memory is not the device's (InvalidArgument).
TEST(Layer, WeightsLabelledCudaNeedTheBackendAndTheDevice) {
  std::mt19937_64 rng(31);
  LayerData d({"labelled_cuda", 32, 4, 2, 8, {5, 2}, 5}, rng);
  MultiHeadAttentionWeights w = d.layer_weights();
  for (TensorView* view : {&w.q_weight, &w.k_weight, &w.v_weight, &w.out_weight, &*w.q_bias, &*w.k_bias, &*w.v_bias,
                           &*w.out_bias}) {
    view->device = Device::cuda(0);
  }
  const bool gpu_present = Device::default_device().type == DeviceType::CUDA;
  const std::string expected = !cuda_built()   ? "q_weight is on cuda:0; this build of heed has no CUDA backend"
                               : !gpu_present ? "device cuda:0: no CUDA device is present"
                                              : "q_weight data is not memory of cuda:0";
  expect_error([&] { MultiHeadAttention(d.config(), w); }, expected,
               gpu_present ? ErrorKind::InvalidArgument : ErrorKind::Unsupported);
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
