#pragma once
// What the Hopper tiled kernel's producer and consumers share (hopper_kernel.cuh): the compiled
// shape of an instance, the shared-memory layout helpers, the mbarriers and the block's rows
// and key tiles.

#include <cuda.h>

#include <cstdint>

#include "cuda/hopper.hpp"
#include "cuda/ptx.cuh"
#include "cuda/tiled_kernel.cuh"

namespace heed::cuda::hopper {

using ptx::shared_address;

// The compile-time shape of the instance keyed (D, Dv, block_n, consumers): the kHopperConfigs
// entries' with that key. D and Dv are the compiled sizes, to which the call's round up.
template <int kD, int kDv, int kKeyBlockN, int kKeyConsumers>
struct Traits {
  static constexpr plan::cuda::HopperConfig kConfig =
      plan::cuda::hopper_instance(plan::cuda::HopperKey{kD, kDv, kKeyBlockN, kKeyConsumers});
  static_assert(kConfig.head_dim > 0, "no entry of kHopperConfigs has this instance's key");
  static constexpr int D = static_cast<int>(kConfig.head_dim), Dv = static_cast<int>(kConfig.value_dim);
  static constexpr int kConsumers = kConfig.consumers;
  static constexpr int kBlockM = plan::cuda::hopper_block_m(kConfig);
  static constexpr int kMinBlocks = plan::cuda::hopper_blocks_per_sm(kConfig);
  static constexpr int kProducerRegisters = plan::cuda::hopper_producer_registers(kConfig);
  static constexpr int kConsumerRegisters = plan::cuda::hopper_consumer_registers(kConfig);
  static constexpr int kBlockN = kConfig.block_n;
  static constexpr int kStages = kConfig.stages;
  static constexpr int kThreads = plan::cuda::hopper_threads(kConfig);
  // 128-byte swizzle: a tile is stored as panels of 64 columns (128 bytes per row), each panel
  // rows × 128 bytes, its 8-row atoms 1024 bytes.
  static constexpr int kPanelColumns = 64;
  static constexpr int kQPanel = kBlockM * 128, kRingPanel = kBlockN * 128;  // K and V
  static constexpr int kKBytes = kBlockN * D * 2, kVBytes = kBlockN * Dv * 2;
  static constexpr int kRingOffset = static_cast<int>(plan::cuda::hopper_ring_offset(kConfig));
  static constexpr int kStageBytes = static_cast<int>(plan::cuda::hopper_stage_bytes(kConfig));
  static constexpr int kBarrierOffset = static_cast<int>(plan::cuda::hopper_barrier_offset(kConfig));
  static constexpr int kSharedBytes = static_cast<int>(plan::cuda::hopper_shared_bytes(kConfig));
  static_assert(kStageBytes == kKBytes + kVBytes, "the planner's stage size");
  static_assert(D % kPanelColumns == 0 && Dv % kPanelColumns == 0, "whole 128-byte panels");
  static_assert(D == Dv, "the output is staged in the Q tile's rows");
  static constexpr bool kSplit = kConfig.depth_split;
  // Columns of D and Dv each consumer multiplies: all, or its half under the depth split.
  static constexpr int kDPer = kSplit ? D / 2 : D, kDvPer = kSplit ? Dv / 2 : Dv;
  // Steps of S (16 columns of D each) whose Q fragments the depth split holds in registers: 14
  // of its 16 (56 registers beside O's 128 under 240 per consumer thread); all 16 leave ptxas
  // short of registers, and it serialises every wgmma (C7512).
  static constexpr int kQRegisterSteps = kSplit ? 14 : 0;
  // Consumer c's first row in the block and first column of D (Q, K) and of Dv (V, out): its
  // own 64 rows, or the same rows and its half of the columns under the depth split.
  static __device__ constexpr int first_row(int c) { return kSplit ? 0 : 64 * c; }
  static __device__ constexpr int first_column(int c) { return kSplit ? kDPer * c : 0; }
  static __device__ constexpr int first_value_column(int c) { return kSplit ? kDvPer * c : 0; }
  static constexpr int kExchangeOffset = static_cast<int>(plan::cuda::hopper_exchange_offset(kConfig));
  // Under the depth split a consumer stages its output in its own Q panels (kDPer == kDvPer).
  static_assert(!kSplit || (kConsumers == 2 && kDPer % kPanelColumns == 0 && kDPer == kDvPer),
                "the depth split: two consumers, whole panels each");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256 && kDvPer <= 256, "wgmma shapes and TMA boxes");
};

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading and stride
// byte offsets (each >> 4), layout type 1 in bits 62-63. K-major operands: stride = 1024 (8 rows
// of 128 bytes), leading unused. MN-major (V): leading = the next 64-column panel, stride = the
// next 8 keys.
__device__ __forceinline__ std::uint64_t descriptor(unsigned address, unsigned leading, unsigned stride) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) | static_cast<std::uint64_t>(leading >> 4) << 16 |
         static_cast<std::uint64_t>(stride >> 4) << 32 | std::uint64_t{1} << 62;
}
// The same layout `offset` bytes on. The address field (bits 0-13) holds address >> 4 and shared
// memory ends below 256 KiB, so no carry leaves it: one add to the low word, computed once per
// operand and tile instead of the whole descriptor per instruction.
__device__ __forceinline__ std::uint64_t advance(std::uint64_t base, unsigned offset) {
  return (base & 0xFFFFFFFF00000000ull) | static_cast<unsigned>(static_cast<unsigned>(base) + (offset >> 4));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a 128-byte-swizzled tile of `panel` bytes
// per 64 columns (the pattern TMA's CU_TENSOR_MAP_SWIZZLE_128B writes).
__device__ __forceinline__ int swizzled(int row, int chunk, int panel) {
  return (chunk >> 3) * panel + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// The consumer warpgroups' turns to issue wgmma (ping-pong): consumer c waits on barrier 3 + c
// until the other has issued and arrived there (256 threads: 128 waiting, 128 arriving).
__device__ __forceinline__ void wait_turn(int consumer) {
  if (consumer == 0) {
    ptx::bar_sync<3, 256>();
  } else {
    ptx::bar_sync<4, 256>();
  }
}
__device__ __forceinline__ void pass_turn(int consumer) {
  if (consumer == 0) {
    ptx::bar_arrive<4, 256>();
  } else {
    ptx::bar_arrive<3, 256>();
  }
}

// Named barrier among one consumer warpgroup's 128 threads (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int consumer) {
  if (consumer == 0) {
    ptx::bar_sync<1, 128>();
  } else {
    ptx::bar_sync<2, 128>();
  }
}

// The block's mbarriers, 8 bytes apart from `base`: per stage, "full" (the tile's bytes have
// landed) and "empty" (every consumer warp is done with it) for K and for V; then one "full" per
// consumer's Q; then "tail", where a paged sequence's last tile of V lands before the producer
// clears the page's tail and completes the stage's "full" itself (once per block).
template <int kStages, int kConsumers>
struct Barriers {
  unsigned base;
  __device__ __forceinline__ unsigned full_k(int stage) const { return base + 8u * stage; }
  __device__ __forceinline__ unsigned full_v(int stage) const { return base + 8u * (kStages + stage); }
  __device__ __forceinline__ unsigned empty_k(int stage) const { return base + 8u * (2 * kStages + stage); }
  __device__ __forceinline__ unsigned empty_v(int stage) const { return base + 8u * (3 * kStages + stage); }
  __device__ __forceinline__ unsigned full_q(int consumer) const { return base + 8u * (4 * kStages + consumer); }
  __device__ __forceinline__ unsigned tail_v() const { return base + 8u * (4 * kStages + kConsumers); }
};

// Where a block's Q and output rows lie in their maps: batch b of dense maps, or the sequence's
// rows of the one batch of [total_q, H, E] maps where cu_seqlens_q places them (ragged and
// chunked paged calls; hopper.cu builds the maps so). K and V: box_coordinates.
struct MapPlace {
  int batch = 0, q_position = 0;
};

// The block's rows and the key tiles they see: 64 × consumers packed rows of one (sequence, key
// head), counted from the sequence's last row block (longest first), and its sizes as ints.
// row0 < 0: the block lies past its sequence's rows (a ragged batch's grid fits the longest).
struct Block {
  call::Sequence seq;
  MapPlace at;
  std::int64_t b, kv_head;
  int row0, rows, group, kv_len, offset, window;
  // The call's D and Dv, at most the compiled ones: TMA reads zeros past them (the maps hold the
  // call's sizes); the consumers' own copies and stores skip those columns.
  int head_dim, value_dim;
  tiled::BlockReach reach;
  int tile_first, n_tiles;
};

template <typename Tr>
__device__ __forceinline__ Block block_of(const HopperArgs& a) {
  const Call& g = a;
  const tiled::BlockPlace place = tiled::block_place(a.heads_inner);
  Block block;
  block.b = place.z;
  block.seq = call::sequence(g, block.b);
  block.at.batch = g.seqs.cu_q != nullptr ? 0 : static_cast<int>(block.b);
  block.at.q_position = static_cast<int>(block.seq.q_row);
  block.kv_head = place.kv_head;
  block.group = static_cast<int>(g.group);
  block.rows = block.group * static_cast<int>(block.seq.q_len);
  const int seq_row_blocks = (block.rows + Tr::kBlockM - 1) / Tr::kBlockM;
  block.row0 = (seq_row_blocks - 1 - static_cast<int>(place.row_block)) * Tr::kBlockM;
  // A cache of no pages has no keys to read, whatever device-resident lengths say.
  const bool no_pages = g.form == call::Form::Paged && g.seqs.num_pages <= 0;
  block.kv_len = no_pages ? 0 : static_cast<int>(block.seq.kv_len);
  block.offset = block.kv_len - static_cast<int>(block.seq.q_len);
  block.window = g.window > 0 ? static_cast<int>(min(g.window, block.seq.kv_len + block.seq.q_len)) : 0;
  block.head_dim = static_cast<int>(g.head_dim);
  block.value_dim = static_cast<int>(g.value_dim);
  const int row_last = min(block.row0 + Tr::kBlockM, block.rows) - 1;
  block.reach = tiled::block_reach(block.row0, row_last, block.group, block.offset, block.window, g.causal, block.kv_len);
  block.tile_first = block.reach.begin / Tr::kBlockN;
  block.n_tiles = block.reach.begin < block.reach.end ? (block.reach.end + Tr::kBlockN - 1) / Tr::kBlockN - block.tile_first : 0;
  return block;
}

}  // namespace heed::cuda::hopper
