// The float64 oracle of the serving forms: each sequence's rows gathered to doubles through the
// views' strides (pages through the block table), then the definition of attention per row.

#include "cpu/reference/serving_oracle.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu/reference/oracle.hpp"

namespace heed::reference {
namespace {

constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("[heed::reference] " + message);
}

std::size_t index(std::int64_t i) { return static_cast<std::size_t>(i); }

// An int32 host tensor of rank 1 ([n]) or 2 ([rows, n]) in logical row-major order.
std::vector<std::int64_t> read_ints(const TensorView& view, int rank, const char* name) {
  require(view.dtype == DType::Int32, std::string(name) + " must be int32");
  require(view.rank() == rank && static_cast<int>(view.strides.size()) == rank,
          std::string(name) + " must be rank " + std::to_string(rank));
  const std::int64_t rows = rank == 2 ? view.shape[0] : 1;
  const std::int64_t columns = view.shape[rank - 1];
  const std::int64_t row_stride = rank == 2 ? view.strides[0] : 0;
  const std::int64_t column_stride = view.strides[static_cast<std::size_t>(rank - 1)];
  std::vector<std::int64_t> values;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < columns; ++c) {
      std::int32_t value;
      const auto* at = static_cast<const unsigned char*>(view.data) +
                       (r * row_stride + c * column_stride) * static_cast<std::int64_t>(sizeof value);
      std::memcpy(&value, at, sizeof value);
      values.push_back(value);
    }
  }
  return values;
}

// cu_seqlens of a ragged batch: from 0, non-decreasing, ending at `total`.
std::vector<std::int64_t> read_cu_seqlens(const TensorView& view, std::int64_t total, const char* name) {
  std::vector<std::int64_t> cu = read_ints(view, 1, name);
  require(!cu.empty() && cu.front() == 0, std::string(name) + " must start at 0");
  for (std::size_t b = 1; b < cu.size(); ++b) require(cu[b] >= cu[b - 1], std::string(name) + " must not decrease");
  require(cu.back() == total, std::string(name) + " must end at " + std::to_string(total));
  return cu;
}

// `count` rows of `width` doubles from a view: row r starts at element row_start(r) and its
// elements are `step` apart.
std::vector<double> gather(const TensorView& view, std::int64_t count, std::int64_t width, std::int64_t step,
                           const std::function<std::int64_t(std::int64_t)>& row_start) {
  std::vector<double> rows;
  rows.reserve(index(count * width));
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t start = row_start(r);
    for (std::int64_t d = 0; d < width; ++d) rows.push_back(read_element(view, start + d * step));
  }
  return rows;
}

// The additive term of the dense mask for row i, key j of one (batch, head): 0 or -inf for a
// boolean mask, the value for a floating one. A dimension of size 1 broadcasts.
using MaskTerm = std::function<double(std::int64_t i, std::int64_t j)>;

MaskTerm mask_term(const TensorView& mask, std::int64_t b, std::int64_t h) {
  return [&mask, b, h](std::int64_t i, std::int64_t j) {
    const auto at = [&](int axis, std::int64_t position) {
      return mask.shape[axis] == 1 ? 0 : position * mask.strides[static_cast<std::size_t>(axis)];
    };
    const double value = mask.rank() == 2 ? read_element(mask, at(0, i) + at(1, j))
                                          : read_element(mask, at(0, b) + at(1, h) + at(2, i) + at(3, j));
    if (mask.dtype == DType::Bool) return value != 0.0 ? 0.0 : kNegativeInfinity;
    return value;
  };
}

// One query head of one sequence, gathered: queries [q_len, D], keys [kv_len, D], values
// [kv_len, Dv]. Row i writes out[i * out_stride + e] and lse[i * lse_stride].
struct HeadOfSequence {
  const std::vector<double>& queries;
  const std::vector<double>& keys;
  const std::vector<double>& values;
  std::int64_t q_len, kv_len, head_dim, value_dim;
  std::optional<double> sink;
  const MaskTerm* mask;
  double* out;
  std::int64_t out_stride;
  double* lse;
  std::int64_t lse_stride;
};

// The definition, row by row: final scores (scale, softcap, then mask, causal and window
// bottom-right), softmax with exp(sink) in the denominator, and the log of that denominator.
void attend(const HeadOfSequence& s, double scale, const AttentionOptions& options) {
  std::vector<double> scores(index(s.kv_len));
  for (std::int64_t i = 0; i < s.q_len; ++i) {
    const double* q_row = &s.queries[index(i * s.head_dim)];
    const std::int64_t diagonal = i + (s.kv_len - s.q_len);
    double row_max = kNegativeInfinity;
    bool any_nan = false;
    for (std::int64_t j = 0; j < s.kv_len; ++j) {
      bool visible = true;
      if (options.causal) visible = j <= diagonal && (!options.window || j > diagonal - *options.window);
      double score = kNegativeInfinity;
      if (visible) {
        double dot = 0.0;
        for (std::int64_t d = 0; d < s.head_dim; ++d) dot += q_row[d] * s.keys[index(j * s.head_dim + d)];
        score = scale * dot;
        if (options.softcap) score = *options.softcap * std::tanh(score / *options.softcap);
        if (s.mask != nullptr) score += (*s.mask)(i, j);
      }
      scores[index(j)] = score;
      if (score > row_max) row_max = score;
      any_nan = any_nan || std::isnan(score);
    }
    double* out_row = s.out + i * s.out_stride;
    double& lse = s.lse[i * s.lse_stride];
    for (std::int64_t e = 0; e < s.value_dim; ++e) out_row[e] = 0.0;
    if (any_nan) {
      for (std::int64_t e = 0; e < s.value_dim; ++e) out_row[e] = kNaN;
      lse = kNaN;
      continue;
    }
    // No visible key: zeros, and the log of the sink's term alone.
    if (row_max == kNegativeInfinity) {
      lse = s.sink ? *s.sink : kNegativeInfinity;
      continue;
    }
    const double sink = s.sink ? *s.sink : kNegativeInfinity;
    const double shift = sink > row_max ? sink : row_max;
    double denominator = s.sink ? std::exp(sink - shift) : 0.0;
    for (std::int64_t j = 0; j < s.kv_len; ++j) {
      const double score = scores[index(j)];
      if (score == kNegativeInfinity) continue;
      const double weight = std::exp(score - shift);
      denominator += weight;
      for (std::int64_t e = 0; e < s.value_dim; ++e) out_row[e] += weight * s.values[index(j * s.value_dim + e)];
    }
    for (std::int64_t e = 0; e < s.value_dim; ++e) out_row[e] /= denominator;
    lse = shift + std::log(denominator);
  }
}

std::optional<double> sink_of(const AttentionOptions& options, std::int64_t h) {
  if (!options.sinks) return std::nullopt;
  return read_element(*options.sinks, h * options.sinks->strides[0]);
}

void check_options(const AttentionOptions& options, std::int64_t q_heads) {
  if (options.sinks) {
    require(options.sinks->rank() == 1 && options.sinks->shape[0] == q_heads, "sinks must be [Hq]");
  }
  if (options.window) require(*options.window >= 1, "window must be >= 1");
}

std::int64_t group_of(std::int64_t q_heads, std::int64_t kv_heads) {
  require(kv_heads > 0 || q_heads == 0, "no key/value heads");
  require(kv_heads == 0 || q_heads % kv_heads == 0, "Hq must be a multiple of Hkv");
  return kv_heads == 0 ? 1 : q_heads / kv_heads;
}

// Sequences whose query rows start at cu_q[b] of a [total_q, Hq, D] q (rank 3), keys gathered by
// key_row(b, kv_head, j) from k and v (last strides k_step, v_step), lengths kv_len(b).
struct RowSequences {
  std::vector<std::int64_t> cu_q;
  std::function<std::int64_t(std::int64_t b)> kv_len;
  std::function<std::int64_t(const TensorView& kv, std::int64_t b, std::int64_t h, std::int64_t j)> key_row;
};

AttentionResult attend_rows(const TensorView& q, const TensorView& k, const TensorView& v, std::int64_t kv_heads,
                            const RowSequences& seqs, double scale, const AttentionOptions& options) {
  const std::int64_t total_q = q.shape[0], q_heads = q.shape[1], head_dim = q.shape[2];
  const std::int64_t value_dim = v.shape[v.rank() - 1];
  const std::int64_t group = group_of(q_heads, kv_heads);
  AttentionResult result;
  result.out.assign(index(total_q * q_heads * value_dim), 0.0);
  result.lse.assign(index(total_q * q_heads), kNegativeInfinity);
  const std::int64_t k_step = k.strides.back(), v_step = v.strides.back();
  for (std::size_t b = 0; b + 1 < seqs.cu_q.size(); ++b) {
    const auto sequence = static_cast<std::int64_t>(b);
    const std::int64_t first_q = seqs.cu_q[b], q_len = seqs.cu_q[b + 1] - first_q;
    const std::int64_t kv_len = seqs.kv_len(sequence);
    for (std::int64_t kv_head = 0; kv_head < kv_heads; ++kv_head) {
      const auto key_start = [&](const TensorView& kv) {
        return [&seqs, view = &kv, sequence, kv_head](std::int64_t j) { return seqs.key_row(*view, sequence, kv_head, j); };
      };
      const std::vector<double> keys = gather(k, kv_len, head_dim, k_step, key_start(k));
      const std::vector<double> values = gather(v, kv_len, value_dim, v_step, key_start(v));
      for (std::int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const std::vector<double> queries = gather(q, q_len, head_dim, q.strides[2], [&](std::int64_t i) {
          return (first_q + i) * q.strides[0] + h * q.strides[1];
        });
        attend({queries, keys, values, q_len, kv_len, head_dim, value_dim, sink_of(options, h), nullptr,
                &result.out[index((first_q * q_heads + h) * value_dim)], q_heads * value_dim,
                &result.lse[index(first_q * q_heads + h)], q_heads},
               scale, options);
      }
    }
  }
  return result;
}

}  // namespace

AttentionResult attention_with_lse(const TensorView& q, const TensorView& k, const TensorView& v, double scale,
                                   const AttentionOptions& options) {
  require(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "q, k, v must be rank 4");
  const std::int64_t batch = q.shape[0], q_heads = q.shape[1], q_len = q.shape[2], head_dim = q.shape[3];
  const std::int64_t kv_heads = k.shape[1], kv_len = k.shape[2], value_dim = v.shape[3];
  require(k.shape[0] == batch && v.shape[0] == batch, "batch sizes differ");
  require(k.shape[3] == head_dim, "q and k head sizes differ");
  require(v.shape[1] == kv_heads && v.shape[2] == kv_len, "k and v shapes differ");
  if (options.mask) require(options.mask->rank() == 2 || options.mask->rank() == 4, "mask must be rank 2 or 4");
  check_options(options, q_heads);
  const std::int64_t group = group_of(q_heads, kv_heads);

  AttentionResult result;
  result.out.assign(index(batch * q_heads * q_len * value_dim), 0.0);
  result.lse.assign(index(batch * q_heads * q_len), kNegativeInfinity);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t kv_head = 0; kv_head < kv_heads; ++kv_head) {
      const auto key_start = [&](const TensorView& kv) {
        return [view = &kv, b, kv_head](std::int64_t j) {
          return b * view->strides[0] + kv_head * view->strides[1] + j * view->strides[2];
        };
      };
      const std::vector<double> keys = gather(k, kv_len, head_dim, k.strides[3], key_start(k));
      const std::vector<double> values = gather(v, kv_len, value_dim, v.strides[3], key_start(v));
      for (std::int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const std::vector<double> queries = gather(q, q_len, head_dim, q.strides[3], [&](std::int64_t i) {
          return b * q.strides[0] + h * q.strides[1] + i * q.strides[2];
        });
        const MaskTerm mask = options.mask ? mask_term(*options.mask, b, h) : MaskTerm();
        attend({queries, keys, values, q_len, kv_len, head_dim, value_dim, sink_of(options, h),
                options.mask ? &mask : nullptr, &result.out[index((b * q_heads + h) * q_len * value_dim)],
                value_dim, &result.lse[index((b * q_heads + h) * q_len)], 1},
               scale, options);
      }
    }
  }
  return result;
}

AttentionResult attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& cu_q, const TensorView& cu_k, double scale,
                                 const AttentionOptions& options) {
  require(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "q, k, v must be rank 3");
  require(k.shape[2] == q.shape[2], "q and k head sizes differ");
  require(v.shape[0] == k.shape[0] && v.shape[1] == k.shape[1], "k and v shapes differ");
  require(!options.mask, "masks are dense-only");
  check_options(options, q.shape[1]);
  RowSequences seqs;
  seqs.cu_q = read_cu_seqlens(cu_q, q.shape[0], "cu_seqlens_q");
  const std::vector<std::int64_t> cu_k_values = read_cu_seqlens(cu_k, k.shape[0], "cu_seqlens_k");
  require(cu_k_values.size() == seqs.cu_q.size(), "cu_seqlens_q and cu_seqlens_k lengths differ");
  seqs.kv_len = [&](std::int64_t b) { return cu_k_values[index(b + 1)] - cu_k_values[index(b)]; };
  seqs.key_row = [&](const TensorView& kv, std::int64_t b, std::int64_t h, std::int64_t j) {
    return (cu_k_values[index(b)] + j) * kv.strides[0] + h * kv.strides[1];
  };
  return attend_rows(q, k, v, k.shape[1], seqs, scale, options);
}

AttentionResult attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                const TensorView& block_table, const TensorView& seqlens_k,
                                const std::optional<TensorView>& cu_q, double scale,
                                const AttentionOptions& options) {
  require(q.rank() == 3 && k_cache.rank() == 4 && v_cache.rank() == 4, "q must be rank 3, the caches rank 4");
  require(k_cache.shape[3] == q.shape[2], "q and k head sizes differ");
  for (int axis = 0; axis < 3; ++axis) require(v_cache.shape[axis] == k_cache.shape[axis], "k and v caches differ");
  require(!options.mask, "masks are dense-only");
  check_options(options, q.shape[1]);
  const std::int64_t num_pages = k_cache.shape[0], page_size = k_cache.shape[1];
  const std::vector<std::int64_t> lengths = read_ints(seqlens_k, 1, "seqlens_k");
  const std::vector<std::int64_t> table = read_ints(block_table, 2, "block_table");
  const auto batch = static_cast<std::int64_t>(lengths.size());
  const std::int64_t max_pages = block_table.shape[1];
  require(block_table.shape[0] == batch, "block_table must have one row per sequence");

  RowSequences seqs;
  if (cu_q) {
    seqs.cu_q = read_cu_seqlens(*cu_q, q.shape[0], "cu_seqlens_q");
    require(static_cast<std::int64_t>(seqs.cu_q.size()) == batch + 1, "cu_seqlens_q must be [B + 1]");
  } else {
    require(q.shape[0] == batch, "decode q must be [B, Hq, D]");
    for (std::int64_t b = 0; b <= batch; ++b) seqs.cu_q.push_back(b);
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = lengths[index(b)];
    require(length >= 0 && length <= max_pages * page_size, "seqlens_k out of range");
    for (std::int64_t page = 0; page * page_size < length; ++page) {
      const std::int64_t entry = table[index(b * max_pages + page)];
      require(entry >= 0 && entry < num_pages, "block_table entry out of range");
    }
  }
  seqs.kv_len = [&](std::int64_t b) { return lengths[index(b)]; };
  seqs.key_row = [&](const TensorView& kv, std::int64_t b, std::int64_t h, std::int64_t j) {
    const std::int64_t page = table[index(b * max_pages + j / page_size)];
    return page * kv.strides[0] + (j % page_size) * kv.strides[1] + h * kv.strides[2];
  };
  return attend_rows(q, k_cache, v_cache, k_cache.shape[2], seqs, scale, options);
}

}  // namespace heed::reference
