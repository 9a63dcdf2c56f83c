#pragma once
// The planners' tuning overrides, kept apart from the devices' facts: what a benchmark or test
// forces to measure one choice of the tables, and the environment knobs that do the same
// (overrides_env.cpp). Every default means "the planner decides"; the plan names an override
// that decided.

#include <cstdint>

namespace heed::plan {

// The CUDA vector (decode) kernel.
enum class CudaVectorKernel {
  Auto,
  Fma,      // HEED_CUDA_VECTOR=fma: the CUDA-core kernel for float16 and bfloat16 too
  Mma,      // HEED_CUDA_VECTOR=mma: the cp.async tensor-core kernel at any row count
  CpAsync,  // the cp.async kernels chosen by rows, as before the TMA kernel (the bench's A/B line)
  TmaRows,  // HEED_CUDA_VECTOR=tma-rows: the TMA kernel's row copies for pages of no multiple of 16
};

// The CUDA tiled (prefill) kernel, HEED_CUDA_TILED=mma|wgmma; wgmma only where it serves.
enum class CudaTiledKernel { Auto, Mma, Wgmma };

// The vector route's launch choices (0: the planner's own), so that a variant is laid out,
// scratch included, by the same code as the plan.
struct CudaVectorTuning {
  std::int64_t partitions = 0;  // key partitions (at most one per visible key)
  int ring_items = 0;           // tensor-core kernels: ring items per warp, 2 up to the planned count
  int blocks_per_sm = 0;        // tensor-core kernels: the ring sized for this many blocks per SM
  int warps = 0;                // TMA kernel: warps per block, 4 or 16
  bool any() const { return partitions > 0 || ring_items > 0 || blocks_per_sm > 0 || warps > 0; }
  bool operator==(const CudaVectorTuning&) const = default;
};

// The wgmma (Hopper) kernel's entry of kHopperConfigs by its key tile and consumer warpgroups,
// where an entry with them holds the call's D and Dv (its masking and min_keys aside), and
// whether two consumers take turns to issue: HEED_CUDA_WGMMA_KEYS=N, HEED_CUDA_WGMMA_CONSUMERS=N,
// HEED_CUDA_PINGPONG=on|off. 0 / Auto: the planner's; an entry that matches none: the planner's.
enum class Toggle { Auto, On, Off };
struct CudaWgmmaTuning {
  int block_n = 0;
  int consumers = 0;
  Toggle pingpong = Toggle::Auto;
  bool operator==(const CudaWgmmaTuning&) const = default;
};

struct PlanOverrides {
  CudaVectorKernel cuda_vector = CudaVectorKernel::Auto;
  CudaTiledKernel cuda_tiled = CudaTiledKernel::Auto;
  CudaVectorTuning cuda_vector_tuning;
  CudaWgmmaTuning cuda_wgmma_tuning;
  // HEED_CPU_TILED_ROWS: query rows per CPU tiled task in place of cpu_tables.hpp's (0: the table's).
  std::int64_t cpu_tiled_rows = 0;
  // HEED_CPU_TILED_KEYS: the most keys per CPU tiled key tile in place of the table's limit.
  std::int64_t cpu_tiled_keys = 0;
  bool operator==(const PlanOverrides&) const = default;
};

// HEED_CUDA_VECTOR, HEED_CUDA_TILED, HEED_CUDA_WGMMA_*, HEED_CUDA_PINGPONG, HEED_CPU_TILED_ROWS and
// HEED_CPU_TILED_KEYS as PlanOverrides, read once per process: what attention and plan_attention
// plan with.
const PlanOverrides& environment_overrides();

// The same variables read through `lookup` (getenv's contract: null when unset), so that the
// parsing is tested without touching the process's environment.
PlanOverrides overrides_from(const char* (*lookup)(const char* name));

}  // namespace heed::plan
