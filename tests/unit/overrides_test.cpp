// The planners' overrides: parsed from the environment's variables in one place, and passed to
// the planners explicitly, which name an override that decided.

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <variant>

#include "core/cpu_info.hpp"
#include "heed/heed.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"

namespace heed {
namespace {

// A fake environment of name=value pairs, for overrides_from.
const char* const* g_variables = nullptr;

const char* lookup(const char* name) {
  for (const char* const* entry = g_variables; entry != nullptr && *entry != nullptr; ++entry) {
    const std::size_t length = std::strlen(name);
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return *entry + length + 1;
  }
  return nullptr;
}

plan::PlanOverrides parse(std::initializer_list<const char*> variables) {
  static const char* table[8] = {};
  std::size_t i = 0;
  for (const char* variable : variables) table[i++] = variable;
  table[i] = nullptr;
  g_variables = table;
  return plan::overrides_from(lookup);
}

TEST(PlanOverrides, ReadFromTheVariablesByTheirDocumentedValues) {
  EXPECT_EQ(parse({}), plan::PlanOverrides{});
  EXPECT_EQ(parse({"HEED_CUDA_VECTOR=fma"}).cuda_vector, plan::CudaVectorKernel::Fma);
  EXPECT_EQ(parse({"HEED_CUDA_VECTOR=mma"}).cuda_vector, plan::CudaVectorKernel::Mma);
  EXPECT_EQ(parse({"HEED_CUDA_VECTOR=tma"}).cuda_vector, plan::CudaVectorKernel::Auto);
  EXPECT_EQ(parse({"HEED_CUDA_VECTOR=tma-rows"}).cuda_vector, plan::CudaVectorKernel::TmaRows);
  EXPECT_EQ(parse({"HEED_CUDA_TILED=mma"}).cuda_tiled, plan::CudaTiledKernel::Mma);
  EXPECT_EQ(parse({"HEED_CUDA_TILED=wgmma"}).cuda_tiled, plan::CudaTiledKernel::Wgmma);
  EXPECT_EQ(parse({"HEED_CUDA_TILED=MMA"}).cuda_tiled, plan::CudaTiledKernel::Auto);
  const plan::PlanOverrides wgmma =
      parse({"HEED_CUDA_WGMMA_KEYS=128", "HEED_CUDA_WGMMA_CONSUMERS=1", "HEED_CUDA_PINGPONG=off"});
  EXPECT_EQ(wgmma.cuda_wgmma_tuning.block_n, 128);
  EXPECT_EQ(wgmma.cuda_wgmma_tuning.consumers, 1);
  EXPECT_EQ(wgmma.cuda_wgmma_tuning.pingpong, plan::Toggle::Off);
  EXPECT_EQ(parse({"HEED_CUDA_PINGPONG=on"}).cuda_wgmma_tuning.pingpong, plan::Toggle::On);
  EXPECT_EQ(parse({"HEED_CUDA_PINGPONG=1"}).cuda_wgmma_tuning.pingpong, plan::Toggle::Auto);
  EXPECT_EQ(parse({"HEED_CUDA_WGMMA_KEYS=x"}).cuda_wgmma_tuning.block_n, 0);
  const plan::PlanOverrides cpu = parse({"HEED_CPU_TILED_ROWS=48", "HEED_CPU_TILED_KEYS=64"});
  EXPECT_EQ(cpu.cpu_tiled_rows, 48);
  EXPECT_EQ(cpu.cpu_tiled_keys, 64);
  // Outside 1 to 65536, or not a whole number: the planner's table.
  for (const char* value : {"HEED_CPU_TILED_ROWS=0", "HEED_CPU_TILED_ROWS=65537", "HEED_CPU_TILED_ROWS=48x",
                            "HEED_CPU_TILED_ROWS=", "HEED_CPU_TILED_ROWS=-4"}) {
    EXPECT_EQ(parse({value}).cpu_tiled_rows, 0) << value;
  }
}

// The CPU planner on stated facts (an AVX2 machine of 4 threads, 1 MiB of L2), not this machine's.
CpuInfo avx2_machine() {
  CpuInfo cpu;
  cpu.isa = CpuIsa::Avx2;
  cpu.threads = 4;
  cpu.l1d_bytes = 32 << 10;
  cpu.l2_bytes = 1 << 20;
  return cpu;
}

TEST(PlanOverrides, TheCpuPlannerTakesThemAndSaysSo) {
  const Shape q{1, 8, 512, 64}, k{1, 2, 512, 64};
  const plan::Problem p = plan::validate_problem(q, k, k, DType::Float32, DType::Float32, DType::Float32, {});
  const plan::CpuRoute planned = plan::plan_cpu(p, avx2_machine());
  ASSERT_TRUE(std::holds_alternative<route::Tiled>(planned.plan.kernel)) << planned.plan.explain();
  EXPECT_EQ(planned.plan.explain().find("HEED_CPU_TILED"), std::string::npos) << planned.plan.explain();
  EXPECT_EQ(planned.plan.workers, 4);
  plan::PlanOverrides overrides;
  overrides.cpu_tiled_rows = 48;
  overrides.cpu_tiled_keys = 64;
  const plan::CpuRoute tuned = plan::plan_cpu(p, avx2_machine(), overrides);
  EXPECT_EQ(tuned.block_q, 12);  // 48 rows of a group of 4 heads
  EXPECT_EQ(tuned.block_k, 64);
  const std::string why = tuned.plan.explain();
  EXPECT_NE(why.find("rows per tile from HEED_CPU_TILED_ROWS=48 (tuning)"), std::string::npos) << why;
  EXPECT_NE(why.find("at most 64 keys per tile from HEED_CPU_TILED_KEYS (tuning)"), std::string::npos) << why;
}

}  // namespace
}  // namespace heed
