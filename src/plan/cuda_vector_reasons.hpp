#pragma once
// The vector route's reasons that concern the TMA kernel and the serving forms (pure host code):
// why the TMA kernel does not serve, how it loads, how a ragged or paged batch is read.

#include <string>

#include "plan/cuda_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

// Why the TMA vector kernel cannot serve `p` on `device`, or empty when it can.
std::string vector_tma_why_not(const Problem& p, const CudaDeviceInfo& device);
// Why an override keeps the vector route off the TMA kernel, or empty under none.
std::string vector_tma_overridden(CudaVectorKernel asked);
// How the TMA kernel loads K and V: boxes, swizzle, ring.
std::string vector_tma_loads_reason(const Problem& p);
// How the vector kernels (`tma`: the TMA kernel, else `tensor_cores`: the mma.sync kernel, else
// the CUDA-core kernel) read a ragged or paged batch's keys.
std::string vector_serving_reason(const Problem& p, bool tma, bool tensor_cores);

}  // namespace heed::plan
