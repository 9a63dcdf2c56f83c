#include <cmath>
#include <string>

#include "core/format.hpp"
#include "heed/error.hpp"
#include "plan/problem.hpp"

namespace heed::plan {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, std::string("[") + kOp + "] " + message);
}

void check_rank4(const Shape& shape, const char* name, const char* layout) {
  if (shape.rank() != 4) invalid(format("{} must have rank 4 {}, got shape {}", name, layout, shape.to_string()));
  for (std::int64_t dim : shape.dims()) {
    if (dim < 0) invalid(format("{} shape {} has a negative size", name, shape.to_string()));
  }
  shape.numel(kOp);
}

void check_floating(DType dtype, const char* name) {
  if (!is_floating(dtype)) {
    invalid(format("{} dtype must be float32, float16 or bfloat16, got {}", name, to_string(dtype)));
  }
}

// Rank 2 [Lq, Lk] or rank 4 [B|1, Hq|1, Lq|1, Lk|1].
MaskKind check_mask(const TensorView& mask, const Problem& p) {
  const Shape target{p.batch, p.q_heads, p.q_len, p.kv_len};
  const Shape& shape = mask.shape;
  bool broadcasts = false;
  if (shape.rank() == 2) {
    broadcasts = (shape[0] == p.q_len || shape[0] == 1) && (shape[1] == p.kv_len || shape[1] == 1);
  } else if (shape.rank() == 4) {
    broadcasts = true;
    for (int axis = 0; axis < 4; ++axis) {
      broadcasts = broadcasts && (shape[axis] == target[axis] || shape[axis] == 1);
    }
  } else {
    invalid(format("mask must have rank 2 [Lq, Lk] or 4 [B, Hq, Lq, Lk], got shape {}", shape.to_string()));
  }
  if (!broadcasts) {
    invalid(format("mask shape {} does not broadcast to {}", shape.to_string(), target.to_string()));
  }
  if (mask.strides.size() != static_cast<std::size_t>(shape.rank())) {
    invalid(format("mask has {} strides for shape {}", mask.strides.size(), shape.to_string()));
  }
  return mask.dtype == DType::Bool ? MaskKind::Bool : MaskKind::Additive;
}

void check_sinks(const TensorView& sinks, std::int64_t q_heads) {
  if (sinks.shape.rank() != 1 || sinks.shape[0] != q_heads) {
    invalid(format("sinks must have shape [Hq] = [{}], got {}", q_heads, sinks.shape.to_string()));
  }
  if (sinks.strides.size() != 1) invalid(format("sinks has {} strides for rank 1", sinks.strides.size()));
  check_floating(sinks.dtype, "sinks");
}

}  // namespace

Problem validate_problem(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                         DType k_dtype, DType v_dtype, const AttentionOptions& options) {
  check_rank4(q, "q", "[B, Hq, Lq, D]");
  check_rank4(k, "k", "[B, Hkv, Lk, D]");
  check_rank4(v, "v", "[B, Hkv, Lk, Dv]");
  check_floating(q_dtype, "q");
  if (k_dtype != q_dtype || v_dtype != q_dtype) {
    invalid(format("q, k and v must share one dtype, got q {}, k {}, v {}", to_string(q_dtype),
                   to_string(k_dtype), to_string(v_dtype)));
  }
  if (q[0] != k[0] || q[0] != v[0]) {
    invalid(format("batch sizes differ: q {}, k {}, v {}", q[0], k[0], v[0]));
  }
  if (k[1] != v[1]) invalid(format("k and v head counts differ: k {}, v {}", k[1], v[1]));
  if (k[1] == 0 ? q[1] != 0 : q[1] % k[1] != 0) {
    invalid(format("Hq ({}) must be a multiple of Hkv ({})", q[1], k[1]));
  }
  if (q[3] != k[3]) invalid(format("q and k head sizes differ: q {}, k {}", q[3], k[3]));
  if (k[2] != v[2]) invalid(format("k and v lengths differ: k {}, v {}", k[2], v[2]));

  Problem p;
  p.batch = q[0];
  p.q_heads = q[1];
  p.kv_heads = k[1];
  p.q_len = q[2];
  p.kv_len = k[2];
  p.head_dim = q[3];
  p.value_dim = v[3];
  p.dtype = q_dtype;
  p.causal = options.causal;
  p.route = options.route;
  const auto element = static_cast<std::int64_t>(size_of(q_dtype));
  // Modulo first: a head size near the int64 limit must not overflow here (it is rejected later).
  p.rows_wide = ((p.head_dim % 16) * element) % 16 == 0 && ((p.value_dim % 16) * element) % 16 == 0;
  // Every tensor must also fit in bytes as float32, the kernels' working type.
  checked_mul(q.numel(kOp), 4, kOp, "q bytes");
  checked_mul(k.numel(kOp), 4, kOp, "k bytes");
  checked_mul(v.numel(kOp), 4, kOp, "v bytes");
  checked_mul(Shape{p.batch, p.q_heads, p.q_len, p.value_dim}.numel(kOp), 4, kOp, "out bytes");
  const std::int64_t rows = checked_mul(checked_mul(p.batch, p.q_heads, kOp, "B * Hq"), p.q_len, kOp, "B * Hq * Lq");
  checked_mul(checked_mul(rows, p.kv_len, kOp, "the score count B * Hq * Lq * Lk"), 4, kOp,
              "the score bytes B * Hq * Lq * Lk * 4");

  if (options.mask) p.mask = check_mask(*options.mask, p);
  if (options.sinks) {
    check_sinks(*options.sinks, p.q_heads);
    p.sinks = true;
  }
  if (options.window) {
    if (!options.causal) invalid(format("window ({}) requires causal", *options.window));
    if (*options.window < 1) invalid(format("window must be >= 1, got {}", *options.window));
    p.window = *options.window;
  }
  if (options.max_score_bytes) {
    if (*options.max_score_bytes <= 0) {
      invalid(format("max_score_bytes must be > 0, got {}", *options.max_score_bytes));
    }
    p.max_score_bytes = options.max_score_bytes;
  }
  return p;
}

std::string describe(const Problem& p, const std::string& device) {
  std::string text = format("shape: B {}, Hq {} / Hkv {} (group {}), Lq {}, Lk {}, D {}, Dv {}, {}{}", p.batch,
                            p.q_heads, p.kv_heads, p.group(), p.q_len, p.kv_len, p.head_dim, p.value_dim,
                            to_string(p.dtype), device);
  if (p.causal) text += ", causal";
  if (p.window) text += format(", window {}", p.window);
  if (p.mask == MaskKind::Bool) text += ", boolean mask";
  if (p.mask == MaskKind::Additive) text += ", additive mask";
  if (p.sinks) text += ", sinks";
  if (p.max_score_bytes) text += format(", max_score_bytes {}", *p.max_score_bytes);
  return text;
}

}  // namespace heed::plan
