#include "call/validate.hpp"

#include "call/checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/format.hpp"
#include "heed/error.hpp"

namespace heed::call {
namespace detail {

[[noreturn]] void invalid(const char* op, const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, std::string("[") + op + "] " + message);
}

void check_floating(DType dtype, const char* name, const char* op) {
  if (!is_floating(dtype)) {
    invalid(op, format("{} dtype must be float32, float16 or bfloat16, got {}", name, to_string(dtype)));
  }
}

void check_strides(const TensorView& view, const char* name, const char* op) {
  if (view.strides.size() != static_cast<std::size_t>(view.shape.rank())) {
    invalid(op, format("{} has {} strides for shape {}", name, view.strides.size(), view.shape.to_string()));
  }
}

void check_data(const TensorView& view, const char* name, const char* op) {
  if (view.data == nullptr && view.shape.numel(op) > 0) {
    invalid(op, format("{} data is null for non-empty shape {}", name, view.shape.to_string()));
  }
}

void check_device(const TensorView& view, const char* name, const TensorView& q, const char* op) {
  if (!(view.device == q.device)) {
    invalid(op, format("{} is on {} but q is on {}", name, view.device.to_string(), q.device.to_string()));
  }
}

// The rows of a [B, H, L, E] view are contiguous and do not overlap (leading dimension >= E).
bool rows_contiguous(const TensorView& view) {
  return view.last_dim_contiguous() && (view.shape[2] <= 1 || view.strides[2] >= view.shape[3]);
}

// Every row of a [B, H, L, E] view is whole 16-byte chunks at 16-byte aligned addresses.
bool rows_wide(const TensorView& view) {
  const auto element = static_cast<std::int64_t>(size_of(view.dtype));
  if (view.shape[3] > 1 && view.strides[3] != 1) return false;
  // Modulo first, so that huge sizes and strides cannot overflow (they are rejected elsewhere).
  if (((view.shape[3] % 16) * element) % 16 != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(view.data) % 16 != 0) return false;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (view.shape[static_cast<int>(axis)] > 1 && ((view.strides[axis] % 16) * element) % 16 != 0) return false;
  }
  return true;
}

// The batch stride is the heads times the head stride (or one batch): (b, h) is b·H + h head
// strides from the start.
bool batch_folds(const TensorView& view) {
  if (view.shape[0] <= 1) return true;
  std::int64_t batch_stride = 0;
  return !__builtin_mul_overflow(view.shape[1], view.strides[1], &batch_stride) && view.strides[0] == batch_stride;
}

bool heads_in_rows(const TensorView& view) {
  const std::int64_t heads = view.shape[1], head_stride = view.strides[1], row_stride = view.strides[2];
  if (heads <= 1 || view.strides[3] != 1 || head_stride <= 0 || head_stride >= row_stride) return false;
  std::int64_t span = 0;
  return !__builtin_mul_overflow(heads - 1, head_stride, &span) && span <= row_stride - view.shape[3];
}

// Strides along B, H and L are positive where the size is above 1, and under 2^40 bytes.
bool strides_positive(const TensorView& view) {
  const auto element = static_cast<std::int64_t>(size_of(view.dtype));
  constexpr std::int64_t kLimit = std::int64_t{1} << 40;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (view.shape[static_cast<int>(axis)] > 1 && (view.strides[axis] <= 0 || view.strides[axis] >= kLimit / element)) {
      return false;
    }
  }
  return true;
}

Strides strides_of(const TensorView& view) {
  Strides strides;
  for (int axis = 0; axis < 4; ++axis) strides[axis] = view.strides[static_cast<std::size_t>(axis)];
  return strides;
}

void check_sinks(const TensorView& sinks, std::int64_t q_heads, const char* op) {
  if (sinks.shape.rank() != 1 || sinks.shape[0] != q_heads) {
    invalid(op, format("sinks must have shape [Hq] = [{}], got {}", q_heads, sinks.shape.to_string()));
  }
  if (sinks.strides.size() != 1) invalid(op, format("sinks has {} strides for rank 1", sinks.strides.size()));
  detail::check_floating(sinks.dtype, "sinks", op);
}

}  // namespace detail
namespace {

using detail::batch_folds;
using detail::invalid;
using detail::rows_contiguous;
using detail::rows_wide;
using detail::strides_of;
using detail::strides_positive;

[[noreturn]] void invalid(const std::string& message) { invalid(kOp, message); }

void check_rank4(const Shape& shape, const char* name, const char* layout) {
  if (shape.rank() != 4) invalid(format("{} must have rank 4 {}, got shape {}", name, layout, shape.to_string()));
  for (std::int64_t dim : shape.dims()) {
    if (dim < 0) invalid(format("{} shape {} has a negative size", name, shape.to_string()));
  }
  shape.numel(kOp);
}

void check_floating(DType dtype, const char* name) { detail::check_floating(dtype, name, kOp); }

void check_strides(const TensorView& view, const char* name) { detail::check_strides(view, name, kOp); }
void check_data(const TensorView& view, const char* name) { detail::check_data(view, name, kOp); }
void check_device(const TensorView& view, const char* name, const TensorView& q) {
  detail::check_device(view, name, q, kOp);
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

// A rank-2 [Lq, Lk] or rank-4 mask as [b, h, i, j] strides, zero along broadcast dimensions.
Mask mask_of(const TensorView& mask) {
  Mask m;
  m.data = mask.data;
  m.dtype = mask.dtype;
  m.kind = mask.dtype == DType::Bool ? MaskKind::Bool : MaskKind::Additive;
  const int offset = 4 - mask.rank();
  for (int axis = 0; axis < mask.rank(); ++axis) {
    m.strides[axis + offset] = mask.shape[axis] == 1 ? 0 : mask.strides[static_cast<std::size_t>(axis)];
  }
  return m;
}

}  // namespace

namespace detail {

// The options every form shares (sinks, window, softcap, budgets) into p.
void check_options(Problem& p, const AttentionOptions& options, const char* op) {
  if (options.sinks) {
    check_sinks(*options.sinks, p.q_heads, op);
    p.has_sinks = true;
  }
  if (options.window) {
    if (!options.causal) invalid(op, format("window ({}) requires causal", *options.window));
    if (*options.window < 1) invalid(op, format("window must be >= 1, got {}", *options.window));
    // A window of Lk keys or more hides nothing (row i's first key would be i + Lk - Lq - W + 1
    // <= 0); storing at most Lk keeps every later sum in range.
    p.window = std::min(*options.window, std::max<std::int64_t>(p.kv_len, 1));
  }
  if (options.softcap) {
    const float cap = *options.softcap;
    if (!(cap > 0.0f) || !std::isfinite(cap)) invalid(op, format("softcap must be finite and > 0, got {}", cap));
    p.softcap = cap;
  }
  if (options.max_score_bytes) {
    if (*options.max_score_bytes <= 0) {
      invalid(op, format("max_score_bytes must be > 0, got {}", *options.max_score_bytes));
    }
    p.max_score_bytes = options.max_score_bytes;
  }
  if (options.max_scratch_bytes) {
    if (*options.max_scratch_bytes <= 0) {
      invalid(op, format("max_scratch_bytes must be > 0, got {}", *options.max_scratch_bytes));
    }
    p.max_scratch_bytes = options.max_scratch_bytes;
  }
}

// A caller's workspace, the scale, out's dtype, strides and device, and the data pointers of out,
// mask and sinks; then the descriptor's output fields.
void attach_output(Call& c, const TensorView& q, const TensorView& out, const Shape& expected, float scale,
                   const AttentionOptions& options, const char* op) {
  if (!(out.shape == expected)) {
    invalid(op, format("out shape {} must be {}", out.shape.to_string(), expected.to_string()));
  }
  check_strides(out, "out", op);
  if (out.dtype != q.dtype) {
    invalid(op, format("out dtype {} must equal q dtype {}", to_string(out.dtype), to_string(q.dtype)));
  }
  check_device(out, "out", q, op);
  if (!std::isfinite(scale)) invalid(op, format("scale must be finite, got {}", scale));
  check_data(out, "out", op);
  if (options.mask) {
    check_data(*options.mask, "mask", op);
    check_device(*options.mask, "mask", q, op);
  }
  if (options.sinks) {
    check_data(*options.sinks, "sinks", op);
    check_device(*options.sinks, "sinks", q, op);
  }
  // Scratch buffers sit at multiples of 64 bytes from the arena's start and hold 8-byte
  // integers and 16-byte vectors: 16 bytes is what malloc, cudaMalloc and every framework give.
  if (options.workspace != nullptr && reinterpret_cast<std::uintptr_t>(options.workspace) % kWorkspaceAlignment != 0) {
    invalid(op, format("workspace must be aligned to {} bytes, got address {}", kWorkspaceAlignment,
                       reinterpret_cast<std::uintptr_t>(options.workspace)));
  }
  c.out = out.data;
  c.scale = scale;
}

// options.lse: float32 of `expected` shape on q's device; its strides into c (axes 0..2 of
// [b, h, i], as `axes` maps lse's own axes there).
void attach_lse(Call& c, const TensorView& q, const AttentionOptions& options, const Shape& expected,
                std::initializer_list<int> axes, const char* op) {
  if (!options.lse) return;
  const TensorView& lse = *options.lse;
  if (lse.dtype != DType::Float32) invalid(op, format("lse dtype must be float32, got {}", to_string(lse.dtype)));
  if (!(lse.shape == expected)) {
    invalid(op, format("lse shape {} must be {}", lse.shape.to_string(), expected.to_string()));
  }
  check_strides(lse, "lse", op);
  check_device(lse, "lse", q, op);
  check_data(lse, "lse", op);
  c.has_lse = true;
  c.lse = static_cast<float*>(lse.data);
  int axis = 0;
  for (int target : axes) {
    if (target >= 0) c.lse_strides[target] = lse.strides[static_cast<std::size_t>(axis)];
    ++axis;
  }
}

}  // namespace detail

Problem validate_problem(const Shape& q, const Shape& k, const Shape& v, DType q_dtype, DType k_dtype,
                         DType v_dtype, const AttentionOptions& options) {
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
  p.group = p.kv_heads > 0 ? p.q_heads / p.kv_heads : 0;
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

  if (options.mask) p.mask_kind = check_mask(*options.mask, p);
  detail::check_options(p, options, kOp);
  return p;
}

Call validate_views(const TensorView& q, const TensorView& k, const TensorView& v,
                    const AttentionOptions& options) {
  for (const auto& [view, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) check_strides(*view, name);
  Call c;
  static_cast<Problem&>(c) = validate_problem(q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, options);
  c.rows_contiguous = rows_contiguous(q) && rows_contiguous(k) && rows_contiguous(v);
  c.rows_wide = rows_wide(q) && rows_wide(k) && rows_wide(v);
  c.batch_folds = batch_folds(q) && batch_folds(k) && batch_folds(v);
  c.kv_strides_positive = strides_positive(k) && strides_positive(v);
  c.kv_heads_in_rows = detail::heads_in_rows(k) && detail::heads_in_rows(v);
  check_device(k, "k", q);
  check_device(v, "v", q);
  c.q = q.data;
  c.k = k.data;
  c.v = v.data;
  c.q_strides = strides_of(q);
  c.k_strides = strides_of(k);
  c.v_strides = strides_of(v);
  if (options.mask) c.mask = mask_of(*options.mask);
  if (options.sinks) c.sinks = Sinks{options.sinks->data, options.sinks->dtype, options.sinks->strides[0]};
  return c;
}

Call validate_call(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                   float scale, const AttentionOptions& options) {
  Call c = validate_views(q, k, v, options);
  check_data(q, "q");
  check_data(k, "k");
  check_data(v, "v");
  const Shape expected{q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
  detail::attach_output(c, q, out, expected, scale, options, kOp);
  c.out_strides = strides_of(out);
  c.out_rows_wide = rows_wide(out);
  detail::attach_lse(c, q, options, Shape{q.shape[0], q.shape[1], q.shape[2]}, {0, 1, 2}, kOp);
  return c;
}

void check_workspace(const Problem& p, const AttentionOptions& options, std::size_t scratch_bytes) {
  if (options.workspace != nullptr && options.workspace_bytes < scratch_bytes) {
    invalid(op_of(p), format("workspace of {} bytes is smaller than the plan's scratch_bytes {}", options.workspace_bytes,
                   scratch_bytes));
  }
}

std::string describe(const Problem& p, const std::string& device) {
  std::string text = format("shape: B {}, Hq {} / Hkv {} (group {}), Lq {}, Lk {}, D {}, Dv {}, {}{}", p.batch,
                            p.q_heads, p.kv_heads, p.group, p.q_len, p.kv_len, p.head_dim, p.value_dim,
                            to_string(p.dtype), device);
  if (p.causal) text += ", causal";
  if (p.window) text += format(", window {}", p.window);
  if (p.mask_kind == MaskKind::Bool) text += ", boolean mask";
  if (p.mask_kind == MaskKind::Additive) text += ", additive mask";
  if (p.has_sinks) text += ", sinks";
  if (p.form == Form::Ragged) text += format(", ragged: {} sequences of at most Lq, Lk", p.batch);
  if (p.form == Form::Paged) text += format(", paged: {} sequences of at most Lk keys in pages of {}", p.batch, p.page_size);
  if (p.has_lse) text += ", lse";
  if (p.softcap > 0.0f) text += format(", softcap {}", p.softcap);
  if (p.max_score_bytes) text += format(", max_score_bytes {}", *p.max_score_bytes);
  if (p.max_scratch_bytes) text += format(", max_scratch_bytes {}", *p.max_scratch_bytes);
  return text;
}

}  // namespace heed::call
