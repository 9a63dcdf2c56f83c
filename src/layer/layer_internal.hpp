#pragma once
// What the encoder layer's CPU and CUDA halves share: the workspace layout of one call (laid
// out by the code that plans it), the heads' and the mask's views, the weights as GEMM
// operands. No CUDA types.

#include <cstdint>
#include <optional>
#include <string>

#include "heed/layer.hpp"
#include "plan/scratch_layout.hpp"

namespace heed::layer {

inline constexpr const char* kOp = "heed::MultiHeadAttention";

[[noreturn]] void invalid(const std::string& message);
[[noreturn]] void unsupported(const std::string& message);

// A weight [rows, cols] as a GEMM operand: row-major (ld = row stride) or, transposed in
// memory, column-major (ld = column stride); data null when it is neither.
struct WeightOperand {
  const void* data = nullptr;
  std::int64_t ld = 0;
  bool row_major = true;
};
WeightOperand weight_operand(const TensorView& w);

// The workspace regions of one call, laid out as the plan states them.
struct Layout {
  MultiHeadAttentionPlan plan;
  plan::Region q, k, v, heads_out, attention;
};

// The heads of projected rows [B, L, heads, D] as a [B, heads, L, D] view.
TensorView heads_view(void* data, DType dtype, Device device, std::int64_t batch, std::int64_t length,
                      std::int64_t heads, std::int64_t dim);

// Key padding [B, L] (or none) as the attention's boolean mask [B, 1, 1, L].
TensorView key_mask_view(const TensorView* mask, Device device, std::int64_t batch, std::int64_t length);

// The attention's options for the layer: the mask, and its scratch inside the layer's workspace.
AttentionOptions attention_options(const Layout& layout, const TensorView* mask, Device device, std::int64_t batch,
                                   std::int64_t length, std::byte* workspace);

// Rows of hidden states or of the output [B, L, width]: the positions' leading dimension
// (width when L = 1, where any stride is legal).
inline std::int64_t row_stride(const TensorView& rows) {
  return rows.shape[1] > 1 ? rows.strides[1] : rows.shape[2];
}

#if HEED_HAS_CUDA
// CUDA (multi_head_attention_cuda.cpp): the device is present (Unsupported otherwise) and every weight and
// bias is memory of it (InvalidArgument otherwise).
void check_cuda_weights(const MultiHeadAttentionWeights& weights);
// CUDA: the call's pointers are memory of the layer's device (InvalidArgument otherwise).
void check_cuda_call(const TensorView& hidden, const TensorView* mask, const TensorView& out, const void* workspace);
// Runs a validated call on `stream`: projections on cuBLAS, heed::attention, output projection.
void forward_cuda(const MultiHeadAttentionConfig& config, const MultiHeadAttentionWeights& weights, float scale,
                  const Layout& layout, const TensorView& hidden, const TensorView* mask, TensorView& out,
                  void* workspace, Stream stream);
#endif

}  // namespace heed::layer
