#pragma once
// The vector (decode) route's launches.

#include <cuda_runtime.h>

#include "cuda/params.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

// Pass 1 (and the merge when the plan has partitions) on `stream`.
void run_vector(const VectorArgs& args, const plan::CudaRoute& route, cudaStream_t stream);

}  // namespace heed::cuda
