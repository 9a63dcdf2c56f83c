#pragma once
// The tiled kernel's shared-memory layout and the addresses each lane gives ldmatrix. Plain
// C++ usable on the host too: tests/unit/cuda_tiled_layout_test.cpp emulates ldmatrix and the
// mma fragment layouts of the PTX ISA on these functions, without a GPU.

#include "core/host_device.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::tiled {

// Chunk offset of (row, chunk) in rows of kChunks 16-byte chunks (see tiled_row_stride).
template <int kChunks>
struct RowLayout {
  static constexpr int kStride = plan::cuda::tiled_row_stride(kChunks);
  static constexpr bool kSwizzled = kChunks % 8 == 0;
  HEED_HOST_DEVICE static int at(int row, int chunk) {
    return row * kStride + (kSwizzled ? (chunk ^ (row & 7)) : chunk);
  }
};

// The byte addresses a lane gives ldmatrix for operand blocks at (row0 + lane_row, chunk0 +
// lane_chunk), with row0 a multiple of 8 and chunk0 even, both compile-time after unrolling.
// The swizzle then depends on lane bits only, so a lane keeps one address per value of
// chunk0 mod 8 and the rest of every address is an immediate offset.
template <int kChunks>
struct FragmentAddress {
  using Layout = RowLayout<kChunks>;
  static constexpr int kVariants = Layout::kSwizzled ? 4 : 1;
  unsigned base[kVariants];

  HEED_HOST_DEVICE void init(unsigned tile, int lane_row, int lane_chunk) {
    for (int v = 0; v < kVariants; ++v) {
      base[v] = tile + 16u * static_cast<unsigned>(Layout::at(lane_row, 2 * v + lane_chunk));
    }
  }
  HEED_HOST_DEVICE unsigned at(int row0, int chunk0) const {
    if constexpr (Layout::kSwizzled) {
      return base[(chunk0 & 7) / 2] + 16u * static_cast<unsigned>(row0 * Layout::kStride + (chunk0 & ~7));
    } else {
      return base[0] + 16u * static_cast<unsigned>(row0 * Layout::kStride + chunk0);
    }
  }
};

// The row and chunk (within a 16 × 16 operand block) whose address lane `lane` gives one
// ldmatrix.x4: lanes 8i..8i+7 address the rows of matrix i, whose fragment lands in register i.
struct LaneBlock {
  int row, chunk;
};
// A = Q (row-major 16 × 16): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
// (rows 8-15, k 8-15) = registers a0..a3 of mma.m16n8k16.
HEED_HOST_DEVICE LaneBlock q_lane(int lane) { return {lane & 15, lane >> 4}; }
// B = Kᵀ for two 8-key column tiles: matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15,
// d 0-7), (keys 8-15, d 8-15) = b0, b1 of the first tile, b0, b1 of the second.
HEED_HOST_DEVICE LaneBlock k_lane(int lane) { return {(lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1}; }
// B = V for two 8-column tiles, read transposed: matrices (keys 0-7, dv 0-7), (keys 8-15, dv 0-7),
// (keys 0-7, dv 8-15), (keys 8-15, dv 8-15) = b0, b1 of the first tile, b0, b1 of the second.
HEED_HOST_DEVICE LaneBlock v_lane(int lane) { return {lane & 15, lane >> 4}; }

}  // namespace heed::cuda::tiled
