// One instantiation of the tiled kernel per translation unit (kTiledConfigs lists them).
#include "cuda/tiled_kernel.cuh"

template void heed::cuda::tiled::launch<__nv_bfloat16, 512, 256>(const heed::cuda::TiledArgs&, dim3, cudaStream_t);
