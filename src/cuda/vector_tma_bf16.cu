// The TMA vector kernel's bfloat16 instantiations (one per head class and row tile).

#include "cuda/vector_tma.cuh"
#include "cuda/vector_tma.hpp"

namespace heed::cuda {

void launch_vector_tma_bf16(const VectorTmaArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                           cudaStream_t stream) {
  vector_tma::launch<__nv_bfloat16>(args, shape, grid, stream);
}

}  // namespace heed::cuda
