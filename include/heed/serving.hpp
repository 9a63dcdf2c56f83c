#pragma once
// The serving forms an inference engine calls: ragged batches (FlashAttention's varlen layout),
// paged KV caches (vLLM's block tables), and the exact merge of partial results by their
// log-sum-exp. Each goes through the same validation, planner and memory model as the dense call;
// options.lse (options.hpp) asks any form for its rows' log-sum-exp.
//
// Within each sequence, causal and window are bottom-right aligned: query i of a sequence with
// Lq_b queries and Lk_b keys sees key j iff j <= i + (Lk_b - Lq_b). Masks are dense-only.

#include <cstdint>
#include <optional>

#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/tensor.hpp"

namespace heed {

// A ragged batch of B sequences: sequence b's queries are rows [cu_seqlens_q[b],
// cu_seqlens_q[b + 1]) of q [total_q, Hq, D], its keys rows [cu_seqlens_k[b], cu_seqlens_k[b + 1])
// of k [total_k, Hkv, D] and v [total_k, Hkv, Dv]; out is [total_q, Hq, Dv]. cu_seqlens_* are
// int32 [B + 1], non-decreasing from 0 and ending at the totals.
struct RaggedBatch {
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_k;
  // Bounds on the sequences' lengths, which size the plan. Computed from host-resident
  // cu_seqlens when absent; required where they live on a device.
  std::optional<std::int64_t> max_seqlen_q;
  std::optional<std::int64_t> max_seqlen_k;
};

// A paged KV cache: k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, page_size, Hkv,
// Dv], any strides (so a head-major page, [num_pages, Hkv, page_size, D] permuted, works too).
// Sequence b has seqlens_k[b] keys; its key j is row j % page_size of page
// block_table[b, j / page_size]. block_table is int32 [B, max_pages], seqlens_k int32 [B].
// Pages are read in place; several sequences may share a page (prefix sharing).
// Queries: q [B, Hq, D], one per sequence (decode), or with cu_seqlens_q q [total_q, Hq, D], the
// last cu_seqlens_q[b + 1] - cu_seqlens_q[b] queries of sequence b (chunked prefill, speculative
// decoding). out has q's shape with Dv last.
struct PagedKv {
  TensorView block_table;
  TensorView seqlens_k;
  std::optional<TensorView> cu_seqlens_q;
  // Bounds on the lengths; computed from host-resident metadata when absent.
  std::optional<std::int64_t> max_seqlen_q;
  std::optional<std::int64_t> max_seqlen_k;
};

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                      TensorView& out, float scale, const AttentionOptions& options, Stream stream = {});
AttentionPlan plan_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const RaggedBatch& batch, const AttentionOptions& options);

void attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                     const PagedKv& pages, TensorView& out, float scale, const AttentionOptions& options,
                     Stream stream = {});
AttentionPlan plan_attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                   const PagedKv& pages, const AttentionOptions& options);

// Merges two partial results over disjoint key sets of the same queries into the result over
// their union: with w = exp(lse_a - lse), out = exp(lse_a - lse) · out_a + exp(lse_b - lse) · out_b,
// lse = log(exp(lse_a) + exp(lse_b)). out_* are [..., H, Dv] of one floating dtype, lse_* float32
// of out's shape without its last dimension. A part whose lse is -inf (no key) adds nothing; both
// -inf gives zeros and -inf. out and lse may be out_a and lse_a (in place).
void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, TensorView& out, TensorView& lse, Stream stream = {});

}  // namespace heed
