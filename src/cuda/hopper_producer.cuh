#pragma once
// The Hopper tiled kernel's producer warpgroup (hopper_kernel.cuh): Q by TMA, then K and V
// tiles into the ring, as TMA boxes (dense, ragged, paged boxes) or as cp.async rows (paged rows).

#include <cuda.h>

#include <cstdint>

#include "cuda/hopper_shared.cuh"
#include "cuda/ptx.cuh"
#include "cuda/vector_keys.hpp"

namespace heed::cuda::hopper {

// The map coordinates of the box of keys from `key` of the block's sequence (vector_keys.hpp's,
// as the TMA vector kernel's: dense or ragged rows, or a page from the block table, clamped to
// the cache). A paged box past the sequence's keys is addressed at row page_size, past the map's
// end, so that TMA fills it with zeros and still counts its bytes: its page's rows and its
// block-table entries may hold anything.
template <bool kPaged>
__device__ __forceinline__ vector_tma::TileCoordinates box_coordinates(const HopperArgs& a, const Block& block,
                                                                       int key) {
  if constexpr (kPaged) {
    if (key >= block.kv_len) return {static_cast<int>(a.page_size), 0};
    std::int64_t page = 0, row = 0;
    paged_row(block.seq.pages, a.seqs.table_strides[1], a.seqs.num_pages, a.page_size, key, page, row);
    return {static_cast<int>(row), static_cast<int>(page)};
  } else {
    return vector_tma::tile_coordinates(a, block.seq, key);
  }
}

// One K or V tile into `tile` as key_boxes boxes of key_box keys (each kPanels 64-column panels,
// box i key_box · i rows into each), completing on `barrier`. Box i's coordinates are lane i's
// `own`, and lane i issues its copies: a paged tile's boxes go out together, not one lane's loop.
template <typename Tr, int kPanels, bool kPaged>
__device__ __forceinline__ void load_tile(const HopperArgs& a, const CUtensorMap* map, unsigned tile, unsigned barrier,
                                          const vector_tma::TileCoordinates& own, int head, int lane) {
  if (lane < (kPaged ? a.key_boxes : 1)) {
    const unsigned destination = tile + static_cast<unsigned>(lane * a.key_box) * 128u;
#pragma unroll
    for (int p = 0; p < kPanels; ++p) {
      ptx::tma_load_box(destination + p * Tr::kRingPanel, map, barrier, 64 * p, own.row, head, own.batch);
    }
  }
}

// A paged sequence's last tile of V, whose last box ends in the page's tail: rows [first, first +
// rows) hold whatever the page holds past the sequence (NaN, say: 0 · NaN = NaN in P·V, and V is
// wgmma's shared-memory operand). The producer warp waits for the tile on "tail", zeroes those
// rows (whole 128-byte rows of each panel, so the swizzle does not matter), makes its writes
// visible to the async proxy, and only then completes the stage's "full" for the consumers.
template <typename Tr>
__device__ __forceinline__ void clear_tail_values(unsigned v_tile, unsigned tail, unsigned full, int first, int rows,
                                                  int lane) {
  ptx::mbarrier_wait(tail, 0);
  constexpr int kRowChunks = Tr::Dv / 64 * 8;  // 16-byte chunks of a row over its panels
  for (int i = lane; i < rows * kRowChunks; i += 32) {
    const int row = first + i / kRowChunks, chunk = i % kRowChunks;
    ptx::st_shared_zero_16(v_tile + (chunk / 8) * Tr::kRingPanel + row * 128 + (chunk % 8) * 16);
  }
  ptx::fence_proxy_async_shared();
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(full);
}

// Each consumer's Q (its 64 rows; its half of D under the depth split) by TMA where the plan
// says so, ahead of K and V. One thread.
template <typename Tr>
__device__ __forceinline__ void load_q_rows(const HopperArgs& a, const Barriers<Tr::kStages, Tr::kConsumers>& barriers,
                                            unsigned q_tile, const Block& block) {
  if (!a.q_rows_tma) return;
  const int head = static_cast<int>(block.kv_head);
#pragma unroll
  for (int consumer = 0; consumer < Tr::kConsumers; ++consumer) {
    const int rows0 = Tr::first_row(consumer), panel0 = Tr::first_column(consumer) / 64;
    ptx::mbarrier_expect_bytes(barriers.full_q(consumer), 64 * Tr::kDPer * 2);
#pragma unroll
    for (int p = panel0; p < panel0 + Tr::kDPer / 64; ++p) {
      ptx::tma_load_rows(q_tile + p * Tr::kQPanel + rows0 * 128, &a.q_map, barriers.full_q(consumer), 64 * p,
                         block.at.q_position + (block.row0 + rows0) / block.group, head, block.at.batch);
    }
  }
}

// The producer: each consumer's Q by TMA where the plan says so, then K and V of the block's
// tiles into the ring, a stage refilled once the consumers have released it. Dense and ragged
// tiles are one box each, issued by one thread (lane 0 alone runs this); a paged tile's boxes
// come from the block table, read and issued by the first warp's lanes (a lane a box). Two
// instances, so that the dense one keeps its few registers (24 beside the depth split's consumers).
template <typename Tr, bool kPaged>
__device__ __forceinline__ void produce(const HopperArgs& a, const Barriers<Tr::kStages, Tr::kConsumers>& barriers,
                                        unsigned q_tile, unsigned ring, const Block& block, int lane) {
  constexpr int kStages = Tr::kStages;
  const int head = static_cast<int>(block.kv_head);
  if (lane == 0) load_q_rows<Tr>(a, barriers, q_tile, block);
  // Paged: the rows past the sequence's last key in its box (0 where a box ends there).
  const int tail_rows = kPaged ? (block.kv_len + a.key_box - 1) / a.key_box * a.key_box - block.kv_len : 0;
  // Lane i's box of tile `step`. A paged tile's block-table reads go out a tile ahead, so that
  // their latency passes while the producer waits for a free stage.
  const auto coordinates = [&](int step) {
    const int key = (block.tile_first + step) * Tr::kBlockN + lane * a.key_box;
    return step < block.n_tiles && lane < (kPaged ? a.key_boxes : 1) ? box_coordinates<kPaged>(a, block, key)
                                                                      : vector_tma::TileCoordinates{};
  };
  vector_tma::TileCoordinates ahead = coordinates(0);
  for (int step = 0; step < block.n_tiles; ++step) {
    const int stage = step % kStages;
    const unsigned reuse = ((step / kStages) + 1) & 1;  // the phase of the stage's last release
    const int key0 = (block.tile_first + step) * Tr::kBlockN;
    const vector_tma::TileCoordinates own = kPaged ? ahead : coordinates(step);
    if constexpr (kPaged) ahead = coordinates(step + 1);
    // Every loaded tile starts before kv_len: the one that ends past it holds the partial box.
    const bool tail = kPaged && tail_rows > 0 && key0 + Tr::kBlockN > block.kv_len;
    const unsigned k_tile = ring + stage * Tr::kStageBytes, v_tile = k_tile + Tr::kKBytes;
    if (step >= kStages) ptx::mbarrier_wait(barriers.empty_k(stage), reuse);
    if (lane == 0) ptx::mbarrier_expect_bytes(barriers.full_k(stage), Tr::kKBytes);
    if constexpr (kPaged) __syncwarp();  // the bytes expected before any lane's copy lands
    load_tile<Tr, Tr::D / 64, kPaged>(a, &a.k_map, k_tile, barriers.full_k(stage), own, head, lane);
    if (step >= kStages) ptx::mbarrier_wait(barriers.empty_v(stage), reuse);
    const unsigned v_landed = tail ? barriers.tail_v() : barriers.full_v(stage);
    if (lane == 0) ptx::mbarrier_expect_bytes(v_landed, Tr::kVBytes);
    if constexpr (kPaged) __syncwarp();
    load_tile<Tr, Tr::Dv / 64, kPaged>(a, &a.v_map, v_tile, v_landed, own, head, lane);
    if (tail) {
      clear_tail_values<Tr>(v_tile, barriers.tail_v(), barriers.full_v(stage), block.kv_len - key0, tail_rows, lane);
    }
  }
}

// Paged rows by cp.async (pages whose boxes would be small: hopper.cu's row_copies): the
// producer warpgroup's 128 threads copy each tile, warp w its rows [w, w + 1) · block_n / 4. Lane
// l holds the page and row of the warp's rows l and l + 32 (page -1 past the sequence's keys:
// zeros, nothing read), found a tile ahead, and the lanes of a row copy its 16-byte chunks.
struct RowPages {
  int page[2] = {-1, -1}, row[2] = {0, 0};
};

template <typename Tr>
__device__ __forceinline__ RowPages row_pages(const HopperArgs& a, const Block& block, int step, int warp, int lane) {
  RowPages at;
  constexpr int kWarpRows = Tr::kBlockN / 4;
  if (step >= block.n_tiles) return at;
#pragma unroll
  for (int i = 0; i < (kWarpRows > 32 ? 2 : 1); ++i) {
    const int r = lane + 32 * i;
    const int key = (block.tile_first + step) * Tr::kBlockN + warp * kWarpRows + r;
    if (r < kWarpRows && key < block.kv_len) {
      std::int64_t page = 0, row = 0;
      paged_row(block.seq.pages, a.seqs.table_strides[1], a.seqs.num_pages, a.page_size, key, page, row);
      at.page[i] = static_cast<int>(page);
      at.row[i] = static_cast<int>(row);
    }
  }
  return at;
}

// One warp's rows of a K (kWidth = D) or V (Dv) tile from `data` into `tile` (swizzled as TMA
// writes it), zeros past the keys and past the call's `width` columns.
template <typename T, typename Tr, int kWidth>
__device__ __forceinline__ void copy_rows(unsigned tile, const void* data, const call::Strides& strides,
                                          std::int64_t head, int width, const RowPages& at, int warp, int lane) {
  constexpr int kChunks = kWidth / 8;                        // 16-byte chunks of a row
  constexpr int kLanesPerRow = kChunks < 32 ? kChunks : 32;  // lanes copying one row
  constexpr int kRowsPerStep = 32 / kLanesPerRow;
  constexpr int kWarpRows = Tr::kBlockN / 4;
  static_assert(kChunks % kLanesPerRow == 0 && kWarpRows <= 64 && kWarpRows % kRowsPerStep == 0 &&
                    32 % kRowsPerStep == 0,
                "a warp's rows and chunks");
  const T* base = static_cast<const T*>(data);
  const std::int64_t head_offset = head * strides.s[1];
  const bool copying = lane < kRowsPerStep * kLanesPerRow;
#pragma unroll 4
  for (int r0 = 0; r0 < kWarpRows; r0 += kRowsPerStep) {
    const int r = r0 + lane / kLanesPerRow;
    const bool first = kWarpRows <= 32 || r0 < 32;  // the lanes' first lookups, or their second
    const int page = __shfl_sync(0xFFFFFFFFu, first ? at.page[0] : at.page[1], r % 32);
    const int row = __shfl_sync(0xFFFFFFFFu, first ? at.row[0] : at.row[1], r % 32);
    const T* source = base + page * strides.s[0] + head_offset + row * strides.s[2];
    const int tile_row = warp * kWarpRows + r;
#pragma unroll
    for (int step = 0; step < kChunks / kLanesPerRow; ++step) {
      const int c = lane % kLanesPerRow + step * kLanesPerRow;
      const bool valid = page >= 0 && 8 * c < width;
      if (copying) {
        ptx::cp_async_16_or_zero(tile + swizzled(tile_row, c, Tr::kRingPanel), valid ? source + 8 * c : base, valid);
      }
    }
  }
}

// The producer for row copies: a tile's K rows once the stage's K is free, then its V rows once
// its V is free, each thread's copies completing its arrival on the stage's "full" (128 arrivals)
// without waiting for them; the consumers fence the async proxy after the wait (cp.async writes
// are the generic proxy's, wgmma reads the async proxy's).
template <typename T, typename Tr>
__device__ __forceinline__ void produce_rows(const HopperArgs& a, const Barriers<Tr::kStages, Tr::kConsumers>& barriers,
                                             unsigned q_tile, unsigned ring, const Block& block, int thread) {
  constexpr int kStages = Tr::kStages;
  const int warp = thread / 32, lane = thread % 32;
  if (thread == 0) load_q_rows<Tr>(a, barriers, q_tile, block);
  RowPages ahead = row_pages<Tr>(a, block, 0, warp, lane);
  for (int step = 0; step < block.n_tiles; ++step) {
    const int stage = step % kStages;
    const unsigned reuse = ((step / kStages) + 1) & 1;
    const RowPages at = ahead;
    ahead = row_pages<Tr>(a, block, step + 1, warp, lane);
    const unsigned k_tile = ring + stage * Tr::kStageBytes, v_tile = k_tile + Tr::kKBytes;
    if (step >= kStages) ptx::mbarrier_wait(barriers.empty_k(stage), reuse);
    copy_rows<T, Tr, Tr::D>(k_tile, a.k, a.k_strides, block.kv_head, block.head_dim, at, warp, lane);
    ptx::cp_async_arrive(barriers.full_k(stage));
    if (step >= kStages) ptx::mbarrier_wait(barriers.empty_v(stage), reuse);
    copy_rows<T, Tr, Tr::Dv>(v_tile, a.v, a.v_strides, block.kv_head, block.value_dim, at, warp, lane);
    ptx::cp_async_arrive(barriers.full_v(stage));
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();  // no thread leaves with copies in flight
}

}  // namespace heed::cuda::hopper
