// The float64 oracle: the definition of attention, one query row at a time. It shares no
// code with the kernels beyond the dtype conversions of heed/dtype.hpp.

#include "cpu/reference/oracle.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace heed::reference {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("[heed::reference] " + message);
}

// A rank-4 tensor copied to contiguous doubles, read through its strides and dtype.
std::vector<double> to_doubles(const TensorView& view) {
  require(view.rank() == 4 && view.strides.size() == 4, "q, k, v must be rank 4");
  const Shape& s = view.shape;
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]));
  for (std::int64_t a = 0; a < s[0]; ++a)
    for (std::int64_t b = 0; b < s[1]; ++b)
      for (std::int64_t c = 0; c < s[2]; ++c)
        for (std::int64_t d = 0; d < s[3]; ++d)
          values.push_back(read_element(view, a * view.strides[0] + b * view.strides[1] +
                                                  c * view.strides[2] + d * view.strides[3]));
  return values;
}

// The mask entry for (b, h, i, j); a dimension of size 1 broadcasts.
double mask_value(const TensorView& mask, std::int64_t b, std::int64_t h, std::int64_t i,
                  std::int64_t j) {
  const auto index = [&](int axis, std::int64_t position) {
    return mask.shape[axis] == 1 ? 0 : position * mask.strides[static_cast<std::size_t>(axis)];
  };
  if (mask.rank() == 2) return read_element(mask, index(0, i) + index(1, j));
  return read_element(mask, index(0, b) + index(1, h) + index(2, i) + index(3, j));
}

}  // namespace

double read_element(const TensorView& view, std::int64_t offset) {
  const auto* base = static_cast<const unsigned char*>(view.data);
  const std::ptrdiff_t byte_offset =
      static_cast<std::ptrdiff_t>(offset) * static_cast<std::ptrdiff_t>(size_of(view.dtype));
  const unsigned char* at = base + byte_offset;
  switch (view.dtype) {
    case DType::Float32: {
      float value;
      std::memcpy(&value, at, sizeof value);
      return value;
    }
    case DType::Float16: {
      std::uint16_t bits;
      std::memcpy(&bits, at, sizeof bits);
      return half_bits_to_float(bits);
    }
    case DType::BFloat16: {
      std::uint16_t bits;
      std::memcpy(&bits, at, sizeof bits);
      return bfloat16_bits_to_float(bits);
    }
    case DType::Bool:
      return *at != 0 ? 1.0 : 0.0;
    case DType::Int32: {
      std::int32_t value;
      std::memcpy(&value, at, sizeof value);
      return value;
    }
  }
  throw std::logic_error("[heed::reference] unknown dtype");
}


std::vector<double> attention(const TensorView& q, const TensorView& k, const TensorView& v,
                              double scale, const AttentionOptions& options) {
  require(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "q, k, v must be rank 4");
  const std::int64_t batch = q.shape[0], q_heads = q.shape[1], q_len = q.shape[2];
  const std::int64_t head_dim = q.shape[3];
  const std::int64_t kv_heads = k.shape[1], kv_len = k.shape[2], value_dim = v.shape[3];
  require(k.shape[0] == batch && v.shape[0] == batch, "batch sizes differ");
  require(k.shape[3] == head_dim, "q and k head sizes differ");
  require(v.shape[1] == kv_heads && v.shape[2] == kv_len, "k and v shapes differ");
  require(kv_heads > 0 || q_heads == 0, "no key/value heads");
  require(kv_heads == 0 || q_heads % kv_heads == 0, "Hq must be a multiple of Hkv");
  if (options.mask) {
    require(options.mask->rank() == 2 || options.mask->rank() == 4, "mask must be rank 2 or 4");
  }
  if (options.sinks) require(options.sinks->rank() == 1, "sinks must be rank 1");

  std::vector<double> out(static_cast<std::size_t>(batch * q_heads * q_len * value_dim), 0.0);
  if (out.empty() || kv_len == 0) return out;

  const std::vector<double> qs = to_doubles(q), ks = to_doubles(k), vs = to_doubles(v);
  const std::int64_t group = q_heads / kv_heads;
  const std::int64_t offset = kv_len - q_len;  // bottom-right alignment of causal
  const double negative_infinity = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(static_cast<std::size_t>(kv_len));

  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < q_heads; ++h) {
      const std::int64_t kv_head = h / group;
      const double* k_head = &ks[static_cast<std::size_t>((b * kv_heads + kv_head) * kv_len * head_dim)];
      const double* v_head = &vs[static_cast<std::size_t>((b * kv_heads + kv_head) * kv_len * value_dim)];
      for (std::int64_t i = 0; i < q_len; ++i) {
        const double* q_row = &qs[static_cast<std::size_t>(((b * q_heads + h) * q_len + i) * head_dim)];
        double row_max = negative_infinity;
        bool any_nan = false;
        for (std::int64_t j = 0; j < kv_len; ++j) {
          bool visible = true;
          if (options.causal) {
            visible = j <= i + offset;
            if (options.window) visible = visible && (i + offset) - j < *options.window;
          }
          double score = negative_infinity;
          if (visible) {
            double dot = 0.0;
            for (std::int64_t d = 0; d < head_dim; ++d) dot += q_row[d] * k_head[j * head_dim + d];
            score = scale * dot;
            if (options.softcap) score = *options.softcap * std::tanh(score / *options.softcap);
            if (options.mask) {
              const double m = mask_value(*options.mask, b, h, i, j);
              if (options.mask->dtype == DType::Bool) {
                if (m == 0.0) score = negative_infinity;
              } else {
                score += m;
              }
            }
          }
          scores[static_cast<std::size_t>(j)] = score;
          if (score > row_max) row_max = score;
          any_nan = any_nan || std::isnan(score);
        }
        double* out_row = &out[static_cast<std::size_t>(((b * q_heads + h) * q_len + i) * value_dim)];
        // A NaN score (from NaN inputs) makes the row NaN, as in PyTorch.
        if (any_nan) {
          for (std::int64_t d = 0; d < value_dim; ++d) out_row[d] = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        // No visible key: the row is zeros, sinks or not.
        if (row_max == negative_infinity) continue;

        double sink = negative_infinity;
        if (options.sinks) sink = read_element(*options.sinks, h * options.sinks->strides[0]);
        const double shift = sink > row_max ? sink : row_max;
        double denominator = sink == negative_infinity ? 0.0 : std::exp(sink - shift);
        for (std::int64_t j = 0; j < kv_len; ++j) {
          const double score = scores[static_cast<std::size_t>(j)];
          if (score == negative_infinity) continue;
          const double weight = std::exp(score - shift);
          denominator += weight;
          for (std::int64_t d = 0; d < value_dim; ++d) out_row[d] += weight * v_head[j * value_dim + d];
        }
        for (std::int64_t d = 0; d < value_dim; ++d) out_row[d] /= denominator;
      }
    }
  }
  return out;
}

}  // namespace heed::reference
