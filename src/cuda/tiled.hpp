#pragma once
// The tiled (prefill) route: a FlashAttention-2 style kernel on mma.sync tensor cores, one
// instantiation per dtype and kernel of plan/cuda_tables.hpp's kTiledConfigs.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/params.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {

struct TiledArgs : Call {
  score::Transform transform;   // in log2 units: scores are exponents of 2
  std::int64_t rows = 0;        // group × Lq packed rows per (batch, key head)
  std::int64_t row_blocks = 0;  // ceil(rows / block_m)
  bool wide_out = false;        // out rows take 16-byte stores (stride-1, 16-byte aligned)
  int value_parts = 1;          // blocks per row block along Dv (grid z = B × value_parts)
  bool heads_inner = false;     // launch order: row blocks outer, (key head, z) pairs inner
};

// The plan's tiled launch on `stream`: grid [row_blocks, Hkv, B × value_parts].
void run_tiled(const TiledArgs& args, const plan::CudaRoute& route, cudaStream_t stream);

namespace tiled {
// The launch of the instance keyed (D, Dv per block, block_m, block_n) (plan::cuda::TiledKey),
// compiled for the sizes and tiles of the kTiledConfigs entries with that key; the call's D and
// Dv are at most those. Instantiated by the files cmake/instances.cpp generates, one per key.
template <typename T, int D, int Dv, int kBlockM, int kBlockN>
void launch(const TiledArgs& args, dim3 grid, cudaStream_t stream);
}  // namespace tiled

}  // namespace heed::cuda
