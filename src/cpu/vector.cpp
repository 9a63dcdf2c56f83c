// The vector (decode) route: per (batch, key head, key block), every key is read once for
// all group x Lq query rows of that key head. With several key blocks, pass 1 writes each
// block's partial max, sum and output and pass 2 merges them exactly.

#include <algorithm>
#include <cmath>

#include "cpu/kernels.hpp"
#include "cpu/load.hpp"
#include "cpu/parallel.hpp"
#include "cpu/softmax.hpp"
#include "heed/profile.hpp"

namespace heed::cpu {
namespace {

struct VectorBuffers {
  float* q;
  float* k;
  float* v;
  float* scores;
  float* accum;
  float* stats;  // [rows] max, then [rows] sum
};

// Query row r of a key head's group: head and position.
struct RowIndex {
  std::int64_t head;
  std::int64_t position;
};

RowIndex row_index(const AttentionParams& p, std::int64_t kv_head, std::int64_t r) {
  return {kv_head * p.group() + r / p.q_len, r % p.q_len};
}

// Keys [first, last) of this block, in the span some row can see.
KeyRange block_keys(const AttentionParams& p, const plan::CpuRoute& r, std::int64_t block) {
  const std::int64_t span_begin = p.keys_for_row(0).begin;
  const std::int64_t first = span_begin + block * r.keys_per_block;
  return {std::min(first, p.kv_len), std::min(first + r.keys_per_block, p.kv_len)};
}

void run_task(const AttentionParams& p, const plan::CpuRoute& r, const VectorBuffers& t, std::int64_t b,
              std::int64_t kv_head, std::int64_t block, float* partial) {
  const std::int64_t rows = r.vector_rows;
  const std::int64_t D = p.head_dim, Dv = p.value_dim;
  float* row_max = t.stats;
  float* row_sum = t.stats + rows;
  for (std::int64_t row = 0; row < rows; ++row) {
    const RowIndex at = row_index(p, kv_head, row);
    load_row(p.q, p.dtype, b * p.q_strides[0] + at.head * p.q_strides[1] + at.position * p.q_strides[2],
             p.q_strides[3], D, t.q + row * D);
    for (std::int64_t d = 0; d < D; ++d) t.q[row * D + d] *= p.scale;
    row_max[row] = kNegInf;
    row_sum[row] = 0.0f;
    std::fill(t.accum + row * Dv, t.accum + (row + 1) * Dv, 0.0f);
  }
  const KeyRange keys = block_keys(p, r, block);
  for (std::int64_t key = keys.begin; key < keys.end; key += r.key_chunk) {
    const std::int64_t count = std::min(r.key_chunk, keys.end - key);
    for (std::int64_t j = 0; j < count; ++j) {
      load_row(p.k, p.dtype, b * p.k_strides[0] + kv_head * p.k_strides[1] + (key + j) * p.k_strides[2],
               p.k_strides[3], D, t.k + j * D);
      load_row(p.v, p.dtype, b * p.v_strides[0] + kv_head * p.v_strides[1] + (key + j) * p.v_strides[2],
               p.v_strides[3], Dv, t.v + j * Dv);
    }
    for (std::int64_t row = 0; row < rows; ++row) {
      const RowIndex at = row_index(p, kv_head, row);
      const KeyRange range = p.keys_for_row(at.position);
      if (range.end <= key || range.begin >= key + count) continue;
      float* s = t.scores + row * r.key_chunk;
      for (std::int64_t j = 0; j < count; ++j) s[j] = dot(t.q + row * D, t.k + j * D, D);
      mask_scores(p, b, at.head, at.position, key, count, s);
      online_update(s, count, t.v, Dv, Dv, row_max[row], row_sum[row], t.accum + row * Dv);
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    float* acc = t.accum + row * Dv;
    if (partial != nullptr) {  // [rows][max, sum, Dv values]
      float* slot = partial + row * (Dv + 2);
      slot[0] = row_max[row];
      slot[1] = row_sum[row];
      std::copy(acc, acc + Dv, slot + 2);
      continue;
    }
    const RowIndex at = row_index(p, kv_head, row);
    finalize_row(p, at.head, row_max[row], row_sum[row], acc, acc);
    store_row(p.out, p.dtype, b * p.out_strides[0] + at.head * p.out_strides[1] + at.position * p.out_strides[2],
              p.out_strides[3], Dv, acc);
  }
}

// Pass 2: rescales every block's partial to the common max and sums them; acc is reused.
void merge_row(const AttentionParams& p, const plan::CpuRoute& r, const float* partials, std::int64_t task,
               std::int64_t kv_head, std::int64_t b, std::int64_t row, float* acc) {
  const std::int64_t Dv = p.value_dim;
  const std::int64_t stride = r.vector_rows * (Dv + 2);
  const float* first = partials + task * r.key_blocks * stride + row * (Dv + 2);
  float frame = kNegInf;
  for (std::int64_t block = 0; block < r.key_blocks; ++block) frame = std::fmax(frame, first[block * stride]);
  float sum = 0.0f;
  std::fill(acc, acc + Dv, 0.0f);
  if (frame != kNegInf) {
    for (std::int64_t block = 0; block < r.key_blocks; ++block) {
      const float* slot = first + block * stride;
      if (slot[0] == kNegInf) continue;
      const float weight = std::exp(slot[0] - frame);
      sum += slot[1] * weight;
      for (std::int64_t d = 0; d < Dv; ++d) acc[d] += slot[2 + d] * weight;
    }
  }
  const RowIndex at = row_index(p, kv_head, row);
  finalize_row(p, at.head, frame, sum, acc, acc);
  store_row(p.out, p.dtype, b * p.out_strides[0] + at.head * p.out_strides[1] + at.position * p.out_strides[2],
            p.out_strides[3], Dv, acc);
}

}  // namespace

void run_vector(const AttentionParams& p, const plan::CpuRoute& r, std::byte* scratch) {
  const std::int64_t tasks = p.batch * p.kv_heads;
  float* partials = r.key_blocks > 1 ? r.partials.at<float>(scratch) : nullptr;
  const std::int64_t partial_floats = r.vector_rows * (p.value_dim + 2);
  profile::record(r.plan.kernel_name.c_str(), r.key_blocks, p.kv_heads, p.batch);
  parallel_for(r.plan.workers, tasks * r.key_blocks, [&](std::int64_t work, int worker) {
    const auto w = static_cast<std::size_t>(worker);
    const VectorBuffers buffers{r.q_rows.at<float>(scratch, w), r.k_rows.at<float>(scratch, w),
                                r.v_rows.at<float>(scratch, w), r.scores.at<float>(scratch, w),
                                r.accum.at<float>(scratch, w),  r.stats.at<float>(scratch, w)};
    const std::int64_t block = work % r.key_blocks;
    const std::int64_t task = work / r.key_blocks;
    run_task(p, r, buffers, task / p.kv_heads, task % p.kv_heads, block,
             partials != nullptr ? partials + work * partial_floats : nullptr);
  });
  if (partials == nullptr) return;
  const std::string merge_name = "heed_cpu_vector_merge_" + std::string(short_name(p.dtype));
  profile::record(merge_name.c_str(), 1, p.kv_heads, p.batch);
  parallel_for(r.plan.workers, tasks, [&](std::int64_t task, int worker) {
    float* acc = r.accum.at<float>(scratch, static_cast<std::size_t>(worker));
    for (std::int64_t row = 0; row < r.vector_rows; ++row) {
      merge_row(p, r, partials, task, task % p.kv_heads, task / p.kv_heads, row, acc);
    }
  });
}

}  // namespace heed::cpu
