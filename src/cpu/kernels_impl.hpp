#pragma once
// The fused CPU routes, compiled once per instruction set (see isa.hpp). Both fold key
// tiles into running row max / sum / accumulators (online softmax) for the query rows of
// every query head of one key head, so each key tile is loaded once per group:
//   tiled:  per (batch, key head, block of block_q query positions), all keys;
//   vector: per (batch, key head, key block), all Lq positions; several key blocks are
//           merged exactly in pass 2.

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/isa.hpp"
#include "cpu/load.hpp"
#include "cpu/microkernels.hpp"
#include "cpu/parallel.hpp"
#include "cpu/params.hpp"
#include "cpu/softmax.hpp"
#include "heed/profile.hpp"
#include "plan/cpu_plan.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {
namespace {

using microkernel::kKeyLanes;
// Up to this many rows a key row is scored in place against each row (decode); above, the
// key tile is transposed once and scored by the register-blocked micro-kernel.
constexpr std::int64_t kDirectMaxRows = 16;

// One worker's buffers: q rows (scaled), Kᵀ tile [D × ldk], V tile, scores [rows × ldk],
// accumulators [rows × Dv], then row max and row sum.
struct Workspace {
  float* q;
  float* k_row;  // 16 key rows in float32, on their way into Kᵀ
  float* k_t;
  float* v;
  float* scores;
  float* accum;
  float* row_max;
  float* row_sum;
  std::int64_t accum_stride;  // floats between accumulator rows (Dv, or the AMX tile's padded Dv)
};

Workspace workspace_of(const Call& p, const plan::CpuRoute& r, std::byte* scratch, int worker,
                       std::int64_t rows) {
  const auto w = static_cast<std::size_t>(worker);
  float* stats = r.stats.at<float>(scratch, w);
  return {r.q_rows.at<float>(scratch, w), r.k_row.at<float>(scratch, w), r.k_rows.at<float>(scratch, w),
          r.v_rows.at<float>(scratch, w),
          r.scores.at<float>(scratch, w), r.accum.at<float>(scratch, w), stats, stats + rows,
          r.amx.on ? r.amx.columns : p.value_dim};
}

std::int64_t round_up_lanes(std::int64_t keys) { return (keys + kKeyLanes - 1) / kKeyLanes * kKeyLanes; }

// load_row, with contiguous 16-bit rows widened a vector at a time.
void widen_row(const void* base, DType dtype, std::int64_t offset, std::int64_t stride, std::int64_t count,
               float* dst) {
  if (stride == 1 && dtype == DType::BFloat16) {
    return microkernel::widen_row(static_cast<const microkernel::Bf16*>(base) + offset, count, dst);
  }
  if (stride == 1 && dtype == DType::Float16) {
    return microkernel::widen_row(static_cast<const microkernel::F16*>(base) + offset, count, dst);
  }
  load_row(base, dtype, offset, stride, count, dst);
}

// Where query row r of a task lives.
struct RowAt {
  std::int64_t head;
  std::int64_t position;
};

void start_row(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t row, RowAt at) {
  float* q = t.q + row * p.head_dim;
  widen_row(p.q, p.dtype, call::row_offset(p.q_strides, seq, at.head, at.position), p.q_strides[3], p.head_dim, q);
  // The transform's dot_scale folded into q: scores are q·k × dot_scale as they come out.
  const float dot_scale = score::transform(p, 1.0f).dot_scale;
  for (std::int64_t d = 0; d < p.head_dim; ++d) q[d] *= dot_scale;
  t.row_max[row] = kNegInf;
  t.row_sum[row] = 0.0f;
  float* acc = t.accum + row * p.value_dim;
  for (std::int64_t d = 0; d < p.value_dim; ++d) acc[d] = 0.0f;
}

// float32 value rows with a contiguous last dimension are multiplied where they are.
bool values_in_place(const Call& p) { return p.dtype == DType::Float32 && p.v_strides[3] == 1; }

// Loads keys [key, key + count) of (sequence, kv_head) as Kᵀ [D × ldk] (zero-padded) and, unless
// they are used in place, V rows.
void load_key_tile(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t kv_head,
                   std::int64_t key, std::int64_t count, std::int64_t ldk) {
  const std::int64_t D = p.head_dim, Dv = p.value_dim;
  KeyRows k_rows(p, p.k_strides, seq, kv_head), v_rows(p, p.v_strides, seq, kv_head);
  for (std::int64_t v_row = 0; v_row < count && !values_in_place(p); ++v_row) {
    widen_row(p.v, p.dtype, v_rows.offset(key + v_row), p.v_strides[3], Dv, t.v + v_row * Dv);
  }
  // Kᵀ in blocks of 16 keys: 16 rows converted into L1, then written 16 contiguous floats at
  // a time (column stores at the tile's stride would cost a cache line each).
  for (std::int64_t first = 0; first < ldk; first += kKeyLanes) {
    const std::int64_t rows = std::clamp<std::int64_t>(count - first, 0, kKeyLanes);
#if defined(__AVX512F__)
    // 16 whole 16-bit rows are widened by the transpose's own loads, not staged in k_row.
    if (rows == kKeyLanes && p.dtype != DType::Float32 && p.k_strides[3] == 1 && D % kKeyLanes == 0 &&
        k_rows.run(key + first) >= kKeyLanes) {
      const auto transpose = [&](const auto* k) {
        const auto* block = k + k_rows.offset(key + first);
        for (std::int64_t d = 0; d < D; d += kKeyLanes) {
          microkernel::transpose16(block + d, p.k_strides[2], t.k_t + d * ldk + first, ldk);
        }
      };
      if (p.dtype == DType::BFloat16) {
        transpose(static_cast<const microkernel::Bf16*>(p.k));
      } else {
        transpose(static_cast<const microkernel::F16*>(p.k));
      }
      continue;
    }
#endif
    for (std::int64_t j = 0; j < rows; ++j) {
      widen_row(p.k, p.dtype, k_rows.offset(key + first + j), p.k_strides[3], D, t.k_row + j * D);
    }
    for (std::int64_t j = rows; j < kKeyLanes; ++j) {
      for (std::int64_t d = 0; d < D; ++d) t.k_row[j * D + d] = 0.0f;
    }
    std::int64_t d = 0;
#if defined(__AVX512F__)
    for (; d + kKeyLanes <= D; d += kKeyLanes) {  // 16 × 16 at a time through the shuffle network
      microkernel::transpose16(t.k_row + d, D, t.k_t + d * ldk + first, ldk);
    }
#endif
    for (; d < D; ++d) {
      float* column = t.k_t + d * ldk + first;
      for (std::int64_t j = 0; j < kKeyLanes; ++j) column[j] = t.k_row[j * D + d];
    }
  }
}

// Turns row `row`'s scores into weights exp(s - new max) and rescales its running state;
// returns false (weights zero) when the row sees no key of the tile. Only the keys inside
// the row's causal / window range are transformed, masked, maxed and exponentiated.
bool softmax_step(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t row, RowAt at,
                  std::int64_t key, std::int64_t count, std::int64_t ldk) {
  float* s = t.scores + row * ldk;
  const KeyRange range = score::keys_for_row(p, seq, at.position);
  const std::int64_t first = std::clamp<std::int64_t>(range.begin - key, 0, count);
  const std::int64_t last = std::clamp<std::int64_t>(range.end - key, 0, count);
  float tile_max = kNegInf;
  if (first < last) {
    const score::Transform transform = score::transform(p, 1.0f);
    if (!transform.linear() || p.mask.kind != MaskKind::None) {
      mask_scores(p, transform, seq, at.head, at.position, key + first, last - first, s + first);
    }
    tile_max = microkernel::max_of(s + first, last - first);
  }
  if (tile_max == kNegInf) {
    // Every visible score is -inf or NaN: a NaN (from NaN inputs) makes the row NaN for good.
    for (std::int64_t j = first; j < last; ++j) {
      if (s[j] != s[j]) t.row_sum[row] = s[j];
    }
    for (std::int64_t j = 0; j < count; ++j) s[j] = 0.0f;
    return false;
  }
  // Row maxima in log2 units, as the weights' exponents are: 2^(s · log2 e − max).
  const float old_max = t.row_max[row], tile_max_log2 = tile_max * microkernel::kLog2e;
  const float new_max = old_max > tile_max_log2 ? old_max : tile_max_log2;
  const float correction = microkernel::exp2_lanes(old_max - new_max);
  for (std::int64_t j = 0; j < first; ++j) s[j] = 0.0f;
  const float sum = microkernel::exp2_shifted(s + first, last - first, new_max);
  for (std::int64_t j = last; j < count; ++j) s[j] = 0.0f;
  t.row_sum[row] = t.row_sum[row] * correction + sum;
  t.row_max[row] = new_max;
  if (correction != 1.0f) {
    float* acc = t.accum + row * t.accum_stride;
    for (std::int64_t d = 0; d < p.value_dim; ++d) acc[d] *= correction;
  }
  return true;
}

// A key or value row as contiguous float32: the caller's own row when it already is one,
// else converted into `buffer`.
const float* row_as_float(const void* base, DType dtype, std::int64_t offset, std::int64_t stride,
                          std::int64_t count, float* buffer) {
  if (dtype == DType::Float32 && (stride == 1 || count <= 1)) return static_cast<const float*>(base) + offset;
  load_row(base, dtype, offset, stride, count, buffer);
  return buffer;
}

// Requests the caller's K or V rows kVectorPrefetchBytes ahead of the row in use into L2, one
// row per call: decode reads each row once, with too little arithmetic per byte for the core's
// own window to keep enough misses in flight; `ahead` rows ahead instead where it is given.
// Rows whose last dimension is strided are left to the hardware.
class RowPrefetch {
 public:
  RowPrefetch(const Call& p, const void* base, const Strides& strides, const Sequence& seq, std::int64_t head,
              std::int64_t width, std::int64_t ahead)
      : rows_(p, strides, seq, head) {
    const auto bytes = static_cast<std::int64_t>(size_of(p.dtype));
    if (strides[3] != 1) return;
    base_ = static_cast<const char*>(base);
    bytes_ = bytes;
    row_bytes_ = width * bytes;
    ahead_ = ahead > 0 ? ahead
                       : std::max<std::int64_t>(1, plan::cpu::kVectorPrefetchBytes / std::max<std::int64_t>(row_bytes_, 1));
    end_row_ = seq.kv_len;
  }
  // Row `row` (of the sequence's key rows) is in use now.
  void at(std::int64_t row) {
    if (base_ == nullptr || row + ahead_ >= end_row_) return;
    const char* next = base_ + rows_.offset(row + ahead_) * bytes_;
    for (std::int64_t line = 0; line < row_bytes_; line += 64) __builtin_prefetch(next + line, 0, 1);
  }

 private:
  KeyRows rows_;
  const char* base_ = nullptr;
  std::int64_t bytes_ = 0, row_bytes_ = 0, ahead_ = 0, end_row_ = 0;
};

// The K and V row offsets of one chunk of keys (heads_task), key head 0's: looked up once for
// every head, since each reads the same rows and a paged key's page costs a division; a key
// head adds its head stride. `v_whole[g]`: keys 16g .. 16g + 15 lie at one V stride.
struct ChunkRows {
  static constexpr std::int64_t kMax = plan::cpu::kVectorHeadsKeyChunk;
  std::int64_t count = 0;
  std::int64_t k[kMax], v[kMax];
  bool v_whole[(kMax + kKeyLanes - 1) / kKeyLanes];
};

void chunk_rows(const Call& p, const Sequence& seq, std::int64_t key, std::int64_t count, ChunkRows& c) {
  KeyRows k_rows(p, p.k_strides, seq, 0), v_rows(p, p.v_strides, seq, 0);
  c.count = std::clamp<std::int64_t>(count, 0, ChunkRows::kMax);
  for (std::int64_t j = 0; j < c.count; ++j) {
    c.k[j] = k_rows.offset(key + j);
    c.v[j] = v_rows.offset(key + j);
  }
  for (std::int64_t j = 0; j < c.count; j += kKeyLanes) {
    c.v_whole[j / kKeyLanes] = v_rows.run(key + j) >= std::min(kKeyLanes, c.count - j);
  }
}

#if defined(__AVX512F__)
// bfloat16 key rows read in place against q in pair order (dot_all_rows_pairs).
bool scores_in_pairs(const Call& p) { return p.dtype == DType::BFloat16 && p.k_strides[3] == 1 && p.head_dim % 32 == 0; }
#endif

// Few rows (decode): each key row is read once, in place where it is float32, and scored
// against every row; no transposed tile is built.
// Rows are requested `ahead` rows ahead (RowPrefetch; 0: kVectorPrefetchBytes ahead), or, given
// the chunk's rows (`now`, heads_task), the same rows of the next chunk (`next`). `q_paired`: the
// caller keeps t.q in pair order (scores_in_pairs), so it is not reordered per call.
template <typename RowOf>
void fold_key_rows(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t kv_head,
                   std::int64_t rows, RowOf row_of, std::int64_t key, std::int64_t count, std::int64_t ahead = 0,
                   const ChunkRows* now = nullptr, const ChunkRows* next = nullptr, [[maybe_unused]] bool q_paired = false) {
  const std::int64_t ldk = round_up_lanes(count);
  KeyRows k_rows(p, p.k_strides, seq, kv_head), v_rows(p, p.v_strides, seq, kv_head);
  RowPrefetch k_ahead(p, p.k, p.k_strides, seq, kv_head, p.head_dim, now != nullptr ? 0 : ahead);
  RowPrefetch v_ahead(p, p.v, p.v_strides, seq, kv_head, p.value_dim, now != nullptr ? 0 : ahead);
  const std::int64_t k_head = kv_head * p.k_strides[1], v_head = kv_head * p.v_strides[1];
  const auto k_offset = [&](std::int64_t j) { return now != nullptr ? now->k[j] + k_head : k_rows.offset(key + j); };
  const auto v_offset = [&](std::int64_t j) { return now != nullptr ? now->v[j] + v_head : v_rows.offset(key + j); };
  const auto bytes = static_cast<std::int64_t>(size_of(p.dtype));
  const auto prefetch = [&](const void* base, std::int64_t offset, std::int64_t width) {
    const char* row = static_cast<const char*>(base) + offset * bytes;
    for (std::int64_t line = 0; line < width * bytes; line += 64) __builtin_prefetch(row + line, 0, 1);
  };
  const auto k_prefetch = [&](std::int64_t j) {
    if (now == nullptr) return k_ahead.at(key + j);
    if (next != nullptr && j < next->count && p.k_strides[3] == 1) prefetch(p.k, next->k[j] + k_head, p.head_dim);
  };
  const auto v_prefetch = [&](std::int64_t j) {
    if (now == nullptr) return v_ahead.at(key + j);
    if (next != nullptr && j < next->count && p.v_strides[3] == 1) prefetch(p.v, next->v[j] + v_head, p.value_dim);
  };
  // 16-bit rows with a contiguous last dimension are widened in registers, not copied.
  const auto each_row = [&](const void* base, std::int64_t offset, std::int64_t stride, std::int64_t width,
                            float* buffer, auto&& use) {
    if (stride == 1 && p.dtype == DType::BFloat16) return use(static_cast<const microkernel::Bf16*>(base) + offset);
    if (stride == 1 && p.dtype == DType::Float16) return use(static_cast<const microkernel::F16*>(base) + offset);
    use(row_as_float(base, p.dtype, offset, stride, width, buffer));
  };
#if defined(__AVX512F__)
  if (scores_in_pairs(p)) {
    // q in pair order in k_row (kKeyLanes × D floats, unused here: the key rows are read in
    // place); group_task sends at most kDirectMaxRows rows here.
    static_assert(kDirectMaxRows <= kKeyLanes, "q's rows in pair order fit k_row");
    if (!q_paired) microkernel::pair_order(t.q, rows, p.head_dim, t.k_row);
    const float* q = q_paired ? t.q : t.k_row;
    const auto* k = static_cast<const microkernel::Bf16*>(p.k);
    for (std::int64_t j = 0; j < count; ++j) {
      k_prefetch(j);
      microkernel::dot_all_rows_pairs(q, rows, p.head_dim, k + k_offset(j), t.scores + j, ldk);
    }
  } else
#endif
  for (std::int64_t j = 0; j < count; ++j) {
    k_prefetch(j);
    each_row(p.k, k_offset(j), p.k_strides[3], p.head_dim, t.k_row, [&](const auto* k) {
      microkernel::dot_all_rows(t.q, rows, p.head_dim, k, t.scores + j, ldk);
    });
  }
  bool any = false;
  for (std::int64_t row = 0; row < rows; ++row) any |= softmax_step(p, t, seq, row, row_of(row), key, count, ldk);
  if (!any) return;
  if (p.v_strides[3] == 1 && p.dtype != DType::Float32) {
    // 16-bit value rows read in place by the register-blocked product, 16 keys at a time:
    // each value is widened once (not once per row), the rows stay in L1 while every column
    // block passes over them, and the stream stays sequential. (float32 rows stream faster
    // through the per-key loop below: 1 thread, Llama decode 32k keys, 27 vs 31 ms.)
    const auto accumulate = [&](const auto* v) {
      for (std::int64_t j = 0; j < count; j += kKeyLanes) {
        const std::int64_t n = std::min(kKeyLanes, count - j);
        for (std::int64_t i = j; i < j + n; ++i) v_prefetch(i);
        if (now != nullptr ? now->v_whole[j / kKeyLanes] : v_rows.run(key + j) >= n) {
          microkernel::accumulate_values(t.scores + j, ldk, rows, n, v + v_offset(j), p.v_strides[2],
                                         p.value_dim, t.accum);
          continue;
        }
        // Keys that straddle pages: the same product over each key's own row.
        const std::remove_reference_t<decltype(*v)>* gathered[kKeyLanes];
        for (std::int64_t i = 0; i < n; ++i) gathered[i] = v + v_offset(j + i);
        microkernel::accumulate_gathered_values(t.scores + j, ldk, rows, n, gathered, p.value_dim, t.accum);
      }
    };
    if (p.dtype == DType::BFloat16) return accumulate(static_cast<const microkernel::Bf16*>(p.v));
    return accumulate(static_cast<const microkernel::F16*>(p.v));
  }
  for (std::int64_t j = 0; j < count; ++j) {
    v_prefetch(j);
    each_row(p.v, v_offset(j), p.v_strides[3], p.value_dim, t.v, [&](const auto* v) {
      microkernel::axpy_all_rows(t.scores + j, ldk, rows, v, p.value_dim, t.accum);
    });
  }
}

// Folds keys [key, key + count) into the running state of `rows` rows.
template <typename RowOf>
void fold_key_tile(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t kv_head,
                   std::int64_t rows, RowOf row_of, std::int64_t key, std::int64_t count) {
  const std::int64_t ldk = round_up_lanes(count);
  load_key_tile(p, t, seq, kv_head, key, count, ldk);
  microkernel::scores_tile(t.q, rows, p.head_dim, t.k_t, ldk, t.scores);
  bool any = false;
  for (std::int64_t row = 0; row < rows; ++row) any |= softmax_step(p, t, seq, row, row_of(row), key, count, ldk);
  if (!any) return;
  if (values_in_place(p)) {
    // One product per run of rows at one stride (the whole tile, unless it straddles pages).
    KeyRows v_rows(p, p.v_strides, seq, kv_head);
    for (std::int64_t j = 0; j < count;) {
      const std::int64_t n = std::min(count - j, v_rows.run(key + j));
      microkernel::accumulate_values(t.scores + j, ldk, rows, n, static_cast<const float*>(p.v) + v_rows.offset(key + j),
                                     p.v_strides[2], p.value_dim, t.accum);
      j += n;
    }
    return;
  }
  microkernel::accumulate_values(t.scores, ldk, rows, count, t.v, p.value_dim, p.value_dim, t.accum);
}

// A row maximum kept in log2 units, in the natural units finalize_row takes.
float natural_max(float max_log2) { return max_log2 == kNegInf ? max_log2 : max_log2 * microkernel::kLn2; }

void store_out(const Call& p, const Sequence& seq, RowAt at, const float* values) {
  store_row(p.out, p.dtype, call::row_offset(p.out_strides, seq, at.head, at.position), p.out_strides[3], p.value_dim,
            values);
}

// The finished row: out, and its log-sum-exp where asked for (m in log2 units, as kept).
void finish_row(const Call& p, const Sequence& seq, RowAt at, float max_log2, float sum, float* acc) {
  finalize_row(p, at.head, natural_max(max_log2), sum, acc, acc);
  store_out(p, seq, at, acc);
  store_lse(p, seq, at.head, at.position, natural_max(max_log2), sum);
}

// The query rows of one task: positions [first, first + count) of every query head of key
// head kv_head; row r is head kv_head * group + r / count at position first + r % count.
struct Rows {
  std::int64_t kv_head;
  std::int64_t first;
  std::int64_t count;
  std::int64_t group;

  std::int64_t size() const { return count * group; }
  RowAt operator()(std::int64_t row) const { return {kv_head * group + row / count, first + row % count}; }
};

// The tiled tasks: one per (batch, key head, block of block_q query positions), `blocks` of
// them per key head. Longest first: under causal masking later query blocks see more keys,
// so they start first. A ragged or paged batch runs its blocks from the last down across all
// sequences, so the longest sequences' blocks start first; blocks past a sequence's queries are
// empty (count 0).
struct TiledTask {
  Sequence seq;
  Rows rows;
};
TiledTask tiled_task_at(const Call& p, const plan::CpuRoute& r, std::int64_t task, std::int64_t blocks) {
  std::int64_t block = 0, pair = 0;
  if (p.form == call::Form::Dense) {
    block = p.causal ? blocks - 1 - task % blocks : task % blocks;
    pair = task / blocks;
  } else {
    block = blocks - 1 - task / (p.batch * p.kv_heads);
    pair = task % (p.batch * p.kv_heads);
  }
  const Sequence seq = call::sequence(p, pair / p.kv_heads);
  const std::int64_t first = block * r.block_q;
  return {seq, Rows{pair % p.kv_heads, first, std::clamp<std::int64_t>(seq.q_len - first, 0, r.block_q), p.group}};
}

// Only keys some row can see: tiles wholly masked by causal or window geometry are skipped.
KeyRange keys_of_rows(const Call& p, const Sequence& seq, const Rows& rows, std::int64_t key_begin,
                      std::int64_t key_end) {
  return {std::max(key_begin, score::keys_for_row(p, seq, rows.first).begin),
          std::min(key_end, score::keys_for_row(p, seq, rows.first + rows.count - 1).end)};
}

// The rows' state written out: to out, or [max, sum, Dv values] per row into `partial`.
void finish_rows(const Call& p, const Workspace& t, const Sequence& seq, const Rows& rows, float* partial) {
  for (std::int64_t row = 0; row < rows.size(); ++row) {
    float* acc = t.accum + row * p.value_dim;
    if (partial != nullptr) {
      float* slot = partial + row * (p.value_dim + 2);
      slot[0] = t.row_max[row];
      slot[1] = t.row_sum[row];
      for (std::int64_t d = 0; d < p.value_dim; ++d) slot[2 + d] = acc[d];
      continue;
    }
    finish_row(p, seq, rows(row), t.row_max[row], t.row_sum[row], acc);
  }
}

// Folds keys [key_begin, key_end) in tiles of tile_keys into the rows' state; then writes
// the rows to out, or [max, sum, Dv values] per row into `partial` for a later merge.
void group_task(const Call& p, const Workspace& t, const Sequence& seq, const Rows& rows,
                std::int64_t key_begin, std::int64_t key_end, std::int64_t tile_keys, float* partial) {
  if (rows.size() == 0) return;
  for (std::int64_t row = 0; row < rows.size(); ++row) start_row(p, t, seq, row, rows(row));
  const KeyRange keys = keys_of_rows(p, seq, rows, key_begin, key_end);
  for (std::int64_t key = keys.begin; key < keys.end; key += tile_keys) {
    const std::int64_t count = std::min(tile_keys, keys.end - key);
    if (rows.size() <= kDirectMaxRows) {
      fold_key_rows(p, t, seq, rows.kv_head, rows.size(), rows, key, count);
    } else {
      fold_key_tile(p, t, seq, rows.kv_head, rows.size(), rows, key, count);
    }
  }
  finish_rows(p, t, seq, rows, partial);
}

// A vector task over every key head (heads_together): each chunk of key rows is folded by one
// head after another, each requesting its slice of the next chunk's rows, so that a chunk's rows
// arrive while the other heads work.
// Head h keeps its rows' state at h × vector_rows in the worker's buffers; partials go where the
// (batch, key head, key block) task would put them.
void heads_task(const Call& p, const plan::CpuRoute& r, std::byte* scratch, int worker, std::int64_t batch,
                std::int64_t block, float* partials) {
  const Sequence seq = call::sequence(p, batch);
  const Rows all{0, 0, seq.q_len, p.group};
  if (all.size() == 0) return;
  const Workspace shared = workspace_of(p, r, scratch, worker, 0);
  const auto state = [&](std::int64_t h) {
    Workspace t = shared;
    t.q += h * r.vector_rows * p.head_dim;
    t.accum += h * r.vector_rows * p.value_dim;
    t.row_max = shared.row_max + 2 * h * r.vector_rows;
    t.row_sum = t.row_max + r.vector_rows;
    return t;
  };
  const auto rows_of = [&](std::int64_t h) { return Rows{h, 0, seq.q_len, p.group}; };
  // Each head's q put in pair order once, not once per chunk.
#if defined(__AVX512F__)
  const bool paired = scores_in_pairs(p) && all.size() <= kDirectMaxRows;
#else
  const bool paired = false;
#endif
  for (std::int64_t h = 0; h < p.kv_heads; ++h) {
    const Workspace t = state(h);
    for (std::int64_t row = 0; row < all.size(); ++row) start_row(p, t, seq, row, rows_of(h)(row));
#if defined(__AVX512F__)
    if (paired) {
      microkernel::pair_order(t.q, all.size(), p.head_dim, t.k_row);
      std::copy(t.k_row, t.k_row + all.size() * p.head_dim, t.q);
    }
#endif
  }
  const std::int64_t key_begin = score::keys_for_row(p, seq, 0).begin + block * r.keys_per_block;
  const KeyRange keys = keys_of_rows(p, seq, all, key_begin, key_begin + r.keys_per_block);
  // Each chunk's rows looked up once for all heads, the next chunk's a chunk ahead (past the
  // block too, as far as the sequence goes: the next block's first rows, only requested).
  ChunkRows chunks[2];
  int current = 0;
  if (keys.begin < keys.end) chunk_rows(p, seq, keys.begin, std::min(r.key_chunk, keys.end - keys.begin), chunks[0]);
  for (std::int64_t key = keys.begin; key < keys.end; key += r.key_chunk) {
    const std::int64_t count = std::min(r.key_chunk, keys.end - key);
    chunk_rows(p, seq, key + r.key_chunk, std::min(r.key_chunk, seq.kv_len - key - r.key_chunk), chunks[current ^ 1]);
    for (std::int64_t h = 0; h < p.kv_heads; ++h) {
      fold_key_rows(p, state(h), seq, h, all.size(), rows_of(h), key, count, r.key_chunk, &chunks[current],
                    &chunks[current ^ 1], paired);
    }
    current ^= 1;
  }
  const std::int64_t partial_floats = r.vector_rows * (p.value_dim + 2);
  for (std::int64_t h = 0; h < p.kv_heads; ++h) {
    const std::int64_t task = batch * p.kv_heads + h;
    finish_rows(p, state(h), seq, rows_of(h),
                partials != nullptr ? partials + (task * r.key_blocks + block) * partial_floats : nullptr);
  }
}

// Vector pass 2: rescales each block's partial to the common max and sums them.
void merge_task(const Call& p, const plan::CpuRoute& r, const float* partials, std::int64_t task,
                float* acc) {
  const std::int64_t kv_head = task % p.kv_heads, Dv = p.value_dim;
  const Sequence seq = call::sequence(p, task / p.kv_heads);
  const Rows rows{kv_head, 0, seq.q_len, p.group};
  const std::int64_t block_stride = r.vector_rows * (Dv + 2);
  for (std::int64_t row = 0; row < rows.size(); ++row) {
    const float* first = partials + task * r.key_blocks * block_stride + row * (Dv + 2);
    float frame = kNegInf;
    for (std::int64_t block = 0; block < r.key_blocks; ++block) {
      frame = std::fmax(frame, first[block * block_stride]);
    }
    // Blocks that weighed no key add 0 (or their NaN sum) against the header's offset.
    const float offset = score::exp_offset(frame);
    float sum = 0.0f;
    for (std::int64_t d = 0; d < Dv; ++d) acc[d] = 0.0f;
    for (std::int64_t block = 0; block < r.key_blocks; ++block) {
      const float* slot = first + block * block_stride;
      const float weight = microkernel::exp2_lanes(slot[0] - offset);
      sum += slot[1] * weight;
      if (weight == 0.0f) continue;
      for (std::int64_t d = 0; d < Dv; ++d) acc[d] += slot[2 + d] * weight;
    }
    finish_row(p, seq, rows(row), frame, sum, acc);
  }
}

}  // namespace

#if !defined(HEED_KERNEL_HELPERS_ONLY)
// Tiled: one task per (batch, key head, block of block_q query positions).
void run_tiled_kernel(const Call& p, const plan::CpuRoute& r, std::byte* scratch) {
  const std::int64_t blocks = (p.q_len + r.block_q - 1) / r.block_q;
  const profile::Dispatch dispatch(r.plan.kernel_name.c_str(), blocks, p.kv_heads, p.batch);
  parallel_for(r.plan.workers, p.batch * p.kv_heads * blocks, [&](std::int64_t task, int worker) {
    const TiledTask at = tiled_task_at(p, r, task, blocks);
    group_task(p, workspace_of(p, r, scratch, worker, p.group * r.block_q), at.seq, at.rows, 0, at.seq.kv_len,
               r.block_k, nullptr);
  });
}

// Vector: one task per (batch, key head, key block) over all group x Lq rows.
void vector_pass(const Call& p, const plan::CpuRoute& r, std::byte* scratch, float* partials) {
  const profile::Dispatch dispatch(r.plan.kernel_name.c_str(), r.key_blocks, p.kv_heads, p.batch);
  if (r.heads_together) {
    parallel_for(r.plan.workers, p.batch * r.key_blocks, [&](std::int64_t work, int worker) {
      heads_task(p, r, scratch, worker, work / r.key_blocks, work % r.key_blocks, partials);
    });
    return;
  }
  const std::int64_t partial_floats = r.vector_rows * (p.value_dim + 2);
  parallel_for(r.plan.workers, p.batch * p.kv_heads * r.key_blocks, [&](std::int64_t work, int worker) {
    const std::int64_t task = work / r.key_blocks;
    const Sequence seq = call::sequence(p, task / p.kv_heads);
    const std::int64_t key_begin = score::keys_for_row(p, seq, 0).begin + (work % r.key_blocks) * r.keys_per_block;
    group_task(p, workspace_of(p, r, scratch, worker, r.vector_rows), seq, Rows{task % p.kv_heads, 0, seq.q_len, p.group},
               key_begin, key_begin + r.keys_per_block, r.key_chunk,
               partials != nullptr ? partials + work * partial_floats : nullptr);
  });
}

void run_vector_kernel(const Call& p, const plan::CpuRoute& r, std::byte* scratch) {
  float* partials = r.key_blocks > 1 ? r.partials.at<float>(scratch) : nullptr;
  vector_pass(p, r, scratch, partials);
  if (partials == nullptr) return;
  const profile::Dispatch merge(r.merge_kernel_name.c_str(), 1, p.kv_heads, p.batch);
  parallel_for(r.plan.workers, p.batch * p.kv_heads, [&](std::int64_t task, int worker) {
    merge_task(p, r, partials, task, r.accum.at<float>(scratch, static_cast<std::size_t>(worker)));
  });
}

// out[i] = exp(x[i]) by the softmax's exp of this ISA (tests check its accuracy).
void softmax_exp(const float* x, std::int64_t count, float* out) {
  std::int64_t i = 0;
  for (; i + microkernel::kVectorLanes <= count; i += microkernel::kVectorLanes) {
    microkernel::store(out + i, microkernel::fast_exp(microkernel::load(x + i)));
  }
  for (; i < count; ++i) out[i] = microkernel::fast_exp(x[i]);
}

// out[i] = dtype(x[i]) for a 16-bit dtype, as the kernels store contiguous output rows (tests
// check it against the scalar conversions).
void narrow_row(DType dtype, const float* x, std::int64_t count, std::uint16_t* out) {
  store_row(out, dtype, 0, 1, count, x);
}

// Independent FMA chains in this ISA's widest vectors, `steps` times; returns the FLOPs done.
double fma_chains(std::int64_t steps) {
  constexpr int kChains = 12;  // > FMA latency x issue width on the cores heed targets
  microkernel::vec acc[kChains];
  for (int chain = 0; chain < kChains; ++chain) acc[chain] = microkernel::vec{} + 1.0f + 1e-3f * static_cast<float>(chain);
  const microkernel::vec multiplier = microkernel::vec{} + 0.999999f;
  const microkernel::vec addend = microkernel::vec{} + 1e-7f;
  for (std::int64_t step = 0; step < steps; ++step) {
    for (int chain = 0; chain < kChains; ++chain) acc[chain] = acc[chain] * multiplier + addend;
  }
  microkernel::vec sum = acc[0];
  for (int chain = 1; chain < kChains; ++chain) sum += acc[chain];
  volatile float sink = sum[0];
  (void)sink;
  return 2.0 * kChains * microkernel::kVectorLanes * static_cast<double>(steps);
}
#endif

}  // namespace HEED_ISA
}  // namespace heed::cpu
