// One instantiation of the Hopper tiled kernel per translation unit: kHopperConfigs[1].
#include "cuda/hopper_kernel.cuh"

static_assert(heed::plan::cuda::kHopperConfigCount == 8, "one translation unit per entry (CMakeLists.txt)");
template void heed::cuda::hopper::launch<__nv_bfloat16, 1>(const heed::cuda::HopperArgs&, dim3, cudaStream_t);
