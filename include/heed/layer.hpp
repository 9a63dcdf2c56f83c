#pragma once
// The encoder attention layer (BERT-style): projections, attention through heed's planner,
// the output projection, on the CPU (float32) or a CUDA device (float32, float16, bfloat16).
// For hidden states x [B, L, hidden] and a key padding mask m [B, L]:
//   q = x·Wqᵀ + bq, k = x·Wkᵀ + bk, v = x·Wvᵀ + bv       (split into heads of head_dim)
//   a = attention(q, k, v, mask = m as [B, 1, 1, L])     (query head h reads kv head h / (Hq/Hkv))
//   out = a·Woᵀ + bo, with the rows of padded positions (m[b, i] false) set to zero.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "heed/plan.hpp"
#include "heed/tensor.hpp"

namespace heed {

struct MultiHeadAttentionConfig {
  std::int64_t hidden = 0;    // features of the input and of the output
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;  // divides q_heads: = q_heads (MHA), fewer (GQA), 1 (MQA)
  std::int64_t head_dim = 0;
  std::optional<float> scale;  // multiplies q·k; default 1/sqrt(head_dim)
};

// Views in PyTorch's nn.Linear layout, weight [out_features, in_features] (y = x·Wᵀ + b):
// q [q_heads·head_dim, hidden], k and v [kv_heads·head_dim, hidden], out [hidden, q_heads·head_dim].
// A weight needs unit stride in one dimension (row-major, or its transpose); biases any stride.
// All on one device and of one dtype, which are the layer's: float32 on the CPU; float32,
// float16 or bfloat16 on CUDA (fp32 accumulation). The layer keeps the views, not copies:
// the caller keeps the memory alive and unchanged (on CUDA, written before each call's stream
// reads it).
struct MultiHeadAttentionWeights {
  TensorView q_weight, k_weight, v_weight, out_weight;
  std::optional<TensorView> q_bias, k_bias, v_bias, out_bias;
};

// The plan of one forward call: the attention's own plan and the layer's workspace.
struct MultiHeadAttentionPlan {
  AttentionPlan attention;        // the plan heed::attention runs for the projected heads
  int workers = 1;                // threads of the projection stages (CUDA: 1, the caller's stream)
  std::int64_t block_rows = 0;    // positions per projection task (CUDA: B·L, one GEMM each)
  std::size_t workspace_bytes = 0;  // all the scratch of the call: q, k, v, heads' output, attention's
  std::vector<ScratchBuffer> buffers;  // the layout of workspace_bytes
  std::vector<std::string> reasons;

  std::string explain() const;  // the layer's reasons, then the attention's
};

class MultiHeadAttention {
 public:
  // Validates the config and the weights (InvalidArgument, or Unsupported for a dtype or
  // device the layer does not run), naming "[heed::MultiHeadAttention]" and the values.
  MultiHeadAttention(const MultiHeadAttentionConfig& config, const MultiHeadAttentionWeights& weights);

  const MultiHeadAttentionConfig& config() const { return config_; }
  float scale() const { return scale_; }
  Device device() const { return weights_.q_weight.device; }  // the weights' device
  DType dtype() const { return weights_.q_weight.dtype; }     // the weights' dtype

  // Pure: the plan for hidden states [batch, length, hidden], with or without a key padding
  // mask, on the layer's device.
  MultiHeadAttentionPlan plan(std::int64_t batch, std::int64_t length, bool key_padding = true) const;

  // out [B, L, hidden] = the layer applied to `hidden` [B, L, hidden] (the layer's device and
  // dtype; the last dimension contiguous, positions not overlapping; out may be `hidden`
  // itself). The key padding mask is Bool [B, L] on the same device, true = a real token, any
  // strides. A workspace of at least the plan's workspace_bytes (4-byte aligned; device memory
  // on CUDA) makes heed allocate nothing. On CUDA the work is queued on `stream` (null: the
  // default stream) and the call does not wait for it. Invalid input throws before any work
  // and leaves `out` untouched. Safe to call from several threads.
  void forward(const TensorView& hidden, const std::optional<TensorView>& key_padding_mask, TensorView& out,
               void* workspace = nullptr, std::size_t workspace_bytes = 0, Stream stream = {}) const;

 private:
  MultiHeadAttentionConfig config_;
  MultiHeadAttentionWeights weights_;
  float scale_ = 1.0f;
};

}  // namespace heed
