// Bad input on the CUDA backend: clear errors before any work and nothing written; out of
// memory maps to OutOfMemory; the caller's stream and workspace are used.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "cuda/device_tensor.hpp"
#include "heed/heed.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

const Device kGpu = Device::cuda(0);

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one"

ErrorKind kind_of_call(const std::function<void()>& call, std::string* message = nullptr) {
  try {
    call();
  } catch (const Error& error) {
    if (message) *message = error.what();
    return error.kind();
  }
  ADD_FAILURE() << "the call did not throw";
  return ErrorKind::Internal;
}

struct Inputs {
  explicit Inputs(const CaseSpec& spec) : problem(make_problem(spec)) {
    problem->out().poison();
    q = std::make_unique<DeviceTensor>(problem->q());
    k = std::make_unique<DeviceTensor>(problem->k());
    v = std::make_unique<DeviceTensor>(problem->v());
    out = std::make_unique<DeviceTensor>(problem->out());
    before = out->download();
  }
  bool out_untouched() const { return out->download() == before; }
  std::unique_ptr<Problem> problem;
  std::unique_ptr<DeviceTensor> q, k, v, out;
  std::vector<unsigned char> before;
};

TEST(CudaErrors, MixedDevicesAreRejectedAndNothingIsWritten) {
  REQUIRE_GPU();
  Inputs in(Make("mixed", 1, 4, 2, 1, 300, 64, 64, DType::BFloat16));
  std::string message;
  EXPECT_EQ(kind_of_call([&] { attention(in.q->view(), in.problem->k().view(), in.v->view(), in.out->view(), 0.125f, {}); },
                         &message),
            ErrorKind::InvalidArgument);
  EXPECT_NE(message.find("k is on cpu but q is on cuda:0"), std::string::npos) << message;
  TensorView host_out = in.problem->out().view();
  EXPECT_EQ(kind_of_call([&] { attention(in.q->view(), in.k->view(), in.v->view(), host_out, 0.125f, {}); }),
            ErrorKind::InvalidArgument);
  EXPECT_TRUE(in.out_untouched());
}

TEST(CudaErrors, HostMemoryLabelledCudaIsRejected) {
  REQUIRE_GPU();
  Inputs in(Make("host_as_cuda", 1, 4, 2, 1, 300, 64, 64, DType::Float16));
  TensorView q = in.problem->q().view();
  q.device = kGpu;
  std::string message;
  EXPECT_EQ(kind_of_call([&] { attention(q, in.k->view(), in.v->view(), in.out->view(), 0.125f, {}); }, &message),
            ErrorKind::InvalidArgument);
  EXPECT_NE(message.find("q data is not memory of cuda:0"), std::string::npos) << message;
  EXPECT_TRUE(in.out_untouched());
}

TEST(CudaErrors, AbsentDeviceIsUnsupported) {
  REQUIRE_GPU();
  std::string message;
  EXPECT_EQ(kind_of_call([&] { (void)plan_attention(Shape{1, 1, 1, 64}, Shape{1, 1, 8, 64}, Shape{1, 1, 8, 64},
                                                    DType::Float32, {}, Device::cuda(63)); },
                         &message),
            ErrorKind::Unsupported);
  EXPECT_NE(message.find("cuda:63"), std::string::npos) << message;
  EXPECT_EQ(kind_of_call([] { (void)memory_stats(Device::cuda(63)); }), ErrorKind::Unsupported);
}

// Stride-0 views make a huge problem out of a few bytes: its packed inputs need far more than
// the card holds, so scratch allocation fails before any launch.
TEST(CudaErrors, OutOfMemoryIsReportedAndNothingIsWritten) {
  REQUIRE_GPU();
  Inputs in(Make("oom", 1, 1, 1, 20, 1, 64, 64, DType::BFloat16));
  TensorView k = in.k->view(), v = in.v->view();
  const std::int64_t huge = std::int64_t{1} << 33;
  k.shape = Shape{1, 1, huge, 64};
  v.shape = Shape{1, 1, huge, 64};
  k.strides = {0, 0, 0, 1};
  v.strides = {0, 0, 0, 1};
  AttentionOptions options;
  options.route = RouteChoice::Composed;
  options.max_score_bytes = huge * 4;
  const AttentionPlan plan = plan_attention(in.q->view(), k, v, options);
  ASSERT_GT(plan.scratch_bytes, std::size_t{1} << 40) << plan.to_json();
  const std::size_t active = memory_stats(kGpu).active;
  std::string message;
  EXPECT_EQ(kind_of_call([&] { attention(in.q->view(), k, v, in.out->view(), 0.125f, options); }, &message),
            ErrorKind::OutOfMemory);
  EXPECT_NE(message.find("could not allocate"), std::string::npos) << message;
  EXPECT_EQ(memory_stats(kGpu).active, active);
  EXPECT_TRUE(in.out_untouched());
}

// The pool's free blocks are memory_stats' cached after a call; release_cached returns them, and
// a cache limit of 0 lets the pool keep nothing past the next synchronisation.
TEST(CudaErrors, ThePoolsCachedBlocksAreReportedAndReleased) {
  REQUIRE_GPU();
  Inputs in(Make("cached", 1, 8, 1, 1, 4000, 128, 128, DType::BFloat16));
  const AttentionPlan plan = plan_attention(in.q->view(), in.k->view(), in.v->view(), {});
  ASSERT_GT(plan.scratch_bytes, 0u) << plan.to_json();
  cuda_ok(cudaDeviceSynchronize(), "sync");
  (void)release_cached(kGpu);
  EXPECT_EQ(memory_stats(kGpu).cached, 0u);
  attention(in.q->view(), in.k->view(), in.v->view(), in.out->view(), 0.0883883f, {});
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  EXPECT_GE(memory_stats(kGpu).cached, plan.scratch_bytes) << "the call's scratch block stays in the pool";
  EXPECT_GE(release_cached(kGpu), plan.scratch_bytes);
  EXPECT_EQ(memory_stats(kGpu).cached, 0u);
  const std::size_t limit = cache_limit(kGpu);
  set_cache_limit(kGpu, 0);
  EXPECT_EQ(cache_limit(kGpu), 0u);
  attention(in.q->view(), in.k->view(), in.v->view(), in.out->view(), 0.0883883f, {});
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  EXPECT_EQ(memory_stats(kGpu).cached, 0u) << "a limit of 0 keeps no free block past a synchronisation";
  set_cache_limit(kGpu, limit);
  std::vector<unsigned char> bytes = in.out->download();
  EXPECT_TRUE(matches_reference(in.out->host_view(bytes), in.problem->reference()));
}

TEST(CudaErrors, CallerStreamAndWorkspace) {
  REQUIRE_GPU();
  Inputs in(Make("stream", 1, 8, 1, 1, 4000, 128, 128, DType::BFloat16));
  const AttentionPlan plan = plan_attention(in.q->view(), in.k->view(), in.v->view(), {});
  ASSERT_GT(plan.scratch_bytes, 0u) << plan.to_json();
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* workspace = nullptr;
  cuda_ok(cudaMalloc(&workspace, plan.scratch_bytes), "cudaMalloc");
  AttentionOptions options;
  options.workspace = workspace;
  options.workspace_bytes = plan.scratch_bytes;
  reset_peak(kGpu);
  const std::size_t active = memory_stats(kGpu).active;
  attention(in.q->view(), in.k->view(), in.v->view(), in.out->view(), 0.0883883f, options, Stream{stream});
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(memory_stats(kGpu).peak, active) << "with a workspace heed allocates nothing";
  std::vector<unsigned char> bytes = in.out->download();
  const std::vector<double> reference = in.problem->reference();
  EXPECT_TRUE(matches_reference(in.out->host_view(bytes), reference));
  (void)cudaFree(workspace);
  (void)cudaStreamDestroy(stream);
}

TEST(CudaErrors, DefaultDeviceIsTheGpu) {
  REQUIRE_GPU();
  EXPECT_EQ(Device::default_device(), kGpu);
  const AttentionPlan plan = plan_attention(Shape{1, 4, 1, 64}, Shape{1, 1, 100, 64}, Shape{1, 1, 100, 64},
                                            DType::Float16, {});
  EXPECT_EQ(plan.device, kGpu);
  // One query row per head: the decode route, on CUDA or tensor cores as the planner's
  // table decides for 4 rows over one (batch, key head) group.
  EXPECT_EQ(plan.kernel_name.rfind("heed_cuda_vector", 0), 0u) << plan.kernel_name;
  EXPECT_TRUE(plan.kernel_name.ends_with("_f16")) << plan.kernel_name;
}

TEST(CudaProfile, TimeModeRecordsDurations) {
  REQUIRE_GPU();
  Inputs in(Make("timed", 2, 8, 2, 1, 2000, 128, 128, DType::BFloat16));
  profile::set_mode(profile::Mode::Time);
  profile::reset();
  attention(in.q->view(), in.k->view(), in.v->view(), in.out->view(), 0.088f, {});
  const std::vector<profile::Record> records = profile::records();
  profile::set_mode(profile::Mode::Off);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records[0].key.rfind("heed_cuda_vector", 0), 0u) << records[0].key;
  EXPECT_NE(records[0].key.find("_bf16 ["), std::string::npos) << records[0].key;
  for (const profile::Record& r : records) EXPECT_GT(r.seconds, 0.0) << r.key;
}

}  // namespace
}  // namespace heed::test
