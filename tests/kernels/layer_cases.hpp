#pragma once
// The encoder layer's test cases and its float64 reference (projections, attention with the
// key padding mask, output projection, padded positions zeroed), shared by the CPU tests
// (kernels/layer_test.cpp) and the CUDA tests (cuda/cuda_layer_test.cpp).

#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/support.hpp"

namespace heed::test {

struct LayerCase {
  std::string name;
  std::int64_t hidden, q_heads, kv_heads, head_dim;
  std::vector<std::int64_t> lengths;  // real tokens per sequence (then padding); empty: no mask
  std::int64_t length;
  bool biases = true;
  Layout layout = Layout::Contiguous;  // of hidden and out
  bool transposed_weights = false;     // weights stored as [in, out] (column-major views)
  DType dtype = DType::Float32;        // of every tensor but the mask
};

inline void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

// The layer's tensors, owned, on the host; weights scaled by 1/sqrt(fan-in) so activations
// stay O(1). The output is poisoned.
struct LayerData {
  LayerCase spec;
  Tensor hidden, out, mask;
  std::vector<Tensor> weights;  // q, k, v, out
  std::vector<Tensor> biases;   // q, k, v, out (empty when the case has none)

  LayerData(const LayerCase& c, std::mt19937_64& rng);

  std::int64_t batch() const { return spec.lengths.empty() ? 2 : static_cast<std::int64_t>(spec.lengths.size()); }
  MultiHeadAttentionConfig config() const { return {spec.hidden, spec.q_heads, spec.kv_heads, spec.head_dim, {}}; }
  MultiHeadAttentionWeights layer_weights() const;
  std::optional<TensorView> mask_view() const;

 private:
  Tensor make_weight(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) const;
};

// The whole layer in float64, [B, L, hidden] contiguous: the definition, written out. Each
// stage's result (q, k, v, the heads' attention output) is a tensor of the layer's dtype, so
// it is rounded to that dtype as the layer stores it (as any half-precision layer does).
std::vector<double> reference_layer(const LayerData& d);

// out [B, L, hidden] as the rank-4 view [B, L, 1, hidden] the comparison reads row by row.
TensorView as_rows(const TensorView& out);

// The same view with its batches in reverse order (a negative batch stride).
TensorView reversed_batches(const TensorView& view);
// The reference of the batches in reverse order.
std::vector<double> reversed_batches(const std::vector<double>& reference, std::int64_t batch);

// The CPU's grid: MHA, GQA, MQA, odd sizes, fully padded sequences, no mask or biases,
// padded rows with transposed weights; float32.
std::vector<LayerCase> layer_cases();

}  // namespace heed::test
