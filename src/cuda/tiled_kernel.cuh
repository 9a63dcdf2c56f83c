#pragma once
// The tiled (prefill) kernel, FlashAttention-2 style on the tensor cores of sm_80 and up.
// - A block holds block_m = 16 × warps packed rows of one (batch, key head): row r is
//   position r / group of query head r % group, so each K/V tile serves the whole group.
// - Each warp owns 16 rows: S = Q·Kᵀ and O += P·V with mma.sync m16n8k16 (float32
//   accumulation); operands come from shared memory through ldmatrix (.trans for V), the
//   weights P straight from the score registers.
// - K/V tiles of block_n keys stream through a cp.async ring of `stages` tiles; tiles that no
//   row of the block can see (causal, window) are never loaded.
// - Online softmax in the log2 domain: each lane holds two rows' maxima and partial sums.
// - Serving forms: a block reads its sequence (call::sequence) and its own lengths; q, out and
//   lse rows through call::row_offset, key rows through call::key_offset once per page run.
// Tile shapes: plan/cuda_tables.hpp (kTiledConfigs), read by the planner too.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/tiled.hpp"
#include "cuda/tiled_layout.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::tiled {

// The compile-time shape of the instance keyed (D, Dv, block_m, block_n): the kTiledConfigs
// entries' with that key. D and Dv are the compiled sizes, to which the call's round up.
template <int kD, int kDv, int kKeyBlockM, int kKeyBlockN>
struct Traits {
  static constexpr plan::cuda::TiledConfig kConfig =
      plan::cuda::tiled_instance(plan::cuda::TiledKey{kD, kDv, kKeyBlockM, kKeyBlockN});
  static_assert(kConfig.head_dim > 0, "no entry of kTiledConfigs has this instance's key");
  static constexpr int D = kD, Dv = kDv;
  static constexpr int kWarps = kConfig.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = plan::cuda::kTiledRowsPerWarp * kWarps;
  static constexpr int kBlockN = kConfig.block_n;
  static constexpr int kStages = kConfig.stages;
  static constexpr bool kQInRegisters = kConfig.q_in_registers;
  static constexpr int kMinBlocks = kConfig.min_blocks;
  static constexpr int kChunksK = D / 8, kChunksV = Dv / 8;  // 16-byte chunks of a row
  static constexpr int kStrideK = plan::cuda::tiled_row_stride(kChunksK);
  static constexpr int kStrideV = plan::cuda::tiled_row_stride(kChunksV);
  // Shared memory in 16-byte chunks: the Q tile (then the output tile), then the ring.
  static constexpr int kQTile = kBlockM * kStrideK;
  static constexpr int kKTile = kBlockN * kStrideK, kVTile = kBlockN * kStrideV;
  static constexpr int kStage = kKTile + kVTile;
  static constexpr int kSharedBytes = static_cast<int>(plan::cuda::tiled_shared_bytes(kConfig));
  static_assert(kSharedBytes == 16 * (kQTile + kStages * kStage), "the planner's shared-memory size");
  static_assert(D % 16 == 0 && Dv % 16 == 0 && kBlockN % 16 == 0, "whole mma steps");
  static_assert(Dv <= D, "the output tile reuses the Q tile's rows");
  static_assert(kStages >= 2, "the ring overlaps one tile's copies with another's compute");
};

using ptx::shared_address;

inline constexpr float kLn2 = 0.6931471805599453f;  // a log2-unit score times this is natural

// c += a (16×16, row-major fragments) · b (16×8, column-major fragments), float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  ptx::mma_m16n8k16<T>(c, a[0], a[1], a[2], a[3], b0, b1);
}

// Two floats as one register of T pairs, `low` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ std::uint32_t pack(float low, float high) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 pair = __floats2half2_rn(low, high);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  }
}

// The row statistics a lane's two rows share with the other three lanes of their quad.
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

// The keys a block of query rows [row0, row_last] can reach: [begin, end), and the diagonals of
// its first and last row (causal bottom-right: row r of the packed group sees keys up to
// r / group + Lk - Lq; a window of W keys back from there). Shared by the mma.sync and the
// Hopper kernels, as are the helpers below.
struct BlockReach {
  int diag_first, diag_last, begin, end;
};
__device__ __forceinline__ BlockReach block_reach(int row0, int row_last, int group, int offset, int window,
                                                  bool causal, int kv_len) {
  BlockReach reach{row0 / group + offset, row_last / group + offset, 0, kv_len};
  if (causal) reach.end = min(max(reach.diag_last + 1, 0), kv_len);
  if (window > 0) reach.begin = min(max(reach.diag_first - window + 1, 0), kv_len);
  return reach;
}

// A block's place in the grid [row_blocks, Hkv, Z]: its row block counted from the last, its key
// head and z. Head-major, as launched: blockIdx itself. Heads inner (TiledArgs::heads_inner): the
// launch order's index i is row block i / (Hkv × Z) of pair i % (Hkv × Z), so under causal
// masking every pair's longest block starts before any pair's second longest.
struct BlockPlace {
  int row_block, kv_head, z;
};
__device__ __forceinline__ BlockPlace block_place(bool heads_inner) {
  if (!heads_inner) return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  const std::uint64_t pairs = static_cast<std::uint64_t>(gridDim.y) * gridDim.z;
  const std::uint64_t index = blockIdx.x + static_cast<std::uint64_t>(gridDim.x) * (blockIdx.y + static_cast<std::uint64_t>(gridDim.y) * blockIdx.z);
  const unsigned pair = static_cast<unsigned>(index % pairs);
  return {static_cast<int>(index / pairs), static_cast<int>(pair % gridDim.y), static_cast<int>(pair / gridDim.y)};
}

// Packed row r's visible keys [lo, hi] of sequence `seq` by the score header (hi < lo: none;
// hi = -1 past the block's last row).
__device__ __forceinline__ void row_keys(const call::Problem& p, const call::Sequence& seq, int r, int rows,
                                         int group, int& lo, int& hi) {
  const score::KeyRange range = score::keys_for_row(p, seq, r / group);
  lo = static_cast<int>(range.begin);
  hi = r >= rows ? -1 : static_cast<int>(range.end) - 1;
}

// The columns [lo, hi] of the key tile at n0 that each of the lane's row halves sees (its keys
// [key_lo, key_hi]; hi = -1 where none).
template <int kBlockN>
__device__ __forceinline__ void visible_columns(int n0, const int (&key_lo)[2], const int (&key_hi)[2], int (&lo)[2],
                                                int (&hi)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    lo[half] = min(max(key_lo[half] - n0, 0), kBlockN);
    hi[half] = min(max(key_hi[half] - n0, -1), kBlockN - 1);
  }
}

// A tile's dot products to scores in the log2 domain, by the score header's transform: scaled,
// then capped where the call has a softcap.
template <typename T, int kNTiles>
__device__ __forceinline__ void transform_scores(float (&s)[kNTiles][4], const score::Transform& transform) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] *= transform.dot_scale;
  if (transform.linear()) return;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = transform.finish(s[j][e], KernelTanh<T>{});
}

// An edge tile's scores: -inf outside the visible columns.
template <int kNTiles>
__device__ __forceinline__ void hide_invisible(float (&s)[kNTiles][4], const int (&lo)[2], const int (&hi)[2],
                                               int quad_col) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * j + 2 * quad_col + (e & 1), half = e >> 1;
      s[j][e] = col >= lo[half] && col <= hi[half] ? s[j][e] : -INFINITY;
    }
}

// Score element (j, e) of a lane's fragments: row half e / 2 (rows g and g + 8 of the warp),
// column 8j + 2·(lane % 4) + e % 2 of the tile.
template <int kNTiles>
using Scores = float[kNTiles][4];

// The array mask's verdict on the visible scores of one tile: M is the mask's element type;
// boolean masks hide scores (-inf), additive ones add their value (in log2 units). `row[half]`
// is the element offset of (row, key n0 + 2·(lane % 4)); kUnit: the keys' stride is 1, so
// every read is an immediate offset from one pointer per row.
template <typename M, bool kBool, bool kUnit, int kNTiles>
__device__ __forceinline__ void apply_mask_rows(Scores<kNTiles>& s, const call::Mask& mask,
                                                const std::int64_t (&row)[2], int quad_col, const int (&lo)[2],
                                                const int (&hi)[2]) {
  const std::int64_t stride = kUnit ? 1 : mask.strides.s[3];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const M* data = static_cast<const M*>(mask.data) + row[half];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int col = 8 * j + 2 * quad_col + x;
        if (col < lo[half] || col > hi[half]) continue;
        const M value = data[(8 * j + x) * stride];
        float& score = s[j][2 * half + x];
        if constexpr (kBool) {
          score = score::masked(score, score::mask_term_of(MaskKind::Bool, value != 0 ? 1.0f : 0.0f));
        } else {
          score = score::masked(score, score::mask_term_of(MaskKind::Additive, to_float(value)) * kLog2e);
        }
      }
    }
  }
}

template <typename M, bool kBool, int kNTiles>
__device__ __forceinline__ void apply_mask(Scores<kNTiles>& s, const call::Mask& mask, const std::int64_t (&row)[2],
                                           int quad_col, const int (&lo)[2], const int (&hi)[2]) {
  if (mask.strides.s[3] == 1) {
    apply_mask_rows<M, kBool, true, kNTiles>(s, mask, row, quad_col, lo, hi);
  } else {
    apply_mask_rows<M, kBool, false, kNTiles>(s, mask, row, quad_col, lo, hi);
  }
}

// A lane's place in its warp and in the mma fragments: rows quad_row and quad_row + 8 of the
// warp's 16, columns 2·quad_col and 2·quad_col + 1 of each 8-column fragment.
struct WarpLane {
  int lane, warp, quad_row, quad_col;
};
__device__ __forceinline__ WarpLane warp_lane() {
  const int lane = threadIdx.x & 31;
  return {lane, static_cast<int>(threadIdx.x >> 5), lane >> 2, lane & 3};
}

// A block's slice of the call: its sequence, key head and part of Dv, its packed rows and the
// key tiles they reach. row0 < 0: the block lies past its sequence's rows and has nothing to do.
struct BlockGeometry {
  call::Sequence seq;
  std::int64_t b, kv_head, part;
  int row0, rows, group, kv_len, offset, window;
  int head_dim, part_columns;
  BlockReach reach;
  int tile_first, n_tiles;
  // The packed row of a lane's row half (g or g + 8 of its warp).
  __device__ __forceinline__ int lane_row(const WarpLane& at, int half) const {
    return row0 + at.warp * 16 + at.quad_row + 8 * half;
  }
};

template <int kBlockM, int kBlockN, int Dv>
__device__ __forceinline__ BlockGeometry block_geometry(const TiledArgs& a) {
  const Call& g = a;
  BlockGeometry geo;
  // z = b × value_parts + part: the part's Dv columns of v and out (whole 16-byte chunks apart).
  const BlockPlace place = block_place(a.heads_inner);
  geo.b = place.z / a.value_parts;
  geo.kv_head = place.kv_head;
  geo.part = place.z % a.value_parts;
  geo.seq = call::sequence(g, geo.b);
  // Lengths below 2^29 and rows below 2^30 (the planner's kTiledMaxLength bounds the maxima):
  // 32-bit indices. A dense sequence has a.rows rows.
  geo.group = static_cast<int>(g.group);
  geo.rows = geo.group * static_cast<int>(geo.seq.q_len);
  // Row blocks last first, counted from the sequence's own last block: under causal masking the
  // last positions see the most keys, so every sequence's longest block is among the first
  // launched and the blocks past a short sequence's rows come last.
  const int seq_row_blocks = (geo.rows + kBlockM - 1) / kBlockM;
  geo.row0 = (seq_row_blocks - 1 - static_cast<int>(place.row_block)) * kBlockM;
  geo.kv_len = static_cast<int>(geo.seq.kv_len);
  geo.offset = geo.kv_len - static_cast<int>(geo.seq.q_len);
  // A window of Lq + Lk keys or more bounds nothing; clamped there it fits an int.
  geo.window = g.window > 0 ? static_cast<int>(min(g.window, geo.seq.kv_len + geo.seq.q_len)) : 0;
  // The call's D and this part's columns of Dv, at most the compiled D and Dv: the copies past
  // them write zeros and read nothing, the stores past them are skipped.
  geo.head_dim = static_cast<int>(g.head_dim);
  geo.part_columns = static_cast<int>(g.value_dim - geo.part * Dv);

  // Keys any row of the block can see, and the diagonals of its first and last row.
  const int row_last = min(geo.row0 + kBlockM, geo.rows) - 1;
  geo.reach = block_reach(geo.row0, row_last, geo.group, geo.offset, geo.window, g.causal, geo.kv_len);
  geo.tile_first = geo.reach.begin / kBlockN;
  geo.n_tiles = geo.reach.begin < geo.reach.end ? (geo.reach.end + kBlockN - 1) / kBlockN - geo.tile_first : 0;
  return geo;
}

// Q: each warp copies its own 16 rows (zeros past the last row).
template <typename T, typename Tr>
__device__ __forceinline__ void load_q(const TiledArgs& a, const BlockGeometry& geo, const WarpLane& at,
                                       uint4* q_tile) {
  using KLayout = RowLayout<Tr::kChunksK>;
  const T* q_sequence = static_cast<const T*>(a.q) + call::row_offset(a.q_strides, geo.seq, 0, 0);
#pragma unroll
  for (int i = 0; i < Tr::D / 16; ++i) {
    const int index = at.lane + 32 * i;
    const int r = at.warp * 16 + index / Tr::kChunksK, c = index % Tr::kChunksK;
    const int row = geo.row0 + r;
    const bool valid = row < geo.rows && 8 * c < geo.head_dim;
    const T* source = q_sequence;
    if (valid) {
      source += (geo.kv_head * geo.group + row % geo.group) * a.q_strides.s[1] +
                std::int64_t(row / geo.group) * a.q_strides.s[2] + 8 * c;
    }
    ptx::cp_async_16_or_zero(shared_address(q_tile + KLayout::at(r, c)), source, valid);
  }
  ptx::cp_async_commit();
}

// The block's key head of K and V (and its part of V's columns), copied tile by tile into the
// cp.async ring. A tile's rows are addressed from its first row's offset while they lie at one
// stride from it (call::key_run: the whole tile unless paged keys change page inside it); the
// rest each resolve their own page. Pages are read in place.
template <typename T, typename Tr>
struct KvTiles {
  const TiledArgs& a;
  const BlockGeometry& geo;
  uint4* const ring;
  const T* const k;
  const T* const v;  // at the block's part of V's columns

  __device__ __forceinline__ KvTiles(const TiledArgs& args, const BlockGeometry& geometry, uint4* ring_stages)
      : a(args),
        geo(geometry),
        ring(ring_stages),
        k(static_cast<const T*>(args.k)),
        v(static_cast<const T*>(args.v) + geometry.part * Tr::Dv * args.v_strides.s[3]) {}

  // Element offset of key row j (< the sequence's Lk) of the block's key head in k or v.
  __device__ __forceinline__ std::int64_t row_at(const call::Strides& strides, std::int64_t j) const {
    return call::key_offset(a, strides, geo.seq, geo.kv_head, j);
  }

  // Copies key tile `tile` into ring stage `stage`; keys past Lk are zeros.
  __device__ __forceinline__ void load(int tile, int stage) const {
    using KLayout = RowLayout<Tr::kChunksK>;
    using VLayout = RowLayout<Tr::kChunksV>;
    const int n0 = tile * Tr::kBlockN;
    // Rows [n0, n0 + run) at one stride from row n0; tiles start below Lk.
    const std::int64_t run = call::key_run(a, geo.seq, n0);
    const std::int64_t k_first = row_at(a.k_strides, n0), v_first = row_at(a.v_strides, n0);
    uint4* const k_tile = ring + stage * Tr::kStage;
    uint4* const v_tile = k_tile + Tr::kKTile;
    constexpr int kKChunks = Tr::kBlockN * Tr::kChunksK, kVChunks = Tr::kBlockN * Tr::kChunksV;
#pragma unroll
    for (int i = 0; i < (kKChunks + Tr::kThreads - 1) / Tr::kThreads; ++i) {
      const int index = threadIdx.x + i * Tr::kThreads;
      if (kKChunks % Tr::kThreads == 0 || index < kKChunks) {
        const int r = index / Tr::kChunksK, c = index % Tr::kChunksK;
        const bool valid = n0 + r < geo.kv_len && 8 * c < geo.head_dim;
        std::int64_t offset = 0;
        if (valid) offset = (r < run ? k_first + r * a.k_strides.s[2] : row_at(a.k_strides, n0 + r)) + 8 * c;
        ptx::cp_async_16_or_zero(shared_address(k_tile + KLayout::at(r, c)), k + offset, valid);
      }
    }
#pragma unroll
    for (int i = 0; i < (kVChunks + Tr::kThreads - 1) / Tr::kThreads; ++i) {
      const int index = threadIdx.x + i * Tr::kThreads;
      if (kVChunks % Tr::kThreads == 0 || index < kVChunks) {
        const int r = index / Tr::kChunksV, c = index % Tr::kChunksV;
        const bool valid = n0 + r < geo.kv_len && 8 * c < geo.part_columns;
        std::int64_t offset = 0;
        if (valid) offset = (r < run ? v_first + r * a.v_strides.s[2] : row_at(a.v_strides, n0 + r)) + 8 * c;
        ptx::cp_async_16_or_zero(shared_address(v_tile + VLayout::at(r, c)), v + offset, valid);
      }
    }
  }
};

// The warp's Q fragments when they stay in registers (kQInRegisters); one unused one otherwise.
template <typename Tr>
using QFragments = std::uint32_t[Tr::kQInRegisters ? Tr::D / 16 : 1][4];

// S = Q·Kᵀ for this warp's 16 rows and the keys of the tile `stage_bytes` into the ring.
template <typename T, typename Tr>
__device__ __forceinline__ void key_scores(Scores<Tr::kBlockN / 8>& s, const QFragments<Tr>& q_fragments,
                                           const FragmentAddress<Tr::kChunksK>& q_address,
                                           const FragmentAddress<Tr::kChunksK>& k_address, unsigned stage_bytes) {
#pragma unroll
  for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < Tr::D / 16; ++kk) {
    std::uint32_t qa[4];
    if constexpr (Tr::kQInRegisters) {
#pragma unroll
      for (int x = 0; x < 4; ++x) qa[x] = q_fragments[kk][x];
    } else {
      ptx::ldmatrix_x4(q_address.at(0, 2 * kk), qa);
    }
#pragma unroll
    for (int p = 0; p < Tr::kBlockN / 16; ++p) {
      std::uint32_t kb[4];
      ptx::ldmatrix_x4(k_address.at(16 * p, 2 * kk) + stage_bytes, kb);
      mma<T>(s[2 * p], qa, kb[0], kb[1]);
      mma<T>(s[2 * p + 1], qa, kb[2], kb[3]);
    }
  }
}

// The call's array mask on the visible columns [lo, hi] of the key tile at n0, by its element type.
template <int kNTiles>
__device__ __forceinline__ void apply_call_mask(Scores<kNTiles>& s, const Call& g, const BlockGeometry& geo,
                                                const WarpLane& at, int n0, const int (&lo)[2], const int (&hi)[2]) {
  // The mask's offsets of this lane's rows (a row past the last is never read: hi = -1).
  std::int64_t mask_row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = min(geo.lane_row(at, half), geo.rows - 1);
    mask_row[half] = geo.b * g.mask.strides.s[0] + (geo.kv_head * geo.group + r % geo.group) * g.mask.strides.s[1] +
                     std::int64_t(r / geo.group) * g.mask.strides.s[2] +
                     std::int64_t(n0 + 2 * at.quad_col) * g.mask.strides.s[3];
  }
  switch (g.mask.kind == MaskKind::Bool ? DType::Bool : g.mask.dtype) {
    case DType::Bool: apply_mask<unsigned char, true, kNTiles>(s, g.mask, mask_row, at.quad_col, lo, hi); break;
    case DType::Float16: apply_mask<__half, false, kNTiles>(s, g.mask, mask_row, at.quad_col, lo, hi); break;
    case DType::BFloat16: apply_mask<__nv_bfloat16, false, kNTiles>(s, g.mask, mask_row, at.quad_col, lo, hi); break;
    case DType::Float32: apply_mask<float, false, kNTiles>(s, g.mask, mask_row, at.quad_col, lo, hi); break;
    case DType::Int32: break;  // validation admits no integer mask
  }
}

// To the log2 domain; -inf where the key is out of the row's reach or the mask hides it.
template <typename T, int kBlockN>
__device__ __forceinline__ void score_tile(Scores<kBlockN / 8>& s, const TiledArgs& a, const BlockGeometry& geo,
                                           const WarpLane& at, int n0, const int (&key_lo)[2],
                                           const int (&key_hi)[2]) {
  constexpr int kNTiles = kBlockN / 8;
  const Call& g = a;
  // An edge tile holds a key some row cannot see (past Lk, above the causal diagonal, or
  // behind the window): its scores are masked one by one.
  const bool edge = n0 + kBlockN > geo.kv_len || (g.causal && n0 + kBlockN - 1 > geo.reach.diag_first) ||
                    (geo.window > 0 && n0 <= geo.reach.diag_last - geo.window);
  transform_scores<T, kNTiles>(s, a.transform);
  if (edge || g.mask.kind != MaskKind::None) {
    int lo[2], hi[2];
    visible_columns<kBlockN>(n0, key_lo, key_hi, lo, hi);
    hide_invisible<kNTiles>(s, lo, hi, at.quad_col);
    if (g.mask.kind != MaskKind::None) apply_call_mask<kNTiles>(s, g, geo, at, n0, lo, hi);
  }
}

// Online softmax: new maxima, the old state rescaled, weights P = 2^(s - max). A row that
// has seen no key yet keeps max -inf and takes frame 0, so its weights are 0, not NaN.
template <int kNTiles, int kOTiles>
__device__ __forceinline__ void online_softmax(Scores<kNTiles>& s, float (&row_max)[2], float (&row_sum)[2],
                                               float (&o)[kOTiles][4]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[j][e]);
  float frame[2], rescale[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float new_max = fmaxf(row_max[half], quad_max(tile_max[half]));
    frame[half] = new_max == -INFINITY ? 0.0f : new_max;
    rescale[half] = ptx::ex2_approx(row_max[half] - frame[half]);
    row_max[half] = new_max;
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = ptx::ex2_approx(s[j][e] - frame[e >> 1]);
      tile_sum[e >> 1] += s[j][e];
    }
#pragma unroll
  for (int half = 0; half < 2; ++half) row_sum[half] = row_sum[half] * rescale[half] + tile_sum[half];
#pragma unroll
  for (int j = 0; j < kOTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] *= rescale[e >> 1];
}

// O += P·V: the score fragments of keys 16kk..16kk+15 are the A fragment of step kk.
template <typename T, typename Tr>
__device__ __forceinline__ void accumulate_values(float (&o)[Tr::Dv / 8][4], const Scores<Tr::kBlockN / 8>& s,
                                                  const FragmentAddress<Tr::kChunksV>& v_address,
                                                  unsigned stage_bytes) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    const std::uint32_t pa[4] = {pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
                                 pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int p = 0; p < Tr::Dv / 16; ++p) {
      std::uint32_t vb[4];
      ptx::ldmatrix_x4_trans(v_address.at(16 * kk, 2 * p) + stage_bytes, vb);
      mma<T>(o[2 * p], pa, vb[0], vb[1]);
      mma<T>(o[2 * p + 1], pa, vb[2], vb[3]);
    }
  }
}

// out = O / (sum + 2^sink), in the frame of the row's maximum; rows that saw no key are zeros.
// Where the call asks for it, each row's log-sum-exp too (natural log, the sink included), by
// the quad's first lane and the first part of Dv.
__device__ __forceinline__ void output_factors(const Call& g, const BlockGeometry& geo, const WarpLane& at,
                                               const float (&row_max)[2], const float (&row_sum)[2],
                                               float (&factor)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float total = quad_sum(row_sum[half]);
    const int r = geo.lane_row(at, half);
    const std::int64_t head = geo.kv_head * geo.group + r % geo.group;
    const bool sinks = g.sinks.data != nullptr && r < geo.rows;
    const float sink = sinks ? sink_logit(g.sinks, head) : 0.0f;
    factor[half] = score::finalize_weight(row_max[half], total, sinks, sink * kLog2e, Exp2Approx{});
    if (g.lse != nullptr && at.quad_col == 0 && r < geo.rows && geo.part == 0) {
      // row_sum sums 2^(s - max) in log2 units, which is e^(s - max) in natural ones.
      g.lse[call::row_offset(g.lse_strides, geo.seq, head, r / geo.group)] =
          score::row_lse(row_max[half] * kLn2, total, sinks, sink);
    }
  }
}

// Through this warp's own rows of the Q tile, to 16-byte stores of whole output rows.
template <typename T, typename Tr>
__device__ __forceinline__ void store_output(const TiledArgs& a, const BlockGeometry& geo, const WarpLane& at,
                                             uint4* q_tile, const float (&o)[Tr::Dv / 8][4],
                                             const float (&factor)[2]) {
  using VLayout = RowLayout<Tr::kChunksV>;
  __syncwarp();  // the warp's last reads of its Q rows (when Q stays in shared memory)
  uint4* const staging = q_tile + at.warp * 16 * Tr::kStrideK;
  auto* const words = reinterpret_cast<std::uint32_t*>(staging);
#pragma unroll
  for (int j = 0; j < Tr::Dv / 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      words[4 * VLayout::at(at.quad_row + 8 * half, j) + at.quad_col] =
          pack<T>(o[j][2 * half] * factor[half], o[j][2 * half + 1] * factor[half]);
    }
  __syncwarp();
  T* const out_batch = static_cast<T*>(a.out) + call::row_offset(a.out_strides, geo.seq, 0, 0) +
                       geo.part * Tr::Dv * a.out_strides.s[3];
#pragma unroll
  for (int i = 0; i < Tr::Dv / 16; ++i) {
    const int index = at.lane + 32 * i;
    const int r = index / Tr::kChunksV, c = index % Tr::kChunksV;
    const int row = geo.row0 + at.warp * 16 + r;
    if (row >= geo.rows || 8 * c >= geo.part_columns) continue;
    T* const destination = out_batch + (geo.kv_head * geo.group + row % geo.group) * a.out_strides.s[1] +
                           std::int64_t(row / geo.group) * a.out_strides.s[2];
    const uint4 chunk = staging[VLayout::at(r, c)];
    if (a.wide_out) {
      *reinterpret_cast<uint4*>(destination + 8 * c) = chunk;
    } else {
      const T* elements = reinterpret_cast<const T*>(&chunk);
#pragma unroll
      for (int x = 0; x < 8; ++x) destination[(8 * c + x) * a.out_strides.s[3]] = elements[x];
    }
  }
}

template <typename T, int D, int Dv, int kKeyBlockM, int kKeyBlockN>
__global__ void __launch_bounds__(Traits<D, Dv, kKeyBlockM, kKeyBlockN>::kThreads,
                                  Traits<D, Dv, kKeyBlockM, kKeyBlockN>::kMinBlocks)
    tiled_kernel(const TiledArgs a) {
  using Tr = Traits<D, Dv, kKeyBlockM, kKeyBlockN>;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kStages = Tr::kStages;
  constexpr int kNTiles = kBlockN / 8;  // 8-key score fragments per tile
  constexpr int kOTiles = Dv / 8;       // 8-column output fragments
  extern __shared__ uint4 shared[];
  uint4* const q_tile = shared;
  uint4* const ring = shared + Tr::kQTile;

  const WarpLane at = warp_lane();
  const BlockGeometry geo = block_geometry<kBlockM, kBlockN, Dv>(a);
  if (geo.row0 < 0) return;  // past the sequence's rows: the whole block leaves
  // This lane's two rows (g and g + 8 of its warp): their visible keys [key_lo, key_hi].
  int key_lo[2], key_hi[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_keys(a, geo.seq, geo.lane_row(at, half), geo.rows, geo.group, key_lo[half], key_hi[half]);
  }

  load_q<T, Tr>(a, geo, at, q_tile);
  const KvTiles<T, Tr> kv(a, geo, ring);
  // The pipeline's first stages; a group is committed even when empty, so that group counts
  // (and cp.async.wait_group) stay the same for every block.
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < geo.n_tiles) kv.load(geo.tile_first + stage, stage);
    ptx::cp_async_commit();
  }

  // ldmatrix addresses (tiled_layout.hpp): this warp's Q rows, K rows and V rows (transposed).
  FragmentAddress<Tr::kChunksK> q_address, k_address;
  FragmentAddress<Tr::kChunksV> v_address;
  q_address.init(shared_address(q_tile), at.warp * 16 + q_lane(at.lane).row, q_lane(at.lane).chunk);
  k_address.init(shared_address(ring), k_lane(at.lane).row, k_lane(at.lane).chunk);
  v_address.init(shared_address(ring + Tr::kKTile), v_lane(at.lane).row, v_lane(at.lane).chunk);

  QFragments<Tr> q_fragments;
  if constexpr (Tr::kQInRegisters) {
    ptx::cp_async_wait<kStages - 1>();  // this lane's Q copies (older than the ring's)
    __syncwarp();                       // and its warp's
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ptx::ldmatrix_x4(q_address.at(0, 2 * kk), q_fragments[kk]);
  }

  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float o[kOTiles][4];
#pragma unroll
  for (int j = 0; j < kOTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;

  for (int step = 0; step < geo.n_tiles; ++step) {
    ptx::cp_async_wait<kStages - 2>();  // this thread's copies of tile `step`
    __syncthreads();                    // everyone's; and every warp is done with the stage refilled next
    if (step + kStages - 1 < geo.n_tiles) kv.load(geo.tile_first + step + kStages - 1, (step + kStages - 1) % kStages);
    ptx::cp_async_commit();
    const unsigned stage_bytes = 16u * static_cast<unsigned>((step % kStages) * Tr::kStage);

    float s[kNTiles][4];
    key_scores<T, Tr>(s, q_fragments, q_address, k_address, stage_bytes);
    score_tile<T, kBlockN>(s, a, geo, at, (geo.tile_first + step) * kBlockN, key_lo, key_hi);
    online_softmax<kNTiles, kOTiles>(s, row_max, row_sum, o);
    accumulate_values<T, Tr>(o, s, v_address, stage_bytes);
  }
  ptx::cp_async_wait<0>();

  float factor[2];
  output_factors(a, geo, at, row_max, row_sum, factor);
  store_output<T, Tr>(a, geo, at, q_tile, o, factor);
}

// Sets the kernel's shared-memory limit on this device (once), then launches.
template <typename T, int D, int Dv, int kBlockM, int kBlockN>
void launch(const TiledArgs& args, dim3 grid, cudaStream_t stream) {
  using Tr = Traits<D, Dv, kBlockM, kBlockN>;
  allow_shared_bytes<tiled_kernel<T, D, Dv, kBlockM, kBlockN>, Carveout::Driver>(Tr::kSharedBytes);
  tiled_kernel<T, D, Dv, kBlockM, kBlockN><<<grid, Tr::kThreads, Tr::kSharedBytes, stream>>>(args);
}

}  // namespace heed::cuda::tiled
