// The tiled (online-softmax) route: per (batch, query head, query block), key tiles are
// loaded as float32, scored, masked and folded into running max / sum / accumulators, so
// scores never exceed one block_q x block_k tile. Tiles no row of the block can see are
// skipped.

#include <algorithm>

#include "cpu/kernels.hpp"
#include "cpu/load.hpp"
#include "cpu/parallel.hpp"
#include "cpu/softmax.hpp"
#include "heed/profile.hpp"

namespace heed::cpu {
namespace {

struct TileBuffers {
  float* q;
  float* k;
  float* v;
  float* scores;
  float* accum;
  float* stats;  // [block_q] max, then [block_q] sum
};

void run_block(const AttentionParams& p, const plan::CpuRoute& r, const TileBuffers& t, std::int64_t b,
               std::int64_t h, std::int64_t first_row) {
  const std::int64_t rows = std::min(r.block_q, p.q_len - first_row);
  const std::int64_t kv_head = h / p.group();
  const std::int64_t D = p.head_dim, Dv = p.value_dim;
  float* row_max = t.stats;
  float* row_sum = t.stats + r.block_q;
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t offset = b * p.q_strides[0] + h * p.q_strides[1] + (first_row + row) * p.q_strides[2];
    load_row(p.q, p.dtype, offset, p.q_strides[3], D, t.q + row * D);
    for (std::int64_t d = 0; d < D; ++d) t.q[row * D + d] *= p.scale;
    row_max[row] = kNegInf;
    row_sum[row] = 0.0f;
    std::fill(t.accum + row * Dv, t.accum + (row + 1) * Dv, 0.0f);
  }
  // Keys any row of the block can see.
  const std::int64_t keys_begin = p.keys_for_row(first_row).begin;
  const std::int64_t keys_end = p.keys_for_row(first_row + rows - 1).end;
  for (std::int64_t key = keys_begin; key < keys_end; key += r.block_k) {
    const std::int64_t count = std::min(r.block_k, keys_end - key);
    for (std::int64_t j = 0; j < count; ++j) {
      load_row(p.k, p.dtype, b * p.k_strides[0] + kv_head * p.k_strides[1] + (key + j) * p.k_strides[2],
               p.k_strides[3], D, t.k + j * D);
      load_row(p.v, p.dtype, b * p.v_strides[0] + kv_head * p.v_strides[1] + (key + j) * p.v_strides[2],
               p.v_strides[3], Dv, t.v + j * Dv);
    }
    for (std::int64_t row = 0; row < rows; ++row) {
      const KeyRange range = p.keys_for_row(first_row + row);
      if (range.end <= key || range.begin >= key + count) continue;
      float* s = t.scores + row * r.block_k;
      for (std::int64_t j = 0; j < count; ++j) s[j] = dot(t.q + row * D, t.k + j * D, D);
      mask_scores(p, b, h, first_row + row, key, count, s);
      online_update(s, count, t.v, Dv, Dv, row_max[row], row_sum[row], t.accum + row * Dv);
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    float* staged = t.accum + row * Dv;
    finalize_row(p, h, row_max[row], row_sum[row], staged, staged);
    store_row(p.out, p.dtype,
              b * p.out_strides[0] + h * p.out_strides[1] + (first_row + row) * p.out_strides[2],
              p.out_strides[3], Dv, staged);
  }
}

}  // namespace

void run_tiled(const AttentionParams& p, const plan::CpuRoute& r, std::byte* scratch) {
  const std::int64_t blocks = (p.q_len + r.block_q - 1) / r.block_q;
  profile::record(r.plan.kernel_name.c_str(), blocks, p.q_heads, p.batch);
  parallel_for(r.plan.workers, p.batch * p.q_heads * blocks, [&](std::int64_t task, int worker) {
    const auto w = static_cast<std::size_t>(worker);
    const TileBuffers buffers{r.q_rows.at<float>(scratch, w),  r.k_rows.at<float>(scratch, w),
                              r.v_rows.at<float>(scratch, w),  r.scores.at<float>(scratch, w),
                              r.accum.at<float>(scratch, w),   r.stats.at<float>(scratch, w)};
    const std::int64_t block = task % blocks;
    const std::int64_t head = (task / blocks) % p.q_heads;
    const std::int64_t batch = task / (blocks * p.q_heads);
    run_block(p, r, buffers, batch, head, block * r.block_q);
  });
}

}  // namespace heed::cpu
