#pragma once
// The tiled (prefill) route on Hopper: TMA, mbarriers and wgmma (sm_90a), one instantiation
// per dtype and kernel of plan/cuda_tables.hpp's kHopperConfigs.

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/tiled.hpp"

namespace heed::cuda {

// The tiled kernel's arguments plus the TMA tensor maps of K and V (dims D, keys, Hkv, batches by
// form: cuda/vector_keys.hpp's map_extent) and, where their rows allow (cuda/tensor_map.hpp,
// row_tensor_map_fits), of Q and the output as packed rows; built on the host for each call,
// taken as a __grid_constant__ parameter.
struct HopperArgs : TiledArgs {
  CUtensorMap k_map, v_map, q_map, out_map;
  int key_box = 0;            // keys per K / V box: the tile's block_n, paged hopper_page_box_keys
  int key_boxes = 1;          // boxes per key tile (block_n / key_box)
  bool row_copies = false;    // paged: K and V rows by the producer warpgroup's cp.async, not TMA boxes
  bool q_rows_tma = false;    // Q by TMA (else 16-byte cp.async copies by the consumers)
  bool out_rows_tma = false;  // the output by TMA stores (else stores by the consumers)
  bool pingpong = true;       // the consumer warpgroups take turns to issue wgmma
};

// The plan's Hopper launch on `stream`: grid [row_blocks, Hkv, B].
void run_tiled_hopper(const TiledArgs& args, const plan::CudaRoute& route, cudaStream_t stream);

namespace hopper {
// The launch of the instance keyed (D, Dv, block_n, consumers) (plan::cuda::HopperKey), compiled
// for the sizes and tiles of the kHopperConfigs entries with that key; the call's D and Dv are
// at most those. Instantiated by the files cmake/instances.cpp generates, one per key.
template <typename T, int D, int Dv, int kBlockN, int kConsumers>
void launch(const HopperArgs& args, dim3 grid, cudaStream_t stream);
}  // namespace hopper

}  // namespace heed::cuda
