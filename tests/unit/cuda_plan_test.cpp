// The CUDA planner is pure host code: tested here without a GPU, on an H200's properties.
// Without a device, every CUDA entry point reports Unsupported.

#include <gtest/gtest.h>

#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/problem.hpp"

namespace heed {
namespace {

plan::CudaDeviceInfo h200() {
  plan::CudaDeviceInfo info;
  info.index = 0;
  info.sm_count = 132;
  info.major = 9;
  info.shared_per_block = 227 << 10;
  info.name = "NVIDIA H200";
  return info;
}

plan::CudaRoute plan_for(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
                         std::int64_t kv_len, std::int64_t head_dim, DType dtype, AttentionOptions options = {}) {
  const Shape q{batch, q_heads, q_len, head_dim}, k{batch, kv_heads, kv_len, head_dim};
  return plan::plan_cuda(plan::validate_problem(q, k, k, dtype, dtype, dtype, options), h200());
}

TEST(CudaPlan, DecodeSplitsKeysToFillTheSms) {
  // 16 x 8 = 128 (batch, key head) groups for 8 x 132 blocks: 9 partitions of 911 keys.
  const plan::CudaRoute r = plan_for(16, 32, 8, 1, 8192, 128, DType::BFloat16);
  ASSERT_TRUE(std::holds_alternative<route::Vector>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_bf16");
  EXPECT_EQ(r.merge_kernel_name, "heed_cuda_vector_merge_bf16");
  EXPECT_EQ(r.vector.partitions, 9);
  EXPECT_EQ(r.vector.lanes_per_key, 16);  // 128 bf16 = 16 chunks of 16 bytes
  EXPECT_EQ(r.vector.row_tile, 4);         // the group's 4 query heads
  EXPECT_EQ(std::get<route::Vector>(r.plan.kernel).passes, 2);
  EXPECT_EQ(r.plan.scratch_bytes, 16u * 8 * 4 * 9 * 130 * 4);
  EXPECT_EQ(r.plan.device, Device::cuda(0));
}

TEST(CudaPlan, LongDecodeOfFewGroupsUsesManyPartitions) {
  const plan::CudaRoute r = plan_for(1, 16, 2, 1, 131072, 256, DType::BFloat16);
  ASSERT_TRUE(std::holds_alternative<route::Vector>(r.plan.kernel));
  EXPECT_EQ(r.vector.partitions, 512);
  EXPECT_EQ(r.vector.row_tile, 8);
  EXPECT_EQ(r.vector.row_tiles, 1);
  EXPECT_GE(r.vector.keys_per_partition, 256);
}

TEST(CudaPlan, ManyGroupsNeedNoMerge) {
  const plan::CudaRoute r = plan_for(256, 32, 8, 1, 4096, 128, DType::Float16);
  EXPECT_EQ(r.vector.partitions, 1);
  EXPECT_EQ(std::get<route::Vector>(r.plan.kernel).passes, 1);
  EXPECT_EQ(r.plan.scratch_bytes, 0u);
}

TEST(CudaPlan, WindowBoundsThePartitions) {
  AttentionOptions options;
  options.causal = true;
  options.window = 1024;
  const plan::CudaRoute r = plan_for(1, 32, 8, 1, 100000, 128, DType::BFloat16, options);
  EXPECT_EQ(r.vector.span_end - r.vector.span_begin, 1024);
  EXPECT_EQ(r.vector.partitions, 4);  // 1024 keys / 256
}

TEST(CudaPlan, PrefillRunsComposedAndTheCapBlocksIt) {
  // D 512 has no tiled kernel: prefill runs composed.
  AttentionOptions options;
  const plan::CudaRoute r = plan_for(2, 8, 2, 300, 300, 512, DType::BFloat16, options);
  EXPECT_TRUE(std::holds_alternative<route::Composed>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_composed_bf16");
  EXPECT_TRUE(r.composed.pack_v);  // P.V in float32
  options.max_score_bytes = 300 * 4 * 20;
  const plan::CudaRoute capped = plan_for(2, 8, 2, 300, 300, 512, DType::BFloat16, options);
  ASSERT_TRUE(std::holds_alternative<route::ComposedBlocks>(capped.plan.kernel));
  EXPECT_EQ(std::get<route::ComposedBlocks>(capped.plan.kernel).rows, 20);
  EXPECT_LE(capped.plan.max_intermediate_bytes, 300u * 4 * 20);
  EXPECT_TRUE(capped.plan.capped);
}

TEST(CudaPlan, IsPure) {
  const plan::CudaRoute a = plan_for(3, 12, 4, 2, 7000, 96, DType::Float16);
  const plan::CudaRoute b = plan_for(3, 12, 4, 2, 7000, 96, DType::Float16);
  EXPECT_EQ(a.plan, b.plan);
}

TEST(CudaPlan, WithoutADeviceEveryEntryPointIsUnsupported) {
  if (Device::default_device().type == DeviceType::CUDA) GTEST_SKIP() << "a CUDA device is present";
  const auto kind = [](auto&& call) {
    try {
      call();
    } catch (const Error& error) {
      return error.kind();
    }
    return ErrorKind::Internal;
  };
  EXPECT_EQ(kind([] { (void)plan_attention(Shape{1, 1, 1, 8}, Shape{1, 1, 4, 8}, Shape{1, 1, 4, 8}, DType::Float32, {},
                                           Device::cuda(0)); }),
            ErrorKind::Unsupported);
  EXPECT_EQ(kind([] { (void)memory_stats(Device::cuda(0)); }), ErrorKind::Unsupported);
  EXPECT_EQ(kind([] { reset_peak(Device::cuda(0)); }), ErrorKind::Unsupported);
  float data[32] = {};
  TensorView q(data, DType::Float32, Shape{1, 1, 1, 8}, Device::cuda(0));
  TensorView k(data, DType::Float32, Shape{1, 1, 4, 8}, Device::cuda(0));
  TensorView out(data, DType::Float32, Shape{1, 1, 1, 8}, Device::cuda(0));
  EXPECT_EQ(kind([&] { attention(q, k, k, out, 1.0f, {}); }), ErrorKind::Unsupported);
  EXPECT_EQ(Device::default_device(), Device::cpu());
}

}  // namespace
}  // namespace heed
