// The CUDA planner's tiled (prefill) route, on an H200's properties (host only): which problems
// it serves, its launch and intermediates, and the reasons when it does not serve.

#include <gtest/gtest.h>

#include <string>

#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/problem.hpp"

namespace heed {
namespace {

using plan::cuda::kTiledConfigs;

plan::CudaDeviceInfo h200() {
  plan::CudaDeviceInfo info;
  info.sm_count = 132;
  info.major = 9;
  info.shared_per_block = 227 << 10;
  info.name = "NVIDIA H200";
  return info;
}

plan::Problem problem(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
                      std::int64_t kv_len, std::int64_t head_dim, std::int64_t value_dim, DType dtype,
                      AttentionOptions options = {}) {
  const Shape q{batch, q_heads, q_len, head_dim}, k{batch, kv_heads, kv_len, head_dim},
      v{batch, kv_heads, kv_len, value_dim};
  return plan::validate_problem(q, k, v, dtype, dtype, dtype, options);
}

bool mentions(const AttentionPlan& plan, const std::string& text) {
  return plan.explain().find(text) != std::string::npos;
}

TEST(CudaTiledPlan, PrefillRunsTiledWithTheGroupPacked) {
  AttentionOptions options;
  options.causal = true;
  const plan::CudaRoute r = plan::plan_cuda(problem(2, 8, 2, 300, 300, 128, 128, DType::BFloat16, options), h200());
  ASSERT_TRUE(std::holds_alternative<route::Tiled>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_tiled_bf16");
  EXPECT_EQ(std::get<route::Tiled>(r.plan.kernel), (route::Tiled{128, 64}));
  EXPECT_EQ(r.tiled.rows, 4 * 300);       // 4 query heads per key head x 300 positions
  EXPECT_EQ(r.tiled.row_blocks, 10);      // ceil(1200 / 128)
  EXPECT_EQ(r.plan.workers, 10 * 2 * 2);  // grid [10, Hkv 2, B 2]
  EXPECT_EQ(r.plan.scratch_bytes, 0u);
  EXPECT_TRUE(r.plan.buffers.empty());
  EXPECT_EQ(r.plan.max_intermediate_bytes, 128u * 64 * 4);
  EXPECT_FALSE(r.plan.capped);
  EXPECT_TRUE(mentions(r.plan, "route tiled: 1200 query rows per key head")) << r.plan.explain();
  EXPECT_TRUE(mentions(r.plan, "grid [10, 2, 2], row blocks launched last first")) << r.plan.explain();
}

TEST(CudaTiledPlan, EveryConfigurationIsServedAndAllButTheValueSplitFitAnA100) {
  constexpr std::size_t kA100SharedPerBlock = 163 << 10;
  for (const auto& c : kTiledConfigs) {
    const std::int64_t dv = plan::cuda::served_value_dim(c);
    for (DType dtype : {DType::Float16, DType::BFloat16}) {
      const plan::CudaRoute r = plan::plan_cuda(problem(1, 4, 4, 200, 333, c.head_dim, dv, dtype), h200());
      ASSERT_TRUE(std::holds_alternative<route::Tiled>(r.plan.kernel))
          << "D " << c.head_dim << " Dv " << dv << "\n" << r.plan.explain();
      EXPECT_EQ(r.tiled.block_m, 16 * c.warps);
      EXPECT_EQ(r.tiled.block_n, c.block_n);
      EXPECT_EQ(r.tiled.value_parts, c.value_parts);
      if (c.value_parts == 1) EXPECT_LE(static_cast<std::size_t>(r.tiled.shared_bytes), kA100SharedPerBlock);
      EXPECT_EQ(r.plan.kernel_name, std::string("heed_cuda_tiled_") + short_name(dtype));
    }
  }
}

TEST(CudaTiledPlan, HeadSize512SplitsItsValueColumns) {
  const plan::CudaRoute r = plan::plan_cuda(problem(2, 8, 8, 4096, 4096, 512, 512, DType::BFloat16), h200());
  ASSERT_TRUE(std::holds_alternative<route::Tiled>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.tiled.value_parts, 2);
  EXPECT_TRUE(mentions(r.plan, "value split: Dv 512 in 2 parts of 256 columns")) << r.plan.explain();
  EXPECT_TRUE(mentions(r.plan, "grid [32, 8, 4]")) << r.plan.explain();  // z = B x 2
  // An A100's 163 KiB do not hold its 224 KiB: the composed route, with the reason.
  plan::CudaDeviceInfo a100 = h200();
  a100.major = 8;
  a100.shared_per_block = 163 << 10;
  const plan::CudaRoute composed =
      plan::plan_cuda(problem(1, 8, 8, 1024, 1024, 512, 512, DType::BFloat16), a100);
  EXPECT_TRUE(std::holds_alternative<route::Composed>(composed.plan.kernel)) << composed.plan.explain();
  EXPECT_TRUE(mentions(composed.plan, "shared memory")) << composed.plan.explain();
}

TEST(CudaTiledPlan, Float32AndUnbuiltHeadSizesStayComposed) {
  const plan::CudaRoute f32 = plan::plan_cuda(problem(1, 4, 4, 200, 200, 128, 128, DType::Float32), h200());
  EXPECT_TRUE(std::holds_alternative<route::Composed>(f32.plan.kernel));
  EXPECT_TRUE(mentions(f32.plan, "float16 and bfloat16")) << f32.plan.explain();
  const plan::CudaRoute d384 = plan::plan_cuda(problem(1, 4, 4, 200, 200, 384, 384, DType::BFloat16), h200());
  EXPECT_TRUE(std::holds_alternative<route::Composed>(d384.plan.kernel));
  EXPECT_TRUE(mentions(d384.plan, "D 384")) << d384.plan.explain();
  const plan::CudaRoute d96_64 = plan::plan_cuda(problem(1, 4, 4, 200, 200, 96, 64, DType::Float16), h200());
  EXPECT_TRUE(std::holds_alternative<route::Composed>(d96_64.plan.kernel));
}

TEST(CudaTiledPlan, RowsThatAreNotWholeChunksStayComposed) {
  plan::Problem p = problem(1, 4, 4, 200, 200, 64, 64, DType::BFloat16);
  p.rows_wide = false;
  const plan::CudaRoute r = plan::plan_cuda(p, h200());
  EXPECT_TRUE(std::holds_alternative<route::Composed>(r.plan.kernel));
  EXPECT_TRUE(mentions(r.plan, "16-byte chunks")) << r.plan.explain();
  p.route = RouteChoice::Tiled;
  try {
    (void)plan::plan_cuda(p, h200());
    FAIL() << "expected Unsupported";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(error.what()).find("16-byte chunks"), std::string::npos) << error.what();
  }
}

TEST(CudaTiledPlan, DecodeStaysOnTheVectorRouteUnlessForced) {
  const plan::CudaRoute decode = plan::plan_cuda(problem(4, 32, 8, 1, 4096, 128, 128, DType::BFloat16), h200());
  EXPECT_TRUE(std::holds_alternative<route::Vector>(decode.plan.kernel));
  AttentionOptions options;
  options.route = RouteChoice::Tiled;
  const plan::CudaRoute forced =
      plan::plan_cuda(problem(4, 32, 8, 1, 4096, 128, 128, DType::BFloat16, options), h200());
  ASSERT_TRUE(std::holds_alternative<route::Tiled>(forced.plan.kernel));
  EXPECT_EQ(forced.tiled.row_blocks, 1);  // 4 rows of a group in one block
  EXPECT_TRUE(mentions(forced.plan, "route tiled: asked for by the caller"));
}

TEST(CudaTiledPlan, ForcedTiledOnFloat32IsUnsupported) {
  AttentionOptions options;
  options.route = RouteChoice::Tiled;
  try {
    (void)plan::plan_cuda(problem(1, 2, 2, 100, 100, 64, 64, DType::Float32, options), h200());
    FAIL() << "expected Unsupported";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(error.what()).find("tiled"), std::string::npos) << error.what();
  }
}

TEST(CudaTiledPlan, ACapBelowTheScoreTileMovesPrefillToComposedBlocks) {
  AttentionOptions options;
  options.max_score_bytes = 128 * 64 * 4 - 1;
  const plan::CudaRoute r = plan::plan_cuda(problem(1, 8, 2, 500, 500, 128, 128, DType::Float16, options), h200());
  EXPECT_TRUE(std::holds_alternative<route::ComposedBlocks>(r.plan.kernel)) << r.plan.explain();
  EXPECT_TRUE(r.plan.capped);
  EXPECT_LE(r.plan.max_intermediate_bytes, static_cast<std::size_t>(*options.max_score_bytes));
  options.route = RouteChoice::Tiled;
  try {
    (void)plan::plan_cuda(problem(1, 8, 2, 500, 500, 128, 128, DType::Float16, options), h200());
    FAIL() << "expected InvalidArgument";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("the smallest cap that fits is 32768 bytes"), std::string::npos)
        << error.what();
  }
  options.max_score_bytes = 128 * 64 * 4;
  const plan::CudaRoute fits = plan::plan_cuda(problem(1, 8, 2, 500, 500, 128, 128, DType::Float16, options), h200());
  EXPECT_TRUE(std::holds_alternative<route::Tiled>(fits.plan.kernel)) << fits.plan.explain();
  EXPECT_FALSE(fits.plan.capped);
}

TEST(CudaTiledPlan, SharedMemoryBeyondTheDeviceStaysComposed) {
  plan::CudaDeviceInfo small = h200();
  small.shared_per_block = 99 << 10;  // e.g. an sm_86 card
  const plan::CudaRoute d192 = plan::plan_cuda(problem(1, 4, 4, 300, 300, 192, 192, DType::BFloat16), small);
  EXPECT_TRUE(std::holds_alternative<route::Composed>(d192.plan.kernel));
  EXPECT_TRUE(mentions(d192.plan, "shared memory")) << d192.plan.explain();
  const plan::CudaRoute d64 = plan::plan_cuda(problem(1, 4, 4, 300, 300, 64, 64, DType::BFloat16), small);
  EXPECT_TRUE(std::holds_alternative<route::Tiled>(d64.plan.kernel)) << d64.plan.explain();
}

TEST(CudaTiledPlan, EmptyOutputsHoldNothing) {
  const plan::CudaRoute r = plan::plan_cuda(problem(1, 4, 4, 0, 300, 64, 64, DType::BFloat16), h200());
  EXPECT_EQ(r.plan.workers, 0);
  EXPECT_EQ(r.plan.scratch_bytes, 0u);
  const plan::CudaRoute no_keys = plan::plan_cuda(problem(1, 4, 4, 70, 0, 64, 64, DType::BFloat16), h200());
  EXPECT_TRUE(std::holds_alternative<route::Tiled>(no_keys.plan.kernel)) << no_keys.plan.explain();
}

}  // namespace
}  // namespace heed
