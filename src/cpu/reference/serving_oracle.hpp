#pragma once
// The float64 oracle of the serving forms (heed/serving.hpp) and of the log-sum-exp output: the
// definition of attention, one row at a time, per sequence. Used only by tests; it shares no code
// with the kernels or src/score beyond the dtype conversions of heed/dtype.hpp.

#include <cstdint>
#include <optional>
#include <vector>

#include "heed/options.hpp"
#include "heed/tensor.hpp"

namespace heed::reference {

// Each row's output and its natural log-sum-exp: log(sum over visible keys exp(s_j) + exp(sink)),
// -inf for a row with no visible key and no sink, the sink's logit for one with a sink only.
// A row that sees no key is zeros. Both contiguous, lse shaped as out without its last dimension.
struct AttentionResult {
  std::vector<double> out;
  std::vector<double> lse;
};

// The dense form: q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], any strides; masks,
// causal, window, sinks and softcap as heed::attention. out [B, Hq, Lq, Dv], lse [B, Hq, Lq].
AttentionResult attention_with_lse(const TensorView& q, const TensorView& k, const TensorView& v, double scale,
                                   const AttentionOptions& options);

// A ragged batch: sequence b is rows [cu_q[b], cu_q[b + 1]) of q [total_q, Hq, D] and rows
// [cu_k[b], cu_k[b + 1]) of k [total_k, Hkv, D] and v [total_k, Hkv, Dv]; cu_* int32 [B + 1] on
// the host, any strides. out [total_q, Hq, Dv], lse [total_q, Hq]. options.mask must be empty.
AttentionResult attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& cu_q, const TensorView& cu_k, double scale,
                                 const AttentionOptions& options);

// A paged KV cache: k_cache [num_pages, page_size, Hkv, D], v_cache [num_pages, page_size, Hkv, Dv];
// key j of sequence b is row j % page_size of page block_table[b, j / page_size] (int32
// [B, max_pages]), and sequence b has seqlens_k[b] keys (int32 [B]). q is [B, Hq, D] (one query
// per sequence) or, with cu_q, [total_q, Hq, D]. out is q's shape with Dv last, lse q's without D.
AttentionResult attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                const TensorView& block_table, const TensorView& seqlens_k,
                                const std::optional<TensorView>& cu_q, double scale,
                                const AttentionOptions& options);

}  // namespace heed::reference
