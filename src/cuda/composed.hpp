#pragma once
// The composed route on cuBLAS: S = scale·Q·Kᵀ (strided-batched GEMM over the key heads, GQA
// without copying K/V), one fused kernel for masks, window, sinks and a float32 softmax, then
// O = P·V in float32 and a store kernel into the caller's output.

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/params.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

using ComposedArgs = Call;

void run_composed(const ComposedArgs& args, const plan::CudaRoute& route, std::byte* scratch, int device,
                  cudaStream_t stream);

}  // namespace heed::cuda
