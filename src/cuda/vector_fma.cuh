#pragma once
// The vector (decode) kernel on CUDA cores: one block per (key partition × row tile, key head,
// batch) holds the query rows of every head of the group and streams its keys once with
// 16-byte loads, several keys in flight per key group. Partitions' partials are merged by
// cuda/vector_merge.cuh. Instantiated by cuda/vector.cu.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/format.hpp"
#include "cuda/common.cuh"
#include "cuda/launch.hpp"
#include "cuda/ptx.cuh"
#include "cuda/vector_common.cuh"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::vector_fma {

constexpr int kThreads = plan::cuda::kVectorThreads;
constexpr int kWarps = kThreads / 32;
template <int C>
constexpr int kKeysPerStep = plan::cuda::vector_keys_per_step(C);
constexpr int kStages = plan::cuda::kVectorStages;

// Lanes with the same key group hold the same sums after the butterfly; adds the 32 / L key
// groups of a warp (online-softmax states) into every lane.
template <int C, int R, int E>
__device__ __forceinline__ void merge_key_groups(float (&m)[R], float (&l)[R], float (&acc)[R][C][E], int lanes) {
  for (int offset = lanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float m_other = __shfl_xor_sync(0xffffffffu, m[r], offset);
      const float l_other = __shfl_xor_sync(0xffffffffu, l[r], offset);
      const float m_new = fmaxf(m[r], m_other);
      const float a = exp2f(m[r] - score::exp_offset(m_new));
      const float b = exp2f(m_other - score::exp_offset(m_new));
      l[r] = l[r] * a + l_other * b;
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float other = __shfl_xor_sync(0xffffffffu, acc[r][c][e], offset);
          acc[r][c][e] = acc[r][c][e] * a + other * b;
        }
      }
      m[r] = m_new;
    }
  }
}

// This thread's 16-byte slot of the shared ring [stage][key][chunk][k or v][thread]: each thread
// reads back only what it copied itself, so the pipeline needs no barrier.
template <int U, int C>
__device__ __forceinline__ uint4* ring_slot(uint4* ring, int stage, int u, int c, int kv) {
  return ring + ((((stage * U + u) * C + c) * 2 + kv) * kThreads + threadIdx.x);
}

// Starts the copies of one step: keys j0 .. j0 + U - 1 of this key group, this lane's 16-byte
// chunks of their K and V rows. Rows past the block's keys are clamped into it (their scores
// are masked), so every copy is unconditional. Without wide rows: element loads, synchronous.
template <typename T, int C, int U>
__device__ __forceinline__ void issue_step(const VectorArgs& a, uint4* ring, int stage, const T* k_base,
                                           const T* v_base, std::int64_t j0, std::int64_t key_end,
                                           const std::int64_t (&k_off)[C], const std::int64_t (&v_off)[C], int L,
                                           int sub) {
  constexpr int E = 16 / sizeof(T);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::int64_t j = min(j0 + u, key_end - 1);
    const T* k_row = k_base + j * a.k_strides.s[2];
    const T* v_row = v_base + j * a.v_strides.s[2];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (a.wide_loads) {
        ptx::cp_async_16(ptx::shared_address(ring_slot<U, C>(ring, stage, u, c, 0)), k_row + k_off[c]);
        ptx::cp_async_16(ptx::shared_address(ring_slot<U, C>(ring, stage, u, c, 1)), v_row + v_off[c]);
      } else {
        const std::int64_t d0 = std::int64_t(c * L + sub) * E;
        *ring_slot<U, C>(ring, stage, u, c, 0) = load_chunk(k_row, a.k_strides.s[3], d0, a.head_dim, false);
        *ring_slot<U, C>(ring, stage, u, c, 1) = load_chunk(v_row, a.v_strides.s[3], d0, a.value_dim, false);
      }
    }
  }
  ptx::cp_async_commit();
}

// The wide path of issue_step with its addresses carried from step to step: `k_lane[c]` points
// at this lane's chunk c of key j0's K row (bytes). Only a step that runs past the block's keys
// clamps its rows.
template <int C, int U>
__device__ __forceinline__ void issue_step_wide(unsigned ring_stage, const char* const (&k_lane)[C],
                                                const char* const (&v_lane)[C], std::int64_t k_row_bytes,
                                                std::int64_t v_row_bytes, std::int64_t j0, std::int64_t key_end) {
  constexpr unsigned kSlot = kThreads * 16;  // bytes between two chunks of one thread
  // Rows past the block's keys (the last step only) read the last row: row = min(u, last).
  const int last = static_cast<int>(min(key_end - 1 - j0, std::int64_t{U - 1}));
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::int64_t row = min(u, last);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const unsigned slot = ring_stage + static_cast<unsigned>((u * C + c) * 2) * kSlot;
      ptx::cp_async_16(slot, k_lane[c] + row * k_row_bytes);
      ptx::cp_async_16(slot + kSlot, v_lane[c] + row * v_row_bytes);
    }
  }
  ptx::cp_async_commit();
}

// The block-table entries of one step's U keys (j0 on, clamped to the block's last key), loaded a
// step ahead of the copies that use them: with small pages each key has its own entry, and a copy
// that waited on its entry would leave the ring short while the warp computes.
template <int U>
struct StepPages {
  std::int32_t entry[U];  // as the table holds it: clamped to the cache where used
  int row[U];
};

struct NoPages {};  // dense and ragged keys: no table

template <int U>
__device__ __forceinline__ StepPages<U> step_pages(const VectorArgs& a, const Sequence& seq, std::int64_t j0,
                                                   std::int64_t key_end) {
  const unsigned size = page_divisor(a.page_size);
  const auto key = static_cast<unsigned>(min(j0, key_end - 1));
  unsigned index = key / size, row = key - index * size;
  StepPages<U> p;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (u > 0 && j0 + u < key_end && ++row == size) {
      row = 0;
      ++index;
    }
    p.entry[u] = seq.pages[index * a.seqs.table_strides[1]];
    p.row[u] = static_cast<int>(row);
  }
  return p;
}

// issue_step for paged keys, at the rows of `pages` (step_pages of j0). `k_lane[c]` points at
// this lane's chunk c of the cache's element 0 (bytes).
template <typename T, int C, int U>
__device__ __forceinline__ void issue_step_paged(const VectorArgs& a, std::int64_t kv_head, uint4* ring, int stage,
                                                 const StepPages<U>& pages, const char* const (&k_lane)[C],
                                                 const char* const (&v_lane)[C], int L, int sub) {
  constexpr int E = 16 / sizeof(T);
  constexpr std::int64_t kBytes = sizeof(T);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::int64_t page = call::detail::clamp(std::int64_t{pages.entry[u]}, std::int64_t{0}, a.seqs.num_pages - 1);
    const std::int64_t k_row = page * a.k_strides.s[0] + kv_head * a.k_strides.s[1] + pages.row[u] * a.k_strides.s[2];
    const std::int64_t v_row = page * a.v_strides.s[0] + kv_head * a.v_strides.s[1] + pages.row[u] * a.v_strides.s[2];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (a.wide_loads) {
        ptx::cp_async_16(ptx::shared_address(ring_slot<U, C>(ring, stage, u, c, 0)), k_lane[c] + k_row * kBytes);
        ptx::cp_async_16(ptx::shared_address(ring_slot<U, C>(ring, stage, u, c, 1)), v_lane[c] + v_row * kBytes);
      } else {
        const std::int64_t d0 = std::int64_t(c * L + sub) * E;
        *ring_slot<U, C>(ring, stage, u, c, 0) = load_chunk(k + k_row, a.k_strides.s[3], d0, a.head_dim, false);
        *ring_slot<U, C>(ring, stage, u, c, 1) = load_chunk(v + v_row, a.v_strides.s[3], d0, a.value_dim, false);
      }
    }
  }
  ptx::cp_async_commit();
}

// Scores of one step's keys for the tile's rows, masks, then the online softmax into (m, l, acc).
template <typename T, int C, int R, int U>
__device__ __forceinline__ void compute_step(const VectorArgs& a, const RowInfo* rows, std::int64_t b, std::int64_t j0,
                                             std::int64_t key_end, int L, const float (&q)[R][C][16 / sizeof(T)],
                                             const uint4 (&k_raw)[U][C], const uint4 (&v_raw)[U][C], float (&m)[R],
                                             float (&l)[R], float (&acc)[R][C][16 / sizeof(T)]) {
  constexpr int E = 16 / sizeof(T);
  const Call& g = a;
  float s[R][U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int r = 0; r < R; ++r) s[r][u] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float kv = chunk_element<T>(k_raw[u][c], e);
#pragma unroll
        for (int r = 0; r < R; ++r) s[r][u] = fmaf(q[r][c][e], kv, s[r][u]);
      }
    }
  }
  for (int offset = L >> 1; offset > 0; offset >>= 1) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) s[r][u] += __shfl_xor_sync(0xffffffffu, s[r][u], offset);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const RowInfo info = rows[r];
    float step_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t j = j0 + u;
      const bool visible = info.valid && j < key_end && j >= info.begin && j < info.end;
      float score = visible ? s[r][u] : -INFINITY;
      if (visible && !a.transform.linear()) score = a.transform.finish(score, KernelTanh<T>{});
      if (visible && g.mask.kind != MaskKind::None) {
        score = score::masked(score, mask_term(g.mask, b, info.head, info.position, j) * kLog2e);
      }
      s[r][u] = score;
      step_max = fmaxf(step_max, score);
    }
    const float m_new = fmaxf(m[r], step_max);
    const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      s[r][u] = exp2f(s[r][u] - score::exp_offset(m_new));
      sum += s[r][u];
    }
    l[r] = l[r] * alpha + sum;
    m[r] = m_new;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][c][e] *= alpha;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float vv = chunk_element<T>(v_raw[u][c], e);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][c][e] = fmaf(s[r][u], vv, acc[r][c][e]);
      }
    }
  }
}

// Transposing butterfly over `Count` values (a compile-time recursion, so every index is a
// constant and the values stay in registers): a lane keeps half of its values and adds its
// partner's copy of that half; the lane bit `offset` selects the upper half.
template <int N, int Count>
__device__ __forceinline__ void transpose_reduce(float (&s)[N], int lane, int& offset, int& own) {
  if constexpr (Count > 1) {
    constexpr int kHalf = Count / 2;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? s[i] : s[i + kHalf];
      const float keep = upper ? s[i + kHalf] : s[i];
      s[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
    if (upper) own += kHalf;
    offset >>= 1;
    transpose_reduce<N, kHalf>(s, lane, offset, own);
  }
}

// The keys [lo, hi) the lane's own row sees in this block, and the row's head and position.
struct OwnRow {
  std::int64_t lo, hi, head, position;
};

// The same step when the tile's R × U scores fit the key group's lanes (R × U <= L): the
// partial dot products are reduced by a transposing butterfly (R·U − 1 shuffles instead of
// R·U·log2 L), after which each lane owns one (row, key) score, so masks and exponentials are
// computed once per score instead of once per lane. `owner_stride` lanes share each score.
template <typename T, int C, int R, int U>
__device__ __forceinline__ void compute_step_owned(const VectorArgs& a, const OwnRow& own_row_info, std::int64_t b,
                                                   std::int64_t j0, int L, int lane,
                                                   const float (&q)[R][C][16 / sizeof(T)], const uint4 (&k_raw)[U][C],
                                                   const uint4 (&v_raw)[U][C], float (&m)[R], float& l_own,
                                                   float (&acc)[R][C][16 / sizeof(T)]) {
  constexpr int E = 16 / sizeof(T);
  constexpr int N = R * U;
  const Call& g = a;
  float s[N];
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int r = 0; r < R; ++r) s[r * U + u] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float kv = chunk_element<T>(k_raw[u][c], e);
#pragma unroll
        for (int r = 0; r < R; ++r) s[r * U + u] = fmaf(q[r][c][e], kv, s[r * U + u]);
      }
    }
  }
  int offset = L >> 1;
  int own = 0;  // flattened index (row × U + key) of the score this lane ends with
  transpose_reduce<N, N>(s, lane, offset, own);
  for (; offset > 0; offset >>= 1) s[0] += __shfl_xor_sync(0xffffffffu, s[0], offset);
  const int stride = L / N;  // lanes holding the same score
  const int group_base = lane & ~(L - 1);
  const int own_row = own / U;
  const std::int64_t j = j0 + own % U;

  const bool visible = j >= own_row_info.lo && j < own_row_info.hi;
  float score = visible ? s[0] : -INFINITY;
  if (visible && !a.transform.linear()) score = a.transform.finish(score, KernelTanh<T>{});
  if (visible && g.mask.kind != MaskKind::None) {
    score = score::masked(score, mask_term(g.mask, b, own_row_info.head, own_row_info.position, j) * kLog2e);
  }
  // The row's maximum over its U keys (lanes `stride` apart), then every row's to every lane.
  float row_max = score;
#pragma unroll
  for (int x = 1; x < U; x <<= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, x * stride));
  float alpha[R];
  float m_own = 0.0f, alpha_own = 1.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float step_max = __shfl_sync(0xffffffffu, row_max, group_base + r * U * stride);
    const float m_new = fmaxf(m[r], step_max);
    alpha[r] = m_new == -INFINITY ? 1.0f : ptx::ex2_approx(m[r] - m_new);
    m[r] = m_new;
    if (r == own_row) {
      m_own = m_new;
      alpha_own = alpha[r];
    }
  }
  const float p = ptx::ex2_approx(score - score::exp_offset(m_own));
  l_own = l_own * alpha_own + p;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][c][e] *= alpha[r];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    float p_key[R];
#pragma unroll
    for (int r = 0; r < R; ++r) p_key[r] = __shfl_sync(0xffffffffu, p, group_base + (r * U + u) * stride);
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float vv = chunk_element<T>(v_raw[u][c], e);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][c][e] = fmaf(p_key[r], vv, acc[r][c][e]);
      }
    }
  }
}

// Each row's sum over the lanes that own its scores (after compute_step_owned), to every lane.
template <int R, int U>
__device__ __forceinline__ void gather_row_sums(float l_own, int L, int lane, float (&l)[R]) {
  constexpr int N = R * U;
  const int stride = L / N;
  const int group_base = lane & ~(L - 1);
#pragma unroll
  for (int x = 1; x < U; x <<= 1) l_own += __shfl_xor_sync(0xffffffffu, l_own, x * stride);
#pragma unroll
  for (int r = 0; r < R; ++r) l[r] = __shfl_sync(0xffffffffu, l_own, group_base + r * U * stride);
}

// This block's keys: its partition of the span, narrowed to what the tile's rows can see.
template <int R>
__device__ __forceinline__ void block_keys(const VectorArgs& a, const KeyRange& span, const RowInfo* rows,
                                           std::int64_t part, std::int64_t& key_begin, std::int64_t& key_end) {
  key_begin = span.begin + part * a.keys_per_partition;
  key_end = min(span.end, key_begin + a.keys_per_partition);
  std::int64_t lo = key_end, hi = key_begin;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (rows[r].valid && rows[r].begin < rows[r].end) {
      lo = min(lo, rows[r].begin);
      hi = max(hi, rows[r].end);
    }
  }
  key_begin = max(key_begin, lo);
  key_end = min(key_end, hi);
}

// This lane's chunks (elements into a K or V row); in the wide path a chunk past the row reads
// chunk 0 (its q is zero).
template <typename T, int C>
__device__ __forceinline__ void lane_chunks(const Call& g, int L, int sub, std::int64_t (&k_off)[C],
                                            std::int64_t (&v_off)[C]) {
  constexpr int E = 16 / sizeof(T);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const std::int64_t d0 = std::int64_t(c * L + sub) * E;
    k_off[c] = d0 < g.head_dim ? d0 : 0;
    v_off[c] = d0 < g.value_dim ? d0 : 0;
  }
}

// Bytes of one stage of the ring: U keys × C chunks × (K, V) × kThreads threads × 16 bytes.
template <int C>
constexpr unsigned kStageBytes = kKeysPerStep<C> * C * 2 * kThreads * 16;

// This thread's chunks of one stage's keys, from the ring into registers.
template <int C, int U>
__device__ __forceinline__ void read_ring_stage(const uint4* ring, int stage, uint4 (&k_raw)[U][C],
                                                uint4 (&v_raw)[U][C]) {
  const uint4* slots = ring + stage * (kStageBytes<C> / 16) + threadIdx.x;
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      k_raw[u][c] = slots[((u * C + c) * 2) * kThreads];
      v_raw[u][c] = slots[((u * C + c) * 2 + 1) * kThreads];
    }
}

// This key group's online softmax (m, l, acc) over the block's keys [key_begin, key_end), a step
// of U keys at a time. kPaged: keys read through the block table (its own instance, so that the
// dense loop keeps its registers).
template <typename T, int C, int R, bool kPaged>
__device__ __forceinline__ void stream_keys(const VectorArgs& a, const Sequence& seq, uint4* ring,
                                            const RowInfo* rows, std::int64_t b, std::int64_t kv_head, std::int64_t key_begin, std::int64_t key_end,
                                            const std::int64_t (&k_off)[C], const std::int64_t (&v_off)[C],
                                            int L, int lane, int warp, const float (&q)[R][C][16 / sizeof(T)], float (&m)[R],
                                            float (&l)[R], float (&acc)[R][C][16 / sizeof(T)]) {
  constexpr int E = 16 / sizeof(T);
  constexpr int U = kKeysPerStep<C>;
  const int sub = lane & (L - 1);
  const int key_groups = kWarps * (32 / L);
  const int key_group = warp * (32 / L) + lane / L;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][c][e] = 0.0f;
  }

  // Dense and ragged keys lie at one stride from key 0's row (paged ones: issue_step_paged).
  constexpr bool paged = kPaged;
  const T* k_base = static_cast<const T*>(a.k) + (paged ? 0 : call::key_offset(a, a.k_strides, seq, kv_head, 0));
  const T* v_base = static_cast<const T*>(a.v) + (paged ? 0 : call::key_offset(a, a.v_strides, seq, kv_head, 0));
  // kStages-deep pipeline of asynchronous copies: steps i + 1 and i + 2 are in flight while step
  // i computes. Every lane of a warp runs the same steps (the shuffles need all 32).
  const std::int64_t step = std::int64_t(key_groups) * U;
  const std::int64_t group_offset = std::int64_t(key_group) * U;
  const std::int64_t steps = key_begin < key_end ? (key_end - key_begin + step - 1) / step : 0;
  const bool owned = R * U <= L;  // each lane owns one score: see compute_step_owned
  float l_own = 0.0f;
  // The row whose scores this lane owns after the transposed reduction (lane / (L / (R·U))).
  OwnRow own_row{0, 0, 0, 0};
  if (R > 1 || owned) {
    const RowInfo info = rows[(sub / (L / (R * U))) / U];
    if (info.valid) own_row = {max(info.begin, key_begin), min(info.end, key_end), info.head, info.position};
  }
  // Wide path: this lane's byte addresses of its first key's chunks, advanced a step at a time.
  const std::int64_t k_row_bytes = a.k_strides.s[2] * std::int64_t(sizeof(T));
  const std::int64_t v_row_bytes = a.v_strides.s[2] * std::int64_t(sizeof(T));
  // Paged: the cache's element 0, each key's row added per step.
  const std::int64_t first_key = paged ? 0 : key_begin + group_offset;
  const char* k_lane[C];
  const char* v_lane[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    k_lane[c] = reinterpret_cast<const char*>(k_base + k_off[c]) + first_key * k_row_bytes;
    v_lane[c] = reinterpret_cast<const char*>(v_base + v_off[c]) + first_key * v_row_bytes;
  }
  const std::int64_t k_step_bytes = step * k_row_bytes, v_step_bytes = step * v_row_bytes;
  const auto ring_lane = ptx::shared_address(ring + threadIdx.x);
  const int step_count = static_cast<int>(steps);
  std::int64_t issue_j0 = key_begin + group_offset;  // this key group's first key of the next issued step
  // Paged: the next issued step's table entries (its keys clamped into the block's).
  std::conditional_t<paged, StepPages<U>, NoPages> pages_ahead{};
  if constexpr (paged) {
    if (step_count > 0) pages_ahead = step_pages<U>(a, seq, issue_j0, key_end);
  }
  const auto issue = [&](int stage) {
    if constexpr (paged) {
      issue_step_paged<T, C, U>(a, kv_head, ring, stage, pages_ahead, k_lane, v_lane, L, sub);
      pages_ahead = step_pages<U>(a, seq, issue_j0 + step, key_end);
      // The table line that step_pages reads two issues later.
      const std::int64_t later = min(issue_j0 + 3 * step, key_end - 1);
      if (sub == 0) prefetch_table(seq.pages, a.seqs.table_strides[1], a.page_size, later);
    } else if (a.wide_loads) {
      issue_step_wide<C, U>(ring_lane + stage * kStageBytes<C>, k_lane, v_lane, k_row_bytes, v_row_bytes, issue_j0,
                            key_end);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        k_lane[c] += k_step_bytes;
        v_lane[c] += v_step_bytes;
      }
    } else {
      issue_step<T, C, U>(a, ring, stage, k_base, v_base, issue_j0, key_end, k_off, v_off, L, sub);
    }
    issue_j0 += step;
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < step_count) {
      issue(i);
    } else {
      ptx::cp_async_commit();
    }
  }
  int write_stage = kStages - 1, read_stage = 0;
  std::int64_t j0 = key_begin + group_offset;
  for (int i = 0; i < step_count; ++i) {
    ptx::cp_async_wait<kStages - 2>();
    uint4 k_raw[U][C], v_raw[U][C];
    read_ring_stage<C, U>(ring, read_stage, k_raw, v_raw);
    if (i + kStages - 1 < step_count) {
      issue(write_stage);
    } else {
      ptx::cp_async_commit();
    }
    read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
    // The planner gives several rows per tile only where R × U <= L; one row may have fewer lanes.
    if (R > 1 || owned) {
      compute_step_owned<T, C, R, U>(a, own_row, b, j0, L, lane, q, k_raw, v_raw, m, l_own, acc);
    } else {
      compute_step<T, C, R, U>(a, rows, b, j0, key_end, L, q, k_raw, v_raw, m, l, acc);
    }
    j0 += step;
  }
  ptx::cp_async_wait<0>();
  if (R > 1 || owned) gather_row_sums<R, U>(l_own, L, lane, l);

  merge_key_groups<C, R, E>(m, l, acc, L);
}

// This warp's partial rows (max, sum, output) into shared memory, from the lanes of its first key
// group: after merge_key_groups every key group holds the same sums.
template <int C, int R, int E, int kRowFloats>
__device__ __forceinline__ void store_warp_partials(const float (&m)[R], const float (&l)[R],
                                                    const float (&acc)[R][C][E], int L, int lane, int warp,
                                                    float (*warp_acc)[R][kRowFloats], float (&warp_m)[kWarps][R],
                                                    float (&warp_l)[kWarps][R]) {
  const int sub = lane & (L - 1);
  if (lane < L) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int e = 0; e < E; ++e) warp_acc[warp][r][(c * L + sub) * E + e] = acc[r][c][e];
      if (lane == 0) {
        warp_m[warp][r] = m[r];
        warp_l[warp][r] = l[r];
      }
    }
  }
}

// The kWarps warps' partial rows merged exactly by the block's threads, a (row, column) each;
// each row written out, or as this partition's partial (store_block_row).
template <typename T, int R, int kRowFloats>
__device__ __forceinline__ void merge_warps(const VectorArgs& a, const Sequence& seq, const RowInfo* rows,
                                            std::int64_t kv_head, std::int64_t part, std::int64_t row0,
                                            const float (&warp_m)[kWarps][R], const float (&warp_l)[kWarps][R],
                                            const float (*warp_acc)[R][kRowFloats]) {
  const std::int64_t dv = a.value_dim;
  for (std::int64_t index = threadIdx.x; index < R * dv; index += kThreads) {
    const int r = static_cast<int>(index / dv);
    const std::int64_t d = index % dv;
    const RowInfo info = rows[r];
    if (!info.valid) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w][r]);
    float l_all = 0.0f, o = 0.0f;
    const float offset = score::exp_offset(m_all);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(warp_m[w][r] - offset);
      l_all += warp_l[w][r] * weight;
      o += warp_acc[w][r][d] * weight;
    }
    store_block_row<T>(a, seq, kv_head, part, row0 + r, info, d, m_all, l_all, o);
  }
}

// Resident blocks per SM the register budget is cut for (ptxas, sm_90a: no spills; 4 blocks
// would fit the shared memory but spill at 128 registers).
template <int R, int C>
constexpr int kMinBlocks = R * C <= 4 ? 3 : 2;

template <typename T, int C, int R, bool kPaged>
__global__ void __launch_bounds__(kThreads, kMinBlocks<R, C>) vector_kernel(const VectorArgs a) {
  constexpr int E = 16 / sizeof(T);
  extern __shared__ uint4 ring[];  // kStages × kKeysPerStep × C × 2 × kThreads chunks, then reused below
  constexpr int kRowFloats = C * 32 * E;  // one row of a warp's output in shared memory
  __shared__ RowInfo rows[R];
  __shared__ float warp_m[kWarps][R], warp_l[kWarps][R];
  auto warp_acc = reinterpret_cast<float(*)[R][kRowFloats]>(ring);  // [kWarps][R][kRowFloats], after the keys

  ptx::griddepcontrol_launch_dependents();  // the merge may launch now
  const Call& g = a;
  const int L = a.lanes_per_key;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane & (L - 1);
  const std::int64_t b = blockIdx.z, kv_head = blockIdx.y;
  const std::int64_t tile = blockIdx.x % a.row_tiles, part = blockIdx.x / a.row_tiles;
  const std::int64_t row0 = tile * R;

  // A ragged or paged block reads its sequence's lengths (clamped): partitions past its keys and
  // tiles past its rows have nothing to write.
  // In shared memory, so that the key loop keeps its registers.
  __shared__ alignas(Sequence) unsigned char seq_storage[sizeof(Sequence)];
  Sequence& seq = *reinterpret_cast<Sequence*>(seq_storage);
  if (threadIdx.x == 0) seq = call::sequence(a, b);
  __syncthreads();
  const KeyRange span = sequence_span(a, seq);
  if (part >= sequence_partitions(a, span)) return;
  if (threadIdx.x < R) rows[threadIdx.x] = row_info(a, seq, kv_head, row0 + threadIdx.x);
  __syncthreads();
  bool any_row = false;
#pragma unroll
  for (int r = 0; r < R; ++r) any_row = any_row || rows[r].valid;
  if (!any_row) return;

  std::int64_t key_begin, key_end;
  block_keys<R>(a, span, rows, part, key_begin, key_end);

  std::int64_t k_off[C], v_off[C];
  lane_chunks<T, C>(a, L, sub, k_off, v_off);

  // q rows of the tile, pre-multiplied by scale × log2(e).
  float q[R][C][E];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const RowInfo info = rows[r];
    const T* q_row = static_cast<const T*>(a.q) + call::row_offset(a.q_strides, seq, info.head, info.position);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const uint4 raw = info.valid ? load_chunk(q_row, a.q_strides.s[3], std::int64_t(c * L + sub) * E, g.head_dim,
                                                a.wide_loads)
                                   : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int e = 0; e < E; ++e) q[r][c][e] = chunk_element<T>(raw, e) * a.transform.dot_scale;
    }
  }

  float m[R], l[R], acc[R][C][E];
  stream_keys<T, C, R, kPaged>(a, seq, ring, rows, b, kv_head, key_begin, key_end, k_off, v_off, L, lane, warp, q, m, l, acc);
  __syncthreads();  // the ring becomes warp_acc
  store_warp_partials<C, R, E, kRowFloats>(m, l, acc, L, lane, warp, warp_acc, warp_m, warp_l);
  __syncthreads();
  merge_warps<T, R, kRowFloats>(a, seq, rows, kv_head, part, row0, warp_m, warp_l, warp_acc);
}

template <typename T, int C, int R, bool kPaged>
void launch_paged(const VectorArgs& a, dim3 grid, cudaStream_t stream) {
  constexpr int E = 16 / sizeof(T);
  constexpr std::size_t ring_bytes = std::size_t{kStages} * kKeysPerStep<C> * C * 2 * kThreads * 16;
  constexpr std::size_t acc_bytes = std::size_t{kWarps} * R * C * 32 * E * sizeof(float);
  constexpr std::size_t shared = ring_bytes > acc_bytes ? ring_bytes : acc_bytes;
  allow_shared_bytes<vector_kernel<T, C, R, kPaged>, Carveout::Driver>(static_cast<std::int64_t>(shared));
  vector_kernel<T, C, R, kPaged><<<grid, kThreads, shared, stream>>>(a);
}

template <typename T, int C, int R>
void launch_kernel(const VectorArgs& a, dim3 grid, cudaStream_t stream) {
  if (a.form == call::Form::Paged) return launch_paged<T, C, R, true>(a, grid, stream);
  launch_paged<T, C, R, false>(a, grid, stream);
}

template <typename T, int C>
void launch_rows(const VectorArgs& a, int row_tile, dim3 grid, cudaStream_t stream) {
  constexpr int E = 16 / sizeof(T);
  switch (row_tile) {
    case 1: return launch_kernel<T, C, 1>(a, grid, stream);
    case 2: return launch_kernel<T, C, 2>(a, grid, stream);
    case 4: return launch_kernel<T, C, 4>(a, grid, stream);
    case 8:
      if constexpr (8 * C * E <= plan::cuda::kVectorRegisterFloats) return launch_kernel<T, C, 8>(a, grid, stream);
      break;
  }
  throw Error(ErrorKind::Internal, format("[heed::attention] no vector kernel for {} rows x {} chunks", row_tile, C));
}

// Pass 1 on `stream` for the plan's chunks per lane and row tile, grid [partitions × row tiles,
// Hkv, B].
template <typename T>
void launch(const VectorArgs& a, int chunks, int row_tile, dim3 grid, cudaStream_t stream) {
  switch (chunks) {
    case 1: return launch_rows<T, 1>(a, row_tile, grid, stream);
    case 2: return launch_rows<T, 2>(a, row_tile, grid, stream);
    case 4:
      if constexpr (sizeof(T) == 4) return launch_rows<T, 4>(a, row_tile, grid, stream);
      break;
  }
  throw Error(ErrorKind::Internal, format("[heed::attention] no vector kernel for {} chunks per lane", chunks));
}

}  // namespace heed::cuda::vector_fma
