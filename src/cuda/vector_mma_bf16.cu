// The tensor-core vector kernel's bfloat16 instantiations (one per head class).

#include "cuda/vector_mma.cuh"
#include "cuda/vector_mma.hpp"

namespace heed::cuda {

void launch_vector_mma_bf16(const VectorArgs& args, const plan::CudaVectorShape& shape, dim3 grid,
                            cudaStream_t stream) {
  vector_mma::launch<__nv_bfloat16>(args, shape, grid, stream);
}

}  // namespace heed::cuda
