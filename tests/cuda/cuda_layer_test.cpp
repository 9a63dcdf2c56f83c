// heed::MultiHeadAttention on CUDA against the float64 reference of the whole layer
// (kernels/layer_cases.hpp) on device copies: the CPU's grid (MHA, GQA, MQA, padding, fully
// padded sequences, padded rows, transposed weights) in float32, and float16 / bfloat16
// cases; output poisoned, bytes outside it untouched; the workspace promise on the device's
// pool, the caller's workspace and stream; the profiler's stage names; errors before any
// work, out of memory included. Label `gpu`.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/device_tensor.hpp"
#include "heed/heed.hpp"
#include "kernels/layer_cases.hpp"

namespace heed::test {
namespace {

constexpr std::size_t kPoolGranularity = 512;  // cuda/allocator.hpp
const Device kGpu = Device::cuda(0);
constexpr DType f32 = DType::Float32;
constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one"

// A layer case's tensors on the device (whole storages, so gaps and poison go up too).
struct DeviceLayer {
  explicit DeviceLayer(const LayerData& d) {
    hidden = std::make_unique<DeviceTensor>(d.hidden);
    out = std::make_unique<DeviceTensor>(d.out);
    mask = std::make_unique<DeviceTensor>(d.mask);
    const MultiHeadAttentionWeights host = d.layer_weights();
    weights = {upload(host.q_weight), upload(host.k_weight), upload(host.v_weight), upload(host.out_weight),
               std::nullopt, std::nullopt, std::nullopt, std::nullopt};
    if (host.q_bias) {
      weights.q_bias = upload(*host.q_bias);
      weights.k_bias = upload(*host.k_bias);
      weights.v_bias = upload(*host.v_bias);
      weights.out_bias = upload(*host.out_bias);
    }
    if (d.mask_view()) mask_view = mask->view();
  }

  TensorView upload(const TensorView& view) {
    tensors.push_back(std::make_unique<DeviceTensor>(view));
    return tensors.back()->view();
  }

  std::unique_ptr<DeviceTensor> hidden, out, mask;
  std::vector<std::unique_ptr<DeviceTensor>> tensors;
  MultiHeadAttentionWeights weights;
  std::optional<TensorView> mask_view;
};

// Every byte of the device's copy of `host` outside its view is as it was uploaded.
::testing::AssertionResult only_view_written(const Tensor& host, const std::vector<unsigned char>& after) {
  const std::vector<unsigned char>& before = host.storage();
  const TensorView& view = host.view();
  const std::size_t size = size_of(view.dtype);
  const auto start = static_cast<const unsigned char*>(view.data) - before.data();
  std::vector<bool> inside(before.size(), false);
  for (std::int64_t offset : element_offsets(view.shape, view.strides)) {
    for (std::size_t byte = 0; byte < size; ++byte) {
      inside[static_cast<std::size_t>(start + offset * static_cast<std::int64_t>(size)) + byte] = true;
    }
  }
  for (std::size_t byte = 0; byte < before.size() && byte < after.size(); ++byte) {
    if (!inside[byte] && before[byte] != after[byte]) {
      return ::testing::AssertionFailure() << "byte " << byte << " outside the output was written";
    }
  }
  return ::testing::AssertionSuccess();
}

// The CPU's grid in float32, the same shapes in float16 and bfloat16, and MiniLM's layer
// shape (hidden 384, 12 heads of 32) with padding.
std::vector<LayerCase> cuda_layer_cases() {
  std::vector<LayerCase> cases = layer_cases();
  const std::vector<LayerCase> more = {
      {"mha_padding_f16", 64, 4, 4, 16, {17, 5, 0}, 17, true, Layout::Contiguous, false, f16},
      {"bert_like_heads_bf16", 96, 12, 12, 8, {33, 1, 20}, 33, true, Layout::Contiguous, false, bf16},
      {"gqa_odd_bf16", 40, 6, 2, 8, {7, 129, 64}, 129, true, Layout::Contiguous, false, bf16},
      {"gqa_two_blocks_f16", 48, 4, 2, 12, {200, 131}, 257, true, Layout::Contiguous, false, f16},
      {"mqa_f16", 9, 4, 1, 7, {1, 7, 3}, 7, true, Layout::Contiguous, false, f16},
      {"mqa_single_position_bf16", 16, 8, 1, 4, {1, 0}, 1, true, Layout::Contiguous, false, bf16},
      {"no_mask_no_bias_bf16", 32, 2, 1, 16, {}, 19, false, Layout::Contiguous, false, bf16},
      {"padded_rows_transposed_weights_f16", 24, 3, 3, 8, {11, 4}, 11, true, Layout::Padded, true, f16},
      {"padded_rows_transposed_weights_bf16", 24, 3, 3, 8, {11, 4}, 11, true, Layout::Padded, true, bf16},
      {"gqa_d64_f16", 256, 8, 2, 64, {100, 37}, 100, true, Layout::Contiguous, false, f16},
      {"minilm_layer_f32", 384, 12, 12, 32, {128, 77, 128, 1}, 128},
      {"minilm_layer_f16", 384, 12, 12, 32, {128, 77, 128, 1}, 128, true, Layout::Contiguous, false, f16},
      {"minilm_layer_bf16", 384, 12, 12, 32, {128, 77, 128, 1}, 128, true, Layout::Contiguous, false, bf16},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  return cases;
}

class CudaLayerGrid : public ::testing::TestWithParam<LayerCase> {};

TEST_P(CudaLayerGrid, MatchesFloat64ReferenceOfTheWholeLayer) {
  REQUIRE_GPU();
  std::mt19937_64 rng(0x6a09e667f3bcc908ULL);
  LayerData d(GetParam(), rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  EXPECT_EQ(layer.device(), kGpu);
  EXPECT_EQ(layer.dtype(), GetParam().dtype);
  layer.forward(device.hidden->view(), device.mask_view, device.out->view());
  std::vector<unsigned char> bytes = device.out->download();
  EXPECT_TRUE(only_view_written(d.out, bytes));
  EXPECT_TRUE(matches_reference(as_rows(device.out->host_view(bytes)), reference_layer(d)));
}

TEST_P(CudaLayerGrid, WorkspaceIsThePlansPromiseOnTheCallersStreamToo) {
  REQUIRE_GPU();
  std::mt19937_64 rng(7);
  LayerData d(GetParam(), rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  const MultiHeadAttentionPlan plan = layer.plan(d.batch(), d.spec.length, !d.spec.lengths.empty());
  SCOPED_TRACE(plan.explain());
  EXPECT_EQ(plan.attention.device, kGpu);

  cuda_ok(cudaDeviceSynchronize(), "sync");
  reset_peak(kGpu);
  const std::size_t before = memory_stats(kGpu).active;
  layer.forward(device.hidden->view(), device.mask_view, device.out->view());
  cuda_ok(cudaDeviceSynchronize(), "sync after the layer");
  const MemoryStats measured = memory_stats(kGpu);
  EXPECT_EQ(measured.active, before) << "the workspace is returned to the pool";
  const std::size_t rounded = (plan.workspace_bytes + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
  EXPECT_LE(measured.peak - before, rounded);
  EXPECT_GE(measured.peak - before, plan.workspace_bytes);  // one allocation holds it all

  // The caller's workspace on the caller's stream: heed allocates nothing; the same result.
  void* workspace = nullptr;
  cuda_ok(cudaMalloc(&workspace, std::max<std::size_t>(plan.workspace_bytes, 16)), "cudaMalloc");
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Tensor again(d.out.view().shape, d.spec.dtype, d.spec.layout);
  again.poison();
  DeviceTensor again_device(again);
  reset_peak(kGpu);
  layer.forward(device.hidden->view(), device.mask_view, again_device.view(), workspace, plan.workspace_bytes,
                Stream{stream});
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(memory_stats(kGpu).peak, before) << "with a workspace heed allocates nothing";
  std::vector<unsigned char> bytes = again_device.download();
  EXPECT_TRUE(matches_reference(as_rows(again_device.host_view(bytes)), reference_layer(d)));
  (void)cudaStreamDestroy(stream);
  (void)cudaFree(workspace);
}

INSTANTIATE_TEST_SUITE_P(Layer, CudaLayerGrid, ::testing::ValuesIn(cuda_layer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CudaLayer, InPlaceOutputMayBeTheHiddenStates) {
  REQUIRE_GPU();
  for (DType dtype : {f32, bf16}) {
    std::mt19937_64 rng(11);
    LayerData d({"in_place", 32, 4, 2, 8, {9, 3}, 9, true, Layout::Contiguous, false, dtype}, rng);
    DeviceLayer device(d);
    const MultiHeadAttention layer(d.config(), device.weights);
    layer.forward(device.hidden->view(), device.mask_view, device.hidden->view());
    std::vector<unsigned char> bytes = device.hidden->download();
    EXPECT_TRUE(matches_reference(as_rows(device.hidden->host_view(bytes)), reference_layer(d)));
  }
}

TEST(CudaLayer, BatchesInReverseOrder) {
  REQUIRE_GPU();
  std::mt19937_64 rng(29);
  LayerData d({"reversed", 24, 4, 2, 6, {9, 2, 5}, 9}, rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  layer.forward(reversed_batches(device.hidden->view()), reversed_batches(device.mask->view()), device.out->view());
  std::vector<unsigned char> bytes = device.out->download();
  EXPECT_TRUE(matches_reference(as_rows(device.out->host_view(bytes)),
                                reversed_batches(reference_layer(d), d.batch())));
}

TEST(CudaLayer, ProfilerNamesTheStagesAndThePlannedAttention) {
  REQUIRE_GPU();
  std::mt19937_64 rng(13);
  LayerData d({"profiled", 32, 4, 4, 8, {20, 9}, 20}, rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  const MultiHeadAttentionPlan plan = layer.plan(2, 20);
  EXPECT_EQ(plan.workers, 1);
  EXPECT_EQ(plan.block_rows, 40);
  EXPECT_NE(plan.explain().find("cuBLAS"), std::string::npos) << plan.explain();
  profile::set_mode(profile::Mode::Shapes);
  profile::reset();
  layer.forward(device.hidden->view(), device.mask_view, device.out->view());
  cuda_ok(cudaDeviceSynchronize(), "sync");
  const std::string report = profile::report();
  profile::set_mode(profile::Mode::Off);
  EXPECT_NE(report.find("heed_cuda_mha_qkv_f32 [1, 3, 2] x1"), std::string::npos) << report;
  EXPECT_NE(report.find("heed_cuda_mha_out_f32 [1, 1, 2] x1"), std::string::npos) << report;
  EXPECT_NE(report.find("heed_cuda_mha_bias_f32 [40, 1, 1] x4"), std::string::npos) << report;
  EXPECT_NE(report.find("heed_cuda_mha_pad_f32 [40, 1, 1] x1"), std::string::npos) << report;
  EXPECT_NE(report.find(plan.attention.kernel_name), std::string::npos) << report;
}

ErrorKind kind_of_call(const std::function<void()>& call, std::string* message) {
  try {
    call();
  } catch (const Error& error) {
    *message = error.what();
    return error.kind();
  }
  ADD_FAILURE() << "the call did not throw";
  return ErrorKind::Internal;
}

// Runs `call`, expecting `kind` with "[heed::MultiHeadAttention] <text>" in the message.
void expect_error(const std::function<void()>& call, const std::string& text,
                  ErrorKind kind = ErrorKind::InvalidArgument) {
  std::string message;
  EXPECT_EQ(kind_of_call(call, &message), kind) << message;
  EXPECT_NE(message.find("[heed::MultiHeadAttention] " + text), std::string::npos) << message;
}

TEST(CudaLayerErrors, DevicesDtypesAndMemoryAreCheckedBeforeAnyWork) {
  REQUIRE_GPU();
  std::mt19937_64 rng(23);
  LayerData d({"errors", 32, 4, 2, 8, {5, 2}, 5}, rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  const std::vector<unsigned char> before = device.out->download();
  TensorView& out = device.out->view();

  expect_error([&] { layer.forward(d.hidden.view(), device.mask_view, out); },
               "hidden is on cpu but the layer's weights are on cuda:0");
  expect_error([&] { layer.forward(device.hidden->view(), d.mask.view(), out); },
               "key_padding_mask is on cpu but the layer's weights are on cuda:0");
  Tensor half_out(Shape{2, 5, 32}, f16);
  DeviceTensor half_device(half_out);
  expect_error([&] { layer.forward(device.hidden->view(), device.mask_view, half_device.view()); },
               "out has dtype float16 but the layer's weights have float32");
  TensorView host_labelled = d.hidden.view();
  host_labelled.device = kGpu;
  expect_error([&] { layer.forward(host_labelled, device.mask_view, out); }, "hidden data is not memory of cuda:0");
  const std::size_t needed = layer.plan(2, 5).workspace_bytes;
  std::vector<float> host_workspace(needed / sizeof(float) + 1);
  expect_error([&] { layer.forward(device.hidden->view(), device.mask_view, out, host_workspace.data(), needed); },
               "workspace data is not memory of cuda:0");
  EXPECT_EQ(device.out->download(), before);

  MultiHeadAttentionWeights mixed = device.weights;
  mixed.k_weight = d.weights[1].view();
  expect_error([&] { MultiHeadAttention(d.config(), mixed); }, "k_weight is on cpu but the layer's weights are on cuda:0");
  MultiHeadAttentionWeights labelled = d.layer_weights();
  for (TensorView* view : {&labelled.q_weight, &labelled.k_weight, &labelled.v_weight, &labelled.out_weight,
                           &*labelled.q_bias, &*labelled.k_bias, &*labelled.v_bias, &*labelled.out_bias}) {
    view->device = kGpu;
  }
  expect_error([&] { MultiHeadAttention(d.config(), labelled); }, "q_weight data is not memory of cuda:0");
  MultiHeadAttentionWeights half_bias = device.weights;
  Tensor bias16(Shape{32}, f16);
  DeviceTensor bias16_device(bias16);
  half_bias.out_bias = bias16_device.view();
  expect_error([&] { MultiHeadAttention(d.config(), half_bias); },
               "out_bias has dtype float16 but the layer's weights have float32");
}

// Weights of 65536 features for hidden size 1 and a hidden-state view of batch stride 0 ask
// for a workspace of 512 GiB from a few MiB of tensors: the pool cannot give it, and nothing
// is launched or written.
TEST(CudaLayerErrors, OutOfMemoryIsReportedAndNothingIsWritten) {
  REQUIRE_GPU();
  std::mt19937_64 rng(37);
  const std::int64_t batch = 512, length = 1024, head_dim = 65536;
  LayerData d({"oom", 1, 1, 1, head_dim, {}, length, false}, rng);
  DeviceLayer device(d);
  const MultiHeadAttention layer(d.config(), device.weights);
  ASSERT_GT(layer.plan(batch, length, false).workspace_bytes, std::size_t{400} << 30);
  TensorView hidden = device.hidden->view();
  hidden.shape = Shape{batch, length, 1};
  hidden.strides = {0, 1, 1};
  const std::size_t out_bytes = static_cast<std::size_t>(batch * length) * sizeof(float);
  void* out_data = nullptr;
  cuda_ok(cudaMalloc(&out_data, out_bytes), "cudaMalloc");
  cuda_ok(cudaMemset(out_data, 0x5a, out_bytes), "cudaMemset");
  TensorView out(out_data, f32, Shape{batch, length, 1}, kGpu);
  const std::size_t active = memory_stats(kGpu).active;
  std::string message;
  EXPECT_EQ(kind_of_call([&] { layer.forward(hidden, std::nullopt, out); }, &message), ErrorKind::OutOfMemory)
      << message;
  EXPECT_NE(message.find("[heed::MultiHeadAttention] could not allocate"), std::string::npos) << message;
  EXPECT_EQ(memory_stats(kGpu).active, active);
  std::vector<unsigned char> bytes(out_bytes);
  cuda_ok(cudaMemcpy(bytes.data(), out_data, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  EXPECT_EQ(bytes, std::vector<unsigned char>(out_bytes, 0x5a));
  (void)cudaFree(out_data);
}

}  // namespace
}  // namespace heed::test
