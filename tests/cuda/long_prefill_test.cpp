// Issue 5's long-prefill schedule: 16 query heads over 2 key heads, head size 256, bfloat16,
// query rows against far more keys, under a 512 MiB score cap. The plan holds the cap, the
// device scratch measured during the call stays within the plan, and rows sampled across heads
// and positions match a float64 reference of those rows. (The whole oracle of the largest
// shape would be 4 TFLOP in float64: too slow for a test, so rows are sampled.) Long tier:
// `heed_cuda_tests_long_tier` (HEED_TEST_LONG=1, scripts/gpu-check with HEED_GPU_LONG=1).

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device_tensor.hpp"
#include "heed/heed.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

const Device kGpu = Device::cuda(0);
constexpr std::int64_t kQHeads = 16, kKvHeads = 2, kDim = 256;
constexpr std::int64_t kCap = std::int64_t{512} << 20;
constexpr std::size_t kPoolGranularity = 512;  // cuda/allocator.hpp
constexpr int kSampledRows = 24;

bool long_tier() {
  const char* value = std::getenv("HEED_TEST_LONG");
  return value != nullptr && std::string(value) == "1";
}

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// One key head's rows as float, [L][D] (read once: Tensor::get per element is slow at 2^18 keys).
std::vector<float> head_rows(const Tensor& t, std::int64_t head, std::int64_t length) {
  std::vector<float> rows(static_cast<std::size_t>(length * kDim));
  const std::int64_t first = head * length * kDim;
  for (std::int64_t n = 0; n < length * kDim; ++n) rows[static_cast<std::size_t>(n)] = static_cast<float>(t.get(first + n));
  return rows;
}

// Output row (query head h, position i) in float64, softmax over every key (not causal).
std::vector<double> reference_row(const Tensor& q, const std::vector<float>& k, const std::vector<float>& v,
                                  std::int64_t h, std::int64_t i, std::int64_t q_len, std::int64_t kv_len,
                                  double scale) {
  std::vector<double> query(kDim), scores(static_cast<std::size_t>(kv_len)), out(kDim, 0.0);
  for (std::int64_t d = 0; d < kDim; ++d) query[d] = q.get((h * q_len + i) * kDim + d);
  double top = -INFINITY;
  for (std::int64_t j = 0; j < kv_len; ++j) {
    double s = 0;
    const float* key = k.data() + j * kDim;
    for (std::int64_t d = 0; d < kDim; ++d) s += query[d] * key[d];
    scores[j] = s * scale;
    top = std::max(top, scores[j]);
  }
  double sum = 0;
  for (std::int64_t j = 0; j < kv_len; ++j) {
    const double p = std::exp(scores[j] - top);
    sum += p;
    const float* value = v.data() + j * kDim;
    for (std::int64_t d = 0; d < kDim; ++d) out[d] += p * value[d];
  }
  for (double& x : out) x /= sum;
  return out;
}

class LongPrefill : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t>> {};

TEST_P(LongPrefill, HoldsTheCapWithinItsScratchAndIsRight) {
  if (!long_tier()) GTEST_SKIP() << "long tier only (HEED_TEST_LONG=1)";
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one";
  const auto [q_len, kv_len] = GetParam();
  std::mt19937_64 rng(static_cast<std::uint64_t>(q_len * 31 + kv_len));
  Tensor q(Shape{1, kQHeads, q_len, kDim}, DType::BFloat16), k(Shape{1, kKvHeads, kv_len, kDim}, DType::BFloat16),
      v(Shape{1, kKvHeads, kv_len, kDim}, DType::BFloat16), out(Shape{1, kQHeads, q_len, kDim}, DType::BFloat16);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  out.poison();
  DeviceTensor dq(q), dk(k), dv(v), dout(out);

  AttentionOptions options;
  options.max_score_bytes = kCap;
  const AttentionPlan plan = plan_attention(dq.view(), dk.view(), dv.view(), options);
  EXPECT_LE(plan.max_intermediate_bytes, static_cast<std::size_t>(kCap)) << plan.explain();
  EXPECT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel)) << plan.explain();

  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  cuda_ok(cudaDeviceSynchronize(), "sync");
  reset_peak(kGpu);
  const std::size_t active = memory_stats(kGpu).active;
  attention(dq.view(), dk.view(), dv.view(), dout.view(), static_cast<float>(scale), options);
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  const MemoryStats stats = memory_stats(kGpu);
  const std::size_t promised = (plan.scratch_bytes + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
  EXPECT_LE(stats.peak - active, promised) << "measured scratch above the plan's " << plan.scratch_bytes;

  std::vector<unsigned char> bytes = dout.download();
  const TensorView got = dout.host_view(bytes);
  const Tolerance tol = tolerance(DType::BFloat16);
  std::vector<float> k_head[kKvHeads], v_head[kKvHeads];
  for (std::int64_t g = 0; g < kKvHeads; ++g) {
    k_head[g] = head_rows(k, g, kv_len);
    v_head[g] = head_rows(v, g, kv_len);
  }
  double worst = 0;
  for (int sample = 0; sample < kSampledRows; ++sample) {
    // Heads of both groups, positions spread from the first to the last row.
    const std::int64_t h = (sample * 7) % kQHeads;
    const std::int64_t i = sample == 0 ? 0 : sample == 1 ? q_len - 1 : (sample * 2654435761LL) % q_len;
    const std::int64_t g = h / (kQHeads / kKvHeads);
    const std::vector<double> expected = reference_row(q, k_head[g], v_head[g], h, i, q_len, kv_len, scale);
    for (std::int64_t d = 0; d < kDim; ++d) {
      const double value = read_element(got, ((h * q_len) + i) * kDim + d);
      ASSERT_FALSE(std::isnan(value)) << "head " << h << " position " << i << " column " << d;
      worst = std::max(worst, std::abs(value - expected[d]) / (tol.atol + tol.rtol * std::abs(expected[d])));
    }
  }
  EXPECT_LE(worst, 1.0) << "max normalised error over " << kSampledRows << " sampled rows";
}

INSTANTIATE_TEST_SUITE_P(LongTiled, LongPrefill,
                         ::testing::Values(std::make_tuple(2048, 8193), std::make_tuple(1024, 33792),
                                           std::make_tuple(1024, 131072), std::make_tuple(1024, 262144)),
                         [](const auto& info) {
                           return "lq" + std::to_string(std::get<0>(info.param)) + "_lk" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace heed::test
