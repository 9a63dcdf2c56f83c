#pragma once
// The vector route's reasons that concern the TMA kernel and the serving forms (pure host code):
// why the TMA kernel does not serve, how it loads, how a ragged or paged batch is read.

#include <string>

#include "plan/cuda_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

// Why the TMA vector kernel cannot serve `p` on `device`, or empty when it can.
// `row_copies`: pages of no multiple of 16 keys may take its row copies (HEED_CUDA_VECTOR=tma-rows).
std::string vector_tma_why_not(const Problem& p, const CudaDeviceInfo& device, bool row_copies);
// Why an override keeps the vector route off the TMA kernel, or empty under none.
std::string vector_tma_overridden(CudaVectorKernel asked);
// How the TMA kernel loads K and V for the plan's shape: boxes and swizzle, or row copies; ring.
std::string vector_tma_loads_reason(const Problem& p, const CudaVectorShape& s);
// How the plan's vector kernel (TMA boxes or row copies, mma.sync or CUDA cores) reads a ragged
// or paged batch's keys.
std::string vector_serving_reason(const Problem& p, const CudaVectorShape& s);

}  // namespace heed::plan
