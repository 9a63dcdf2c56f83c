#pragma once
// The CUDA tiled (prefill) route's part of plan_cuda: whether the kernel serves a problem, and
// its launch, reasons and intermediates. Pure host code, like the rest of the planner.

#include <cstddef>
#include <optional>
#include <string>

#include "plan/cuda_plan.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

struct CudaTiledFit {
  CudaTiledShape shape;
  std::size_t intermediate = 0;  // block_m × block_n float32 scores per block, in registers
  std::string kernel_reason;     // why this kernel (mma.sync or wgmma) and not the other
  // Causal: the modelled finish of the launch head-major and with heads inner, in key-tile
  // times, on `slots` resident blocks (0 when not modelled).
  std::int64_t finish_head_major = 0, finish_heads_inner = 0, slots = 0;
};

// The tiled kernel's shape for `p` (the Hopper kernel where it serves and pays, unless the
// overrides say otherwise), or nullopt with `why_not` (and `min_cap`: the score tile's bytes when
// only the cap is in the way, else SIZE_MAX).
std::optional<CudaTiledFit> fit_cuda_tiled(const Problem& p, const CudaDeviceInfo& device,
                                           const PlanOverrides& overrides, std::size_t& min_cap, std::string& why_not);

// The plan of the tiled route: kernel, name, workers, reasons; no scratch.
void build_cuda_tiled(CudaRoute& r, const Problem& p, const CudaTiledFit& fit);

}  // namespace heed::plan
