// The one place the planners' tuning knobs are read from the environment.

#include <cstdlib>
#include <string_view>

#include "plan/overrides.hpp"

namespace heed::plan {
namespace {

// A tiling knob: a whole number 1 to 65536, else 0 (unset, the planner's table).
std::int64_t tiling_knob(const char* value) {
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long long rows = std::strtoll(value, &end, 10);
  return end != value && *end == '\0' && rows >= 1 && rows <= 65536 ? rows : 0;
}

const char* from_environment(const char* name) { return std::getenv(name); }

}  // namespace

PlanOverrides overrides_from(const char* (*lookup)(const char* name)) {
  PlanOverrides overrides;
  const auto is = [&](const char* name, std::string_view value) {
    const char* set = lookup(name);
    return set != nullptr && value == set;
  };
  if (is("HEED_CUDA_VECTOR", "fma")) overrides.cuda_vector = CudaVectorKernel::Fma;
  if (is("HEED_CUDA_VECTOR", "mma")) overrides.cuda_vector = CudaVectorKernel::Mma;
  if (is("HEED_CUDA_VECTOR", "tma-rows")) overrides.cuda_vector = CudaVectorKernel::TmaRows;
  if (is("HEED_CUDA_TILED", "mma")) overrides.cuda_tiled = CudaTiledKernel::Mma;
  if (is("HEED_CUDA_TILED", "wgmma")) overrides.cuda_tiled = CudaTiledKernel::Wgmma;
  overrides.cuda_wgmma_tuning.block_n = static_cast<int>(tiling_knob(lookup("HEED_CUDA_WGMMA_KEYS")));
  overrides.cuda_wgmma_tuning.consumers = static_cast<int>(tiling_knob(lookup("HEED_CUDA_WGMMA_CONSUMERS")));
  if (is("HEED_CUDA_PINGPONG", "on")) overrides.cuda_wgmma_tuning.pingpong = Toggle::On;
  if (is("HEED_CUDA_PINGPONG", "off")) overrides.cuda_wgmma_tuning.pingpong = Toggle::Off;
  overrides.cpu_tiled_rows = tiling_knob(lookup("HEED_CPU_TILED_ROWS"));
  overrides.cpu_tiled_keys = tiling_knob(lookup("HEED_CPU_TILED_KEYS"));
  return overrides;
}

const PlanOverrides& environment_overrides() {
  static const PlanOverrides overrides = overrides_from(from_environment);
  return overrides;
}

}  // namespace heed::plan
