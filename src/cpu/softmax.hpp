#pragma once
// The pieces of the softmax every CPU route shares: masks on a row of scores and the final
// normalisation with sinks. Fully masked rows end as zeros.

#include <cmath>
#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/load.hpp"
#include "cpu/params.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {

// Scores s[0..count) of keys first..first+count of row (b, h, i): keys outside the causal /
// window range and keys a boolean mask hides become -inf; an additive mask is added.
inline void mask_scores(const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                        std::int64_t first, std::int64_t count, float* s) {
  const KeyRange range = p.keys_for_row(i);
  for (std::int64_t j = 0; j < count; ++j) {
    if (first + j < range.begin || first + j >= range.end) s[j] = kNegInf;
  }
  const MaskParams& m = p.mask;
  if (m.kind == plan::MaskKind::None) return;
  const std::int64_t row = b * m.strides[0] + h * m.strides[1] + i * m.strides[2] + first * m.strides[3];
  if (m.kind == plan::MaskKind::Bool) {
    const auto* bytes = static_cast<const std::uint8_t*>(m.data);
    for (std::int64_t j = 0; j < count; ++j) {
      if (bytes[row + j * m.strides[3]] == 0) s[j] = kNegInf;
    }
  } else {
    for (std::int64_t j = 0; j < count; ++j) s[j] += load_element(m.data, m.dtype, row + j * m.strides[3]);
  }
}

inline float sink_logit(const AttentionParams& p, std::int64_t h) {
  return load_element(p.sinks, p.sinks_dtype, h * p.sinks_stride);
}

// out = acc / (l + exp(sink)) in the frame of max m; zeros when nothing was visible.
inline void finalize_row(const AttentionParams& p, std::int64_t h, float m, float l, const float* acc,
                         float* out) {
  if (m == kNegInf) {
    for (std::int64_t d = 0; d < p.value_dim; ++d) out[d] = 0.0f;
    return;
  }
  float weight = 1.0f / l;
  if (p.sinks != nullptr) {
    const float sink = sink_logit(p, h);
    const float frame = std::fmax(m, sink);
    const float kept = std::exp(m - frame);
    weight = kept / (l * kept + std::exp(sink - frame));
  }
  for (std::int64_t d = 0; d < p.value_dim; ++d) out[d] = acc[d] * weight;
}

}  // namespace HEED_ISA
}  // namespace heed::cpu
