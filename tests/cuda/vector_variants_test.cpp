// The vector route's tuned variants (the benchmark's A/B lines) against the float64 oracle:
// rings of two items, one to four blocks per SM, wide (16-warp) blocks and tuned partition counts, planned by
// plan_cuda and run through the backend's entry point. On a 9.0 device they run the TMA
// kernel, elsewhere the cp.async kernels. Label `gpu`: registered only when heed is built with
// CUDA.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <memory>
#include <variant>

#include "cuda/device_tensor.hpp"
#include "call/validate.hpp"
#include "cuda/runtime.hpp"
#include "device/cuda_device.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

plan::CudaVectorTuning tuned(std::int64_t partitions, int ring_items, int blocks_per_sm, int warps = 0) {
  plan::CudaVectorTuning tuning;
  tuning.partitions = partitions;
  tuning.ring_items = ring_items;
  tuning.blocks_per_sm = blocks_per_sm;
  tuning.warps = warps;
  return tuning;
}

bool hopper() {
  cudaDeviceProp properties{};
  return cudaGetDeviceProperties(&properties, 0) == cudaSuccess && properties.major == 9;
}

// Plans `spec` with `tuning` (beside the environment's overrides; `kernel` where not Auto), runs
// it on device copies (output poisoned) and compares; `tma`: the TMA kernel must run it on a
// 9.0 device.
void check_tuned(const CaseSpec& spec, const plan::CudaVectorTuning& tuning,
                 plan::CudaVectorKernel kernel = plan::CudaVectorKernel::Auto, bool tma = false) {
  const auto problem = make_problem(spec);
  DeviceProblem device(*problem);
  const Device gpu = Device::cuda(0);
  const call::Call call = call::validate_call(device.q->view(), device.k->view(), device.v->view(), device.out->view(),
                                              problem->scale(), device.options);
  plan::PlanOverrides overrides = plan::environment_overrides();
  overrides.cuda_vector_tuning = tuning;
  if (kernel != plan::CudaVectorKernel::Auto) overrides.cuda_vector = kernel;
  const plan::CudaRoute route =
      plan::plan_cuda(call, heed::device::cuda_device_info(gpu, "vector_variants_test"), overrides);
  SCOPED_TRACE(route.plan.to_json());
  ASSERT_TRUE(std::holds_alternative<route::Vector>(route.plan.kernel));
  if (kernel != plan::CudaVectorKernel::Auto) EXPECT_FALSE(route.vector.tma);
  if (tma && hopper()) EXPECT_TRUE(route.vector.tma);
  if (kernel == plan::CudaVectorKernel::Fma) EXPECT_FALSE(route.vector.tensor_cores);
  if (tuning.partitions > 0) EXPECT_LE(route.vector.partitions, tuning.partitions);  // whole tiles on TMA
  // Wide blocks where asked and served (head class <= 128, at most 8 rows per block).
  if (tuning.warps > 0 && route.vector.tma) {
    const bool served = route.vector.head_class <= 128 && route.vector.row_tile <= 8;
    EXPECT_EQ(route.vector.warps, served ? tuning.warps : 4);
  }
  cuda::run_attention(call, device.options, route, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  std::vector<unsigned char> bytes = device.out->download();
  EXPECT_TRUE(matches_reference(device.out->host_view(bytes), problem->reference()));
}

constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;

TEST(CudaVectorVariants, EveryRingAndBlockCountMatchesTheOracle) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one";
  const CaseSpec cases[] = {
      Make("tma_bf16_32x8_d128", 1, 32, 8, 1, 6000, 128, 128, bf16),
      Make("tma_f16_d256_rows16_window_sinks", 1, 32, 2, 1, 5000, 256, 256, f16).window(3001).sinks(f16),
      Make("tma_bf16_d64_keypad", 3, 16, 4, 1, 4000, 64, 64, bf16).mask(MaskKind::KeyPadding),
      // 128 groups: wide blocks as planned.
      Make("tma_bf16_wide_b16_window_sinks", 16, 32, 8, 1, 700, 128, 128, bf16).window(301).sinks(bf16),
  };
  const plan::CudaVectorTuning tunings[] = {
      tuned(0, 0, 0), tuned(0, 2, 0), tuned(0, 0, 1), tuned(50, 0, 4), tuned(1, 0, 0), tuned(7, 2, 3),
      tuned(0, 0, 0, 16), tuned(7, 2, 0, 16), tuned(0, 0, 0, 4),
  };
  for (const CaseSpec& spec : cases) {
    for (const plan::CudaVectorTuning& tuning : tunings) {
      SCOPED_TRACE(spec.name);
      check_tuned(spec, tuning);
    }
  }
}

// The TMA kernel on head sizes that round up to a class: rows that are not whole 64-column
// boxes arrive as dense rows (one whole-row box; chunks past the row are skipped or cleared),
// D != Dv mixes the two layouts, and D 192 reads three of its class's four boxes. Several
// partitions, so that tiles end inside a block's range.
TEST(CudaVectorVariants, TheTmaKernelReadsWholeRows) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one";
  const CaseSpec cases[] = {
      Make("tma_bf16_d8", 1, 16, 2, 1, 3000, 8, 8, bf16),
      Make("tma_f16_d24_keypad", 2, 16, 2, 1, 2500, 24, 24, f16).mask(MaskKind::KeyPadding).masked_rows(),
      Make("tma_bf16_d56_window_sinks", 1, 32, 4, 1, 3000, 56, 56, bf16).window(1701).sinks(bf16),
      Make("tma_f16_d48_rows16", 1, 32, 2, 1, 2000, 48, 48, f16),
      Make("tma_bf16_d104_causal", 1, 16, 2, 1, 2600, 104, 104, bf16).causal(),
      Make("tma_f16_d120_dv128", 1, 16, 2, 1, 2000, 120, 128, f16),
      Make("tma_bf16_d64_dv40", 1, 16, 2, 1, 2000, 64, 40, bf16),
      Make("tma_bf16_d184_sinks", 1, 16, 2, 1, 1500, 184, 184, bf16).sinks(),
      Make("tma_f16_d192", 1, 16, 2, 1, 1500, 192, 192, f16),
      Make("tma_bf16_d248_dv200", 1, 8, 1, 1, 1200, 248, 200, bf16),
  };
  for (const CaseSpec& spec : cases) {
    for (const plan::CudaVectorTuning& tuning : {tuned(0, 0, 0), tuned(7, 2, 0), tuned(0, 0, 0, 16)}) {
      SCOPED_TRACE(spec.name);
      check_tuned(spec, tuning, plan::CudaVectorKernel::Auto, /*tma=*/true);
    }
  }
}

// The cp.async kernels (every device's decode but a 9.0 one's) on head sizes that round up to
// a class: tensor cores from 8 rows (D 136 and 184 on class 256, 72 on 128, 40 on 64, D != Dv)
// and the CUDA-core kernel, which reads D at run time.
TEST(CudaVectorVariants, TheCpAsyncKernelsRoundHeadSizesUp) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one";
  const CaseSpec cases[] = {
      Make("mma_f16_d136_split", 1, 16, 2, 1, 4000, 136, 136, f16),
      Make("mma_bf16_d184_rows16_causal", 1, 16, 1, 1, 2500, 184, 184, bf16).causal(),
      Make("mma_bf16_d72_window_sinks", 2, 32, 4, 1, 3000, 72, 72, bf16).window(1000).sinks(bf16),
      Make("mma_f16_d40_keypad", 2, 16, 2, 1, 3000, 40, 40, f16).mask(MaskKind::KeyPadding).masked_rows(),
      Make("mma_bf16_d120_dv104", 1, 16, 2, 1, 2000, 120, 104, bf16),
  };
  for (const CaseSpec& spec : cases) {
    for (const plan::CudaVectorKernel kernel : {plan::CudaVectorKernel::CpAsync, plan::CudaVectorKernel::Fma}) {
      SCOPED_TRACE(spec.name);
      check_tuned(spec, {}, kernel);
    }
  }
}

}  // namespace
}  // namespace heed::test
