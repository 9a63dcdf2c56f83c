#pragma once
// Pass 1 of the tensor-core vector kernel (cuda/vector_mma.cuh), one translation unit per dtype.

#include <cuda_runtime.h>

#include "cuda/params.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

// Launches the kernel of the plan's head class on `stream`, grid [partitions × row tiles, Hkv, B].
void launch_vector_mma_f16(const VectorArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                           cudaStream_t stream);
void launch_vector_mma_bf16(const VectorArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                            cudaStream_t stream);

}  // namespace heed::cuda
