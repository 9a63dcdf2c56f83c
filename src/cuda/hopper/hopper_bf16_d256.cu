// One instantiation of the Hopper tiled kernel per translation unit (kHopperConfigs lists them).
#include "cuda/hopper_kernel.cuh"

template void heed::cuda::hopper::launch<__nv_bfloat16, 256, 256>(const heed::cuda::HopperArgs&, dim3, cudaStream_t);
