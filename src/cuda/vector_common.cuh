#pragma once
// What the vector (decode) kernels share: a block's sequence and its query rows' geometry, the
// paged key rows, the final write of a row (sinks, fully masked rows, lse); their PTX is
// cuda/ptx.cuh's.

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/vector_keys.hpp"

namespace heed::cuda {

using call::Sequence;

inline constexpr float kLn2 = 0.6931471805599453f;

struct RowInfo {
  std::int64_t head, position, begin, end;
  bool valid;
};

// Row `row` (of group × Lq, Lq the plan's bound) of key head `kv_head` in sequence `s`: its
// query head, position and visible keys; not valid past the sequence's queries.
__device__ __forceinline__ RowInfo row_info(const VectorArgs& a, const Sequence& s, std::int64_t kv_head,
                                            std::int64_t row) {
  RowInfo info{};
  info.valid = row < a.rows;
  if (info.valid) {
    info.head = kv_head * a.group + row / a.q_len;
    info.position = row % a.q_len;
    info.valid = info.position < s.q_len;
    const KeyRange range = score::keys_for_row(a, s, info.position);
    info.begin = info.valid ? range.begin : 0;
    info.end = info.valid ? range.end : 0;
  }
  return info;
}

// Keys any row of sequence `s` sees. A dense call's is the plan's; a ragged or paged sequence's
// own, whose length the plan's span bounds, so the plan's partitions cover it.
__device__ __forceinline__ KeyRange sequence_span(const VectorArgs& a, const Sequence& s) {
  if (a.form == call::Form::Dense) return {a.span_begin, a.span_end};
  if (s.q_len == 0) return {0, 0};
  return {score::keys_for_row(a, s, 0).begin, score::keys_for_row(a, s, s.q_len - 1).end};
}

// The partitions that hold sequence `s`'s keys (at least one, which writes rows that see none);
// blocks of later partitions exit at once and the merge reads only these.
__device__ __forceinline__ std::int64_t sequence_partitions(const VectorArgs& a, const KeyRange& span) {
  if (a.form == call::Form::Dense) return a.partitions;
  const std::int64_t keys = span.end > span.begin ? span.end - span.begin : 0;
  const std::int64_t parts = (keys + a.keys_per_partition - 1) / a.keys_per_partition;
  return parts < 1 ? 1 : (parts > a.partitions ? a.partitions : parts);
}

// Page and row within it of key j of a paged sequence whose block-table row is `pages`, clamped
// to the cache (cuda/vector_keys.hpp: 32-bit arithmetic, no 64-bit division in hot loops).
__device__ __forceinline__ void page_of_key(const std::int32_t* pages, std::int64_t table_stride,
                                            std::int64_t num_pages, std::int64_t page_size, std::int64_t j,
                                            std::int64_t& page, std::int64_t& row) {
  paged_row(pages, table_stride, num_pages, page_size, j, page, row);
}

// Brings the block-table line of key j (one of the sequence's keys) into L1 a few steps before
// the entries are loaded: with small pages every tile of keys reads the table afresh.
__device__ __forceinline__ void prefetch_table(const std::int32_t* pages, std::int64_t table_stride,
                                               std::int64_t page_size, std::int64_t j) {
  ptx::prefetch_l1(pages + static_cast<unsigned>(j) / page_divisor(page_size) * table_stride);
}

// Writes one finished row by the score header's finalize step, in the log2 frame of m: out =
// acc / (sum + 2^sink); a row that saw no key is zeros. Column 0 also writes the row's lse.
template <typename T>
__device__ __forceinline__ void write_row(const VectorArgs& a, const Sequence& s, std::int64_t h, std::int64_t i,
                                          std::int64_t d, float m, float l, float acc) {
  const bool sinks = a.sinks.data != nullptr;
  const float sink = sinks ? sink_logit(a.sinks, h) : 0.0f;
  const float weight = score::finalize_weight(m, l, sinks, sink * kLog2e, [](float x) { return exp2f(x); });
  T* out = static_cast<T*>(a.out);
  out[call::row_offset(a.out_strides, s, h, i) + d * a.out_strides.s[3]] =
      from_float<T>(score::finalize_value(acc, weight));
  // m is in log2 units, l a sum of 2^(s - m) = e^(s·ln2 - m·ln2): the natural frame is m·ln2.
  if (d == 0 && a.lse != nullptr) a.lse[call::row_offset(a.lse_strides, s, h, i)] = score::row_lse(m * kLn2, l, sinks, sink);
}

// A block's result for row `row` (of group × Lq), column d: the final output when the keys are
// not partitioned, else the partition's partial (max, sum, output) for the merge pass.
template <typename T>
__device__ __forceinline__ void store_block_row(const VectorArgs& a, const Sequence& s, std::int64_t kv_head,
                                                std::int64_t part, std::int64_t row, const RowInfo& info,
                                                std::int64_t d, float m, float l, float o) {
  if (a.partitions == 1) {
    write_row<T>(a, s, info.head, info.position, d, m, l, o);
    return;
  }
  const std::int64_t dv = a.value_dim;
  float* slot = a.partials + (((s.index * a.kv_heads + kv_head) * a.rows + row) * a.partitions + part) * (dv + 2);
  if (d == 0) {
    slot[0] = m;
    slot[1] = l;
  }
  slot[2 + d] = o;
}

}  // namespace heed::cuda
