#pragma once
// The tiled (prefill) kernel on Hopper (sm_90a): TMA, mbarriers, wgmma, warp specialisation.
// - A block holds 64 × consumers packed rows of one (batch, key head), as the mma.sync kernel
//   does (row r is position r / group of query head r % group).
// - Warpgroup 0 produces: one thread copies each K and V tile (block_n keys) by TMA into a
//   ring of `stages` tiles, 128-byte swizzled, and the copy engine completes the tile's
//   "full" mbarriers (K and V apart); consumers release K and V through "empty" mbarriers.
// - Warpgroups 1 (and 2) consume 64 rows each: S = Q·Kᵀ with wgmma (Q and K from shared
//   memory), the online softmax of the mma.sync kernel on the accumulators (same layout per
//   warp), then O += P·V with P from registers and V from shared memory (transposed). S of
//   tile j and P·V of tile j-1 run during tile j's softmax; two consumers take turns to issue.
// - Depth split (D 512): both consumers hold the same 64 rows, each half of D and of Dv; their
//   partial S meet in shared memory, and each multiplies the weights into its half of V.
// Shapes: plan/cuda_tables.hpp (kHopperConfigs), read by the planner too.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/hopper.hpp"
#include "cuda/hopper_wgmma.cuh"
#include "cuda/tiled_kernel.cuh"
#include "cuda/tma.cuh"

namespace heed::cuda::hopper {

using tiled::copy_async;
using tiled::shared_address;

template <int kIndex>
struct Traits {
  static_assert(kIndex >= 0 && kIndex < plan::cuda::kHopperConfigCount, "an entry of kHopperConfigs");
  static constexpr plan::cuda::HopperConfig kConfig = plan::cuda::kHopperConfigs[kIndex];
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
  static_assert(!kSplit || (kConsumers == 2 && kDPer % kPanelColumns == 0 && kDPer == kDvPer &&
                            !kConfig.pingpong),
                "the depth split: two consumers, whole panels each, no ping-pong");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256 && kDvPer <= 256, "wgmma shapes and TMA boxes");
};

// mbarriers and TMA loads: cuda/tma.cuh.
using tma::barrier_arrive;
using tma::barrier_expect_bytes;
using tma::barrier_init;
using tma::barrier_wait;

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

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from touching accumulators across an asynchronous wgmma.
template <int kTiles>
__device__ __forceinline__ void hold(float (&d)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
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
    asm volatile("bar.sync 3, 256;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 4, 256;\n" ::: "memory");
  }
}
__device__ __forceinline__ void pass_turn(int consumer) {
  if (consumer == 0) {
    asm volatile("bar.arrive 4, 256;\n" ::: "memory");
  } else {
    asm volatile("bar.arrive 3, 256;\n" ::: "memory");
  }
}

// Named barrier among one consumer warpgroup's 128 threads (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int consumer) {
  if (consumer == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
}

template <typename T, int kConfig>
__global__ void __launch_bounds__(Traits<kConfig>::kThreads, Traits<kConfig>::kMinBlocks)
    hopper_kernel(const __grid_constant__ HopperArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = Traits<kConfig>;
  constexpr int D = Tr::D, Dv = Tr::Dv;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kStages = Tr::kStages;
  constexpr int kNTiles = kBlockN / 8;  // 8-key score fragments per tile
  constexpr int kOTiles = Tr::kDvPer / 8;  // 8-column output fragments
  extern __shared__ unsigned char shared_raw[];
  // The swizzle's atoms are 1024 bytes: align the base (the planner adds 1 KiB for this).
  const unsigned raw = shared_address(shared_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* const shared = shared_raw + (base - raw);
  const unsigned q_tile = base, ring = base + Tr::kRingOffset, barriers = base + Tr::kBarrierOffset;
  const auto full_k = [&](int stage) { return barriers + 8u * stage; };
  const auto full_v = [&](int stage) { return barriers + 8u * (kStages + stage); };
  const auto empty_k = [&](int stage) { return barriers + 8u * (2 * kStages + stage); };
  const auto empty_v = [&](int stage) { return barriers + 8u * (3 * kStages + stage); };
  const auto full_q = [&](int consumer) { return barriers + 8u * (4 * kStages + consumer); };

  const Call& g = a;
  const tiled::BlockPlace place = tiled::block_place(a.heads_inner);
  const std::int64_t b = place.z, kv_head = place.kv_head;
  const int row0 = static_cast<int>((a.row_blocks - 1 - place.row_block) * kBlockM);  // longest first
  const int rows = static_cast<int>(a.rows), group = static_cast<int>(g.group);
  const int kv_len = static_cast<int>(g.kv_len), q_len = static_cast<int>(g.q_len), offset = kv_len - q_len;
  const int window = g.window > 0 ? static_cast<int>(min(g.window, g.kv_len + g.q_len)) : 0;
  const int row_last = min(row0 + kBlockM, rows) - 1;
  const tiled::BlockReach reach = tiled::block_reach(row0, row_last, group, offset, window, g.causal, kv_len);
  const int tile_first = reach.begin / kBlockN;
  const int n_tiles = reach.begin < reach.end ? (reach.end + kBlockN - 1) / kBlockN - tile_first : 0;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(full_k(stage), 1);
      barrier_init(full_v(stage), 1);
      barrier_init(empty_k(stage), 4 * Tr::kConsumers);  // one arrival per consumer warp
      barrier_init(empty_v(stage), 4 * Tr::kConsumers);
    }
    for (int consumer = 0; consumer < Tr::kConsumers; ++consumer) barrier_init(full_q(consumer), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Through a shuffle from lane 0 the compiler knows the warpgroup is the same in every lane
  // (uniform registers for what derives from it: the consumer, its rows, its descriptors).
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x / 128), 0);
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::kProducerRegisters));
    if (threadIdx.x == 0) {
      const int head = static_cast<int>(kv_head), batch = static_cast<int>(b);
      if (a.q_rows_tma) {
        // Each consumer's Q (its 64 rows; its half of D under the depth split) ahead of K and V.
#pragma unroll
        for (int consumer = 0; consumer < Tr::kConsumers; ++consumer) {
          const int rows0 = Tr::first_row(consumer), panel0 = Tr::first_column(consumer) / 64;
          barrier_expect_bytes(full_q(consumer), 64 * Tr::kDPer * 2);
#pragma unroll
          for (int p = panel0; p < panel0 + Tr::kDPer / 64; ++p) {
            tma::load_rows(q_tile + p * Tr::kQPanel + rows0 * 128, &a.q_map, full_q(consumer), 64 * p,
                           (row0 + rows0) / group, head, batch);
          }
        }
      }
      for (int step = 0; step < n_tiles; ++step) {
        const int stage = step % kStages;
        const unsigned reuse = ((step / kStages) + 1) & 1;  // the phase of the stage's last release
        const int n0 = (tile_first + step) * kBlockN;
        const unsigned k_tile = ring + stage * Tr::kStageBytes, v_tile = k_tile + Tr::kKBytes;
        if (step >= kStages) barrier_wait(empty_k(stage), reuse);
        barrier_expect_bytes(full_k(stage), Tr::kKBytes);
#pragma unroll
        for (int p = 0; p < D / 64; ++p) tma::load_box(k_tile + p * Tr::kRingPanel, &a.k_map, full_k(stage), 64 * p, n0, head, batch);
        if (step >= kStages) barrier_wait(empty_v(stage), reuse);
        barrier_expect_bytes(full_v(stage), Tr::kVBytes);
#pragma unroll
        for (int p = 0; p < Dv / 64; ++p) {
          tma::load_box(v_tile + p * Tr::kRingPanel, &a.v_map, full_v(stage), 64 * p, n0, head, batch);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::kConsumerRegisters));
    const int consumer = warpgroup - 1;
    const int thread = threadIdx.x - 128 * warpgroup;
    const int lane = thread & 31, warp = thread >> 5;  // warp within the warpgroup
    const int quad_row = lane >> 2, quad_col = lane & 3;
    const int wg_row0 = Tr::first_row(consumer);
    const int d0 = Tr::first_column(consumer), dv0 = Tr::first_value_column(consumer);

    // Q: this warpgroup's 64 rows by TMA (the producer's first load), else 16-byte copies into the
    // swizzled layout (zeros past the last row).
    if (a.q_rows_tma) {
      barrier_wait(full_q(consumer), 0);
    } else {
      const T* q_batch = static_cast<const T*>(a.q) + b * a.q_strides.s[0];
      constexpr int kChunks = Tr::kDPer / 8;
#pragma unroll
      for (int i = 0; i < 64 * kChunks / 128; ++i) {
        const int index = thread + 128 * i;
        const int r = wg_row0 + index / kChunks, c = d0 / 8 + index % kChunks;
        const int row = row0 + r;
        const bool valid = row < rows;
        const T* source = q_batch;
        if (valid) {
          source += (kv_head * group + row % group) * a.q_strides.s[1] + std::int64_t(row / group) * a.q_strides.s[2] +
                    8 * c;
        }
        copy_async(q_tile + swizzled(r, c, Tr::kQPanel), source, valid);
      }
      tiled::commit_async();
      tiled::wait_async<0>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // wgmma reads what cp.async wrote
      warpgroup_sync(consumer);
    }

    int key_lo[2], key_hi[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tiled::row_reach(row0 + wg_row0 + warp * 16 + quad_row + 8 * half, rows, group, offset, window, g.causal,
                       kv_len, key_lo[half], key_hi[half]);
    }

    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float o[kOTiles][4];
#pragma unroll
    for (int j = 0; j < kOTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    // Descriptors of this consumer's Q rows (and half of D), of K in stage 0 (its half of D) and
    // of V in stage 0 (its half of Dv).
    const std::uint64_t q_base = descriptor(q_tile + wg_row0 * 128 + (d0 / 64) * Tr::kQPanel, 16, 1024);
    // The depth split keeps most of its Q in registers (A fragments, 4 registers per 16-column
    // step), so S reads little more than K from shared memory: with 32-key tiles Q would
    // otherwise be read again every tile, 64 KiB of the block's roughly 160 KiB per tile.
    constexpr int kQRegisterSteps = Tr::kQRegisterSteps;
    std::uint32_t q_fragments[Tr::kSplit ? kQRegisterSteps : 1][4];
    if constexpr (Tr::kSplit) {
      // ldmatrix x4: lanes 0-15 address rows 0-15 of the warp's 16 at the step's first 8 columns,
      // lanes 16-31 the same rows at the next 8 (the mma.sync m16n8k16 A fragment).
      const int r = wg_row0 + warp * 16 + (lane & 15);
#pragma unroll
      for (int kk = 0; kk < kQRegisterSteps; ++kk) {
        tiled::load_matrix(q_tile + swizzled(r, d0 / 8 + 2 * kk + (lane >> 4), Tr::kQPanel), q_fragments[kk]);
      }
    }
    const std::uint64_t k_base = descriptor(ring + (d0 / 64) * Tr::kRingPanel, 16, 1024);
    const std::uint64_t v_base = descriptor(ring + Tr::kKBytes + (dv0 / 64) * Tr::kRingPanel, Tr::kRingPanel, 1024);

    // S = Q·Kᵀ of tile `step` into s, issued (D / 16 steps of 16 columns, 4 per 128-byte panel).
    const auto issue_scores = [&](float (&s)[kNTiles][4], int step) {
      const int stage = step % kStages;
      barrier_wait(full_k(stage), (step / kStages) & 1);
      const std::uint64_t k_desc = advance(k_base, stage * Tr::kStageBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Tr::kDPer / 16; ++kk) {
        const unsigned column = (kk % 4) * 32u, panel = kk / 4;
        if (Tr::kSplit && kk < kQRegisterSteps) {
          Wgmma<T, kBlockN>::rk(s, q_fragments[kk], advance(k_desc, panel * Tr::kRingPanel + column), kk > 0);
        } else {
          Wgmma<T, kBlockN>::ss(s, advance(q_base, panel * Tr::kQPanel + column),
                                advance(k_desc, panel * Tr::kRingPanel + column), kk > 0);
        }
      }
      wgmma_commit();
    };
    // O += P·V of tile `step`, issued: the weights of keys 16kk..16kk+15 are the A fragment of
    // step kk; V's 16 keys of step kk are 2048 bytes into each panel.
    const auto issue_values = [&](const std::uint32_t (&p)[kBlockN / 16][4], int step) {
      const int stage = step % kStages;
      barrier_wait(full_v(stage), (step / kStages) & 1);
      const std::uint64_t v_desc = advance(v_base, stage * Tr::kStageBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) Wgmma<T, Tr::kDvPer>::rs(o, p[kk], advance(v_desc, kk * 2048u), 1);
      wgmma_commit();
    };
    // A stage's K (or V) is free once this warp's wgmma that read it has completed.
    const auto release = [&](unsigned barrier) {
      __syncwarp();
      if (lane == 0) barrier_arrive(barrier);
    };
    // The depth split: this consumer's partial S of tile `step` to shared memory, then the other's
    // added (a + b in both consumers, so both hold the same S). Two buffers alternate by tile: a
    // consumer writes tile step + 1's only after both passed tile step's barrier, and the other
    // read tile step - 1's before it.
    const auto exchange = [&](float (&s)[kNTiles][4], int step) {
      if constexpr (Tr::kSplit) {
        float4* const buffers = reinterpret_cast<float4*>(shared + Tr::kExchangeOffset);
        float4* const mine = buffers + ((step & 1) * 2 + consumer) * kNTiles * 128;
        const float4* const theirs = buffers + ((step & 1) * 2 + 1 - consumer) * kNTiles * 128;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mine[j * 128 + thread] = make_float4(s[j][0], s[j][1], s[j][2], s[j][3]);
        asm volatile("bar.sync 5, 256;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const float4 other = theirs[j * 128 + thread];
          s[j][0] += other.x;
          s[j][1] += other.y;
          s[j][2] += other.z;
          s[j][3] += other.w;
        }
      }
    };
    // Scores of tile `step` to weights 2^(s - frame) in place (log2 domain; -inf where the key is
    // out of the row's reach), the row maxima updated; returns the old state's rescale factors.
    const auto softmax = [&](float (&s)[kNTiles][4], int step, float (&rescale)[2], float (&tile_sum)[2]) {
      const int n0 = (tile_first + step) * kBlockN;
      const bool edge = n0 + kBlockN > kv_len || (g.causal && n0 + kBlockN - 1 > reach.diag_first) ||
                        (window > 0 && n0 <= reach.diag_last - window);
      // Edge tiles and capped scores are transformed here (hidden keys -inf); inner tiles take
      // the scale in the exponent's FFMA, their maximum scale × the raw maximum (minimum under a
      // negative scale).
      float multiplier = 1.0f;
      float tile_max[2] = {-INFINITY, -INFINITY};
      if (edge || !a.transform.linear()) {
        tiled::transform_scores<kNTiles>(s, a.transform);
        if (edge) {
          int lo[2], hi[2];
          tiled::visible_columns<kBlockN>(n0, key_lo, key_hi, lo, hi);
          tiled::hide_invisible<kNTiles>(s, lo, hi, quad_col);
        }
#pragma unroll
        for (int j = 0; j < kNTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[j][e]);
      } else {
        multiplier = a.transform.dot_scale;
        if (multiplier >= 0.0f) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[j][e]);
        } else {
          float tile_min[2] = {INFINITY, INFINITY};
#pragma unroll
          for (int j = 0; j < kNTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) tile_min[e >> 1] = fminf(tile_min[e >> 1], s[j][e]);
#pragma unroll
          for (int half = 0; half < 2; ++half) tile_max[half] = tile_min[half];
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) tile_max[half] *= multiplier;
      }
      // A row that has seen no key keeps max -inf and takes frame 0: weights 0, not NaN.
      float frame[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float new_max = fmaxf(row_max[half], tiled::quad_max(tile_max[half]));
        frame[half] = new_max == -INFINITY ? 0.0f : new_max;
        rescale[half] = tiled::exp2_approx(row_max[half] - frame[half]);
        row_max[half] = new_max;
        tile_sum[half] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] = tiled::exp2_approx(fmaf(s[j][e], multiplier, -frame[e >> 1]));
          tile_sum[e >> 1] += s[j][e];
        }
    };
    const auto to_weights = [&](const float (&s)[kNTiles][4], std::uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        p[kk][0] = tiled::pack<T>(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = tiled::pack<T>(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = tiled::pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = tiled::pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    };

    // Software pipeline within the warpgroup: tile j's S = Q·Kᵀ and tile j-1's O += P·V are in
    // flight while the softmax of tile j runs; O is rescaled once P·V of tile j-1 is complete.
    // With ping-pong the two warpgroups take turns to issue (n_tiles + 1 turns each, consumer 0
    // first), so that one's softmax runs while the other's products occupy the tensor cores.
    if (n_tiles > 0) {
      float s[kNTiles][4];
      std::uint32_t p[kBlockN / 16][4];
      float rescale[2], tile_sum[2];
      const bool pingpong = Tr::kConsumers == 2 && !Tr::kSplit && a.pingpong;
      if (pingpong && consumer == 1) pass_turn(consumer);
      if (pingpong) wait_turn(consumer);
      issue_scores(s, 0);
      if (pingpong) pass_turn(consumer);
      wgmma_wait<0>();
      hold(s);
      release(empty_k(0));
      exchange(s, 0);
      softmax(s, 0, rescale, tile_sum);
#pragma unroll
      for (int half = 0; half < 2; ++half) row_sum[half] = tile_sum[half];
      to_weights(s, p);
      for (int step = 1; step < n_tiles; ++step) {
        if (pingpong) wait_turn(consumer);
        issue_scores(s, step);
        issue_values(p, step - 1);
        if (pingpong) pass_turn(consumer);
        wgmma_wait<1>();  // S of tile `step`
        hold(s);
        release(empty_k(step % kStages));
        exchange(s, step);
        softmax(s, step, rescale, tile_sum);
        wgmma_wait<0>();  // P·V of tile step - 1
        hold(o);
        release(empty_v((step - 1) % kStages));
#pragma unroll
        for (int half = 0; half < 2; ++half) row_sum[half] = row_sum[half] * rescale[half] + tile_sum[half];
#pragma unroll
        for (int j = 0; j < kOTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[j][e] *= rescale[e >> 1];
        to_weights(s, p);
      }
      if (pingpong) wait_turn(consumer);
      issue_values(p, n_tiles - 1);
      if (pingpong && consumer == 0) pass_turn(consumer);  // consumer 1's last turn is its last wait
      wgmma_wait<0>();
      hold(o);
    }
    // out = O / (sum + 2^sink), in the frame of the row's maximum; rows that saw no key are zeros.
    float factor[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float total = tiled::quad_sum(row_sum[half]);
      const int r = row0 + wg_row0 + warp * 16 + quad_row + 8 * half;
      const bool sinks = g.sinks.data != nullptr && r < rows;
      const float sink = sinks ? sink_logit(g.sinks, kv_head * group + r % group) * kLog2e : 0.0f;
      factor[half] = score::finalize_weight(row_max[half], total, sinks, sink, Exp2Approx{});
    }

    // Through this warp's own 16 rows of the Q tile (every wgmma that read them is complete),
    // to 16-byte stores of whole output rows.
#pragma unroll
    for (int j = 0; j < kOTiles; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wg_row0 + warp * 16 + quad_row + 8 * half;
        *reinterpret_cast<std::uint32_t*>(shared + swizzled(r, dv0 / 8 + j, Tr::kQPanel) + 4 * quad_col) =
            tiled::pack<T>(o[j][2 * half] * factor[half], o[j][2 * half + 1] * factor[half]);
      }
    if (a.out_rows_tma) {
      // The warpgroup's rows (its half of Dv under the depth split) by TMA stores, issued by one
      // thread once every thread's writes are visible to the copy engine.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      warpgroup_sync(consumer);
      if (thread == 0) {
#pragma unroll
        for (int p = dv0 / 64; p < (dv0 + Tr::kDvPer) / 64; ++p) {
          tma::store_rows(&a.out_map, q_tile + p * Tr::kQPanel + wg_row0 * 128, 64 * p, (row0 + wg_row0) / group,
                          static_cast<int>(kv_head), static_cast<int>(b));
        }
        tma::store_commit();
        tma::store_wait();
      }
      return;
    }
    __syncwarp();
    T* const out_batch = static_cast<T*>(a.out) + b * a.out_strides.s[0];
    constexpr int kChunksV = Tr::kDvPer / 8;
#pragma unroll
    for (int i = 0; i < Tr::kDvPer / 16; ++i) {
      const int index = lane + 32 * i;
      const int r = wg_row0 + warp * 16 + index / kChunksV, c = dv0 / 8 + index % kChunksV;
      const int row = row0 + r;
      if (row >= rows) continue;
      T* const destination = out_batch + (kv_head * group + row % group) * a.out_strides.s[1] +
                             std::int64_t(row / group) * a.out_strides.s[2];
      const uint4 chunk = *reinterpret_cast<const uint4*>(shared + swizzled(r, c, Tr::kQPanel));
      if (a.wide_out) {
        *reinterpret_cast<uint4*>(destination + 8 * c) = chunk;
      } else {
        const T* elements = reinterpret_cast<const T*>(&chunk);
#pragma unroll
        for (int x = 0; x < 8; ++x) destination[(8 * c + x) * a.out_strides.s[3]] = elements[x];
      }
    }
  }
#else
  __trap();  // built for another architecture: the planner never launches it there
#endif
}

// Sets the kernel's shared-memory limit on this device (once), then launches.
template <typename T, int kConfig>
void launch(const HopperArgs& args, dim3 grid, cudaStream_t stream) {
  using Tr = Traits<kConfig>;
  allow_shared_bytes<hopper_kernel<T, kConfig>, Carveout::Driver>(Tr::kSharedBytes);
  hopper_kernel<T, kConfig><<<grid, Tr::kThreads, Tr::kSharedBytes, stream>>>(args);
}

}  // namespace heed::cuda::hopper
