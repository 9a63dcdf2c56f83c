#pragma once
// What the vector (decode) kernels share: a query row's geometry, the final write of a row
// (sinks, fully masked rows); their PTX is cuda/ptx.cuh's.

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/params.hpp"
#include "cuda/ptx.cuh"

namespace heed::cuda {

struct RowInfo {
  std::int64_t head, position, begin, end;
  bool valid;
};

// Row `row` (of group × Lq) of key head `kv_head`: its query head, position and visible keys.
__device__ __forceinline__ RowInfo row_info(const VectorArgs& a, std::int64_t kv_head, std::int64_t row) {
  RowInfo info{};
  info.valid = row < a.rows;
  if (info.valid) {
    info.head = kv_head * a.group + row / a.q_len;
    info.position = row % a.q_len;
    const KeyRange range = score::keys_for_row(a, info.position);
    info.begin = range.begin;
    info.end = range.end;
  }
  return info;
}

// Writes one finished row by the score header's finalize step, in the log2 frame of m: out =
// acc / (sum + 2^sink); a row that saw no key is zeros.
template <typename T>
__device__ __forceinline__ void write_row(const VectorArgs& a, std::int64_t b, std::int64_t h, std::int64_t i,
                                          std::int64_t d, float m, float l, float acc) {
  const bool sinks = a.sinks.data != nullptr;
  const float weight = score::finalize_weight(m, l, sinks, sinks ? sink_logit(a.sinks, h) * kLog2e : 0.0f,
                                              [](float x) { return exp2f(x); });
  T* out = static_cast<T*>(a.out);
  out[b * a.out_strides.s[0] + h * a.out_strides.s[1] + i * a.out_strides.s[2] + d * a.out_strides.s[3]] =
      from_float<T>(score::finalize_value(acc, weight));
}

// A block's result for row `row` (of group × Lq), column d: the final output when the keys are
// not partitioned, else the partition's partial (max, sum, output) for the merge pass.
template <typename T>
__device__ __forceinline__ void store_block_row(const VectorArgs& a, std::int64_t b, std::int64_t kv_head,
                                                std::int64_t part, std::int64_t row, const RowInfo& info,
                                                std::int64_t d, float m, float l, float o) {
  if (a.partitions == 1) {
    write_row<T>(a, b, info.head, info.position, d, m, l, o);
    return;
  }
  const std::int64_t dv = a.value_dim;
  float* slot = a.partials + (((b * a.kv_heads + kv_head) * a.rows + row) * a.partitions + part) * (dv + 2);
  if (d == 0) {
    slot[0] = m;
    slot[1] = l;
  }
  slot[2 + d] = o;
}

}  // namespace heed::cuda
