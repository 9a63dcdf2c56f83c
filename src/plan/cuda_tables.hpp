#pragma once
// The CUDA routing thresholds and kernel shapes, in one table. Each entry gives its reason and
// the heed_cuda_bench case that measures it (scripts/gpu-check); the figures are in
// docs/decisions.md.

#include <cstdint>
#include <numeric>

namespace heed::plan::cuda {

// Vector route when one key head serves at most this many query rows (group × Lq): decode,
// bound by reading K and V once; above it the tiled route. The CPU's threshold, not swept here.
inline constexpr std::int64_t kVectorMaxRows = 16;
// Threads per vector block: 4 warps. Each warp holds 32 / lanes_per_key key groups; each key
// group copies vector_keys_per_step(chunks_per_lane) keys per step (K and V rows, 16 bytes per
// lane and chunk, cp.async into shared memory) through a kVectorStages-deep pipeline, so each
// block keeps (kVectorStages - 1) × 128 × 128 bytes = 32 KiB of loads in flight in 48 KiB of
// shared memory (4 blocks per SM by shared memory).
inline constexpr int kVectorThreads = 128;
inline constexpr int kVectorStages = 3;
// Keys per step of one key group: 128 bytes of K and V per lane and step at any head size.
constexpr int vector_keys_per_step(int chunks_per_lane) { return chunks_per_lane >= 4 ? 1 : 4 / chunks_per_lane; }
// Bytes of one vector load: 8 float16/bfloat16 or 4 float32 elements.
inline constexpr int kVectorLoadBytes = 16;
// Largest head size the vector kernel holds in registers (chunks_per_lane <= 512 / 32 / E).
inline constexpr std::int64_t kVectorMaxHeadDim = 512;
// Floats of q (and of the output accumulator) per lane: row_tile × chunks_per_lane × E <= 64,
// meant to keep both in registers; about a third of the instantiations still spill 24-284 bytes
// (-Xptxas -v). Cases: the decode_* cases under HEED_CUDA_VECTOR=fma.
inline constexpr int kVectorRegisterFloats = 64;
inline constexpr int kVectorMaxRowTile = 8;

// The tensor-core vector kernel (float16 / bfloat16; float32 keeps the CUDA-core kernel above):
// mma.sync m16n8k16 with keys as M and the group's rows as N, since a group of 8 rows at 4.8 TB/s
// needs more FP32 FMA than the CUDA cores give. 4 warps, each streaming its own 16-key tiles as K
// and V ring items, each lane copying exactly the chunks its fragments need (cuda/vector_mma.cuh).
// Cases: decode_b1_16x2_d256_131k, decode_b1_32x8_d128_32k.
inline constexpr int kVectorMmaThreads = 128;
inline constexpr int kVectorMmaKeysPerTile = 16;
// Head-size classes, each one compiled kernel per dtype: D and Dv padded to the class's largest
// (64, 128, 256, 512); a lane holds class / 32 chunks of K per key pair and class / 64 of V per
// key quad, so one ring item is 16 keys × class × 2 bytes per warp for K and for V alike.
inline constexpr int kVectorMmaHeadClasses[] = {64, 128, 256, 512};
// Query rows per block: two n-tiles of 8 (16 rows) below the largest class, one at 512, where
// 16 rows would take 256 float32 accumulators per lane.
constexpr int vector_mma_max_row_tile(int head_class) { return head_class >= 512 ? 8 : 16; }
// Blocks per SM the ring is sized for: two, so that one block's start and end (q, the first
// loads' latency, the block's merge) overlap the other's streaming, and the grid fills the
// machine in waves of 2 × SMs blocks. A class whose two-item ring does not fit twice (512 on an
// H200) runs one block per SM.
inline constexpr int kVectorMmaBlocksPerSm = 2;
// Ring items per warp: as many as fit the block's share of the SM's shared memory, at most 12
// (the kernel's wait switch) and at least 2 (one in flight while one is read). On an H200
// (228 KiB per SM) that is 12 / 6 / 3 items for classes 64 / 128 / 256 at two blocks per SM
// and 3 for 512 at one: 128-176 KiB of loads in flight per SM, against the ~40-60 KiB that
// 4.8 TB/s × ~1-1.5 µs of loaded latency asks over 132 SMs (Little's law).
inline constexpr int kVectorMmaMaxRingItems = 12;
inline constexpr int kVectorMmaMinRingItems = 2;
// The kernel's shared memory, laid out by these functions for planner and kernel alike: the
// ring (warps × ring items × item bytes), then q as MMA fragments (n-tiles × class / 32 chunks
// per lane); after the key loop the ring is reused for the warps' partial outputs (float32,
// warps × row tile × class), so a block holds the larger of the two.
inline constexpr int kVectorMmaWarps = kVectorMmaThreads / 32;
constexpr std::int64_t vector_mma_item_bytes(int head_class) {
  return std::int64_t{kVectorMmaKeysPerTile} * head_class * 2;
}
constexpr std::int64_t vector_mma_q_bytes(int head_class) {
  return std::int64_t{vector_mma_max_row_tile(head_class) / 8} * (head_class / 32) * 32 * 16;
}
constexpr std::int64_t vector_mma_epilogue_bytes(int head_class, int warps = kVectorMmaWarps) {
  return std::int64_t{warps} * vector_mma_max_row_tile(head_class) * head_class * 4;
}
// Static shared memory of the kernel (its rows' bounds and the warps' max and sum), an upper
// bound the kernel asserts.
inline constexpr std::int64_t kVectorMmaStaticSharedBytes = 2048;
// Partitions of the tensor-core kernel: the count P that minimises
//   waves(P) × (keys per partition + overhead) + (P > 1 ? overhead : 0),
// waves(P) = ceil(groups × P / (SMs × blocks per SM)), with overhead = the keys one block streams
// in ~2 µs (a block's start and end, and the merge launch); candidates 1 and the P that fill 1-8
// waves. Cases: decode_b1_32x8_d128_32k (one wave), decode_b64_32x8_d128_4k (no partitions).
inline constexpr std::int64_t kVectorBlockOverheadBytes = 32 << 10;
inline constexpr int kVectorMaxWaves = 8;
// No partition shorter than one step of the block (its warps × 16 keys): a shorter one idles
// warps and only adds partials to merge.

// The TMA vector kernel (cuda/vector_tma.cuh): the tensor-core kernel's products and tiles, its
// K and V items copied by TMA (lane 0 of each warp) into the per-warp ring, where per-lane
// cp.async stalled near 3 TB/s. Served on a 9.0 device (sm_90a code) for float16 / bfloat16 where
// D and Dv round up to a class below (vector_tma_head_class), rows are 16-byte chunks and k's and
// v's strides are positive (what a tensor map describes). Cases: the four decode_* cases; class
// 192 (D 136-192, which class 256's last box would miss): heed_cuda_bench --head-sizes.
inline constexpr int kVectorTmaHeadClasses[] = {64, 128, 192, 256};
// A box of a K or V item: 64 columns (one 128-byte swizzle row) × 16 keys.
inline constexpr int kVectorTmaBoxColumns = 64;
// The TMA kernel's class for (D, Dv): the smallest that holds both, where both reach into its
// last box, so that every box copied holds some of the call's columns (the maps read zeros past
// them); 0 where none (a D far below Dv, say).
constexpr int vector_tma_head_class(std::int64_t head_dim, std::int64_t value_dim) {
  for (int head_class : kVectorTmaHeadClasses) {
    if (head_dim <= head_class && value_dim <= head_class) {
      const int last_box = head_class - kVectorTmaBoxColumns;
      return head_dim > last_box && value_dim > last_box ? head_class : 0;
    }
  }
  return 0;
}
// Rows that are no multiple of a box load as whole rows instead: one unswizzled box of all the
// row's columns (class 256 at most, a box's limit) × 16 keys. 64-column boxes reaching past the
// row's end ran at 0.63-0.98 of the compiled size's rate. Case: heed_cuda_bench --head-sizes
// --mode decode (D 8, 24, 40, 48, 56, 104).
constexpr bool vector_tma_whole_rows(std::int64_t columns) { return columns % kVectorTmaBoxColumns != 0; }
// Pages of no multiple of 16 keys (a 16-key box would cross pages) load by row copies: one bulk
// copy (cp.async.bulk, no tensor map) per key row, lanes 0-15 of a warp each copying one key's
// row of its page, into rows vector_tma_row_pitch bytes apart: an odd number of 16-byte chunks,
// so the 8 rows an ldmatrix reads lie in distinct banks. Case: paged_decode_*_p1.
constexpr std::int64_t vector_tma_row_pitch(int head_class) { return 2 * std::int64_t{head_class} + 16; }
constexpr std::int64_t vector_tma_item_bytes(int head_class, bool row_copies) {
  return row_copies ? kVectorMmaKeysPerTile * vector_tma_row_pitch(head_class) : vector_mma_item_bytes(head_class);
}
// The swizzle's 1024-byte atoms: the kernel aligns its dynamic shared memory, the plan adds this.
inline constexpr std::int64_t kVectorTmaAlignBytes = 1024;
// Static shared memory of the kernel (one mbarrier per ring slot of each warp, its rows' bounds,
// the warps' max and sum), an upper bound the kernel asserts.
inline constexpr std::int64_t kVectorTmaStaticSharedBytes = 2048;
// Wide blocks: 16 warps, one block per SM, where (batch x key head x row tile) groups about fill
// the SMs (from SMs / 2), so a block streams a whole group's keys and no partition needs merging.
// Served at head classes 64 and 128 with at most 8 rows per block (512 threads' registers fit the
// SM); static shared memory grows with the warps' mbarriers, maxima and sums.
// Case: decode_b16_32x8_d128_8k.
inline constexpr int kVectorTmaWideWarps = 16;
inline constexpr std::int64_t kVectorTmaWideStaticSharedBytes = 6144;
constexpr bool vector_tma_wide_serves(int head_class, int row_tile) { return head_class <= 128 && row_tile <= 8; }
// Blocks per SM the ring is sized for (as many ring items as fit, up to 12): 4 at head class
// 128, 2 at 64 (not measured) and 256 (then no more than the registers allow). Cases:
// decode_b16_32x8_d128_8k, decode_b64_32x8_d128_4k, decode_b1_16x2_d256_131k.
constexpr int vector_tma_blocks_per_sm(int head_class) { return head_class == 128 ? 4 : 2; }
// Blocks per SM that the kernel's registers allow, by head class and row tile (8 or 16 rows):
// nvcc 13.0 -Xptxas -v, sm_90a, bfloat16, without spills (paged tiles and V-row clears
// included): 80 / 116 registers at class 64, 104 / 150 at 128, 116 / 197 at 192, 128 / 228 at
// 256, so 65536 / (128 threads × registers) blocks. The kernel's __launch_bounds__ keeps it
// there (class 256 at 8 rows exactly at 4 blocks' 128); the planner sizes no more blocks.
constexpr int vector_tma_register_blocks(int head_class, int row_tile) {
  if (head_class <= 64) return row_tile <= 8 ? 5 : 4;
  if (head_class <= 128) return row_tile <= 8 ? 4 : 3;
  return row_tile <= 8 ? 4 : 2;
}
// Partitions of its 4-warp blocks fill at most 2 blocks per SM, though the ring is sized for 4:
// 8 streaming warps per SM about saturate the memory, and each further partition adds a block's
// start and end and a partial to merge. Case: decode_b1_32x8_d128_32k.
inline constexpr int kVectorTmaPartitionBlocksPerSm = 2;
// Its partials are merged by the merge launch (programmatically dependent): a merge by each
// group's last block walked the partitions one L2 round trip after another and measured slower.
// Cases: decode_b1_32x8_d128_32k, decode_b1_16x2_d256_131k.

// Tensor cores from this many query rows per key head (group × Lq) up; below it the CUDA-core
// kernel, faster with 4 rows over many groups (between 4 and 8 not measured). Cases:
// decode_b16_32x8_d128_8k, decode_b64_32x8_d128_4k (4 rows), decode_b1_16x2_d256_131k (8).
inline constexpr std::int64_t kVectorMmaMinRows = 8;
// Also from kVectorMmaFewGroupRows rows when the (batch × key head) groups are few (groups ×
// kVectorMmaFewGroupsFactor <= SMs): a long key range split over few groups. Cases:
// decode_b1_32x8_d128_32k; decode_b16_32x8_d128_8k and decode_b64_32x8_d128_4k stay on CUDA cores.
inline constexpr std::int64_t kVectorMmaFewGroupRows = 4;
// 8: between 8 and 128 groups nothing is measured, so the switch stays near the measured point.
inline constexpr std::int64_t kVectorMmaFewGroupsFactor = 8;

// Key partitions of the CUDA-core kernel: about kVectorBlocksPerSm blocks per SM (3 resident at
// 128 threads by registers), but no partition under kVectorMinKeysPerPartition keys, where the
// merge's rows × (Dv + 2) floats per partition would cost more than a few percent of the reads.
// Cases: decode_b16_32x8_d128_8k, decode_b64_32x8_d128_4k.
inline constexpr std::int64_t kVectorBlocksPerSm = 4;
inline constexpr std::int64_t kVectorMinKeysPerPartition = 256;

// Composed route: without a caller's cap the score buffer of one step (kv heads × rows × Lk
// float32) stays within this many bytes, so long prefill shapes are blocked instead of
// allocating gigabytes of scores.
inline constexpr std::int64_t kComposedScoreBudget = std::int64_t{1} << 30;
// Threads of the softmax and store kernels (one block per score row).
inline constexpr int kRowThreads = 256;

}  // namespace heed::plan::cuda

namespace heed::plan::cuda {

// Tiled (prefill) route, FlashAttention-2 style on mma.sync (sm_80 and up; on sm_90 for what
// kHopperConfigs below does not serve, and under HEED_CUDA_TILED=mma). One kernel per (D, Dv)
// entry and dtype: each warp holds 16 query rows, a block `warps` × 16, and K/V tiles of `block_n`
// keys stream through a `stages`-deep cp.async ring; `value_parts` blocks split Dv (D 512). A
// call's D and Dv (multiples of 8) round up to the entry of least padded work that holds both
// (tiled_config_index). The shapes are FlashAttention-2's sm_80 choices, not tuned here. Cases:
// the prefill_* cases' mma lines (HEED_CUDA_TILED=mma). Adding a head size is one row here: the
// build generates its instance files (cmake/instances.cpp).
struct TiledConfig {
  std::int64_t head_dim = 0, value_dim = 0;  // value_dim: the output columns of one block
  int warps = 4;                // 16 query rows each: block_m = 16 × warps
  int block_n = 64;             // keys per tile
  int stages = 2;               // K/V tiles in flight in the shared-memory ring
  bool q_in_registers = true;   // else Q fragments are read from shared memory per key tile
  int min_blocks = 1;           // resident blocks per SM the register budget is cut for
  int value_parts = 1;          // blocks per row block, each value_dim columns of Dv (S recomputed)
  constexpr bool operator==(const TiledConfig&) const = default;
};

// One 8-warp block per SM everywhere (256 threads, up to 255 registers each, no spills): two
// blocks would need 128 registers, where D 64 spills. Q stays in registers up to D 128; D 256
// takes 32-key tiles so that every entry fits an A100's 163 KiB (ptxas figures: docs/decisions.md).
inline constexpr TiledConfig kTiledConfigs[] = {
    {32, 32, 8, 64, 2, true, 1},  // embedding models (MiniLM, bge-small): 4 chunks, padded to 5
    {64, 64, 8, 64, 2, true, 1},
    {80, 80, 8, 64, 2, true, 1},
    {96, 96, 8, 64, 2, true, 1},
    {128, 128, 8, 64, 2, true, 1},
    // D 136-160 (on an A100, and under masks on an H200): 1.2x less padded work than on 192.
    {160, 160, 8, 64, 2, false, 1},
    {192, 128, 8, 64, 2, false, 1},
    {192, 192, 8, 64, 2, false, 1},
    // D 200-224, as 160: 1.14x less padded work than on 256.
    {224, 224, 8, 32, 2, false, 1},
    {256, 256, 8, 32, 2, false, 1},
    // D = Dv = 512 (no public fused kernel serves it): a warp's 16 rows × 512 output columns
    // would take 256 float32 registers per lane, so the value columns split in two: blocks
    // z = 2b and 2b + 1 each compute S for their rows (the whole of D) and 256 columns of O, and
    // the work is 1.5× the FLOPs counted (2·512 + 2·256 per pair and part, against 2·512 + 2·512).
    // 224 KiB of shared memory (Q 128 KiB, two stages of 32 keys × (512 + 256) × 2 bytes): an
    // H100 / H200 holds it, an A100 (163 KiB) takes the next entry.
    {512, 256, 8, 32, 2, false, 1, 2},
    // The same with 64-row blocks: Q 64 KiB, 160 KiB in all, within an A100's 163 KiB.
    {512, 256, 4, 32, 2, false, 1, 2},
};
inline constexpr int kTiledConfigCount = static_cast<int>(sizeof(kTiledConfigs) / sizeof(kTiledConfigs[0]));
// Query rows per warp: the M of mma.m16n8k16, one A fragment per 16-key step.
inline constexpr int kTiledRowsPerWarp = 16;

// The value dimension a configuration serves: its blocks' columns times the parts.
constexpr std::int64_t served_value_dim(const TiledConfig& c) { return c.value_dim * c.value_parts; }

// Whether an entry serves (D, Dv): both at most its compiled sizes (the kernel rounds them up,
// as FlashAttention does: loads past D and Dv read zeros, stores past Dv are skipped), every
// value part holding some of Dv's columns. Rows are 16-byte chunks (the planner checks).
constexpr bool tiled_serves(const TiledConfig& c, std::int64_t head_dim, std::int64_t value_dim) {
  return head_dim > 0 && head_dim <= c.head_dim && value_dim > (c.value_parts - 1) * c.value_dim &&
         value_dim <= served_value_dim(c);
}
// Multiply-adds per (row, key) pair an entry spends: S over its D in each value part, P·V over
// its Dv. The planner takes the entry serving a call with the least of this.
constexpr std::int64_t tiled_padded_work(const TiledConfig& c) {
  return c.head_dim * c.value_parts + served_value_dim(c);
}

// What an instance of the kernel is compiled for: an entry's fields but value_parts (a launch
// argument), so entries differing only there share one instance.
constexpr TiledConfig tiled_kernel(TiledConfig c) {
  c.value_parts = 1;
  return c;
}
// What names an instance (the kernel's template arguments, its generated file): D, Dv per
// block and the tile. One key names one kernel (asserted below).
struct TiledKey {
  int head_dim = 0, value_dim = 0, block_m = 0, block_n = 0;
  constexpr bool operator==(const TiledKey&) const = default;
};
constexpr TiledKey tiled_key(const TiledConfig& c) {
  return {static_cast<int>(c.head_dim), static_cast<int>(c.value_dim), kTiledRowsPerWarp * c.warps, c.block_n};
}
// The kernel of the entries with `key` (an instance's shape); D 0, which the kernel rejects,
// where no entry has it.
constexpr TiledConfig tiled_instance(TiledKey key) {
  for (const TiledConfig& c : kTiledConfigs) {
    if (tiled_key(c) == key) return tiled_kernel(c);
  }
  return {};
}
constexpr bool tiled_keys_name_one_kernel() {
  for (const TiledConfig& c : kTiledConfigs) {
    if (tiled_instance(tiled_key(c)) != tiled_kernel(c)) return false;
  }
  return true;
}
static_assert(tiled_keys_name_one_kernel(),
              "two kTiledConfigs entries share (D, Dv, block_m, block_n) but not their compiled fields");

// Shared-memory rows of `chunks` 16-byte chunks: whole groups of 8 chunks are XOR-swizzled
// (chunk ^ (row & 7)), other widths (D 32, 80, 96) padded to an odd number of chunks (the XOR would
// leave a partial group). Either way the 8 rows that one ldmatrix phase reads fall in 8
// different 16-byte bank groups, so the operand reads, the hot path, are free of conflicts;
// so are the copies into swizzled rows, while a copy phase that crosses a padded row meets a
// two-way conflict (D 32, 80, 96 only; checked by emulating every layout's addresses).
constexpr int tiled_row_stride(int chunks) { return chunks % 8 == 0 || chunks % 2 == 1 ? chunks : chunks + 1; }

// Bytes of shared memory of one block: the Q tile (later the output tile), then `stages`
// K and V tiles. The kernel lays its memory out from the same numbers.
constexpr std::int64_t tiled_shared_bytes(const TiledConfig& c) {
  const std::int64_t k_row = tiled_row_stride(static_cast<int>(c.head_dim / 8));
  const std::int64_t v_row = tiled_row_stride(static_cast<int>(c.value_dim / 8));
  const std::int64_t q_tile = std::int64_t{kTiledRowsPerWarp} * c.warps * k_row;
  return 16 * (q_tile + std::int64_t{c.stages} * c.block_n * (k_row + v_row));
}

// The entry serving (D, Dv) with the least padded work (the first of equals) whose shared
// memory fits `shared_per_block`, or -1.
constexpr int tiled_config_index(std::int64_t head_dim, std::int64_t value_dim,
                                 std::int64_t shared_per_block = std::int64_t{1} << 40) {
  int best = -1;
  for (int i = 0; i < kTiledConfigCount; ++i) {
    const TiledConfig& c = kTiledConfigs[i];
    if (!tiled_serves(c, head_dim, value_dim) || tiled_shared_bytes(c) > shared_per_block) continue;
    if (best < 0 || tiled_padded_work(c) < tiled_padded_work(kTiledConfigs[best])) best = i;
  }
  return best;
}

// The shared memory per block of a 9.0 device (H100, H200, H20): 227 KiB.
inline constexpr std::int64_t kSm90SharedPerBlock = std::int64_t{227} << 10;
// Whether a 9.0 device never takes entry `index` (tiled_config_index): an earlier entry serves
// the same sizes with no more padded work and fits it (D 512's 64-row entry, for an A100's
// 163 KiB). The build compiles such an entry for the architectures below 9.0 only.
constexpr bool tiled_below_sm90_only(int index) {
  const TiledConfig& c = kTiledConfigs[index];
  for (int j = 0; j < index; ++j) {
    const TiledConfig& o = kTiledConfigs[j];
    if (o.head_dim == c.head_dim && served_value_dim(o) == served_value_dim(c) && o.value_parts == c.value_parts &&
        tiled_padded_work(o) <= tiled_padded_work(c) && tiled_shared_bytes(o) <= kSm90SharedPerBlock) {
      return true;
    }
  }
  return false;
}

// Tiled route on Hopper (compute capability 9.0, built for sm_90a): K and V tiles of `block_n`
// keys arrive by TMA (cp.async.bulk.tensor, 128-byte swizzle) in a `stages`-deep ring completed
// on mbarriers; one producer warpgroup (one thread issues the copies) and `consumers` warpgroups
// of 64 rows (block_m = 64 × consumers), S = Q·Kᵀ and O += P·V on wgmma.mma_async (m64nNk16,
// float32 accumulators; Q and K from shared memory, P from registers, V transposed from shared
// memory). Rows are packed as on the mma.sync kernel. Served: float16 and bfloat16, D and Dv
// rounded up to an entry's D = Dv (hopper_config_index), no array mask, where the padded work
// pays (wgmma_pays); the rest keeps the mma.sync kernel. Shapes from the register
// budget (setmaxnreg: O (Dv / 2), S (block_n / 2) and P (block_n / 4) registers per consumer
// thread) and shared memory (Q, then `stages` × block_n × (D + Dv) × 2 bytes, at most 227 KiB
// per block). Cases: prefill_b2_16x16_d128_8k (176-key tiles), prefill_b2_32x32_d64_8k (192),
// prefill_b32_12x12_d64_512 (one consumer), prefill_b1_32x8_d128_16k_causal (ping-pong).
enum class HopperMasking { Any, Causal, Full };  // the calls an entry serves: all, causal, not causal
struct HopperConfig {
  std::int64_t head_dim = 0, value_dim = 0;
  int block_n = 128;     // keys per tile: the N of S's wgmma, the K of O's
  int stages = 2;        // K/V tiles in flight in the shared-memory ring
  bool pingpong = true;  // two consumer warpgroups take turns to issue their products
  HopperMasking masking = HopperMasking::Any;
  std::int64_t min_keys = 0;  // served from this Lk up
  int consumers = 2;          // warpgroups of 64 rows; 1: two blocks per SM
  int blocks_per_sm = 0;      // resident blocks per SM; 0: 2 with one consumer, else 1
  // Two consumers on the same 64 rows, each with half of D and half of Dv: each issues S over
  // its half of D, the two partial S meet in shared memory (summed in the same order by both),
  // and each multiplies the weights into its half of V. No S is computed twice.
  bool depth_split = false;
  constexpr bool operator==(const HopperConfig&) const = default;
};
// Of the entries of least padded work holding (D, Dv), the first whose masking and min_keys
// match serves a call. Longer tiles amortise each tile's softmax bookkeeping; under causal
// masking and for short key ranges shorter ones waste less on the diagonal and the last tile.
inline constexpr HopperConfig kHopperConfigs[] = {
    // 16 + 2 × 48 KiB; S 96, P 48, O 32 registers; three stages measured slower.
    // Case: prefill_b2_32x32_d64_8k.
    {64, 64, 192, 2, true, HopperMasking::Full, 2048, 2},
    // Key ranges from 513 to 2047: one consumer warpgroup, two blocks per SM, so that one
    // block's start (Q, the first tiles) and end (the output) overlap the other's products.
    // 8 + 3 × 32 KiB per block; registers 32 / 224 of the block's 256 × 128.
    {64, 64, 128, 3, false, HopperMasking::Full, 513, 1},
    // BERT's 512 keys and fewer: one consumer, 64-key tiles, three blocks per SM, so that more
    // blocks' starts and ends overlap the others' products (slower at 8k keys, hence the bound).
    // 8 + 2 × 16 KiB per block; registers 24 / 136 of the block's 256 × 80; S 32, O 32, P 16.
    // Cases: prefill_b32_12x12_d64_512, prefill_b8_12x12_d64_512.
    {64, 64, 64, 2, false, HopperMasking::Full, 0, 1, 3},
    // 16 + 3 × 32 KiB; S 64, O 32 registers: room for a third tile in flight.
    {64, 64, 128, 3, true, HopperMasking::Any, 0, 2},
    // 32 + 2 × 88 KiB; S 88, P 44, O 64 registers.
    {128, 128, 176, 2, true, HopperMasking::Full, 0, 2},
    // 32 + 2 × 64 KiB; S 64, O 64, P 32 registers.
    {128, 128, 128, 2, true, HopperMasking::Any, 0, 2},
    // D 136-192: 48 + 2 × 84 KiB; S 56, P 28, O 96 registers. FlashAttention-3's tile at D 192
    // (128 × 112); not yet measured here.
    {192, 192, 112, 2, true, HopperMasking::Any, 0, 2},
    // 64 + 2 × 64 KiB; O 128 registers leave S 32 (64 keys).
    {256, 256, 64, 2, true, HopperMasking::Any, 0, 2},
    // D 512, the depth split: 64 rows, Q 64 KiB + 2 × (K 32 + V 32) KiB + 32 KiB for the
    // partial S (two buffers per consumer); O 128 (256 columns), S 16, P 8 registers per thread.
    // Case: prefill_b1_8x8_d512_4k_causal.
    {512, 512, 32, 2, false, HopperMasking::Any, 0, 2, 0, true},
};
inline constexpr int kHopperConfigCount = static_cast<int>(sizeof(kHopperConfigs) / sizeof(kHopperConfigs[0]));
// Entries the planner picks from (entries after these would be the benchmark's A/B candidates).
inline constexpr int kHopperPlannedCount = kHopperConfigCount;
// Rows per consumer warpgroup (the M of wgmma) and threads per warpgroup.
inline constexpr int kHopperRowsPerConsumer = 64;
inline constexpr int kHopperWarpgroupThreads = 128;
constexpr int hopper_block_m(const HopperConfig& c) {
  return kHopperRowsPerConsumer * (c.depth_split ? 1 : c.consumers);
}
constexpr int hopper_threads(const HopperConfig& c) { return kHopperWarpgroupThreads * (1 + c.consumers); }
// Registers per thread after setmaxnreg (multiples of 8). Two consumers, one block per SM:
// 128 × (40 + 2 × 232) = 64512 of the SM's 65536; the depth split 128 × (24 + 2 × 240), the
// most setmaxnreg gives, for Q's fragments beside O (hopper_kernel.cuh, kQRegisterSteps). One
// consumer, two blocks: each block's 256 × 128 registers as 128 × (32 + 224).
constexpr int hopper_blocks_per_sm(const HopperConfig& c) {
  return c.blocks_per_sm > 0 ? c.blocks_per_sm : c.consumers == 1 ? 2 : 1;
}
constexpr int hopper_producer_registers(const HopperConfig& c) {
  return hopper_blocks_per_sm(c) > 2 || c.depth_split ? 24 : c.consumers == 1 ? 32 : 40;
}
// Above two blocks per SM: what the block's share of 65536 leaves the consumers beside the
// producer (three one-consumer blocks: 256 × 80 per block, 24 + 136).
constexpr int hopper_consumer_registers(const HopperConfig& c) {
  if (c.depth_split) return 240;
  if (hopper_blocks_per_sm(c) <= 2) return c.consumers == 1 ? 224 : 232;
  const int launch = 65536 / (hopper_blocks_per_sm(c) * hopper_threads(c)) / 8 * 8;
  return (launch * (1 + c.consumers) - hopper_producer_registers(c)) / c.consumers / 8 * 8;
}

// Whether an entry serves (D, Dv): both at most its compiled sizes, rounded up inside the
// kernel (TMA fills a box's columns past the tensor's D or Dv with zeros and stores none past
// Dv; the consumers' own copies and stores skip those columns).
constexpr bool hopper_serves(const HopperConfig& c, std::int64_t head_dim, std::int64_t value_dim) {
  return head_dim > 0 && head_dim <= c.head_dim && value_dim > 0 && value_dim <= c.value_dim;
}
constexpr std::int64_t hopper_padded_work(const HopperConfig& c) { return c.head_dim + c.value_dim; }

// The Hopper configuration for (D, Dv) with or without causal masking over Lk keys: of the
// entries that serve it and match, the first of least padded work; or -1.
constexpr int hopper_config_index(std::int64_t head_dim, std::int64_t value_dim, bool causal, std::int64_t kv_len) {
  int best = -1;
  for (int i = 0; i < kHopperPlannedCount; ++i) {
    const HopperConfig& c = kHopperConfigs[i];
    const bool fits = c.masking == HopperMasking::Any || (c.masking == HopperMasking::Causal) == causal;
    if (!hopper_serves(c, head_dim, value_dim) || !fits || kv_len < c.min_keys) continue;
    if (best < 0 || hopper_padded_work(c) < hopper_padded_work(kHopperConfigs[best])) best = i;
  }
  return best;
}

// The wgmma kernel's speed per FLOP of its compiled sizes over the mma.sync kernel's: on the
// H200 1.65-2.5x FlashAttention-2's mma.sync kernel (PyTorch's flash lines of the prefill_*
// cases at D 64-256; 1.4x at BERT's 512 keys) and 2.6-3.2x heed's own at D 512. A call takes
// the wgmma kernel where its padded work is under this many times the mma.sync entry's: from
// D 40 up (72 on 128 against 80, 136 on 192 against 160); D 8-32 stay on the mma.sync 32.
inline constexpr std::int64_t kWgmmaSpeedup = 2;
constexpr bool wgmma_pays(const HopperConfig& h, const TiledConfig& t) {
  return hopper_padded_work(h) < kWgmmaSpeedup * tiled_padded_work(t);
}

// What an instance of the Hopper kernel is compiled for: an entry's fields but those only the
// planner reads (masking, min_keys) or the launch passes (pingpong).
constexpr HopperConfig hopper_kernel(HopperConfig c) {
  c.pingpong = false;
  c.masking = HopperMasking::Any;
  c.min_keys = 0;
  return c;
}
// What names an instance (the kernel's template arguments, its generated file): D, Dv, the key
// tile and the consumer warpgroups. One key names one kernel (asserted below).
struct HopperKey {
  int head_dim = 0, value_dim = 0, block_n = 0, consumers = 0;
  constexpr bool operator==(const HopperKey&) const = default;
};
constexpr HopperKey hopper_key(const HopperConfig& c) {
  return {static_cast<int>(c.head_dim), static_cast<int>(c.value_dim), c.block_n, c.consumers};
}
// The kernel of the entries with `key` (an instance's shape); D 0, which the kernel rejects,
// where no entry has it.
constexpr HopperConfig hopper_instance(HopperKey key) {
  for (const HopperConfig& c : kHopperConfigs) {
    if (hopper_key(c) == key) return hopper_kernel(c);
  }
  return {};
}
constexpr bool hopper_keys_name_one_kernel() {
  for (const HopperConfig& c : kHopperConfigs) {
    if (hopper_instance(hopper_key(c)) != hopper_kernel(c)) return false;
    if (c.depth_split && c.pingpong) return false;  // the split's consumers work in step
  }
  return true;
}
static_assert(hopper_keys_name_one_kernel(),
              "two kHopperConfigs entries share (D, Dv, block_n, consumers) but not their compiled fields, or a "
              "depth split asks for ping-pong");

// The Hopper kernel's shared memory: Q (block_m rows), the ring, 4 × stages mbarriers (K and V
// full, K and V free), and 1 KiB to align the base to the 128-byte swizzle's 1024-byte atoms.
constexpr std::int64_t hopper_ring_offset(const HopperConfig& c) { return std::int64_t{hopper_block_m(c)} * c.head_dim * 2; }
constexpr std::int64_t hopper_stage_bytes(const HopperConfig& c) {
  return std::int64_t{c.block_n} * (c.head_dim + c.value_dim) * 2;
}
// The depth split's partial scores: per buffer (two, alternating by tile) and consumer, each
// thread's block_n / 2 floats of S, stored as float4 [fragment][thread].
constexpr std::int64_t hopper_exchange_offset(const HopperConfig& c) {
  return hopper_ring_offset(c) + c.stages * hopper_stage_bytes(c);
}
constexpr std::int64_t hopper_exchange_bytes(const HopperConfig& c) {
  return c.depth_split ? std::int64_t{2} * c.consumers * kHopperWarpgroupThreads * (c.block_n / 2) * 4 : 0;
}
constexpr std::int64_t hopper_barrier_offset(const HopperConfig& c) {
  return hopper_exchange_offset(c) + hopper_exchange_bytes(c);
}
// mbarriers: full / empty K and V per stage, Q per consumer, and the paged form's tail tile of V.
constexpr std::int64_t hopper_barrier_count(const HopperConfig& c) { return 4 * c.stages + c.consumers + 1; }
constexpr std::int64_t hopper_shared_bytes(const HopperConfig& c) {
  return hopper_barrier_offset(c) + 8 * hopper_barrier_count(c) + 1024;
}

// Paged keys on the wgmma kernel: a key tile is copied as TMA boxes of keys of one page each.
// A box holds the most keys dividing both the page and the tile, so that no box crosses a page:
// page 16 takes 16-key boxes, page 64 64-key boxes, page 256 a 128-key tile whole. Pages of no
// multiple of 16 keys (whole 1024-byte swizzle atoms per box) are copied row by row by the
// producer warpgroup's cp.async instead, each row from its own page, where it has more than 24
// registers a thread (ptxas spills the copies in 24); those entries keep such pages on mma.sync.
// Row copies measured slower than 16-key boxes (chunked prefill 2k of 16k keys, D 128, page 16:
// 0.51 of dense against 0.82), and faster than mma.sync at page 1 (0.48-0.50 against 0.23-0.25).
inline constexpr int kHopperPageBoxKeys = 16;
enum class HopperPaging { Boxes, Rows, None };
constexpr int hopper_page_box_keys(std::int64_t page_size, int block_n) {
  return static_cast<int>(std::gcd(page_size, std::int64_t{block_n}));
}
constexpr HopperPaging hopper_paging(std::int64_t page_size, const HopperConfig& c) {
  if (hopper_page_box_keys(page_size, c.block_n) % kHopperPageBoxKeys == 0) return HopperPaging::Boxes;
  return hopper_producer_registers(c) > 24 ? HopperPaging::Rows : HopperPaging::None;
}

// The tiled kernel indexes with 32-bit integers: Lq and Lk below this, packed rows (group × Lq)
// below twice this, so that diagonals and window bounds cannot overflow.
inline constexpr std::int64_t kTiledMaxLength = std::int64_t{1} << 29;

}  // namespace heed::plan::cuda
