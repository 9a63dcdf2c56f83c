// The Hopper (wgmma) kernel's persistent schedule against the float64 oracle: each problem is
// planned for a described device of two or three SMs and its grid forced persistent, so that a
// few resident blocks each loop over many tiles (the ring, the consumers' turns and the Q
// buffers running on from tile to tile): every entry of kHopperConfigs, causal tiles of mixed
// lengths and tiles that see no key, windows, sinks, GQA packing, Lq != Lk, [B, L, H, D] rows and
// element stores of the output. Label `gpu`; skipped off a 9.0 device or without sm_90a code.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/device_tensor.hpp"
#include "cuda/runtime.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/cuda_tiled_plan.hpp"
#include "plan/planner.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

struct ScheduleCase {
  CaseSpec spec;
  int sms = 2;  // of the described device: 2 or 4 resident blocks (one or two per SM)
};

std::ostream& operator<<(std::ostream& os, const ScheduleCase& c) { return os << c.spec.name; }

// Why this machine cannot run the Hopper kernel, or empty.
std::string why_no_hopper() {
#if defined(HEED_CUDA_SM90A)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return "no CUDA device: the gpu tests need one";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cudaGetDeviceProperties failed";
  if (prop.major != 9 || prop.minor != 0) return "the wgmma kernel runs on compute capability 9.0 only";
  return {};
#else
  return "this build has no sm_90a code";
#endif
}

constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;
using L = Layout;

std::vector<ScheduleCase> schedule_cases() {
  return {
      // BERT-like: many short sequences, 64-row blocks (one consumer, two blocks per SM).
      {Make("persistent_d64_many_short", 24, 2, 2, 70, 70, 64, 64, bf16), 2},
      // Group 3 (heads cross row blocks), Lq != Lk, the output by element stores.
      {Make("persistent_d64_gqa3_strided_out", 5, 3, 1, 77, 333, 64, 64, f16).out_layout(L::StridedLast), 3},
      // 192-key tiles from 2048 keys: two consumers, two Q buffers.
      {Make("persistent_d64_long_keys_gqa4", 1, 8, 2, 50, 2100, 64, 64, f16), 2},
      // Causal tiles of mixed lengths on the D 64 entry for any masking.
      {Make("persistent_d64_causal_mixed", 2, 4, 4, 300, 300, 64, 64, bf16).causal(), 2},
      // D 128, 176-key tiles, one Q buffer; sinks, Lq < Lk.
      {Make("persistent_d128_n176_sinks", 2, 4, 2, 70, 400, 128, 128, bf16).sinks(bf16), 2},
      // Causal with a window and Lq > Lk: leading row blocks see no key (no turns, zeros).
      {Make("persistent_d128_window_lq_gt_lk", 1, 4, 1, 200, 150, 128, 128, f16).causal().window(60).masked_rows(), 3},
      // One key tile per tile: the consumers' turns cross a tile boundary at every other turn.
      {Make("persistent_d128_one_key_tile", 6, 2, 2, 40, 40, 128, 128, bf16).causal(), 2},
      // D 256 (one Q buffer): window, sinks, [B, L, H, D] rows in and out.
      {Make("persistent_d256_blhd_window_sinks", 2, 2, 2, 130, 130, 256, 256, bf16)
           .causal().window(50).sinks().layout(L::BLHD).out_layout(L::BLHD), 2},
  };
}

class HopperSchedule : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(HopperSchedule, PersistentGridMatchesOracle) {
  if (const std::string why = why_no_hopper(); !why.empty()) GTEST_SKIP() << why;
  const ScheduleCase& c = GetParam();
  const auto problem = make_problem(c.spec);
  problem->out().poison();
  DeviceTensor q(problem->q()), k(problem->k()), v(problem->v()), out(problem->out());
  AttentionOptions options = problem->options();
  std::unique_ptr<DeviceTensor> sinks;
  if (options.sinks) {
    sinks = std::make_unique<DeviceTensor>(*options.sinks);
    options.sinks = sinks->view();
  }
  const plan::Problem p = plan::validate_views(q.view(), k.view(), v.view(), options);
  plan::CudaDeviceInfo described = cuda::device_info(Device::cuda(0), "HopperSchedule");
  described.sm_count = c.sms;
  plan::CudaRoute route = plan::plan_cuda(p, described);
  ASSERT_TRUE(route.tiled.wgmma) << route.plan.explain();
  plan::schedule_hopper(route.tiled, p, described, true);
  const std::int64_t tiles = route.tiled.row_blocks * p.kv_heads * p.batch;
  ASSERT_TRUE(route.tiled.persistent);
  ASSERT_LT(route.tiled.blocks, tiles) << "each block loops over several tiles";

  cuda::run_attention(q.view(), k.view(), v.view(), out.view(), problem->scale(), options, route, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "sync after attention");
  std::vector<unsigned char> bytes = out.download();
  const TensorView got = out.host_view(bytes);
  const std::vector<double> reference = problem->reference();
  EXPECT_TRUE(matches_reference(got, reference)) << route.tiled.blocks << " blocks over " << tiles << " tiles";
  if (c.spec.expect_masked_rows) EXPECT_GT(compare(got, reference).zero_rows, 0);
}

INSTANTIATE_TEST_SUITE_P(Wgmma, HopperSchedule, ::testing::ValuesIn(schedule_cases()),
                         [](const auto& info) { return info.param.spec.name; });

}  // namespace
}  // namespace heed::test
