#pragma once
// The CUDA routing function: one place decides the route, its launch shape and its scratch,
// for plan_attention, attention and heed explain alike. Pure: it reads the problem, the
// device's facts (discovered once per device) and the caller's overrides, never the device
// itself.

#include <cstdint>
#include <string>

#include "heed/plan.hpp"
#include "plan/overrides.hpp"
#include "plan/problem.hpp"
#include "plan/scratch_layout.hpp"

namespace heed::plan {

// The facts of one CUDA device and of this build, read once per process; no tuning knobs
// (those are PlanOverrides).
struct CudaDeviceInfo {
  int index = 0;
  int sm_count = 1;
  int major = 0, minor = 0;
  std::size_t shared_per_block = 48 << 10;
  std::size_t shared_per_sm = 228 << 10;
  std::size_t reserved_shared_per_block = 1 << 10;
  std::string name;
  // The build holds sm_90a code (HEED_CUDA_ARCHS has 90a): the Hopper kernel can run on 9.0.
  bool wgmma_built = false;
};

// The vector (decode) kernel's launch: grid [partitions × row_tiles, Hkv, B].
struct CudaVectorShape {
  bool tensor_cores = false;  // the mma kernel (float16 / bfloat16), else the CUDA-core one
  bool tma = false;           // tensor cores, K and V copied by TMA (cuda/vector_tma.cuh)
  bool row_copies = false;    // TMA: paged rows copied one bulk copy each (pages of no multiple of 16)
  int elems_per_chunk = 8;   // elements of one 16-byte load
  int lanes_per_key = 32;    // lanes that share one key row (a power of two <= 32)
  int chunks_per_lane = 1;   // 16-byte chunks of a row each lane holds
  int row_tile = 1;          // query rows (heads × positions of a group) per block
  std::int64_t rows = 0;     // group × Lq
  std::int64_t row_tiles = 1;
  std::int64_t span_begin = 0, span_end = 0;  // keys any row can see
  std::int64_t partitions = 1;
  std::int64_t keys_per_partition = 0;
  // Tensor-core kernel only (cuda/vector_mma.cuh):
  int head_class = 0;        // the compiled head-size class: D and Dv <= head_class
  int k_steps = 0;           // ceil(D / 32): 32-element steps of a K row (two MMA k-steps each)
  int v_steps = 0;           // ceil(Dv / 64): 64-element steps of a V row (four MMA m-tiles each)
  int ring_items = 0;        // 16-key K or V items per warp in the shared-memory ring
  int blocks_per_sm = 0;     // resident blocks per SM (shared memory)
  int warps = 4;             // warps per block (TMA kernel: 4, or 16 for wide blocks)
  std::int64_t shared_bytes = 0;  // dynamic shared memory per block
  bool dependent_merge = false;   // merge launched programmatically dependent (sm_90+)
};

// The composed route's steps: for each block of `rows` query positions and head of the group,
// chunks of `heads` (batch, key head) pairs in the order b·Hkv + key head (within one batch
// unless fold_batch): S = scale·Q·Kᵀ (cuBLAS), softmax, O = P·V (cuBLAS).
struct CudaComposedShape {
  std::int64_t rows = 0;
  std::int64_t row_blocks = 0;
  std::int64_t heads = 0;  // (batch, key head) pairs per step (the GEMMs' batch)
  bool fold_batch = false;  // a step's pairs may span batches (else one batch's key heads)
  bool pack_qk = false;    // q and k copied to contiguous rows of their dtype
  bool pack_v = false;     // v copied to contiguous float32 rows (P·V runs in float32)
};

// The tiled (prefill) kernel's launch: grid [row_blocks, Hkv, B × value_parts]; a block holds block_m packed
// rows of one key head's group (row r is position r / group of query head r % group) and
// streams key tiles of block_n. `config` indexes kTiledConfigs (cuda_tables.hpp), or
// kHopperConfigs where `wgmma` (the Hopper kernel: TMA, wgmma, warp specialised).
struct CudaTiledShape {
  int config = -1;
  bool wgmma = false;
  bool pingpong = false;  // wgmma: the consumer warpgroups take turns to issue (kHopperConfigs)
  int warps = 0, stages = 0;
  bool q_in_registers = true;
  std::int64_t block_m = 0, block_n = 0;
  std::int64_t rows = 0;  // group × Lq
  std::int64_t row_blocks = 0;
  std::int64_t shared_bytes = 0;  // dynamic shared memory per block
  int value_parts = 1;            // blocks per row block along Dv: grid z = B × value_parts
  bool heads_inner = false;       // launch order: row blocks outer, (key head, z) pairs inner
};

struct CudaRoute {
  AttentionPlan plan;
  std::string merge_kernel_name;    // vector, two passes
  std::string softmax_kernel_name;  // composed
  CudaVectorShape vector;
  CudaComposedShape composed;
  CudaTiledShape tiled;
  Region partials;                      // vector, two passes: [B][Hkv][rows][partitions][Dv + 2]
  Region q_packed, k_packed, v_packed;  // composed
  Region scores, out_rows;              // composed, one step
  Region metadata;                      // host-resident metadata's device copy (call/metadata.hpp)
};

// The plan of `problem` on `device`, overrides applied (a benchmark's variant, a test's forced
// kernel, or environment_overrides()).
CudaRoute plan_cuda(const Problem& problem, const CudaDeviceInfo& device, const PlanOverrides& overrides = {});

// plan_cuda memoized per thread (the last few problems): what `attention` runs, so that a
// repeated decode call skips the planning and its explanation (a few µs of string formatting
// before the first launch). The reference stays valid until this thread's next call.
const CudaRoute& plan_cuda_cached(const Problem& problem, const CudaDeviceInfo& device,
                                  const PlanOverrides& overrides = {});

}  // namespace heed::plan
