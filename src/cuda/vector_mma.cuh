#pragma once
// The tensor-core vector (decode) kernel for float16 and bfloat16, one instantiation per head-size
// class (cuda/vector_mma_<dtype>.cu). A block holds up to 16 query rows of one key head's group
// (the heads × positions that share its K and V) and streams its partition of the keys once.
//
// Products on tensor cores (mma.sync m16n8k16, float32 accumulate), transposed so that the
// query rows are the small N dimension:
//   Sᵀ[16 keys × 8 rows] = K[16 keys × D] · Qᵀ[D × 8 rows]
//   Oᵀ[Dv × 8 rows]     += Vᵀ[Dv × 16 keys] · Pᵀ[16 keys × 8 rows]
// Sᵀ's accumulator becomes Pᵀ's B operand through movmatrix (an 8 × 8 transpose in registers).
// Contractions may run in any order, so a lane's K fragment is laid out to be 16 contiguous
// bytes of a K row (q uses the same order), and a lane's V fragment 16 contiguous bytes of
// each of four V rows (one PRMT per register pairs two keys); the output columns come out in
// the order of those bytes. Each lane therefore copies (cp.async, 16 bytes) exactly the
// chunks its own fragments need into its own slots of the shared ring and reads back only
// those: the pipeline needs no barrier, and the slots are bank-conflict free.
//
// Lane l = 4·gid + tq. K item (16 keys of one tile): chunk 4p + tq (elements 8(4p + tq) ..
// + 7) of keys gid and gid + 8, for p < k_steps; it feeds k-steps 2p and 2p + 1. V item:
// chunk 8j + gid of keys 2tq, 2tq + 1, 2tq + 8, 2tq + 9, for j < v_steps; it feeds m-tiles
// 4j .. 4j + 3, whose row gid is column 8(8j + gid) + 2u and row gid + 8 the next column.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/vector_common.cuh"
#include "heed/error.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::vector_mma {

constexpr int kThreads = plan::cuda::kVectorMmaThreads;
constexpr int kWarps = plan::cuda::kVectorMmaWarps;
constexpr int kTileKeys = plan::cuda::kVectorMmaKeysPerTile;
constexpr int kMaxRows = 16;
constexpr unsigned kChunkBytes = 32 * 16;  // one 16-byte chunk for each lane of a warp
template <int kClass>
constexpr int kRowTiles = plan::cuda::vector_mma_max_row_tile(kClass) / 8;  // n-tiles of 8 query rows

struct StaticShared {
  RowInfo rows[kMaxRows];
  float warp_m[kWarps][kMaxRows];
  float warp_l[kWarps][kMaxRows];
};
static_assert(sizeof(StaticShared) <= plan::cuda::kVectorMmaStaticSharedBytes);

// c += a · b, m16n8k16, row-major A, column-major B, float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// The 8 × 8 16-bit matrix whose row gid, columns 2tq and 2tq + 1 this lane holds, transposed.
__device__ __forceinline__ unsigned transpose_8x8(unsigned x) {
  unsigned y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Two floats as one register of 16-bit values, `low` in the low half.
template <typename T>
__device__ __forceinline__ unsigned pack(float low, float high) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const unsigned*>(&pair);
  } else {
    const __half2 pair = __floats2half2_rn(low, high);
    return *reinterpret_cast<const unsigned*>(&pair);
  }
}

// {x.low, y.low} and {x.high, y.high}: the same element of two keys, one register.
__device__ __forceinline__ unsigned low_halves(unsigned x, unsigned y) { return __byte_perm(x, y, 0x5410); }
__device__ __forceinline__ unsigned high_halves(unsigned x, unsigned y) { return __byte_perm(x, y, 0x7632); }

// Word u (a compile-time constant once unrolled) of a 16-byte chunk.
__device__ __forceinline__ unsigned word(const uint4& v, int u) {
  return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}

// cp.async.wait_group takes an immediate: all but the newest `pending` groups have landed.
__device__ __forceinline__ void wait_pending(int pending) {
  static_assert(plan::cuda::kVectorMmaMaxRingItems == 12, "one case per pending count");
  switch (pending) {
    case 0: wait_async<0>(); break;
    case 1: wait_async<1>(); break;
    case 2: wait_async<2>(); break;
    case 3: wait_async<3>(); break;
    case 4: wait_async<4>(); break;
    case 5: wait_async<5>(); break;
    case 6: wait_async<6>(); break;
    case 7: wait_async<7>(); break;
    case 8: wait_async<8>(); break;
    case 9: wait_async<9>(); break;
    default: wait_async<10>(); break;
  }
}

// Where this lane's copies come from and go.
struct Copies {
  const char* k_rows;  // K row of the block's first key (bytes)
  const char* v_rows;
  std::int64_t k_row_bytes, v_row_bytes;
  const void* k_elements;  // the same rows as elements, for the element path (any strides)
  const void* v_elements;
  int keys;                // keys of the block
  unsigned ring;           // this warp's ring (shared address)
  // The fast path's lane pointers (bytes): key gid's chunk tq of K, key 2tq's chunk gid of V.
  const char* k_lane;
  const char* v_lane;
};

// One 16-byte copy, global -> shared, asynchronously.
__device__ __forceinline__ void copy_async_16(unsigned shared, const char* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(global) : "memory");
}

// The element path of issue_item (rows not 16-byte aligned or not contiguous): each chunk read
// element by element and stored at once, zeros past the keys and the head size. Out of line:
// rare, and large once inlined.
template <typename T, int kSteps>
__device__ __noinline__ void store_item_elements(unsigned base, const T* rows, std::int64_t row_stride,
                                                 std::int64_t stride, std::int64_t dim, int keys, int steps, int key0,
                                                 int gid, int tq, bool values) {
  constexpr int E = 8;
  const int key_count = values ? 4 : 2;
  for (int kk = 0; kk < key_count; ++kk) {
    const int key = values ? key0 + 2 * tq + (kk & 1) + 8 * (kk >> 1) : key0 + gid + 8 * kk;
    for (int step = 0; step < steps && step < kSteps; ++step) {
      const int chunk = values ? 8 * step + gid : 4 * step + tq;
      const unsigned dst = base + (values ? 4 * step + kk : 2 * step + kk) * kChunkBytes;
      const uint4 value = key < keys ? load_chunk(rows + key * row_stride, stride, std::int64_t{chunk} * E, dim, false)
                                     : make_uint4(0, 0, 0, 0);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(value.x), "r"(value.y),
                   "r"(value.z), "r"(value.w)
                   : "memory");
    }
  }
}

// Copies item `item` (K of tile item / 2 when even, V when odd) of this warp into ring slot
// `slot`: 16 bytes per chunk (cp.async), zeros for keys past the block and columns past the
// head size (nothing read for them).
// kFast (wide rows, D = Dv = the class): an item of 16 keys inside the block copies with no
// checks, from the lane pointers at constant offsets.
template <typename T, int KC, int VC, bool kFast>
__device__ __forceinline__ void issue_item(const VectorArgs& a, const Copies& st, int item, int slot, int warp,
                                           int gid, int tq) {
  constexpr int E = 8;  // elements of a 16-byte chunk
  constexpr int kItemChunks = 2 * KC;
  const unsigned base = st.ring + static_cast<unsigned>(slot * kItemChunks) * kChunkBytes + (gid * 4 + tq) * 16;
  const int key0 = (warp + kWarps * (item >> 1)) * kTileKeys;
  const bool values = (item & 1) != 0;
  if (kFast && key0 + kTileKeys <= st.keys) {
    if (!values) {
      const char* row = st.k_lane + key0 * st.k_row_bytes;  // key gid; key gid + 8 is 8 rows on
      const std::int64_t eight_rows = 8 * st.k_row_bytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int p = 0; p < KC; ++p) copy_async_16(base + (2 * p + h) * kChunkBytes, row + h * eight_rows + 64 * p);
      }
    } else {
      const char* row = st.v_lane + key0 * st.v_row_bytes;  // keys 2tq, 2tq + 1, 2tq + 8, 2tq + 9
      const std::int64_t next = st.v_row_bytes, eight_rows = 8 * st.v_row_bytes;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const char* key_row = row + (kk & 1) * next + (kk >> 1) * eight_rows;
#pragma unroll
        for (int j = 0; j < VC; ++j) copy_async_16(base + (4 * j + kk) * kChunkBytes, key_row + 128 * j);
      }
    }
    commit_async();
    return;
  }
  if (!a.wide_loads) {
    if (values) {
      store_item_elements<T, VC>(base, static_cast<const T*>(st.v_elements), a.v_strides.s[2], a.v_strides.s[3],
                                 a.value_dim, st.keys, a.v_steps, key0, gid, tq, true);
    } else {
      store_item_elements<T, KC>(base, static_cast<const T*>(st.k_elements), a.k_strides.s[2], a.k_strides.s[3],
                                 a.head_dim, st.keys, a.k_steps, key0, gid, tq, false);
    }
  } else if (!values) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // keys gid and gid + 8
      const int key = key0 + gid + 8 * h;
      const char* row = st.k_rows + key * st.k_row_bytes;
#pragma unroll
      for (int p = 0; p < KC; ++p) {
        if (p >= a.k_steps) break;
        const int chunk = 4 * p + tq;
        const bool ok = key < st.keys && chunk * E < a.head_dim;
        copy_async_16_or_zero(base + (2 * p + h) * kChunkBytes, ok ? row + chunk * 16 : st.k_rows, ok);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // keys 2tq, 2tq + 1, 2tq + 8, 2tq + 9
      const int key = key0 + 2 * tq + (kk & 1) + 8 * (kk >> 1);
      const char* row = st.v_rows + key * st.v_row_bytes;
#pragma unroll
      for (int j = 0; j < VC; ++j) {
        if (j >= a.v_steps) break;
        const int chunk = 8 * j + gid;
        const bool ok = key < st.keys && chunk * E < a.value_dim;
        copy_async_16_or_zero(base + (4 * j + kk) * kChunkBytes, ok ? row + chunk * 16 : st.v_rows, ok);
      }
    }
  }
  commit_async();
}

__device__ __forceinline__ uint4 load_shared(unsigned address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

// The online-softmax state of this lane's rows (nt·8 + 2tq + e) and its share of Oᵀ (the TMA
// kernel's tiles are 16 columns wide instead: [2] is column c + 8).
template <int NT, int VC>
struct Accumulators {
  float m[NT][2], l[NT][2];  // l: this lane's keys only until the end
  float o[NT][4 * VC][4];    // Oᵀ tiles: [0] (column c, row 2tq), [1] (c, 2tq + 1), [2] (c + 1, 2tq), [3]
  unsigned p[NT][2];         // Pᵀ of the last K item as the B operand (keys 2tq.., keys 2tq + 8..)

  // No key seen: m = -inf, l = 0, O = 0.
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        m[nt][e] = -INFINITY;
        l[nt][e] = 0.0f;
      }
      p[nt][0] = p[nt][1] = 0;
#pragma unroll
      for (int t = 0; t < 4 * VC; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][t][e] = 0.0f;
    }
  }
  // Each row's sum over the warp's keys (lanes of the same tq hold the same rows).
  __device__ __forceinline__ void sum_over_warp() {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 4);
        l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 8);
        l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 16);
      }
  }
  // The max and sum of n-tile nt's rows `row` and `row` + 1 (this lane's) into the warp's
  // entries of the block's shared arrays.
  __device__ __forceinline__ void store_stats(int nt, int row, float* warp_m, float* warp_l) const {
    warp_m[row] = m[nt][0];
    warp_l[row] = l[nt][0];
    warp_m[row + 1] = m[nt][1];
    warp_l[row + 1] = l[nt][1];
  }
};

// The W warps' partial rows (max, sum and `columns` output columns each, warp_out's rows
// kRowsPerWarp per warp, kClass floats apart) merged exactly by the block's 32·W threads; each
// row written out, or as this partition's partial (store_block_row).
template <typename T, int kRowsPerWarp, int kClass, int W>
__device__ __forceinline__ void merge_warps(const VectorArgs& a, std::int64_t b, std::int64_t kv_head,
                                            std::int64_t part, std::int64_t row0, const RowInfo* rows,
                                            int tile_rows, int columns, const float (&warp_m)[W][kMaxRows],
                                            const float (&warp_l)[W][kMaxRows], const float* warp_out) {
  for (int index = threadIdx.x; index < tile_rows * columns; index += 32 * W) {
    const int r = index / columns, d = index % columns;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) m_all = fmaxf(m_all, warp_m[w][r]);
    float l_all = 0.0f, o = 0.0f;
    const float offset = score::exp_offset(m_all);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float weight = exp2f(warp_m[w][r] - offset);
      l_all += warp_l[w][r] * weight;
      o += warp_out[(w * kRowsPerWarp + r) * kClass + d] * weight;
    }
    store_block_row<T>(a, b, kv_head, part, row0 + r, rows[r], d, m_all, l_all, o);
  }
}

// This block's keys: its partition of the span, narrowed to what the tile's rows see (from
// key_begin; returns their count). lo / hi: the keys [lo, hi), relative to key_begin, that each
// of this lane's rows (nt·8 + 2tq + e) sees; 0, 0 past the tile's rows.
template <int NT>
__device__ __forceinline__ int partition_keys(const VectorArgs& a, const RowInfo* rows, int tile_rows,
                                              std::int64_t part, int tq, std::int64_t& key_begin,
                                              int (&lo)[NT][2], int (&hi)[NT][2]) {
  key_begin = a.span_begin + part * a.keys_per_partition;
  std::int64_t key_end = min(a.span_end, key_begin + a.keys_per_partition);
  {
    std::int64_t first = key_end, last = key_begin;
    for (int r = 0; r < tile_rows; ++r) {
      if (rows[r].begin < rows[r].end) {
        first = min(first, rows[r].begin);
        last = max(last, rows[r].end);
      }
    }
    key_begin = max(key_begin, first);
    key_end = min(key_end, last);
  }
  const int keys = key_begin < key_end ? static_cast<int>(key_end - key_begin) : 0;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = nt * 8 + 2 * tq + e;
      lo[nt][e] = hi[nt][e] = 0;
      if (r < tile_rows) {
        lo[nt][e] = static_cast<int>(min(max(rows[r].begin - key_begin, std::int64_t{0}), std::int64_t{keys}));
        hi[nt][e] = static_cast<int>(min(max(rows[r].end - key_begin, std::int64_t{0}), std::int64_t{keys}));
      }
    }
  }
  return keys;
}

// The online softmax of one K item, shared by the tensor-core decode kernels: the lane's scores
// of keys key0 + gid and key0 + gid + 8 (s + s_odd: the two halves of the dimensions) for rows
// nt·8 + 2tq + e, scaled to log2, plus array masks (kMasks), -inf outside each row's [lo, hi);
// the running max and sum updated, the first kOutTiles O tiles rescaled, and Pᵀ kept as the
// next V item's B operand.
template <typename T, int NT, int kOutTiles, bool kMasks, typename Acc>
__device__ __forceinline__ void softmax_item(const VectorArgs& a, const RowInfo* rows, const float (&s)[NT][4],
                                             const float (&s_odd)[NT][4], int n_tiles, int key0,
                                             std::int64_t key_begin, std::int64_t b, const int (&lo)[NT][2],
                                             const int (&hi)[NT][2], int tq, int gid, Acc& acc) {
  const int key_a = key0 + gid, key_b = key_a + 8;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt >= n_tiles) break;
    float alpha[2], p_a[2], p_b[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool visible_a = key_a >= lo[nt][e] && key_a < hi[nt][e];
      const bool visible_b = key_b >= lo[nt][e] && key_b < hi[nt][e];
      float score_a = (s[nt][e] + s_odd[nt][e]) * a.transform.dot_scale;
      float score_b = (s[nt][2 + e] + s_odd[nt][2 + e]) * a.transform.dot_scale;
      if (!a.transform.linear()) {
        score_a = a.transform.finish(score_a, Exp2Approx{});
        score_b = a.transform.finish(score_b, Exp2Approx{});
      }
      if (kMasks && a.mask.kind != MaskKind::None) {
        const RowInfo& row = rows[nt * 8 + 2 * tq + e];
        const auto term = [&](int key) { return mask_term(a.mask, b, row.head, row.position, key_begin + key) * kLog2e; };
        if (visible_a) score_a = score::masked(score_a, term(key_a));
        if (visible_b) score_b = score::masked(score_b, term(key_b));
      }
      score_a = visible_a ? score_a : -INFINITY;
      score_b = visible_b ? score_b : -INFINITY;
      // The row's maximum over the item's 16 keys: lanes of the same tq hold the same rows.
      float step_max = fmaxf(score_a, score_b);
      step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 4));
      step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 8));
      step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 16));
      const float m_new = fmaxf(acc.m[nt][e], step_max);
      const float offset = score::exp_offset(m_new);
      alpha[e] = m_new == -INFINITY ? 1.0f : fast_exp2(acc.m[nt][e] - m_new);
      p_a[e] = fast_exp2(score_a - offset);
      p_b[e] = fast_exp2(score_b - offset);
      acc.l[nt][e] = acc.l[nt][e] * alpha[e] + p_a[e] + p_b[e];
      acc.m[nt][e] = m_new;
    }
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
      acc.o[nt][t][0] *= alpha[0];
      acc.o[nt][t][1] *= alpha[1];
      acc.o[nt][t][2] *= alpha[0];
      acc.o[nt][t][3] *= alpha[1];
    }
    // Sᵀ's fragment (key gid / gid + 8, rows 2tq, 2tq + 1) transposed into Pᵀ's B operand
    // (keys 2tq, 2tq + 1 / 2tq + 8, 2tq + 9, row gid).
    acc.p[nt][0] = transpose_8x8(pack<T>(p_a[0], p_a[1]));
    acc.p[nt][1] = transpose_8x8(pack<T>(p_b[0], p_b[1]));
  }
}

// Scores of one K item for the lane's (key, row) pairs, masked, then the online softmax and
// Pᵀ as the next V item's B operand.
template <typename T, int KC, int VC, int NT, bool kFast>
__device__ __forceinline__ void consume_keys(const VectorArgs& a, const StaticShared& sh, unsigned slot_base,
                                             unsigned q_base, int n_tiles, int key0, std::int64_t key_begin,
                                             std::int64_t b, const int (&lo)[NT][2], const int (&hi)[NT][2], int tq,
                                             int gid, Accumulators<NT, VC>& acc) {
  float s[NT][4], s_odd[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = s_odd[nt][e] = 0.0f;
#pragma unroll
  for (int p = 0; p < KC; ++p) {
    if (!kFast && p >= a.k_steps) break;
    const uint4 k_low = load_shared(slot_base + (2 * p) * kChunkBytes);       // key gid
    const uint4 k_high = load_shared(slot_base + (2 * p + 1) * kChunkBytes);  // key gid + 8
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= n_tiles) break;
      const uint4 q = load_shared(q_base + (nt * KC + p) * kChunkBytes);
      mma<T>(s[nt], k_low.x, k_high.x, k_low.y, k_high.y, q.x, q.y);
      mma<T>(s_odd[nt], k_low.z, k_high.z, k_low.w, k_high.w, q.z, q.w);
    }
  }
  softmax_item<T, NT, 4 * VC, !kFast>(a, sh.rows, s, s_odd, n_tiles, key0, key_begin, b, lo, hi, tq, gid, acc);
}

// Oᵀ += Vᵀ · Pᵀ for one V item.
template <typename T, int VC, int NT, bool kFast>
__device__ __forceinline__ void consume_values(const VectorArgs& a, unsigned slot_base, int n_tiles,
                                               Accumulators<NT, VC>& acc) {
#pragma unroll
  for (int j = 0; j < VC; ++j) {
    if (!kFast && j >= a.v_steps) break;
    // Keys 2tq, 2tq + 1, 2tq + 8, 2tq + 9 of this lane's column chunk.
    const uint4 v0 = load_shared(slot_base + (4 * j + 0) * kChunkBytes);
    const uint4 v1 = load_shared(slot_base + (4 * j + 1) * kChunkBytes);
    const uint4 v2 = load_shared(slot_base + (4 * j + 2) * kChunkBytes);
    const uint4 v3 = load_shared(slot_base + (4 * j + 3) * kChunkBytes);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      // Vᵀ rows gid (column 8(8j + gid) + 2u) and gid + 8 (the next column), keys as above.
      const unsigned a0 = low_halves(word(v0, u), word(v1, u)), a1 = high_halves(word(v0, u), word(v1, u));
      const unsigned a2 = low_halves(word(v2, u), word(v3, u)), a3 = high_halves(word(v2, u), word(v3, u));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= n_tiles) break;
        mma<T>(acc.o[nt][4 * j + u], a0, a1, a2, a3, acc.p[nt][0], acc.p[nt][1]);
      }
    }
  }
}

// NT: n-tiles of 8 query rows (the plan's row tile / 8). kFast: 16-byte rows, D = Dv = the class
// and no array mask, so the hot loop carries no checks for them: whole items copy from lane
// pointers at constant offsets, and no step is skipped.
template <typename T, int kClass, int NT, bool kFast>
__global__ void __launch_bounds__(kThreads) vector_mma_kernel(const VectorArgs a) {
  constexpr int KC = kClass / 32;  // compiled K steps; a.k_steps <= KC run
  constexpr int VC = kClass / 64;  // compiled V steps; a.v_steps <= VC run
  static_assert(NT >= 1 && NT <= kRowTiles<kClass>, "the class's row tile");
  constexpr int kItemChunks = 2 * KC;
  static_assert(kItemChunks == 4 * VC, "a K item and a V item take the same chunks per lane");
  extern __shared__ uint4 shared[];
  __shared__ StaticShared sh;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The merge pass may launch now; it waits for this grid's completion before reading.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const Call& g = a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const std::int64_t b = blockIdx.z, kv_head = blockIdx.y;
  const std::int64_t tile = blockIdx.x % a.row_tiles, part = blockIdx.x / a.row_tiles;
  const std::int64_t row0 = tile * a.row_tile;
  const int tile_rows = static_cast<int>(min(std::int64_t{a.row_tile}, a.rows - row0));
  const int n_tiles = (tile_rows + 7) / 8;

  if (threadIdx.x < tile_rows) sh.rows[threadIdx.x] = row_info(a, kv_head, row0 + threadIdx.x);
  __syncthreads();

  // This block's keys: its partition, narrowed to what the tile's rows can see.
  std::int64_t key_begin = 0;
  int lo[NT][2], hi[NT][2];
  const int keys = partition_keys<NT>(a, sh.rows, tile_rows, part, tq, key_begin, lo, hi);

  const int ring_items = a.ring_items;
  const unsigned ring_base = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const unsigned q_base = ring_base + static_cast<unsigned>(kWarps * ring_items * kItemChunks) * kChunkBytes;
  Copies st;
  {
    const T* k_block = static_cast<const T*>(a.k) + b * a.k_strides.s[0] + kv_head * a.k_strides.s[1] +
                       key_begin * a.k_strides.s[2];
    const T* v_block = static_cast<const T*>(a.v) + b * a.v_strides.s[0] + kv_head * a.v_strides.s[1] +
                       key_begin * a.v_strides.s[2];
    st.k_rows = reinterpret_cast<const char*>(k_block);
    st.v_rows = reinterpret_cast<const char*>(v_block);
    st.k_row_bytes = a.k_strides.s[2] * std::int64_t{sizeof(T)};
    st.v_row_bytes = a.v_strides.s[2] * std::int64_t{sizeof(T)};
    st.k_elements = k_block;
    st.v_elements = v_block;
    st.keys = keys;
    st.k_lane = st.k_rows + gid * st.k_row_bytes + tq * 16;
    st.v_lane = st.v_rows + 2 * tq * st.v_row_bytes + gid * 16;
    st.ring = ring_base + static_cast<unsigned>(warp * ring_items * kItemChunks) * kChunkBytes;
  }
  // This warp's tiles (16 keys each; tile t of the block goes to warp t % kWarps) as K and V items.
  constexpr int kBlockStep = kWarps * kTileKeys;
  const int tiles = keys > warp * kTileKeys ? (keys - warp * kTileKeys + kBlockStep - 1) / kBlockStep : 0;
  const int items = 2 * tiles;
  int next_item = 0, next_slot = 0;
  const auto issue_next = [&] {
    if (next_item < items) {
      issue_item<T, KC, VC, kFast>(a, st, next_item, next_slot, warp, gid, tq);
    } else {
      commit_async();  // an empty group keeps the count of groups per item
    }
    ++next_item;
    next_slot = next_slot + 1 == ring_items ? 0 : next_slot + 1;
  };
  for (int i = 0; i < ring_items - 1; ++i) issue_next();

  // q as B fragments (row nt·8 + gid, chunk 4p + tq), zeros past the head size and the tile.
  for (int index = threadIdx.x; index < NT * KC * 32; index += kThreads) {
    const int nt = index / (KC * 32), p = (index / 32) % KC, fragment_lane = index % 32;
    const int r = nt * 8 + fragment_lane / 4, chunk = 4 * p + fragment_lane % 4;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < tile_rows && p < a.k_steps) {
      const RowInfo& row = sh.rows[r];
      const T* q_row = static_cast<const T*>(a.q) + b * a.q_strides.s[0] + row.head * a.q_strides.s[1] +
                       row.position * a.q_strides.s[2];
      value = load_chunk(q_row, a.q_strides.s[3], std::int64_t{chunk} * 8, g.head_dim, a.wide_loads);
    }
    shared[(q_base - ring_base) / 16 + index] = value;
  }
  __syncthreads();

  Accumulators<NT, VC> acc;
  acc.reset();
  const unsigned lane_offset = static_cast<unsigned>(lane) * 16;
  int read_slot = 0;
  for (int item = 0; item < items; ++item) {
    wait_pending(ring_items - 2);
    issue_next();  // into the slot read by the previous item
    const unsigned slot_base =
        st.ring + static_cast<unsigned>(read_slot * kItemChunks) * kChunkBytes + lane_offset;
    read_slot = read_slot + 1 == ring_items ? 0 : read_slot + 1;
    if ((item & 1) == 0) {
      const int key0 = (warp + kWarps * (item >> 1)) * kTileKeys;
      consume_keys<T, KC, VC, NT, kFast>(a, sh, slot_base, q_base + lane_offset, n_tiles, key0, key_begin, b, lo, hi, tq,
                                  gid, acc);
    } else {
      consume_values<T, VC, NT, kFast>(a, slot_base, n_tiles, acc);
    }
  }
  wait_async<0>();

  acc.sum_over_warp();
  __syncthreads();  // every warp is done with the ring: it becomes warp_out
  // warp_out[warp][row][column], float32, rows of the tile, columns in the caller's order.
  float* warp_out = reinterpret_cast<float*>(shared);
  constexpr int kRowsPerWarp = NT * 8;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt >= n_tiles) break;
    const int row = nt * 8 + 2 * tq;
#pragma unroll
    for (int j = 0; j < VC; ++j) {
      if (!kFast && j >= a.v_steps) break;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int column = (8 * j + gid) * 8 + 2 * u;
        float* out = warp_out + (warp * kRowsPerWarp + row) * kClass + column;
        *reinterpret_cast<float2*>(out) = make_float2(acc.o[nt][4 * j + u][0], acc.o[nt][4 * j + u][2]);
        *reinterpret_cast<float2*>(out + kClass) = make_float2(acc.o[nt][4 * j + u][1], acc.o[nt][4 * j + u][3]);
      }
    }
    if (gid == 0) acc.store_stats(nt, row, sh.warp_m[warp], sh.warp_l[warp]);
  }
  __syncthreads();

  // The warps' partial rows merged exactly; written out, or as this partition's partial.
  merge_warps<T, kRowsPerWarp, kClass>(a, b, kv_head, part, row0, sh.rows, tile_rows, static_cast<int>(g.value_dim),
                                       sh.warp_m, sh.warp_l, warp_out);
}

template <typename T, int kClass, int NT, bool kFast>
void launch_kernel(const VectorArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  allow_shared_bytes<vector_mma_kernel<T, kClass, NT, kFast>>(s.shared_bytes);
  vector_mma_kernel<T, kClass, NT, kFast><<<grid, kThreads, static_cast<std::size_t>(s.shared_bytes), stream>>>(a);
}

// The class's kernel for the plan's row tile (8 rows: one n-tile, half the accumulators) and
// the fast path where it applies.
template <typename T, int kClass>
void launch_class(const VectorArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  const bool fast = a.wide_loads && a.head_dim == kClass && a.value_dim == kClass &&
                    a.mask.kind == MaskKind::None;
  if (s.row_tile <= 8 || kRowTiles<kClass> == 1) {
    return fast ? launch_kernel<T, kClass, 1, true>(a, s, grid, stream)
                : launch_kernel<T, kClass, 1, false>(a, s, grid, stream);
  }
  if constexpr (kRowTiles<kClass> >= 2) {
    return fast ? launch_kernel<T, kClass, 2, true>(a, s, grid, stream)
                : launch_kernel<T, kClass, 2, false>(a, s, grid, stream);
  }
}

template <typename T>
void launch(const VectorArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  switch (s.head_class) {
    case 64: return launch_class<T, 64>(a, s, grid, stream);
    case 128: return launch_class<T, 128>(a, s, grid, stream);
    case 256: return launch_class<T, 256>(a, s, grid, stream);
    case 512: return launch_class<T, 512>(a, s, grid, stream);
  }
  throw Error(ErrorKind::Internal, format("[heed::attention] no tensor-core vector kernel for head class {}",
                                          s.head_class));
}

}  // namespace heed::cuda::vector_mma
