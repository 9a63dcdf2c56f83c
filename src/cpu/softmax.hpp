#pragma once
// The score header's semantics (score/score.hpp) on rows of CPU scores: the softcap and the
// masks on a row, and the final normalisation with sinks.

#include <cmath>
#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/load.hpp"
#include "cpu/microkernels.hpp"
#include "cpu/params.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {

// s[0..count) = the transform finished (with a softcap c: c · tanh(s[j])) in natural units, for
// scores already multiplied by the transform's dot_scale.
inline void finish_scores(const score::Transform& transform, float* s, std::int64_t count) {
  const auto tanh = score::tanh_by_exp2([](auto x) { return microkernel::exp2_lanes(x); });
  std::int64_t j = 0;
  for (; j + microkernel::kVectorLanes <= count; j += microkernel::kVectorLanes) {
    microkernel::store(s + j, transform.finish(microkernel::load(s + j), tanh));
  }
  for (; j < count; ++j) s[j] = transform.finish(s[j], tanh);
}

// Scores s[0..count) of keys first..first+count of row (h, i) of a sequence, each q·k × dot_scale:
// the transform finished where it is not linear, then keys outside the causal / window range and
// keys a boolean mask hides become -inf, and an additive mask is added.
inline void mask_scores(const Call& p, const score::Transform& transform, const Sequence& seq, std::int64_t h,
                        std::int64_t i, std::int64_t first, std::int64_t count, float* s) {
  if (!transform.linear()) finish_scores(transform, s, count);
  const KeyRange range = score::keys_for_row(p, seq, i);
  for (std::int64_t j = 0; j < count; ++j) {
    if (first + j < range.begin || first + j >= range.end) s[j] = kNegInf;
  }
  const call::Mask& m = p.mask;
  if (m.kind == MaskKind::None) return;
  const std::int64_t row = score::mask_offset(m, seq.index, h, i, first);
  for (std::int64_t j = 0; j < count; ++j) {
    s[j] = score::masked(s[j], score::mask_term_of(m.kind, load_element(m.data, m.dtype, row + j * m.strides[3])));
  }
}

// out = acc × the score header's finalize weight, in the natural frame of max m and sum l.
inline void finalize_row(const Call& p, std::int64_t h, float m, float l, const float* acc, float* out) {
  const bool sinks = p.sinks.data != nullptr;
  const float weight = score::finalize_weight(m, l, sinks, sinks ? score::sink_logit(p.sinks, h) : 0.0f,
                                              [](float x) { return std::exp(x); });
  for (std::int64_t d = 0; d < p.value_dim; ++d) out[d] = score::finalize_value(acc[d], weight);
}

}  // namespace HEED_ISA
}  // namespace heed::cpu
