// The composed route: per (batch, query head, row block), S = scale·Q·Kᵀ on BLAS, one fused
// pass over S for masks, window, sinks and the softmax, then O = P·V on BLAS. Composed is
// one block of all Lq rows; ComposedBlocks splits Lq under the score cap.

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "cpu/blas.hpp"
#include "cpu/kernels.hpp"
#include "cpu/load.hpp"
#include "cpu/parallel.hpp"
#include "cpu/softmax.hpp"
#include "heed/profile.hpp"

namespace heed::cpu {
namespace {

// A row-major matrix for BLAS: rows of `ld` floats.
struct Matrix {
  const float* data;
  std::int64_t ld;
};

// `count` rows from element `offset`, `strides[2]` apart, in place or packed.
Matrix rows_of(const void* base, DType dtype, const Strides& strides, std::int64_t offset, std::int64_t count,
               std::int64_t width, float* pack) {
  if (pack == nullptr) return {static_cast<const float*>(base) + offset, std::max(strides[2], width)};
  for (std::int64_t row = 0; row < count; ++row) {
    load_row(base, dtype, offset + row * strides[2], strides[3], width, pack + row * width);
  }
  return {pack, width};
}

// One fused pass over a row of probabilities-to-be (q·k × dot_scale): softcap and masks, max,
// exp, sum with the sink, and normalisation, by the score header's rules.
void softmax_row(const Call& p, const score::Transform& transform, const Sequence& seq, std::int64_t h,
                 std::int64_t i, float* s) {
  const std::int64_t keys = seq.kv_len;
  mask_scores(p, transform, seq, h, i, 0, keys, s);
  float row_max = kNegInf;
  for (std::int64_t j = 0; j < keys; ++j) row_max = s[j] > row_max ? s[j] : row_max;
  const float offset = score::exp_offset(row_max);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < keys; ++j) {
    s[j] = std::exp(s[j] - offset);
    sum += s[j];
  }
  const bool sinks = p.sinks.data != nullptr;
  const float weight = score::finalize_weight(row_max, sum, sinks, sinks ? score::sink_logit(p.sinks, h) : 0.0f,
                                              [](float x) { return std::exp(x); });
  for (std::int64_t j = 0; j < keys; ++j) s[j] = score::finalize_value(s[j], weight);
  store_lse(p, seq, h, i, row_max, sum);
}

struct ComposedBuffers {
  float* scores;
  float* out;
  float* q;  // null: BLAS reads the caller's rows in place
  float* k;
  float* v;
};

// Ragged sequences are dense in their rows; paged calls never plan this route.
void run_block(const Call& p, const ComposedBuffers& t, const Sequence& seq, std::int64_t h,
               std::int64_t first_row, std::int64_t rows, std::int64_t& packed_kv) {
  const std::int64_t kv_head = h / p.group;
  const std::int64_t Lk = seq.kv_len, D = p.head_dim, Dv = p.value_dim;
  const score::Transform transform = score::transform(p, 1.0f);
  const Matrix q = rows_of(p.q, p.dtype, p.q_strides, call::row_offset(p.q_strides, seq, h, first_row), rows, D, t.q);
  // Packed K and V stay valid while consecutive tasks share a key head.
  const std::int64_t kv_id = seq.index * p.kv_heads + kv_head;
  const bool reuse = t.k != nullptr && packed_kv == kv_id;
  const Matrix k = rows_of(p.k, p.dtype, p.k_strides, call::key_offset(p, p.k_strides, seq, kv_head, 0),
                           reuse ? 0 : Lk, D, t.k);
  const Matrix v = rows_of(p.v, p.dtype, p.v_strides, call::key_offset(p, p.v_strides, seq, kv_head, 0),
                           reuse ? 0 : Lk, Dv, t.v);
  packed_kv = kv_id;
  if (Lk > 0 && D > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows), blas_int(Lk), blas_int(D), transform.dot_scale,
                q.data, blas_int(q.ld), k.data, blas_int(k.ld), 0.0f, t.scores, blas_int(Lk));
  } else {
    std::fill(t.scores, t.scores + rows * Lk, 0.0f);
  }
  for (std::int64_t row = 0; row < rows; ++row) softmax_row(p, transform, seq, h, first_row + row, t.scores + row * Lk);
  if (Lk > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows), blas_int(Dv), blas_int(Lk), 1.0f,
                t.scores, blas_int(Lk), v.data, blas_int(v.ld), 0.0f, t.out, blas_int(Dv));
  } else {
    std::fill(t.out, t.out + rows * Dv, 0.0f);
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    store_row(p.out, p.dtype, call::row_offset(p.out_strides, seq, h, first_row + row), p.out_strides[3], Dv,
              t.out + row * Dv);
  }
}

}  // namespace

void run_composed(const Call& p, const plan::CpuRoute& r, std::byte* scratch) {
  use_single_threaded_blas();
  const std::int64_t blocks = (p.q_len + r.rows - 1) / r.rows;
  const profile::Dispatch dispatch(r.plan.kernel_name.c_str(), blocks, p.q_heads, p.batch);
  for (int worker = 0; worker < r.plan.workers; ++worker) {
    if (auto* id = r.packed_kv_id.at<std::int64_t>(scratch, static_cast<std::size_t>(worker))) *id = -1;
  }
  parallel_for(r.plan.workers, p.batch * p.q_heads * blocks, [&](std::int64_t task, int worker) {
    const auto w = static_cast<std::size_t>(worker);
    const ComposedBuffers buffers{r.scores.at<float>(scratch, w), r.out_rows.at<float>(scratch, w),
                                  r.q_rows.at<float>(scratch, w), r.k_rows.at<float>(scratch, w),
                                  r.v_rows.at<float>(scratch, w)};
    const std::int64_t block = task % blocks;
    const std::int64_t head = (task / blocks) % p.q_heads;
    const Sequence seq = call::sequence(p, task / (blocks * p.q_heads));
    const std::int64_t first_row = block * r.rows;
    if (first_row >= seq.q_len) return;  // a ragged sequence shorter than the longest
    std::int64_t unpacked = -1;
    std::int64_t* packed_kv = r.pack_inputs ? r.packed_kv_id.at<std::int64_t>(scratch, w) : &unpacked;
    run_block(p, buffers, seq, head, first_row, std::min(r.rows, seq.q_len - first_row), *packed_kv);
  });
}

}  // namespace heed::cpu
