// heed::Runner on CUDA, and host-resident metadata on CUDA. A runner's run() captured in a CUDA
// graph and replayed after the data, the block table and the lengths changed in place on the
// device gives the plain call's output bit for bit (same plan, same kernels); host-resident
// metadata (copied to the device by the call, or by the runner at construction and at
// update_metadata) gives what device-resident metadata gives. Label `gpu`: skipped without a
// device.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda/device_tensor.hpp"
#include "heed/heed.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one"

constexpr float kScale = 0.125f;

// A contiguous host tensor and its device copy, refilled together.
struct Pair {
  Tensor host;
  std::unique_ptr<DeviceTensor> device;
  Pair(const Shape& shape, DType dtype, std::mt19937_64& rng) : host(shape, dtype) {
    host.fill_random(rng);
    device = std::make_unique<DeviceTensor>(host);
  }
  TensorView& view() { return device->view(); }
  void refill(std::mt19937_64& rng, cudaStream_t stream) {
    host.fill_random(rng);
    cuda_ok(cudaMemcpyAsync(device->view().data, host.view().data, host.storage().size(), cudaMemcpyHostToDevice,
                            stream),
            "cudaMemcpyAsync of new data");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
};

// Int32 metadata on the host and its device copy.
struct Metadata {
  IntTensor host;
  std::unique_ptr<DeviceTensor> device;
  Metadata(const Shape& shape, const std::vector<std::int64_t>& values)
      : host(shape, values), device(std::make_unique<DeviceTensor>(host.view())) {}
  // New values on the host and on the device (the same memory the calls were bound to).
  void set(const std::vector<std::int64_t>& values, cudaStream_t stream) {
    auto* data = static_cast<std::int32_t*>(host.view().data);
    for (std::size_t i = 0; i < values.size(); ++i) data[i] = static_cast<std::int32_t>(values[i]);
    cuda_ok(cudaMemcpyAsync(device->view().data, data, values.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                            stream),
            "cudaMemcpyAsync of new metadata");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
};

::testing::AssertionResult same_output(const DeviceTensor& got, const DeviceTensor& expected) {
  if (got.download() == expected.download()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the outputs differ";
}

// A stream of its own (non-blocking, as PyTorch's), and a graph captured on it.
class CapturingStream {
 public:
  CapturingStream() { cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~CapturingStream() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }
  heed::Stream heed() const { return heed::Stream{stream_}; }
  void capture(Runner& runner) {
    cuda_ok(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    runner.run(heed());
    cuda_ok(cudaStreamEndCapture(stream_, &graph_), "cudaStreamEndCapture");
    cuda_ok(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  void replay() {
    cuda_ok(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Paged decode: B 4, Hq 8 / Hkv 2, D 128, pages of 16, up to 8 pages a sequence.
struct PagedDecode {
  static constexpr std::int64_t kBatch = 4, kPages = 40, kPageSize = 16, kMaxPages = 8;
  std::mt19937_64 rng;
  Pair q, k_cache, v_cache;
  Pair out, expected;
  Metadata table, lengths;
  explicit PagedDecode(DType dtype, const std::string& name)
      : rng(seed_of(name)),
        q({kBatch, 8, 128}, dtype, rng),
        k_cache({kPages, kPageSize, 2, 128}, dtype, rng),
        v_cache({kPages, kPageSize, 2, 128}, dtype, rng),
        out({kBatch, 8, 128}, dtype, rng),
        expected({kBatch, 8, 128}, dtype, rng),
        table({kBatch, kMaxPages}, first_table()),
        lengths({kBatch}, {100, 1, 128, 37}) {}

  static std::vector<std::int64_t> first_table() {
    std::vector<std::int64_t> t(kBatch * kMaxPages);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>((i * 7) % kPages);
    return t;
  }
  PagedKv pages(bool on_device) {
    return PagedKv{on_device ? table.device->view() : table.host.view(),
                   on_device ? lengths.device->view() : lengths.host.view(), std::nullopt, std::nullopt,
                   kPageSize * kMaxPages};
  }
  void run_plain(bool on_device, heed::Stream stream) {
    attention_paged(q.view(), k_cache.view(), v_cache.view(), pages(on_device), expected.view(), kScale, {}, stream);
    cuda_ok(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)), "cudaStreamSynchronize");
  }
  // New data, pages shuffled and shared, one sequence unused (length 0).
  void change(cudaStream_t stream) {
    q.refill(rng, stream);
    k_cache.refill(rng, stream);
    v_cache.refill(rng, stream);
    std::vector<std::int64_t> t(kBatch * kMaxPages);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>((i * 13 + 5) % kPages);
    t[8] = t[0];  // a shared page
    table.set(t, stream);
    lengths.set({0, 128, 17, 64}, stream);
  }
};

TEST(CudaRunner, PagedDecodeGraphReplaysAfterDataAndMetadataChangeInPlace) {
  REQUIRE_GPU();
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32}) {
    SCOPED_TRACE(to_string(dtype));
    PagedDecode d(dtype, std::string("runner_graph_") + to_string(dtype));
    CapturingStream stream;
    Runner runner = Runner::paged(d.q.view(), d.k_cache.view(), d.v_cache.view(), d.pages(true), d.out.view(),
                                  kScale, {}, stream.heed());
    stream.capture(runner);
    for (int round = 0; round < 2; ++round) {
      stream.replay();
      d.run_plain(true, stream.heed());
      EXPECT_TRUE(same_output(*d.out.device, *d.expected.device)) << "round " << round;
      d.change(stream.get());
    }
  }
}

TEST(CudaRunner, HostMetadataIsCopiedByThePlainCallAndTheRunner) {
  REQUIRE_GPU();
  PagedDecode d(DType::Float16, "runner_host_metadata");
  CapturingStream stream;
  const AttentionPlan plan = plan_attention_paged(d.q.view(), d.k_cache.view(), d.v_cache.view(), d.pages(false), {});
  const auto metadata = std::find_if(plan.buffers.begin(), plan.buffers.end(),
                                     [](const ScratchBuffer& b) { return b.name == "metadata"; });
  ASSERT_NE(metadata, plan.buffers.end()) << plan.explain();
  EXPECT_GE(metadata->bytes, (PagedDecode::kBatch * PagedDecode::kMaxPages + PagedDecode::kBatch) * 4u);
  EXPECT_EQ(metadata->offset + metadata->bytes, plan.scratch_bytes);

  // The plain call with host metadata gives what it gives with the metadata on the device.
  d.run_plain(true, stream.heed());
  const std::vector<unsigned char> on_device = d.expected.device->download();
  d.run_plain(false, stream.heed());
  EXPECT_EQ(d.expected.device->download(), on_device);

  // A runner with host metadata, captured; changed metadata reaches it through update_metadata.
  Runner runner = Runner::paged(d.q.view(), d.k_cache.view(), d.v_cache.view(), d.pages(false), d.out.view(),
                                kScale, {}, stream.heed());
  EXPECT_EQ(runner.plan(), plan);
  stream.capture(runner);
  stream.replay();
  EXPECT_EQ(d.out.device->download(), on_device);
  d.change(stream.get());
  runner.update_metadata(stream.heed());
  stream.replay();
  d.run_plain(true, stream.heed());
  EXPECT_TRUE(same_output(*d.out.device, *d.expected.device));
}

TEST(CudaRunner, RaggedPrefillWithHostMetadataMatchesDeviceMetadata) {
  REQUIRE_GPU();
  std::mt19937_64 rng(seed_of("runner_ragged_host"));
  Pair q({70, 4, 64}, DType::BFloat16, rng), k({150, 2, 64}, DType::BFloat16, rng);
  Pair v({150, 2, 64}, DType::BFloat16, rng);
  Pair out({70, 4, 64}, DType::BFloat16, rng), expected({70, 4, 64}, DType::BFloat16, rng);
  Metadata cu_q({4}, cumulative({30, 0, 40})), cu_k({4}, cumulative({50, 10, 90}));
  AttentionOptions options;
  options.causal = true;
  CapturingStream stream;
  const RaggedBatch host{cu_q.host.view(), cu_k.host.view(), 40, 90};
  const RaggedBatch device{cu_q.device->view(), cu_k.device->view(), 40, 90};
  attention_varlen(q.view(), k.view(), v.view(), device, expected.view(), kScale, options, stream.heed());
  attention_varlen(q.view(), k.view(), v.view(), host, out.view(), kScale, options, stream.heed());
  EXPECT_TRUE(same_output(*out.device, *expected.device));

  Runner runner = Runner::varlen(q.view(), k.view(), v.view(), device, out.view(), kScale, options, stream.heed());
  stream.capture(runner);
  cu_q.set(cumulative({10, 35, 25}), stream.get());
  cu_k.set(cumulative({90, 35, 25}), stream.get());
  q.refill(rng, stream.get());
  stream.replay();
  attention_varlen(q.view(), k.view(), v.view(), device, expected.view(), kScale, options, stream.heed());
  EXPECT_TRUE(same_output(*out.device, *expected.device));
}

TEST(CudaRunner, DenseRunMatchesThePlainCall) {
  REQUIRE_GPU();
  std::mt19937_64 rng(seed_of("runner_dense_cuda"));
  Pair q({2, 8, 129, 128}, DType::Float16, rng), k({2, 2, 300, 128}, DType::Float16, rng);
  Pair v({2, 2, 300, 128}, DType::Float16, rng);
  Pair out({2, 8, 129, 128}, DType::Float16, rng), expected({2, 8, 129, 128}, DType::Float16, rng);
  AttentionOptions options;
  options.causal = true;
  CapturingStream stream;
  Runner runner = Runner::dense(q.view(), k.view(), v.view(), out.view(), kScale, options, stream.heed());
  EXPECT_EQ(runner.plan(), plan_attention(q.view(), k.view(), v.view(), options));
  stream.capture(runner);
  for (int round = 0; round < 2; ++round) {
    stream.replay();
    attention(q.view(), k.view(), v.view(), expected.view(), kScale, options, stream.heed());
    EXPECT_TRUE(same_output(*out.device, *expected.device)) << "round " << round;
    k.refill(rng, stream.get());
  }
}

}  // namespace
}  // namespace heed::test
