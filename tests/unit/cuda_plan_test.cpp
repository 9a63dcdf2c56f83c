// The CUDA planner is pure host code: tested here without a GPU, on an H200's properties.
// Without a device, every CUDA entry point reports Unsupported.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/format.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"
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

// The tensor-core vector kernel's shapes are tested at every row count (HEED_CUDA_VECTOR=mma);
// which kernel the default picks is DecodeKernelFollowsTheGroupSize's.
plan::PlanOverrides mma_at_any_rows() {
  plan::PlanOverrides overrides;
  overrides.cuda_vector = plan::CudaVectorKernel::Mma;
  return overrides;
}

plan::CudaRoute plan_for(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
                         std::int64_t kv_len, std::int64_t head_dim, DType dtype, AttentionOptions options = {}) {
  const Shape q{batch, q_heads, q_len, head_dim}, k{batch, kv_heads, kv_len, head_dim};
  return plan::plan_cuda(plan::validate_problem(q, k, k, dtype, dtype, dtype, options), h200(), mma_at_any_rows());
}

TEST(CudaPlan, DecodeKernelFollowsTheGroupSize) {
  const auto kernel = [](std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len, std::int64_t d,
                         const plan::PlanOverrides& overrides = {}) {
    const Shape q{4, q_heads, q_len, d}, k{4, kv_heads, 8192, d};
    const plan::CudaRoute r = plan::plan_cuda(
        plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, {}), h200(), overrides);
    return r.plan.kernel_name + (r.plan.explain().find("where they measured faster") != std::string::npos
                                     ? " (rows)" : "");
  };
  // 4 rows per key head (32/8 heads): CUDA cores, and the plan says why; 8 rows: tensor cores.
  EXPECT_EQ(kernel(32, 8, 1, 128), "heed_cuda_vector_bf16 (rows)");
  EXPECT_EQ(kernel(16, 2, 1, 256), "heed_cuda_vector_mma_bf16");
  EXPECT_EQ(kernel(32, 8, 2, 128), "heed_cuda_vector_mma_bf16");  // 4 heads x 2 positions
  EXPECT_EQ(kernel(32, 8, 1, 128, mma_at_any_rows()), "heed_cuda_vector_mma_bf16");
  // 4 rows over few (batch, key head) groups, a long key split: tensor cores (measured faster
  // at B 1 x 8 key heads); B 4 x 8 = 32 groups keep the CUDA cores.
  const Shape q1{1, 32, 1, 128}, k1{1, 8, 32768, 128};
  EXPECT_EQ(plan::plan_cuda(plan::validate_problem(q1, k1, k1, DType::BFloat16, DType::BFloat16, DType::BFloat16, {}),
                            h200())
                .plan.kernel_name,
            "heed_cuda_vector_mma_bf16");
  // There a cap below the tensor-core kernel's 256 scores in flight (but not the CUDA cores' 128)
  // is the reason for the CUDA cores, not the row count.
  AttentionOptions capped;
  capped.max_score_bytes = 512;
  const plan::CudaRoute r = plan::plan_cuda(
      plan::validate_problem(q1, k1, k1, DType::BFloat16, DType::BFloat16, DType::BFloat16, capped), h200());
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_bf16");
  EXPECT_NE(r.plan.explain().find("the tensor-core kernel's 256 scores in flight exceed max_score_bytes 512"),
            std::string::npos)
      << r.plan.explain();
  EXPECT_EQ(r.plan.explain().find("where they measured faster"), std::string::npos) << r.plan.explain();
}

TEST(CudaPlan, DecodeSplitsKeysToFillTheSms) {
  // bfloat16 runs on tensor cores: 2 blocks of 100 KiB per SM, so 264 block slots; 16 x 8 = 128
  // (batch, key head) groups fill one wave with 2 partitions of 4096 keys.
  const plan::CudaRoute r = plan_for(16, 32, 8, 1, 8192, 128, DType::BFloat16);
  ASSERT_TRUE(std::holds_alternative<route::Vector>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_mma_bf16");
  EXPECT_EQ(r.merge_kernel_name, "heed_cuda_vector_merge_bf16");
  EXPECT_TRUE(r.vector.tensor_cores);
  EXPECT_EQ(r.vector.head_class, 128);
  EXPECT_EQ(r.vector.k_steps, 4);
  EXPECT_EQ(r.vector.v_steps, 2);
  EXPECT_EQ(r.vector.row_tile, 8);  // the group's 4 query heads in one n-tile of 8
  EXPECT_EQ(r.vector.ring_items, 6);
  EXPECT_EQ(r.vector.blocks_per_sm, 2);
  EXPECT_EQ(r.vector.shared_bytes, 6 * 4 * 4096 + 2 * 4 * 512);
  EXPECT_EQ(r.vector.partitions, 2);
  EXPECT_EQ(r.vector.keys_per_partition, 4096);
  EXPECT_TRUE(r.vector.dependent_merge);  // sm_90
  EXPECT_EQ(std::get<route::Vector>(r.plan.kernel).passes, 2);
  EXPECT_EQ(r.plan.scratch_bytes, 16u * 8 * 4 * 2 * 130 * 4);
  EXPECT_EQ(r.plan.device, Device::cuda(0));
}

TEST(CudaPlan, LongDecodeOfFewGroupsFillsOneWave) {
  // 8 groups over 264 slots: 33 partitions of 993 keys, one block per slot.
  const plan::CudaRoute a = plan_for(1, 32, 8, 1, 32768, 128, DType::BFloat16);
  EXPECT_EQ(a.vector.partitions, 33);
  EXPECT_EQ(a.vector.keys_per_partition, 993);
  EXPECT_EQ(a.plan.workers, 264);
  // Head size 256: the class-256 kernel, 3 ring items; 2 groups of 8 rows, 132 partitions each.
  const plan::CudaRoute b = plan_for(1, 16, 2, 1, 131072, 256, DType::BFloat16);
  ASSERT_TRUE(std::holds_alternative<route::Vector>(b.plan.kernel));
  EXPECT_EQ(b.vector.head_class, 256);
  EXPECT_EQ(b.vector.ring_items, 3);
  EXPECT_EQ(b.vector.blocks_per_sm, 2);
  EXPECT_EQ(b.vector.row_tile, 8);
  EXPECT_EQ(b.vector.row_tiles, 1);
  EXPECT_EQ(b.vector.partitions, 132);
  EXPECT_EQ(b.vector.keys_per_partition, 993);
}

TEST(CudaPlan, ManyGroupsNeedNoMerge) {
  const plan::CudaRoute r = plan_for(256, 32, 8, 1, 4096, 128, DType::Float16);
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_mma_f16");
  EXPECT_EQ(r.vector.partitions, 1);
  EXPECT_EQ(std::get<route::Vector>(r.plan.kernel).passes, 1);
  EXPECT_EQ(r.plan.scratch_bytes, 0u);
  EXPECT_FALSE(r.vector.dependent_merge);
  // B 64 x 8 key heads = 512 groups: two waves of 264 slots, still no merge.
  EXPECT_EQ(plan_for(64, 32, 8, 1, 4096, 128, DType::BFloat16).vector.partitions, 1);
}

TEST(CudaPlan, WindowBoundsThePartitions) {
  AttentionOptions options;
  options.causal = true;
  options.window = 1024;
  const plan::CudaRoute r = plan_for(1, 32, 8, 1, 100000, 128, DType::BFloat16, options);
  EXPECT_EQ(r.vector.span_end - r.vector.span_begin, 1024);
  EXPECT_EQ(r.vector.span_end, 100000);
  EXPECT_EQ(r.vector.partitions, 16);  // 1024 keys over 8 groups in one wave, >= 64 keys each
  EXPECT_EQ(r.vector.keys_per_partition, 64);
  // The CUDA-core kernel (float32): at least 256 keys per partition.
  EXPECT_EQ(plan_for(1, 32, 8, 1, 100000, 128, DType::Float32, options).vector.partitions, 4);
}

TEST(CudaPlan, FloatKeepsTheCudaCoreKernel) {
  const plan::CudaRoute r = plan_for(16, 32, 8, 1, 8192, 128, DType::Float32);
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_f32");
  EXPECT_FALSE(r.vector.tensor_cores);
  EXPECT_EQ(r.vector.lanes_per_key, 32);  // 128 float32 = 32 chunks of 16 bytes
  EXPECT_EQ(r.vector.row_tile, 4);
}

TEST(CudaPlan, FmaSwitchSelectsTheCudaCoreKernelForHalves) {
  plan::PlanOverrides fma;
  fma.cuda_vector = plan::CudaVectorKernel::Fma;  // HEED_CUDA_VECTOR=fma
  const Shape q{16, 32, 1, 128}, k{16, 8, 8192, 128};
  const plan::CudaRoute r = plan::plan_cuda(
      plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, {}), h200(), fma);
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_bf16");
  EXPECT_FALSE(r.vector.tensor_cores);
  EXPECT_EQ(r.vector.lanes_per_key, 16);
  EXPECT_EQ(r.vector.partitions, 5);  // 128 groups for 4 x 132 blocks: 5 partitions of 1639 keys
}

TEST(CudaPlan, HeadClassesAndRowTiles) {
  const auto shape_of = [](std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len, std::int64_t d,
                           std::int64_t dv, AttentionOptions options = {}) {
    const Shape q{1, q_heads, q_len, d}, k{1, kv_heads, 3000, d}, v{1, kv_heads, 3000, dv};
    return plan::plan_cuda(plan::validate_problem(q, k, v, DType::Float16, DType::Float16, DType::Float16, options),
                           h200(), mma_at_any_rows())
        .vector;
  };
  EXPECT_EQ(shape_of(8, 1, 1, 64, 64).head_class, 64);
  EXPECT_EQ(shape_of(8, 1, 1, 64, 64).ring_items, 12);
  const plan::CudaVectorShape d96 = shape_of(8, 2, 1, 96, 64);
  EXPECT_EQ(d96.head_class, 128);
  EXPECT_EQ(d96.k_steps, 3);
  EXPECT_EQ(d96.v_steps, 1);
  const plan::CudaVectorShape d80 = shape_of(8, 2, 1, 80, 112);
  EXPECT_EQ(d80.head_class, 128);
  EXPECT_EQ(d80.k_steps, 3);
  EXPECT_EQ(d80.v_steps, 2);
  EXPECT_EQ(shape_of(8, 2, 1, 192, 128).head_class, 256);
  // 16 rows (group 8 x Lq 2): two n-tiles in one block.
  const plan::CudaVectorShape rows16 = shape_of(16, 2, 2, 128, 128);
  EXPECT_EQ(rows16.row_tile, 16);
  EXPECT_EQ(rows16.row_tiles, 1);
  // Head size 512: one n-tile (16 rows would take 256 accumulators per lane), one block per SM.
  const plan::CudaVectorShape d512 = shape_of(8, 1, 2, 512, 512);
  EXPECT_EQ(d512.head_class, 512);
  EXPECT_EQ(d512.row_tile, 8);
  EXPECT_EQ(d512.row_tiles, 2);
  EXPECT_EQ(d512.blocks_per_sm, 1);
  EXPECT_EQ(d512.ring_items, 3);
  // A forced vector route over 40 rows: three tiles of 16.
  AttentionOptions forced;
  forced.route = RouteChoice::Vector;
  const plan::CudaVectorShape rows40 = shape_of(8, 1, 5, 64, 64, forced);
  EXPECT_EQ(rows40.row_tile, 16);
  EXPECT_EQ(rows40.row_tiles, 3);
}

TEST(CudaPlan, AnA100RingFitsItsSharedMemory) {
  plan::CudaDeviceInfo a100 = h200();
  a100.sm_count = 108;
  a100.major = 8;
  a100.shared_per_block = 163 << 10;
  a100.shared_per_sm = 164 << 10;
  const Shape q{1, 32, 1, 128}, k{1, 8, 32768, 128};
  const plan::CudaRoute r =
      plan::plan_cuda(plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, {}), a100,
                      mma_at_any_rows());
  EXPECT_EQ(r.vector.ring_items, 4);
  EXPECT_EQ(r.vector.blocks_per_sm, 2);
  EXPECT_LE(r.vector.shared_bytes + 2048 + 1024, (164 << 10) / 2);
  EXPECT_FALSE(r.vector.dependent_merge);  // programmatic dependent launch needs sm_90
  const Shape q512{1, 8, 1, 512}, k512{1, 1, 4000, 512};
  const plan::CudaRoute d512 = plan::plan_cuda(
      plan::validate_problem(q512, k512, k512, DType::Float16, DType::Float16, DType::Float16, {}), a100);
  EXPECT_EQ(d512.vector.ring_items, 2);
  EXPECT_EQ(d512.vector.blocks_per_sm, 1);
}

TEST(CudaPlan, ACapBelowTheTensorCoreTileFallsBackToCudaCores) {
  AttentionOptions options;
  options.max_score_bytes = 600;  // tensor cores: 4 rows x 64 keys x 4 = 1024; CUDA cores: 4 x 32 x 4 = 512
  const plan::CudaRoute r = plan_for(1, 32, 8, 1, 3000, 128, DType::BFloat16, options);
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_bf16");
  EXPECT_LE(r.plan.max_intermediate_bytes, 600u);
  options.max_score_bytes = 1024;
  EXPECT_EQ(plan_for(1, 32, 8, 1, 3000, 128, DType::BFloat16, options).plan.kernel_name, "heed_cuda_vector_mma_bf16");
}

TEST(CudaPlan, PrefillRunsComposedAndTheCapBlocksIt) {
  // D 520 has no tiled kernel (the largest compiled is 512): prefill runs composed.
  AttentionOptions options;
  const plan::CudaRoute r = plan_for(2, 8, 2, 300, 300, 520, DType::BFloat16, options);
  EXPECT_TRUE(std::holds_alternative<route::Composed>(r.plan.kernel)) << r.plan.explain();
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_composed_bf16");
  EXPECT_TRUE(r.composed.pack_v);  // P.V in float32
  options.max_score_bytes = 300 * 4 * 20;
  const plan::CudaRoute capped = plan_for(2, 8, 2, 300, 300, 520, DType::BFloat16, options);
  ASSERT_TRUE(std::holds_alternative<route::ComposedBlocks>(capped.plan.kernel));
  EXPECT_EQ(std::get<route::ComposedBlocks>(capped.plan.kernel).rows, 20);
  EXPECT_LE(capped.plan.max_intermediate_bytes, 300u * 4 * 20);
  EXPECT_TRUE(capped.plan.capped);
}

// max_scratch_bytes: the vector route takes fewer key partitions (one pass holds no partials),
// the composed route smaller blocks; the plan names the bound; below the smallest form the
// error names the smallest budget that fits.
TEST(CudaPlan, AScratchBudgetTakesFewerPartitionsOrSmallerBlocks) {
  AttentionOptions options;
  const plan::CudaRoute whole = plan_for(1, 32, 8, 1, 32768, 128, DType::BFloat16, options);
  ASSERT_TRUE(std::holds_alternative<route::Vector>(whole.plan.kernel)) << whole.plan.explain();
  ASSERT_GT(whole.vector.partitions, 4) << whole.plan.explain();
  const std::size_t per_partition = 8u * whole.vector.rows * (128 + 2) * 4;
  EXPECT_EQ(whole.plan.scratch_bytes, per_partition * static_cast<std::size_t>(whole.vector.partitions));
  options.max_scratch_bytes = static_cast<std::int64_t>(per_partition * 3 + 100);
  const plan::CudaRoute fewer = plan_for(1, 32, 8, 1, 32768, 128, DType::BFloat16, options);
  EXPECT_EQ(fewer.vector.partitions, 3) << fewer.plan.explain();
  EXPECT_LE(fewer.plan.scratch_bytes, static_cast<std::size_t>(*options.max_scratch_bytes));
  EXPECT_NE(fewer.plan.explain().find("scratch bound by max_scratch_bytes"), std::string::npos) << fewer.plan.explain();
  EXPECT_NE(fewer.plan.explain().find("3 key partition(s) of " + std::to_string(whole.vector.partitions)), std::string::npos)
      << fewer.plan.explain();
  options.max_scratch_bytes = 1;
  const plan::CudaRoute one = plan_for(1, 32, 8, 1, 32768, 128, DType::BFloat16, options);
  EXPECT_EQ(one.vector.partitions, 1);
  EXPECT_EQ(std::get<route::Vector>(one.plan.kernel).passes, 1);
  EXPECT_EQ(one.plan.scratch_bytes, 0u);

  // D 520 runs composed: its score step halves until the layout fits.
  AttentionOptions composed;
  const plan::CudaRoute full = plan_for(2, 8, 2, 300, 300, 520, DType::BFloat16, composed);
  ASSERT_TRUE(std::holds_alternative<route::Composed>(full.plan.kernel)) << full.plan.explain();
  const std::size_t fixed = full.plan.scratch_bytes - full.plan.max_intermediate_bytes -
                            static_cast<std::size_t>(full.composed.heads * full.composed.rows * 520 * 4);
  composed.max_scratch_bytes = static_cast<std::int64_t>(fixed + 300 * 4 * 64 + 64 * 520 * 4 + 4096);
  const plan::CudaRoute blocks = plan_for(2, 8, 2, 300, 300, 520, DType::BFloat16, composed);
  ASSERT_TRUE(std::holds_alternative<route::ComposedBlocks>(blocks.plan.kernel)) << blocks.plan.explain();
  EXPECT_LE(blocks.plan.scratch_bytes, static_cast<std::size_t>(*composed.max_scratch_bytes)) << blocks.plan.explain();
  EXPECT_LT(blocks.composed.rows, 300);
  EXPECT_NE(blocks.plan.explain().find("composed in blocks of"), std::string::npos) << blocks.plan.explain();
  composed.max_scratch_bytes = static_cast<std::int64_t>(fixed);
  try {
    (void)plan_for(2, 8, 2, 300, 300, 520, DType::BFloat16, composed);
    ADD_FAILURE() << "a budget below the composed route's packed inputs was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("the smallest budget that fits is"), std::string::npos) << error.what();
  }
}

TEST(CudaPlan, ComposedStepsSpanBatchesWhereTheStridesFold) {
  // float32 prefill runs composed: B 32 x 12 heads (MiniLM) is one step of 384 (batch, key head)
  // pairs when the batch stride is heads x head stride; otherwise (e.g. [B, L, H, D] memory)
  // q, k and v are packed first, which folds them too (1 step instead of 32).
  plan::Problem p = plan::validate_problem(Shape{32, 12, 128, 32}, Shape{32, 12, 128, 32}, Shape{32, 12, 128, 32},
                                           DType::Float32, DType::Float32, DType::Float32, {});
  plan::CudaRoute r = plan::plan_cuda(p, h200());
  ASSERT_TRUE(std::holds_alternative<route::Composed>(r.plan.kernel)) << r.plan.explain();
  EXPECT_TRUE(r.composed.fold_batch);
  EXPECT_EQ(r.composed.heads, 32 * 12);
  EXPECT_NE(r.plan.explain().find("across batches"), std::string::npos) << r.plan.explain();
  EXPECT_FALSE(r.composed.pack_qk);
  EXPECT_FALSE(r.composed.pack_v);
  p.batch_folds = false;  // e.g. [B, L, H, D] memory, or k broadcast over the batch
  r = plan::plan_cuda(p, h200());
  EXPECT_TRUE(r.composed.fold_batch);
  EXPECT_TRUE(r.composed.pack_qk);
  EXPECT_TRUE(r.composed.pack_v);
  EXPECT_EQ(r.composed.heads, 32 * 12);
  EXPECT_NE(r.plan.explain().find("do not fold in place"), std::string::npos) << r.plan.explain();
  EXPECT_EQ(r.q_packed.slice_bytes, std::size_t{32} * 12 * 128 * 32 * 4);  // q packed in the plan's scratch
  // Rows that are not contiguous are packed contiguous first, which folds them.
  p.rows_contiguous = false;
  EXPECT_TRUE(plan::plan_cuda(p, h200()).composed.fold_batch);
}

TEST(CudaPlan, LongRowsThatDoNotFoldAreNotPackedToFold) {
  // One (batch, key head) pair per step already: a copy of q, k and v would save no step.
  plan::Problem p = plan::validate_problem(Shape{2, 4, 32768, 384}, Shape{2, 4, 32768, 384},
                                           Shape{2, 4, 32768, 384}, DType::Float32, DType::Float32, DType::Float32, {});
  p.batch_folds = false;
  const plan::CudaRoute r = plan::plan_cuda(p, h200());
  ASSERT_TRUE(std::holds_alternative<route::ComposedBlocks>(r.plan.kernel)) << r.plan.explain();
  EXPECT_FALSE(r.composed.fold_batch);
  EXPECT_FALSE(r.composed.pack_qk);
  EXPECT_EQ(r.composed.heads, 1);
}

TEST(CudaPlan, BatchFoldsWhereTheBatchStrideIsHeadsTimesTheHeadStride) {
  static float data[2 * 4 * 8 * 16];
  const auto folds = [](std::vector<std::int64_t> k_strides) {
    const Shape shape{2, 4, 8, 16};
    const TensorView q(data, DType::Float32, shape), v(data, DType::Float32, shape);
    const TensorView k(data, DType::Float32, shape, std::move(k_strides));
    return plan::validate_views(q, k, v, {}).batch_folds;
  };
  EXPECT_TRUE(folds({512, 128, 16, 1}));    // [B, H, L, D] contiguous
  EXPECT_FALSE(folds({0, 128, 16, 1}));     // broadcast over the batch
  EXPECT_FALSE(folds({512, 16, 64, 1}));    // [B, L, H, D] memory
  EXPECT_TRUE(folds({1024, 256, 16, 1}));   // padded heads, still one stride per (b, h)
}

// An H200 with a build that holds sm_90a code: the TMA vector kernel serves.
plan::CudaDeviceInfo h200_tma() {
  plan::CudaDeviceInfo info = h200();
  info.wgmma_built = true;
  return info;
}

plan::CudaRoute plan_on(const plan::CudaDeviceInfo& device, std::int64_t batch, std::int64_t q_heads,
                        std::int64_t kv_heads, std::int64_t kv_len, std::int64_t head_dim, DType dtype,
                        const plan::CudaVectorTuning& tuning = {},
                        plan::CudaVectorKernel kernel = plan::CudaVectorKernel::Auto) {
  const Shape q{batch, q_heads, 1, head_dim}, k{batch, kv_heads, kv_len, head_dim};
  plan::PlanOverrides overrides;
  overrides.cuda_vector = kernel;
  overrides.cuda_vector_tuning = tuning;
  return plan::plan_cuda(plan::validate_problem(q, k, k, dtype, dtype, dtype, {}), device, overrides);
}

TEST(CudaPlan, TheTmaKernelServesHalvesOfClassSizesOnHopper) {
  // The four decode targets of issue 4: every group size on the TMA kernel, 4 blocks per SM at
  // head class 128, 2 at 256.
  const plan::CudaRoute b1 = plan_on(h200_tma(), 1, 32, 8, 32768, 128, DType::BFloat16);
  EXPECT_EQ(b1.plan.kernel_name, "heed_cuda_vector_tma_bf16");
  EXPECT_TRUE(b1.vector.tma);
  EXPECT_TRUE(b1.vector.tensor_cores);
  EXPECT_EQ(b1.vector.head_class, 128);
  EXPECT_EQ(b1.vector.row_tile, 8);
  EXPECT_EQ(b1.vector.blocks_per_sm, 4);
  EXPECT_EQ(b1.vector.ring_items, 3);
  EXPECT_EQ(b1.vector.shared_bytes, 3 * 4 * 4096 + 2 * 4 * 512 + 1024);  // ring, q, the swizzle's alignment
  // 8 groups over 132 x 2 partition slots (the ring is sized for 4 blocks, partitions fill 2):
  // 33 partitions of 1008 keys (whole 16-key tiles), one wave.
  EXPECT_EQ(b1.vector.keys_per_partition, 1008);
  EXPECT_EQ(b1.vector.partitions, 33);
  EXPECT_NE(b1.plan.explain().find("loads: TMA"), std::string::npos) << b1.plan.explain();
  EXPECT_EQ(plan_on(h200_tma(), 16, 32, 8, 8192, 128, DType::BFloat16).plan.kernel_name, "heed_cuda_vector_tma_bf16");
  EXPECT_EQ(plan_on(h200_tma(), 64, 32, 8, 4096, 128, DType::Float16).plan.kernel_name, "heed_cuda_vector_tma_f16");
  const plan::CudaRoute d256 = plan_on(h200_tma(), 1, 16, 2, 131072, 256, DType::BFloat16);
  EXPECT_EQ(d256.plan.kernel_name, "heed_cuda_vector_tma_bf16");
  EXPECT_EQ(d256.vector.ring_items, 3);
  EXPECT_EQ(d256.vector.keys_per_partition, 1008);
  EXPECT_EQ(d256.vector.partitions, 131);
  // 16 rows (two n-tiles) at D 256: 228 registers, 2 blocks per SM at most.
  EXPECT_EQ(plan_on(h200_tma(), 1, 16, 1, 4096, 256, DType::BFloat16, {0, 0, 4}).vector.blocks_per_sm, 2);
}

TEST(CudaPlan, TheTmaKernelNamesHowItLoadsRows) {
  // Rows of a multiple of 64 columns as swizzled 64-column boxes; others (D 56 on class 64) as
  // whole rows, one unswizzled box.
  const std::string boxes = plan_on(h200_tma(), 16, 32, 8, 8192, 64, DType::BFloat16).plan.explain();
  EXPECT_NE(boxes.find("64-column x 16-key boxes, 128-byte swizzle"), std::string::npos) << boxes;
  const plan::CudaRoute d56 = plan_on(h200_tma(), 16, 32, 8, 8192, 56, DType::BFloat16);
  ASSERT_EQ(d56.plan.kernel_name, "heed_cuda_vector_tma_bf16");
  EXPECT_EQ(d56.vector.head_class, 64);
  const std::string rows = d56.plan.explain();
  EXPECT_NE(rows.find("whole rows (56 columns x 16 keys, no swizzle)"), std::string::npos) << rows;
  EXPECT_EQ(rows.find("128-byte swizzle"), std::string::npos) << rows;
  EXPECT_TRUE(plan::cuda::vector_tma_whole_rows(56));
  EXPECT_FALSE(plan::cuda::vector_tma_whole_rows(192));
}

TEST(CudaPlan, GroupsThatAboutFillTheSmsTakeWideBlocks) {
  // B 16 x 8 key heads (128 groups on 132 SMs): one 16-warp block per group, no partitions.
  const plan::CudaRoute b16 = plan_on(h200_tma(), 16, 32, 8, 8192, 128, DType::BFloat16);
  EXPECT_EQ(b16.vector.warps, 16);
  EXPECT_EQ(b16.vector.blocks_per_sm, 1);
  EXPECT_EQ(b16.vector.partitions, 1);
  EXPECT_EQ(b16.vector.ring_items, 3);
  EXPECT_EQ(b16.vector.shared_bytes, 3 * 16 * 4096 + 2 * 4 * 512 + 1024);  // ring, q, the swizzle's alignment
  EXPECT_FALSE(b16.vector.dependent_merge);
  EXPECT_NE(b16.plan.explain().find("wide blocks"), std::string::npos) << b16.plan.explain();
  // Too many groups (B 64: 512) or too few (B 1: 8) keep 4-warp blocks.
  EXPECT_EQ(plan_on(h200_tma(), 64, 32, 8, 4096, 128, DType::BFloat16).vector.warps, 4);
  EXPECT_EQ(plan_on(h200_tma(), 1, 32, 8, 32768, 128, DType::BFloat16).vector.warps, 4);
  // 16 rows per block or head class 256: 4-warp blocks, asked for wide or not.
  EXPECT_EQ(plan_on(h200_tma(), 16, 128, 8, 8192, 128, DType::BFloat16).vector.warps, 4);
  EXPECT_EQ(plan_on(h200_tma(), 128, 16, 1, 4096, 256, DType::BFloat16, {0, 0, 0, 16}).vector.warps, 4);
  // Asked for: 8 groups over 132 single-block slots: 16 partitions of 2048 keys; and back.
  const plan::CudaRoute b1 = plan_on(h200_tma(), 1, 32, 8, 32768, 128, DType::BFloat16, {0, 0, 0, 16});
  EXPECT_EQ(b1.vector.warps, 16);
  EXPECT_EQ(b1.vector.partitions, 16);
  EXPECT_EQ(b1.vector.keys_per_partition, 2048);
  EXPECT_EQ(plan_on(h200_tma(), 16, 32, 8, 8192, 128, DType::BFloat16, {0, 0, 0, 4}).vector.warps, 4);
}

TEST(CudaPlan, TheTmaKernelSaysWhyItDoesNotServe) {
  const auto why = [](const plan::CudaRoute& r) {
    EXPECT_FALSE(r.vector.tma) << r.plan.explain();
    return r.plan.explain();
  };
  EXPECT_NE(why(plan_on(h200_tma(), 1, 8, 2, 4096, 512, DType::BFloat16)).find("the TMA kernel's classes (64, 128, 192, 256"),
            std::string::npos);
  EXPECT_NE(why(plan_on(h200(), 1, 16, 2, 4096, 128, DType::BFloat16)).find("no sm_90a code"), std::string::npos);
  EXPECT_EQ(plan_on(h200_tma(), 1, 16, 2, 4096, 128, DType::Float32).plan.kernel_name, "heed_cuda_vector_f32");
  plan::CudaDeviceInfo a100 = h200_tma();
  a100.major = 8;
  EXPECT_NE(why(plan_on(a100, 1, 16, 2, 4096, 128, DType::BFloat16)).find("9.0 only"), std::string::npos);
  // The choice before the TMA kernel: CUDA cores for 4 rows of many groups.
  const plan::CudaRoute before =
      plan_on(h200_tma(), 16, 32, 8, 8192, 128, DType::BFloat16, {}, plan::CudaVectorKernel::CpAsync);
  EXPECT_EQ(before.plan.kernel_name, "heed_cuda_vector_bf16");
  EXPECT_NE(why(before).find("the caller's overrides ask for the cp.async kernels"), std::string::npos);
  // k rows that are not whole 16-byte chunks (a strided last dimension): the cp.async kernels.
  const Shape q{1, 16, 1, 128}, k{1, 2, 4096, 128};
  plan::Problem strided = plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, {});
  strided.rows_wide = false;
  EXPECT_NE(why(plan::plan_cuda(strided, h200_tma())).find("16-byte rows"), std::string::npos);
}

TEST(CudaPlan, TheTmaKernelsPartitionsMergeInADependentLaunch) {
  const plan::CudaRoute r = plan_on(h200_tma(), 1, 32, 8, 32768, 128, DType::BFloat16);
  EXPECT_TRUE(r.vector.dependent_merge);
  EXPECT_EQ(std::get<route::Vector>(r.plan.kernel).passes, 2);
  EXPECT_EQ(r.merge_kernel_name, "heed_cuda_vector_merge_bf16");
  EXPECT_EQ(r.plan.scratch_bytes, 8u * 4 * 33 * 130 * 4);  // partials of 33 partitions
  // One partition: nothing to merge, no scratch; B 64 x 8 key heads run one partition each.
  const plan::CudaRoute single = plan_on(h200_tma(), 1, 32, 8, 32768, 128, DType::BFloat16, {1});
  EXPECT_EQ(std::get<route::Vector>(single.plan.kernel).passes, 1);
  EXPECT_EQ(single.plan.scratch_bytes, 0u);
  EXPECT_EQ(plan_on(h200_tma(), 64, 32, 8, 4096, 128, DType::BFloat16).vector.partitions, 1);
}

// Serving problems as validation leaves them from host views (no data: planning reads shapes,
// strides and host metadata). Paged decode: B sequences of kv_len keys in pages of page_size,
// one query each, the cache token-major [pages, page_size, Hkv, D] or head-major in memory.
plan::Problem paged_decode(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t kv_len,
                           std::int64_t page_size, std::int64_t head_dim, DType dtype, bool head_major = false) {
  const std::int64_t per_sequence = (kv_len + page_size - 1) / page_size, pages = batch * per_sequence;
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages)), lengths(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(table.size() - 1 - i);
  for (auto& length : lengths) length = static_cast<std::int32_t>(kv_len);
  const Shape cache{pages, page_size, kv_heads, head_dim};
  const std::vector<std::int64_t> strides =
      head_major ? std::vector<std::int64_t>{kv_heads * page_size * head_dim, head_dim, page_size * head_dim, 1}
                 : std::vector<std::int64_t>{page_size * kv_heads * head_dim, kv_heads * head_dim, head_dim, 1};
  const TensorView q(nullptr, dtype, Shape{batch, q_heads, head_dim});
  const TensorView k(nullptr, dtype, cache, strides);
  const PagedKv kv{TensorView(table.data(), DType::Int32, Shape{batch, per_sequence}),
                   TensorView(lengths.data(), DType::Int32, Shape{batch})};
  return call::validate_paged(q, k, k, kv, nullptr, 1.0f, {});
}

// Ragged decode: one query per sequence, each of kv_len keys in the [total_k, Hkv, D] rows.
plan::Problem ragged_decode(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t kv_len,
                            std::int64_t head_dim, DType dtype) {
  std::vector<std::int32_t> cu_q, cu_k;
  for (std::int64_t b = 0; b <= batch; ++b) {
    cu_q.push_back(static_cast<std::int32_t>(b));
    cu_k.push_back(static_cast<std::int32_t>(b * kv_len));
  }
  const TensorView q(nullptr, dtype, Shape{batch, q_heads, head_dim});
  const TensorView k(nullptr, dtype, Shape{batch * kv_len, kv_heads, head_dim});
  const RaggedBatch rb{TensorView(cu_q.data(), DType::Int32, Shape{batch + 1}),
                       TensorView(cu_k.data(), DType::Int32, Shape{batch + 1})};
  return call::validate_ragged(q, k, k, rb, nullptr, 1.0f, {});
}

bool mentions(const plan::CudaRoute& r, const std::string& text) {
  return r.plan.explain().find(text) != std::string::npos;
}

// Paged decode with pages of a multiple of 16 keys runs the TMA kernel where dense decode of the
// same sizes does, with the dense plan's shape (blocks, ring, partitions), token- or head-major.
TEST(CudaPlan, PagedDecodeTakesTheTmaKernelWhereDenseDoes) {
  struct Decode {
    std::int64_t batch, q_heads, kv_heads, kv_len, head_dim;
    DType dtype;
  };
  for (const Decode& d : {Decode{16, 32, 8, 8192, 128, DType::BFloat16}, Decode{64, 32, 8, 4096, 128, DType::Float16},
                          Decode{1, 32, 8, 32768, 128, DType::BFloat16}, Decode{1, 16, 2, 4096, 256, DType::BFloat16},
                          Decode{4, 16, 2, 1000, 64, DType::Float16}}) {
    const plan::CudaRoute dense = plan_on(h200_tma(), d.batch, d.q_heads, d.kv_heads, d.kv_len, d.head_dim, d.dtype);
    ASSERT_TRUE(dense.vector.tma) << dense.plan.explain();
    for (std::int64_t page_size : {16, 64, 256}) {
      for (bool head_major : {false, true}) {
        const plan::CudaRoute r = plan::plan_cuda(
            paged_decode(d.batch, d.q_heads, d.kv_heads, d.kv_len, page_size, d.head_dim, d.dtype, head_major),
            h200_tma());
        SCOPED_TRACE(r.plan.explain());
        EXPECT_EQ(r.plan.kernel_name, dense.plan.kernel_name);
        EXPECT_TRUE(r.vector.tma);
        EXPECT_EQ(r.vector.warps, dense.vector.warps);
        EXPECT_EQ(r.vector.ring_items, dense.vector.ring_items);
        EXPECT_EQ(r.vector.blocks_per_sm, dense.vector.blocks_per_sm);
        EXPECT_EQ(r.vector.partitions, dense.vector.partitions);
        EXPECT_EQ(r.vector.keys_per_partition, dense.vector.keys_per_partition);
        EXPECT_TRUE(mentions(r, format("keys read in place from pages of {} keys by TMA boxes at (row, key head, "
                                       "page), one block-table read per 16-key tile",
                                       page_size)));
        EXPECT_TRUE(mentions(r, "loads: TMA"));
      }
    }
  }
}

// Pages of no multiple of 16 keys keep the cp.async kernels, and the plan says why; asked
// (HEED_CUDA_VECTOR=tma-rows), they take the TMA kernel by row copies, its ring holding rows at
// the padded pitch. The overrides, other devices and builds keep the cp.async kernels, as for
// dense calls.
TEST(CudaPlan, PagedDecodeOfOddPagesCopiesRowsWhereAsked) {
  plan::PlanOverrides rows;
  rows.cuda_vector = plan::CudaVectorKernel::TmaRows;
  for (std::int64_t page_size : {1, 7, 8, 24}) {
    for (const std::int64_t q_heads : {32, 64}) {  // 4 rows per key head (CUDA cores), 8 (tensor cores)
      const plan::CudaRoute r = plan::plan_cuda(paged_decode(16, q_heads, 8, 8192, page_size, 128, DType::BFloat16),
                                                h200_tma());
      SCOPED_TRACE(r.plan.explain());
      EXPECT_FALSE(r.vector.tma);
      EXPECT_EQ(r.plan.kernel_name, q_heads == 32 ? "heed_cuda_vector_bf16" : "heed_cuda_vector_mma_bf16");
      EXPECT_TRUE(mentions(r, format("pages of {} keys (its 16-key boxes must not cross a page", page_size)));
      EXPECT_TRUE(mentions(r, q_heads == 32 ? "each step's block-table entries read a step ahead of its copies"
                                            : "one block-table read per page run"));
    }
    for (const std::int64_t head_dim : {64, 128, 256}) {
      const plan::CudaRoute r =
          plan::plan_cuda(paged_decode(16, 32, 8, 8192, page_size, head_dim, DType::BFloat16), h200_tma(), rows);
      SCOPED_TRACE(r.plan.explain());
      EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_tma_bf16");
      EXPECT_TRUE(r.vector.row_copies);
      const std::int64_t pitch = 2 * head_dim + 16;
      EXPECT_EQ(plan::cuda::vector_tma_row_pitch(r.vector.head_class), pitch);
      EXPECT_GE(r.vector.shared_bytes, std::int64_t{r.vector.ring_items} * r.vector.warps * 16 * pitch);
      EXPECT_TRUE(mentions(r, format("{} bytes apart in its ring", pitch)));
      EXPECT_TRUE(mentions(r, format("pages of {} keys are no multiple of 16", page_size)));
      EXPECT_TRUE(mentions(r, "by one bulk copy per key row at (row, key head, page)"));
    }
  }
  const plan::CudaRoute boxes =
      plan::plan_cuda(paged_decode(16, 32, 8, 8192, 16, 128, DType::BFloat16), h200_tma(), rows);
  EXPECT_FALSE(boxes.vector.row_copies);
  EXPECT_TRUE(boxes.vector.tma);
  const plan::Problem p16 = paged_decode(16, 64, 8, 8192, 16, 128, DType::BFloat16);
  plan::PlanOverrides mma;
  mma.cuda_vector = plan::CudaVectorKernel::Mma;
  const plan::CudaRoute asked = plan::plan_cuda(p16, h200_tma(), mma);
  EXPECT_EQ(asked.plan.kernel_name, "heed_cuda_vector_mma_bf16");
  EXPECT_TRUE(mentions(asked, "HEED_CUDA_VECTOR=mma asks for the cp.async tensor-core kernel")) << asked.plan.explain();
  EXPECT_TRUE(mentions(plan::plan_cuda(p16, h200()), "no sm_90a code"));
  plan::CudaDeviceInfo a100 = h200_tma();
  a100.major = 8;
  EXPECT_TRUE(mentions(plan::plan_cuda(p16, a100), "9.0 only"));
  EXPECT_EQ(plan::plan_cuda(paged_decode(4, 16, 2, 1000, 16, 128, DType::Float32), h200_tma()).plan.kernel_name,
            "heed_cuda_vector_f32");
}

// Ragged decode runs the TMA kernel too: its maps span the [total_k, Hkv, D] rows as one batch.
TEST(CudaPlan, RaggedDecodeTakesTheTmaKernel) {
  const plan::CudaRoute dense = plan_on(h200_tma(), 16, 32, 8, 8192, 128, DType::BFloat16);
  const plan::CudaRoute r = plan::plan_cuda(ragged_decode(16, 32, 8, 8192, 128, DType::BFloat16), h200_tma());
  SCOPED_TRACE(r.plan.explain());
  EXPECT_EQ(r.plan.kernel_name, "heed_cuda_vector_tma_bf16");
  EXPECT_EQ(r.vector.warps, dense.vector.warps);
  EXPECT_EQ(r.vector.partitions, dense.vector.partitions);
  EXPECT_TRUE(mentions(r, "keys at cu_seqlens_k[b] of k and v (TMA maps over the [total_k, Hkv, E] rows)"));
}

TEST(CudaPlan, IsPure) {
  const plan::CudaRoute a = plan_for(3, 12, 4, 2, 7000, 96, DType::Float16);
  const plan::CudaRoute b = plan_for(3, 12, 4, 2, 7000, 96, DType::Float16);
  EXPECT_EQ(a.plan, b.plan);
}

TEST(CudaPlan, TuningOverridesPartitionsAndRing) {
  const Shape q{1, 32, 1, 128}, k{1, 8, 32768, 128};
  const plan::Problem p = plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, {});
  const auto tuned_by = [](const plan::CudaVectorTuning& tuning) {
    plan::PlanOverrides overrides = mma_at_any_rows();
    overrides.cuda_vector_tuning = tuning;
    return overrides;
  };
  const plan::CudaRoute planned = plan::plan_cuda(p, h200(), mma_at_any_rows());
  const plan::CudaRoute tuned = plan::plan_cuda(p, h200(), tuned_by({66, 3}));
  EXPECT_EQ(tuned.vector.partitions, 66);
  EXPECT_EQ(tuned.vector.keys_per_partition, 497);
  EXPECT_EQ(tuned.plan.scratch_bytes, 8u * 4 * 66 * 130 * 4);  // laid out for the tuned count
  EXPECT_EQ(tuned.vector.ring_items, 3);
  EXPECT_EQ(tuned.vector.shared_bytes, 3 * 4 * 4096 + 2 * 4 * 512);
  EXPECT_LT(tuned.vector.shared_bytes, planned.vector.shared_bytes);
  // One partition: no merge, no scratch; a ring beyond the planned one is not granted.
  const plan::CudaRoute single = plan::plan_cuda(p, h200(), tuned_by({1, 100}));
  EXPECT_EQ(std::get<route::Vector>(single.plan.kernel).passes, 1);
  EXPECT_EQ(single.plan.scratch_bytes, 0u);
  EXPECT_EQ(single.vector.ring_items, planned.vector.ring_items);
}

TEST(CudaPlan, TheCachedPlanIsThePlan) {
  const auto problem = [](std::int64_t kv_len, std::optional<std::int64_t> cap = std::nullopt) {
    AttentionOptions options;
    options.max_score_bytes = cap;
    const Shape q{1, 32, 1, 128}, k{1, 8, kv_len, 128};
    return plan::validate_problem(q, k, k, DType::BFloat16, DType::BFloat16, DType::BFloat16, options);
  };
  // More problems than the cache holds, each asked twice, in and out of order.
  for (int round = 0; round < 2; ++round) {
    for (std::int64_t kv_len : {1000, 2000, 3000, 4000, 5000, 32768}) {
      EXPECT_EQ(plan::plan_cuda_cached(problem(kv_len), h200(), mma_at_any_rows()).plan,
                plan::plan_cuda(problem(kv_len), h200(), mma_at_any_rows()).plan);
    }
  }
  const auto keys = [&](std::int64_t kv_len) {
    return plan::plan_cuda_cached(problem(kv_len), h200(), mma_at_any_rows()).vector.keys_per_partition;
  };
  const std::int64_t short_keys = keys(1000), long_keys = keys(32768);
  EXPECT_EQ(short_keys, 67);  // 15 partitions of at least 64 keys
  EXPECT_EQ(long_keys, 993);
  // A problem whose planning throws leaves nothing behind; the next call throws again.
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THROW((void)plan::plan_cuda_cached(problem(100000, 16), h200(), mma_at_any_rows()), Error);
  }
  // The overrides are part of the key: the same problem under HEED_CUDA_VECTOR=fma is another plan.
  plan::PlanOverrides fma;
  fma.cuda_vector = plan::CudaVectorKernel::Fma;
  EXPECT_EQ(plan::plan_cuda_cached(problem(1000), h200(), mma_at_any_rows()).plan.kernel_name,
            "heed_cuda_vector_mma_bf16");
  EXPECT_EQ(plan::plan_cuda_cached(problem(1000), h200(), fma).plan.kernel_name, "heed_cuda_vector_bf16");
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
