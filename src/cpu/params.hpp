#pragma once
// What every CPU kernel reads: the call descriptor (call/call.hpp), as validation built it.

#include <cstdint>
#include <limits>

#include "call/call.hpp"
#include "score/score.hpp"

namespace heed::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using call::Call;
using call::MaskKind;
using call::Sequence;
using call::Strides;
using score::KeyRange;

// The key rows of one (sequence, key head) of k or v: row j's element offset, with the run of
// rows at one stride around it (a page, when paged; all rows otherwise) kept, so that walking
// the rows costs a multiply-add each and a block-table read per page.
class KeyRows {
 public:
  KeyRows(const Call& p, const Strides& strides, const Sequence& s, std::int64_t head)
      : p_(&p), strides_(&strides), s_(&s), head_(head), stride_(strides[2]) {}

  std::int64_t stride() const { return stride_; }
  std::int64_t offset(std::int64_t j) {
    if (j < begin_ || j >= end_) locate(j);
    return base_ + (j - begin_) * stride_;
  }
  // Rows from j on at one stride from row j.
  std::int64_t run(std::int64_t j) {
    if (j < begin_ || j >= end_) locate(j);
    return end_ - j;
  }

 private:
  void locate(std::int64_t j) {
    const bool paged = s_->pages != nullptr;
    begin_ = paged ? j - j % p_->page_size : 0;
    end_ = paged ? begin_ + p_->page_size : std::numeric_limits<std::int64_t>::max();
    base_ = call::key_offset(*p_, *strides_, *s_, head_, begin_);
  }

  const Call* p_;
  const Strides* strides_;
  const Sequence* s_;
  std::int64_t head_, stride_;
  std::int64_t begin_ = 0, end_ = 0, base_ = 0;
};

// Where a finished row's log-sum-exp goes, when the call asks for it: m and l in natural units.
inline void store_lse(const Call& p, const Sequence& s, std::int64_t h, std::int64_t i, float m, float l) {
  if (p.lse == nullptr) return;
  const bool sinks = p.sinks.data != nullptr;
  p.lse[call::row_offset(p.lse_strides, s, h, i)] =
      score::row_lse(m, l, sinks, sinks ? score::sink_logit(p.sinks, h) : 0.0f);
}

}  // namespace heed::cpu
