#pragma once
// The tiled (prefill) route on Hopper: TMA, mbarriers and wgmma (sm_90a), one instantiation
// per dtype and entry of plan/cuda_tables.hpp's kHopperConfigs.

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/tiled.hpp"

namespace heed::cuda {

// The tiled kernel's arguments plus the TMA tensor maps of K and V (dims D, Lk, Hkv, B), built
// on the host for each call; the kernel takes them as a __grid_constant__ parameter.
struct HopperArgs : TiledArgs {
  CUtensorMap k_map, v_map;
  bool pingpong = true;  // the consumer warpgroups take turns to issue wgmma
};

// The plan's Hopper launch on `stream`: grid [row_blocks, Hkv, B × value parts].
void run_tiled_hopper(const TiledArgs& args, const plan::CudaRoute& route, cudaStream_t stream);

namespace hopper {
template <typename T, int kConfig>
void launch(const HopperArgs& args, dim3 grid, cudaStream_t stream);
}  // namespace hopper

}  // namespace heed::cuda
