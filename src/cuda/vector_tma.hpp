#pragma once
// The TMA vector (decode) kernel (cuda/vector_tma.cuh): float16 and bfloat16 on a 9.0 device,
// D = Dv = 64, 128 or 256, one translation unit per dtype.

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/params.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

// The vector kernel's arguments plus the TMA tensor maps of K and V (dims D, visible keys, Hkv,
// B; boxes of 64 columns × 16 keys), built on the host for each call; the kernel takes them as
// a __grid_constant__ parameter.
struct VectorTmaArgs : VectorArgs {
  CUtensorMap k_map, v_map;
};

// The maps of `args` for the plan's shape (keys past the visible span read as zeros).
void make_vector_tma_maps(VectorTmaArgs& args, const plan::CudaVectorShape& shape);

// Launches the kernel of the plan's head class and row tile on `stream`, grid [partitions ×
// row tiles, Hkv, B].
void launch_vector_tma_f16(const VectorTmaArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                           cudaStream_t stream);
void launch_vector_tma_bf16(const VectorTmaArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                            cudaStream_t stream);

}  // namespace heed::cuda
