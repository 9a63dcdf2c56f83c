#pragma once
// The options of one attention call, shared by plan_attention and attention.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "heed/tensor.hpp"

namespace heed {

// Which route the caller asks for. Auto lets the planner choose; the others force a
// route (as PyTorch's sdpa_kernel does) and fail with the reason where it cannot serve.
enum class RouteChoice { Auto, Vector, Tiled, Composed };

// A caller's workspace starts at a multiple of this many bytes (malloc's and cudaMalloc's
// alignment suffices).
inline constexpr std::size_t kWorkspaceAlignment = 16;

struct AttentionOptions {
  // Bottom-right aligned: query i sees key j iff j <= i + (Lk - Lq).
  bool causal = false;
  // Broadcastable to [B, Hq, Lq, Lk] (rank 2 [Lq, Lk] or rank 4 [B|1, Hq|1, Lq|1, Lk|1]).
  // DType::Bool: true (non-zero byte) attends. Floating: added to the scaled scores.
  // May be combined with `causal`: a key must pass both.
  std::optional<TensorView> mask;
  // Sliding window, causal only: query i also needs j > i + (Lk - Lq) - window.
  std::optional<std::int64_t> window;
  // One logit per query head, shape [Hq], floating; adds exp(sink) to the softmax
  // denominator, unscaled, and no value row.
  std::optional<TensorView> sinks;
  // Logit softcap c > 0 (Gemma 2: 50, Grok: 30): the scaled score s becomes c · tanh(s / c),
  // before the mask is added.
  std::optional<float> softcap;
  // No intermediate of score size may exceed this many bytes (must be > 0).
  std::optional<std::int64_t> max_score_bytes;
  // No call may allocate more than this many bytes of scratch in all (must be > 0): the planner
  // takes forms that need less (K and V packed per task, fewer workers) or names the smallest
  // budget that fits.
  std::optional<std::int64_t> max_scratch_bytes;
  RouteChoice route = RouteChoice::Auto;
  // An output, where given: each query row's log-sum-exp in float32, natural log, shaped as out
  // without its last dimension ([B, Hq, Lq] dense, [total_q, Hq] ragged, [B, Hq] paged decode),
  // any strides. It is log(sum_j exp(s_j)) over the row's visible keys' final scores s_j and, with
  // sinks, the sink's logit, so that out · exp(lse) = sum_j exp(s_j) · v_j; -inf for a row that sees
  // no key and has no sink. merge_states (serving.hpp) combines two parts exactly; give sinks to
  // one part only.
  std::optional<TensorView> lse;
  // Caller-owned scratch of at least the plan's scratch_bytes, aligned to kWorkspaceAlignment;
  // heed then allocates nothing.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace heed
