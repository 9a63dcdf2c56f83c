#pragma once
// The score semantics of every kernel, host and device, written once: a query row's visible
// keys (causal, window; bottom-right aligned), the mask term, the score transform (scale, then
// softcap) and the finalize step (sinks, rows that see no key). Only the float64 oracle
// (cpu/reference) is written apart, to check this.
//
// Kernels keep scores in a `unit` of their choice: 1 (natural log) or log2 e (base-2 exponents
// for exp2). The transform, mask terms and sink logits below come in that unit.

#include <cmath>
#include <cstdint>

#include "call/call.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace heed::score {

inline constexpr float kLog2e = 1.4426950408889634f;

struct KeyRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;  // exclusive; begin >= end: no key visible
  HEED_HOST_DEVICE bool empty() const { return begin >= end; }
};

HEED_HOST_DEVICE std::int64_t clamp_keys(std::int64_t key, std::int64_t kv_len) {
  return key < 0 ? 0 : (key > kv_len ? kv_len : key);
}

// Keys that causal and window geometry leave visible to query row i: j <= i + (Lk - Lq), and
// with a window W also j > i + (Lk - Lq) - W. Validation keeps W <= Lk, so nothing overflows.
HEED_HOST_DEVICE KeyRange keys_for_row(const call::Problem& p, std::int64_t i) {
  const std::int64_t diagonal = i + (p.kv_len - p.q_len);
  KeyRange range{0, p.kv_len};
  if (p.causal) range.end = clamp_keys(diagonal + 1, p.kv_len);
  if (p.window > 0) range.begin = clamp_keys(diagonal - p.window + 1, p.kv_len);
  return range;
}

// The same for query row i of one sequence of a ragged or paged call (its own Lq and Lk).
HEED_HOST_DEVICE KeyRange keys_for_row(const call::Problem& p, const call::Sequence& s, std::int64_t i) {
  const std::int64_t diagonal = i + (s.kv_len - s.q_len);
  KeyRange range{0, s.kv_len};
  if (p.causal) range.end = clamp_keys(diagonal + 1, s.kv_len);
  if (p.window > 0) range.begin = clamp_keys(diagonal - p.window + 1, s.kv_len);
  return range;
}

// Element `offset` of a tensor of runtime dtype, as float (Bool: 1 or 0).
HEED_HOST_DEVICE float load_float(const void* base, DType dtype, std::int64_t offset) {
  switch (dtype) {
    case DType::Float32: return static_cast<const float*>(base)[offset];
#if defined(__CUDA_ARCH__)
    case DType::Float16: return __half2float(static_cast<const __half*>(base)[offset]);
    case DType::BFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[offset]);
#else
    case DType::Float16: return half_bits_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::BFloat16: return bfloat16_bits_to_float(static_cast<const std::uint16_t*>(base)[offset]);
#endif
    case DType::Bool: return static_cast<const unsigned char*>(base)[offset] != 0 ? 1.0f : 0.0f;
    case DType::Int32: return static_cast<float>(static_cast<const std::int32_t*>(base)[offset]);
  }
  return 0.0f;
}

// Where score (b, h, i, j) sits in the mask (zero strides along broadcast axes).
HEED_HOST_DEVICE std::int64_t mask_offset(const call::Mask& m, std::int64_t b, std::int64_t h, std::int64_t i,
                                          std::int64_t j) {
  return b * m.strides[0] + h * m.strides[1] + i * m.strides[2] + j * m.strides[3];
}

// The term a mask element `value` (a bool's 1 / 0, or an additive mask's value, in natural
// units) gives its score: -inf where it hides the key, else what is added (0 for a bool).
HEED_HOST_DEVICE float mask_term_of(call::MaskKind kind, float value) {
  if (kind == call::MaskKind::Bool) return value != 0.0f ? 0.0f : -INFINITY;
  return kind == call::MaskKind::Additive ? value : 0.0f;
}

// A transformed score s with its mask term: a hidden key is -inf whatever s is (a NaN score
// of a hidden key must not reach the row), else s + term.
HEED_HOST_DEVICE float masked(float s, float term) { return term == -INFINITY ? -INFINITY : s + term; }

// The mask's term for score (b, h, i, j) in natural units.
HEED_HOST_DEVICE float mask_term(const call::Mask& m, std::int64_t b, std::int64_t h, std::int64_t i,
                                 std::int64_t j) {
  if (m.kind == call::MaskKind::None) return 0.0f;
  return mask_term_of(m.kind, load_float(m.data, m.dtype, mask_offset(m, b, h, i, j)));
}

// The score of a dot product q·k: s = scale · q·k, and with a softcap c, c · tanh(s / c),
// before the mask term is added. Kernels multiply q·k (or q) by dot_scale; where the transform
// is not linear, finish(x) then gives the score in `unit`s, else x is the score already (and a
// kernel may fold dot_scale into its exponent's FMA). Every score option that is a function of
// one score belongs here, so kernels reach it through finish() alone.
struct Transform {
  float dot_scale = 1.0f;  // scale × unit, or scale / c where capped
  float cap_scale = 0.0f;  // c × unit; 0: no softcap

  HEED_HOST_DEVICE bool linear() const { return cap_scale == 0.0f; }

  // The rest of the transform after dot_scale: c · tanh(x), by the kernel's own `tanh` (of a
  // float or a vector of them): the special-function unit's on the 16-bit CUDA kernels, whose
  // weights are rounded to 16 bits anyway; tanh_by_exp2 elsewhere.
  template <typename V, typename Tanh>
  HEED_HOST_DEVICE V finish(V x, Tanh tanh) const {
    if (linear()) return x;
    return tanh(x) * cap_scale;
  }
  // finish(x) = shaped(x) × finish_scale(), for kernels that fold the last multiply into their
  // exponent's FMA (finish_scale() > 0 keeps the order of scores, so maxima may be taken first).
  template <typename V, typename Tanh>
  HEED_HOST_DEVICE V shaped(V x, Tanh tanh) const {
    return linear() ? x : tanh(x);
  }
  HEED_HOST_DEVICE float finish_scale() const { return linear() ? 1.0f : cap_scale; }
};

// tanh(x) as 1 - 2 / (e^(2x) + 1) through a kernel's base-2 exponential: one exp2 and one
// division, exact at both saturations (e^(2x) = inf gives 1, 0 gives -1) and NaN-preserving.
template <typename Exp2>
struct TanhByExp2 {
  Exp2 exp2;
  template <typename V>
  HEED_HOST_DEVICE V operator()(V x) const {
    const V e = exp2(x * (2.0f * kLog2e)) + 1.0f;
#if defined(__CUDA_ARCH__)
    return 1.0f - __fdividef(2.0f, e);  // e = inf gives 0, as wanted
#else
    return 1.0f - 2.0f / e;
#endif
  }
};
template <typename Exp2>
HEED_HOST_DEVICE TanhByExp2<Exp2> tanh_by_exp2(Exp2 exp2) {
  return {exp2};
}

HEED_HOST_DEVICE Transform transform(const call::Call& c, float unit) {
  if (c.softcap > 0.0f) return {c.scale / c.softcap, c.softcap * unit};
  return {c.scale * unit, 0.0f};
}

// The sink logit of query head h (not scaled, natural units).
HEED_HOST_DEVICE float sink_logit(const call::Sinks& sinks, std::int64_t h) {
  return load_float(sinks.data, sinks.dtype, h * sinks.stride);
}

// The offset a row's weights are taken against: exp(s - offset). A row whose maximum is still
// -inf has weighed no key; 0 keeps its masked scores at weight 0 and its NaN scores NaN.
HEED_HOST_DEVICE float exp_offset(float row_max) { return row_max == -INFINITY ? 0.0f : row_max; }

// The factor that turns a finished row's accumulator into its output, out = acc × weight, from
// its running maximum m and sum l of exp(s - m) (both in `unit`s) and, with sinks, the sink's
// logit in the same unit (exp(sink) joins the denominator). l is 0 exactly when every key was
// hidden by the key range or the mask: that row is zeros. A NaN score makes l NaN, and the row
// NaN, as in PyTorch. `exp` is the kernel's exponential in its unit.
template <typename Exp>
HEED_HOST_DEVICE float finalize_weight(float m, float l, bool has_sink, float sink, Exp exp) {
  if (l == 0.0f) return 0.0f;
  if (!has_sink) return 1.0f / l;
  const float frame = fmaxf(m, sink);
  const float kept = exp(m - frame);
  return kept / (l * kept + exp(sink - frame));
}

// A finished row's log-sum-exp in natural units, from its running maximum m and sum l of
// exp(s - m) (natural units): log(l · e^m + e^sink). A row that weighed no key (l = 0) has the
// sink's logit, or -inf without one; a NaN sum stays NaN.
HEED_HOST_DEVICE float row_lse(float m, float l, bool has_sink, float sink) {
  if (l == 0.0f) return has_sink ? sink : -INFINITY;
  if (!has_sink) return m + logf(l);
  const float frame = fmaxf(m, sink);
  return frame + logf(l * expf(m - frame) + expf(sink - frame));
}

// A finished output value: rows that see no key are written from nothing, whatever the value
// rows of their hidden keys hold.
HEED_HOST_DEVICE float finalize_value(float acc, float weight) { return weight == 0.0f ? 0.0f : acc * weight; }

}  // namespace heed::score
