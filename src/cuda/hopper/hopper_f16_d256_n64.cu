// One instantiation of the Hopper tiled kernel per translation unit: kHopperConfigs[6].
#include "cuda/hopper_kernel.cuh"

static_assert(heed::plan::cuda::kHopperConfigCount == 8, "one translation unit per entry (CMakeLists.txt)");
template void heed::cuda::hopper::launch<__half, 6>(const heed::cuda::HopperArgs&, dim3, cudaStream_t);
