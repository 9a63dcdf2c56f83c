#include "kernels/layer_cases.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace heed::test {
namespace {

// A value stored in `dtype` (float32, float16 or bfloat16), read back.
double round_to(DType dtype, double value) {
  const auto single = static_cast<float>(value);
  switch (dtype) {
    case DType::Float16: return static_cast<float>(half(single));
    case DType::BFloat16: return static_cast<float>(bfloat16(single));
    default: return single;
  }
}

void round_all(std::vector<double>& values, DType dtype) {
  for (double& value : values) value = round_to(dtype, value);
}

// The weight's element (o, i) through its view.
double weight_at(const Tensor& w, std::int64_t o, std::int64_t i) {
  const TensorView& v = w.view();
  return read_element(v, o * v.strides[0] + i * v.strides[1]);
}

// x [rows, in] · Wᵀ + b in float64.
std::vector<double> linear(const std::vector<double>& x, std::int64_t rows, std::int64_t in, const Tensor& w,
                           const Tensor* bias) {
  const std::int64_t n = w.view().shape[0];
  std::vector<double> y(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < n; ++o) {
      double sum = bias ? bias->get(o) : 0.0;
      for (std::int64_t i = 0; i < in; ++i) sum += x[static_cast<std::size_t>(r * in + i)] * weight_at(w, o, i);
      y[static_cast<std::size_t>(r * n + o)] = sum;
    }
  }
  return y;
}

}  // namespace

LayerData::LayerData(const LayerCase& c, std::mt19937_64& rng)
    : spec(c),
      hidden(Shape{batch(), c.length, c.hidden}, c.dtype, c.layout),
      out(Shape{batch(), c.length, c.hidden}, c.dtype, c.layout),
      mask(Shape{batch(), c.length}, DType::Bool) {
  hidden.fill_random(rng);
  const std::int64_t qw = c.q_heads * c.head_dim, kvw = c.kv_heads * c.head_dim;
  const std::int64_t rows[4] = {qw, kvw, kvw, c.hidden};
  const std::int64_t cols[4] = {c.hidden, c.hidden, c.hidden, qw};
  for (int i = 0; i < 4; ++i) {
    weights.push_back(make_weight(rows[i], cols[i], rng));
    if (c.biases) {
      biases.emplace_back(Shape{rows[i]}, c.dtype);
      biases.back().fill_random(rng, 0.5);
    }
  }
  for (std::int64_t b = 0; b < batch(); ++b) {
    for (std::int64_t i = 0; i < c.length; ++i) {
      mask.set(b * c.length + i, c.lengths.empty() || i < c.lengths[static_cast<std::size_t>(b)] ? 1.0 : 0.0);
    }
  }
  out.poison();
}

Tensor LayerData::make_weight(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) const {
  const double stddev = 1.0 / std::sqrt(static_cast<double>(cols));
  if (!spec.transposed_weights) {
    Tensor w(Shape{rows, cols}, spec.dtype);
    w.fill_random(rng, stddev);
    return w;
  }
  // [rows, cols] stored as its transpose: storage [cols, rows], view strides (1, rows).
  Tensor w(Shape{cols, rows}, spec.dtype);
  w.fill_random(rng, stddev);
  TensorView& view = w.view();
  view.shape = Shape{rows, cols};
  view.strides = {1, rows};
  return w;
}

MultiHeadAttentionWeights LayerData::layer_weights() const {
  MultiHeadAttentionWeights w{weights[0].view(), weights[1].view(), weights[2].view(), weights[3].view(),
                              std::nullopt, std::nullopt, std::nullopt, std::nullopt};
  if (!biases.empty()) {
    w.q_bias = biases[0].view();
    w.k_bias = biases[1].view();
    w.v_bias = biases[2].view();
    w.out_bias = biases[3].view();
  }
  return w;
}

std::optional<TensorView> LayerData::mask_view() const {
  return spec.lengths.empty() ? std::nullopt : std::optional<TensorView>(mask.view());
}

std::vector<double> reference_layer(const LayerData& d) {
  const LayerCase& c = d.spec;
  const std::int64_t B = d.batch(), L = c.length, D = c.head_dim, group = c.q_heads / c.kv_heads;
  const std::int64_t qw = c.q_heads * D, kvw = c.kv_heads * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto bias = [&](int i) { return d.biases.empty() ? nullptr : &d.biases[static_cast<std::size_t>(i)]; };
  std::vector<double> result(static_cast<std::size_t>(B * L * c.hidden), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> x(static_cast<std::size_t>(L * c.hidden));
    for (std::int64_t n = 0; n < L * c.hidden; ++n) x[static_cast<std::size_t>(n)] = d.hidden.get(b * L * c.hidden + n);
    std::vector<double> q = linear(x, L, c.hidden, d.weights[0], bias(0));
    std::vector<double> k = linear(x, L, c.hidden, d.weights[1], bias(1));
    std::vector<double> v = linear(x, L, c.hidden, d.weights[2], bias(2));
    round_all(q, c.dtype);
    round_all(k, c.dtype);
    round_all(v, c.dtype);
    std::vector<double> heads(static_cast<std::size_t>(L * qw), 0.0);
    for (std::int64_t h = 0; h < c.q_heads; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<double> scores(static_cast<std::size_t>(L), -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < L; ++j) {
          if (d.mask.get(b * L + j) == 0.0) continue;
          double dot = 0;
          for (std::int64_t e = 0; e < D; ++e) dot += q[static_cast<std::size_t>(i * qw + h * D + e)] * k[static_cast<std::size_t>(j * kvw + g * D + e)];
          scores[static_cast<std::size_t>(j)] = scale * dot;
          top = std::max(top, scale * dot);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;  // no key: zeros
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - top));
        for (std::int64_t j = 0; j < L; ++j) {
          const double p = scores[static_cast<std::size_t>(j)] / sum;
          for (std::int64_t e = 0; e < D; ++e) heads[static_cast<std::size_t>(i * qw + h * D + e)] += p * v[static_cast<std::size_t>(j * kvw + g * D + e)];
        }
      }
    }
    round_all(heads, c.dtype);
    const std::vector<double> y = linear(heads, L, qw, d.weights[3], bias(3));
    for (std::int64_t i = 0; i < L; ++i) {
      if (d.mask.get(b * L + i) == 0.0) continue;  // padded positions: zeros
      for (std::int64_t o = 0; o < c.hidden; ++o) {
        result[static_cast<std::size_t>((b * L + i) * c.hidden + o)] = y[static_cast<std::size_t>(i * c.hidden + o)];
      }
    }
  }
  return result;
}

TensorView as_rows(const TensorView& out) {
  return TensorView(out.data, out.dtype, Shape{out.shape[0], out.shape[1], 1, out.shape[2]},
                    {out.strides[0], out.strides[1], 0, out.strides[2]}, out.device);
}

TensorView reversed_batches(const TensorView& view) {
  TensorView reversed = view;
  const std::int64_t last = std::max<std::int64_t>(view.shape[0] - 1, 0);
  reversed.data = static_cast<unsigned char*>(view.data) +
                  last * view.strides[0] * static_cast<std::int64_t>(size_of(view.dtype));
  reversed.strides[0] = -view.strides[0];
  return reversed;
}

std::vector<double> reversed_batches(const std::vector<double>& reference, std::int64_t batch) {
  std::vector<double> reversed(reference.size());
  const std::size_t per_batch = batch > 0 ? reference.size() / static_cast<std::size_t>(batch) : 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto from = reference.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(batch - 1 - b) * per_batch);
    std::copy(from, from + static_cast<std::ptrdiff_t>(per_batch),
              reversed.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * per_batch));
  }
  return reversed;
}

std::vector<LayerCase> layer_cases() {
  return {
      {"mha_padding", 64, 4, 4, 16, {17, 5, 0}, 17},
      {"bert_like_heads", 96, 12, 12, 8, {33, 1, 20}, 33},
      {"gqa_odd", 40, 6, 2, 8, {7, 129, 64}, 129},
      {"gqa_two_blocks", 48, 4, 2, 12, {200, 131}, 257},
      {"mqa", 9, 4, 1, 7, {1, 7, 3}, 7},
      {"mqa_single_position", 16, 8, 1, 4, {1, 0}, 1},
      {"no_mask_no_bias", 32, 2, 1, 16, {}, 19, false},
      {"padded_rows_transposed_weights", 24, 3, 3, 8, {11, 4}, 11, true, Layout::Padded, true},
  };
}

}  // namespace heed::test
