// Every CUDA route against the float64 oracle over the CPU's hand-chosen grid (plus decode
// shapes that split keys into partitions), on device copies of the inputs with the output
// poisoned; the plan names the kernels that run (profiler) and the measured device scratch
// stays within the plan. Label `gpu`: registered only when heed is built with CUDA.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <set>

#include "cuda/device_tensor.hpp"
#include "cuda/tiled_cases.hpp"
#include "heed/heed.hpp"
#include "kernels/grid_cases.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/overrides.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

constexpr std::size_t kPoolGranularity = 512;  // cuda/allocator.hpp
constexpr std::size_t kLargeScratch = std::size_t{8} << 20;
const Device kGpu = Device::cuda(0);

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one"

bool empty_output(const CaseSpec& spec) {
  return spec.batch == 0 || spec.q_heads == 0 || spec.q_len == 0 || spec.value_dim == 0;
}

// Bytes of `after` outside the elements of `view` equal `before`.
::testing::AssertionResult gaps_equal(const TensorView& view, const unsigned char* base,
                                      const std::vector<unsigned char>& before,
                                      const std::vector<unsigned char>& after) {
  std::vector<bool> element(before.size(), false);
  const std::size_t size = size_of(view.dtype);
  const auto start = static_cast<const unsigned char*>(view.data) - base;
  for (std::int64_t offset : element_offsets(view.shape, view.strides)) {
    for (std::size_t byte = 0; byte < size; ++byte) element[static_cast<std::size_t>(start + offset * static_cast<std::int64_t>(size)) + byte] = true;
  }
  for (std::size_t byte = 0; byte < before.size(); ++byte) {
    if (!element[byte] && before[byte] != after[byte]) {
      return ::testing::AssertionFailure() << "byte " << byte << " outside the output was written";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether Auto must pick the CUDA tiled route: prefill (more than kVectorMaxRows rows per key
// head) that the kernel serves (on the compiled size the call's rounds up to), under a cap that
// holds its score tile.
bool expect_cuda_tiled(const CaseSpec& spec) {
  const int config = plan::cuda::tiled_config_index(spec.head_dim, spec.value_dim);
  if (spec.route != RouteChoice::Auto || !cuda_tiled_serves(spec) || empty_output(spec)) return false;
  if (spec.kv_heads == 0 || (spec.q_heads / spec.kv_heads) * spec.q_len <= plan::cuda::kVectorMaxRows) return false;
  const auto& c = plan::cuda::kTiledConfigs[config];
  return !spec.max_score_bytes || *spec.max_score_bytes >= 16 * c.warps * c.block_n * 4;
}

// Whether the tiled route must take the Hopper (wgmma) kernel: a 9.0 device, a build with
// sm_90a code, no HEED_CUDA_TILED=mma, a head size that rounds up to an entry of kHopperConfigs
// with less padded work at its speed-up than the mma.sync entry's (or HEED_CUDA_TILED=wgmma), no
// array mask, k and v strides that a TMA map describes (positive), and a cap that holds its
// score tile.
bool expect_wgmma(const CaseSpec& spec) {
#if defined(HEED_CUDA_SM90A)
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const plan::CudaTiledKernel forced = plan::environment_overrides().cuda_tiled;
  if (prop.major != 9 || prop.minor != 0 || forced == plan::CudaTiledKernel::Mma) return false;
  const int config = plan::cuda::hopper_config_index(spec.head_dim, spec.value_dim, spec.causal, spec.kv_len);
  if (config < 0 || spec.mask != MaskKind::None || spec.layout == Layout::ReversedL) return false;
  const int mma = plan::cuda::tiled_config_index(spec.head_dim, spec.value_dim);
  const bool asked = forced == plan::CudaTiledKernel::Wgmma;
  if (!asked && mma >= 0 && !plan::cuda::wgmma_pays(plan::cuda::kHopperConfigs[config], plan::cuda::kTiledConfigs[mma])) {
    return false;
  }
  return !spec.max_score_bytes ||
         *spec.max_score_bytes >= plan::cuda::hopper_block_m(plan::cuda::kHopperConfigs[config]) *
                                     plan::cuda::kHopperConfigs[config].block_n * 4;
#else
  (void)spec;
  return false;
#endif
}

void check_case(const CaseSpec& spec) {
  const auto problem = make_problem(spec);
  DeviceProblem device(*problem);
  if (spec.route == RouteChoice::Tiled && !cuda_tiled_serves(spec)) {
    try {
      (void)device.plan();
      ADD_FAILURE() << "the CUDA tiled route does not serve this dtype, head size or layout and must say so";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
      EXPECT_NE(std::string(error.what()).find("tiled route cannot serve"), std::string::npos) << error.what();
    }
    return;
  }
  // Caps that only the CPU's tiled route meets (its tiles shrink to 16 keys; the CUDA tiled
  // kernel's do not) are rejected with the smallest cap a CUDA route accepts.
  if (spec.max_score_bytes && std::holds_alternative<route::Tiled>(problem->plan().kernel)) {
    try {
      (void)device.plan();
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(error.what()).find("smallest cap that fits"), std::string::npos) << error.what();
      return;
    }
  }
  const AttentionPlan plan = device.plan();
  SCOPED_TRACE(plan.to_json());
  EXPECT_EQ(plan.device, kGpu);
  if (expect_cuda_tiled(spec)) {
    EXPECT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel)) << "prefill the tiled kernel serves";
    EXPECT_EQ(plan.kernel_name,
              std::string(expect_wgmma(spec) ? "heed_cuda_tiled_wgmma_" : "heed_cuda_tiled_") + short_name(spec.dtype));
  }
  switch (spec.route) {
    case RouteChoice::Vector: EXPECT_TRUE(std::holds_alternative<route::Vector>(plan.kernel)); break;
    case RouteChoice::Tiled: EXPECT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel)); break;
    case RouteChoice::Composed:
      EXPECT_TRUE(std::holds_alternative<route::Composed>(plan.kernel) ||
                  std::holds_alternative<route::ComposedBlocks>(plan.kernel));
      break;
    default: break;
  }
  if (spec.max_score_bytes) EXPECT_LE(plan.max_intermediate_bytes, static_cast<std::size_t>(*spec.max_score_bytes));
  if (spec.max_scratch_bytes) EXPECT_LE(plan.scratch_bytes, static_cast<std::size_t>(*spec.max_scratch_bytes));

  profile::set_mode(profile::Mode::Shapes);
  profile::reset();
  cuda_ok(cudaDeviceSynchronize(), "sync");
  reset_peak(kGpu);
  const std::size_t active = memory_stats(kGpu).active;
  device.run();
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  const MemoryStats stats = memory_stats(kGpu);
  EXPECT_EQ(stats.active, active) << "scratch is returned to the pool";
  const std::size_t used = stats.peak - active;
  const std::size_t promised = (plan.scratch_bytes + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
  EXPECT_LE(used, promised) << "measured scratch above the plan's " << plan.scratch_bytes;
  if (plan.scratch_bytes >= kLargeScratch) EXPECT_GE(static_cast<double>(used), 0.8 * static_cast<double>(plan.scratch_bytes));

  const std::vector<Dispatch> launched = dispatches();
  profile::set_mode(profile::Mode::Off);
  if (empty_output(spec)) {
    EXPECT_TRUE(launched.empty()) << "an empty output launches nothing";
  } else {
    bool main_launch = false, merge = false;
    for (const Dispatch& d : launched) {
      if (d.name == plan.kernel_name) {
        main_launch = true;
        if (const auto* vector = std::get_if<route::Vector>(&plan.kernel)) {
          EXPECT_EQ(d.y, spec.kv_heads);
          EXPECT_EQ(d.z, spec.batch);
          EXPECT_EQ(d.x % vector->blocks, 0) << "x = partitions x row tiles";
        } else if (const auto* tiled = std::get_if<route::Tiled>(&plan.kernel)) {
          // [ceil(group x Lq / block_q), Hkv, B]: a block holds block_q rows of a key head's group.
          // z = B × value parts (D 512's columns in two halves on the mma.sync kernel; the wgmma
          // kernel splits D 512's depth inside one block instead, z = B).
          int parts = 1;
          if (plan.kernel_name.find("wgmma") == std::string::npos) {
            const int config = plan::cuda::tiled_config_index(spec.head_dim, spec.value_dim);
            if (config >= 0) parts = plan::cuda::kTiledConfigs[config].value_parts;
          }
          EXPECT_EQ(d.x, ceil_div((spec.q_heads / spec.kv_heads) * spec.q_len, tiled->block_q));
          EXPECT_EQ(d.y, spec.kv_heads);
          EXPECT_EQ(d.z, spec.batch * parts);
          EXPECT_EQ(d.count, 1);
        } else {
          EXPECT_EQ(d.y, spec.q_heads);
          EXPECT_EQ(d.z, spec.batch);
        }
      }
      if (d.name.find("_vector_merge_") != std::string::npos) merge = true;
    }
    EXPECT_TRUE(main_launch) << "the plan's kernel " << plan.kernel_name << " did not run";
    if (const auto* vector = std::get_if<route::Vector>(&plan.kernel)) EXPECT_EQ(merge, vector->passes == 2);
  }

  std::vector<unsigned char> bytes = device.out->download();
  const TensorView out = device.out->host_view(bytes);
  EXPECT_TRUE(gaps_equal(problem->out().view(), problem->out().storage().data(), device.out_before, bytes));
  const std::vector<double> reference = problem->reference();
  EXPECT_TRUE(matches_reference(out, reference));
  const Comparison comparison = compare(out, reference);
  if (spec.expect_masked_rows) EXPECT_GT(comparison.zero_rows, 0);
  if (spec.nan_query) EXPECT_GT(comparison.expected_nan, 0) << "a NaN in q must give its row NaN";
}

constexpr DType f32 = DType::Float32;
constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;

// Decode shapes the CPU grid lacks: enough keys for several partitions (two passes), every
// head size of the vector kernels, GQA packing, and masks, windows and sinks across partitions.
// float32 runs the CUDA-core kernel, float16 / bfloat16 the tensor-core one (and the CUDA-core
// one again in the heed_cuda_tests_vector_fma run, HEED_CUDA_VECTOR=fma).
std::vector<CaseSpec> cuda_cases() {
  using MK = MaskKind;
  return {
      Make("gpu_decode_bf16_32x8_d128_split", 2, 32, 8, 1, 5000, 128, 128, bf16),
      // Under max_scratch_bytes: 128k keys of prefill within 64 MiB, decode in fewer key
      // partitions, the composed route in smaller blocks.
      Make("gpu_budget_128k_prefill", 1, 4, 1, 32, 131072, 128, 128, bf16).budget(std::int64_t{64} << 20),
      Make("gpu_budget_decode_partitions", 1, 32, 8, 1, 32768, 128, 128, bf16).budget(std::int64_t{1} << 18),
      Make("gpu_budget_composed_blocks", 1, 4, 2, 1000, 1500, 64, 64, f32).route(RouteChoice::Composed)
          .budget(std::int64_t{4} << 20),
      Make("gpu_decode_f16_16x2_d256_split", 1, 16, 2, 1, 3001, 256, 256, f16),
      Make("gpu_decode_f32_d64_split", 1, 8, 8, 1, 4097, 64, 64, f32),
      Make("gpu_decode_bf16_d512", 1, 4, 1, 1, 1500, 512, 512, bf16),
      Make("gpu_decode_f32_d512", 1, 4, 2, 1, 1300, 512, 512, f32),
      Make("gpu_decode_f32_d384", 1, 2, 1, 1, 900, 384, 384, f32),
      Make("gpu_decode_bf16_d192_dv128", 1, 8, 2, 1, 2000, 192, 128, bf16),
      Make("gpu_decode_f16_d96_dv64", 2, 6, 3, 1, 1700, 96, 64, f16),
      Make("gpu_decode_bf16_d80_odd", 1, 4, 2, 1, 777, 80, 80, bf16),
      Make("gpu_decode_f32_d33_scalar_loads", 1, 2, 1, 2, 600, 33, 17, f32),
      Make("gpu_decode_window_split", 1, 8, 2, 1, 10000, 128, 128, bf16).window(3000),
      Make("gpu_decode_sinks_split", 1, 16, 2, 1, 6000, 64, 64, bf16).sinks(bf16),
      Make("gpu_decode_keypad_split", 3, 8, 2, 1, 3000, 128, 128, f16).mask(MK::KeyPadding).masked_rows(),
      Make("gpu_decode_additive_split", 1, 4, 1, 1, 2500, 64, 64, f32).mask(MK::Additive),
      Make("gpu_decode_bool_split_blhd", 2, 8, 2, 1, 3000, 128, 128, bf16).mask(MK::Bool4D).layout(Layout::BLHD),
      Make("gpu_decode_4q_causal_split", 1, 8, 2, 4, 4000, 128, 128, bf16).causal(),
      Make("gpu_decode_rows16_tiles", 1, 16, 1, 1, 3000, 128, 128, f16),
      Make("gpu_vector_forced_rows40", 1, 8, 1, 5, 2000, 64, 64, f32).route(RouteChoice::Vector),
      Make("gpu_decode_strided_last_split", 1, 4, 2, 1, 2000, 64, 64, bf16).layout(Layout::StridedLast),
      Make("gpu_decode_reversed_split", 1, 4, 2, 1, 2000, 64, 64, f16).layout(Layout::ReversedL),
      // The tensor-core kernel (float16 / bfloat16): each head class at its edges, one and two
      // n-tiles of 8 rows, more rows than a block holds, warps without keys, the element path,
      // no merge (one partition), per-row windows, masks, sinks and large logits.
      Make("gpu_mma_bf16_d64_rows16_window_sinks", 1, 64, 8, 2, 4000, 64, 64, bf16).window(128).sinks(bf16),
      Make("gpu_mma_f16_d64_dv16", 1, 4, 2, 1, 500, 64, 16, f16),
      Make("gpu_mma_bf16_d128_rows12_window_per_row", 1, 8, 2, 3, 2000, 128, 128, bf16).window(100),
      Make("gpu_mma_f16_d256_rows16", 1, 16, 1, 1, 3000, 256, 256, f16),
      Make("gpu_mma_bf16_d512_dv256", 1, 4, 1, 1, 1100, 512, 256, bf16),
      Make("gpu_mma_f16_d512_rows16_two_tiles", 1, 8, 1, 2, 1200, 512, 512, f16),
      Make("gpu_mma_bf16_d160_dv96", 2, 6, 2, 1, 900, 160, 96, bf16),
      Make("gpu_mma_f16_rows40_forced_causal", 1, 8, 1, 5, 2000, 64, 64, f16).causal().route(RouteChoice::Vector),
      Make("gpu_mma_bf16_40_keys_empty_warp", 1, 32, 8, 1, 40, 128, 128, bf16),
      Make("gpu_mma_f16_one_key", 2, 8, 2, 1, 1, 128, 128, f16),
      Make("gpu_mma_bf16_d33_element_path", 1, 4, 2, 2, 700, 33, 17, bf16),
      Make("gpu_mma_f16_strided_rows16_window_sinks", 1, 16, 2, 2, 1500, 64, 64, f16)
          .layout(Layout::StridedLast).window(300).sinks(f16),
      Make("gpu_mma_bf16_one_partition_sinks", 64, 8, 8, 1, 200, 64, 64, bf16).sinks(bf16),
      Make("gpu_mma_f16_one_partition_blhd", 64, 16, 8, 1, 150, 128, 128, f16).layout(Layout::BLHD)
          .out_layout(Layout::BLHD),
      Make("gpu_mma_bf16_additive_rows16", 1, 8, 2, 4, 1000, 128, 128, bf16).mask(MK::Additive, bf16).masked_rows(),
      Make("gpu_mma_f16_bool4d_causal_split", 2, 8, 2, 3, 2500, 96, 64, f16).mask(MK::Bool4D).causal().masked_rows(),
      Make("gpu_mma_f16_large_logits", 1, 8, 1, 1, 3000, 128, 128, f16).scale(1.0),
      Make("gpu_mma_bf16_bool_expanded_rows12", 3, 16, 4, 3, 2000, 64, 64, bf16).mask(MK::BoolExpanded).masked_rows(),
      // The TMA kernel (a 9.0 device; elsewhere the kernels above): many partitions, fully
      // masked partitions and rows, keys ending inside a tile (read past the span as zeros),
      // per-row causal ends over two n-tiles, windows with sinks at D 256.
      Make("gpu_decode_tma_bf16_32x8_d128_many_partitions", 1, 32, 8, 1, 20000, 128, 128, bf16),
      Make("gpu_decode_tma_f16_d64_keypad_many_partitions", 3, 16, 4, 1, 9000, 64, 64, f16)
          .mask(MK::KeyPadding)
          .masked_rows(),
      Make("gpu_decode_tma_bf16_d128_keys_1037", 2, 8, 2, 1, 1037, 128, 128, bf16),
      Make("gpu_decode_tma_f16_d128_causal_rows9", 1, 12, 4, 3, 3333, 128, 128, f16).causal(),
      Make("gpu_decode_tma_bf16_d256_rows16_window_sinks", 1, 32, 2, 1, 7000, 256, 256, bf16).window(2500).sinks(bf16),
      // Head sizes that round up to a compiled class (loads past D read zeros): several
      // partitions (the partials hold Dv + 2 floats), masks and windows. TMA at 72 (class 128),
      // 40 (64), 136 and 184 (192) and 200 (256); D != Dv. The cp.async kernels' rounding:
      // vector_variants_test.cpp.
      Make("gpu_decode_tma_bf16_d72_split", 2, 32, 4, 1, 5000, 72, 72, bf16),
      Make("gpu_decode_tma_f16_d40_keypad_split", 2, 16, 2, 1, 3000, 40, 40, f16).mask(MK::KeyPadding).masked_rows(),
      Make("gpu_decode_tma_bf16_d200_window_sinks", 1, 16, 2, 1, 6000, 200, 200, bf16).window(2000).sinks(bf16),
      Make("gpu_decode_tma_f16_d136_split", 1, 16, 2, 1, 4000, 136, 136, f16),
      Make("gpu_decode_tma_bf16_d184_rows16_causal", 1, 16, 1, 1, 2500, 184, 184, bf16).causal(),
      Make("gpu_decode_tma_bf16_d120_dv104", 1, 16, 2, 1, 2000, 120, 104, bf16),
      Make("gpu_decode_f32_d72_split", 1, 8, 2, 1, 4000, 72, 72, f32),
      Make("gpu_composed_prefill_bf16", 2, 8, 2, 130, 300, 128, 128, bf16).causal(),
      Make("gpu_composed_prefill_f16_blocks", 1, 4, 4, 200, 400, 64, 64, f16).cap(400 * 4 * 30),
      Make("gpu_composed_d0", 1, 2, 2, 20, 30, 0, 16, f32).scale(1.0),
      // [B, L, H, D] batches that do not fold in place: packed, then one step over every
      // (batch, key head) pair (GQA, masked rows, [B, L, H, D] out).
      Make("gpu_composed_f32_blhd_packed_fold", 3, 6, 2, 40, 50, 32, 32, f32).layout(Layout::BLHD)
          .out_layout(Layout::BLHD).causal().mask(MK::KeyPadding).masked_rows(),
      Make("gpu_composed_bf16_blhd_packed_fold", 4, 4, 4, 33, 33, 64, 64, bf16).layout(Layout::BLHD)
          .sinks(bf16).route(RouteChoice::Composed),
  };
}

class CudaGrid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(CudaGrid, MatchesOracle) {
  REQUIRE_GPU();
  check_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Quick, CudaGrid, ::testing::ValuesIn(quick_cases()), CaseName());
INSTANTIATE_TEST_SUITE_P(Gpu, CudaGrid, ::testing::ValuesIn(cuda_cases()), CaseName());
INSTANTIATE_TEST_SUITE_P(Long, CudaGrid, ::testing::ValuesIn(long_tier_cases()), CaseName());
INSTANTIATE_TEST_SUITE_P(Tiled, CudaGrid, ::testing::ValuesIn(tiled_cuda_cases()), CaseName());
INSTANTIATE_TEST_SUITE_P(LongTiled, CudaGrid, ::testing::ValuesIn(tiled_cuda_long_cases()), CaseName());

}  // namespace
}  // namespace heed::test
