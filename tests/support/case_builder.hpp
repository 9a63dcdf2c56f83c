#pragma once
// The builder every kernel test writes its cases with.

#include <cstdint>
#include <string>

#include "support/problem.hpp"

namespace heed::test {

// A case in one line: sizes first, then what it adds.
class Make {
 public:
  Make(std::string name, std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
       std::int64_t kv_len, std::int64_t head_dim = 64, std::int64_t value_dim = -1, DType dtype = DType::Float32) {
    c_.name = std::move(name);
    c_.batch = batch;
    c_.q_heads = q_heads;
    c_.kv_heads = kv_heads;
    c_.q_len = q_len;
    c_.kv_len = kv_len;
    c_.head_dim = head_dim;
    c_.value_dim = value_dim >= 0 ? value_dim : head_dim;
    c_.dtype = dtype;
  }
  Make& causal() { return c_.causal = true, *this; }
  Make& window(std::int64_t w) { return c_.causal = true, c_.window = w, *this; }
  Make& sinks(DType dtype = DType::Float32) { return c_.sinks = true, c_.sink_dtype = dtype, *this; }
  Make& softcap(float c) { return c_.softcap = c, *this; }
  Make& stddev(double s) { return c_.input_stddev = s, *this; }
  Make& mask(MaskKind kind, DType dtype = DType::Float32) { return c_.mask = kind, c_.mask_dtype = dtype, *this; }
  Make& mask_layout(Layout l) { return c_.mask_layout = l, *this; }
  Make& sinks_layout(Layout l) { return c_.sinks_layout = l, *this; }
  Make& cap(std::int64_t bytes) { return c_.max_score_bytes = bytes, *this; }
  Make& budget(std::int64_t bytes) { return c_.max_scratch_bytes = bytes, *this; }
  Make& route(RouteChoice r) { return c_.route = r, *this; }
  Make& layout(Layout l) { return c_.layout = l, *this; }
  Make& q_layout(Layout l) { return c_.q_layout = l, *this; }
  Make& out_layout(Layout l) { return c_.out_layout = l, *this; }
  Make& scale(double s) { return c_.scale = s, *this; }
  Make& nan_query() { return c_.nan_query = true, *this; }
  Make& masked_rows() { return c_.expect_masked_rows = true, *this; }
  operator CaseSpec() const { return c_; }  // NOLINT: the builder converts implicitly

 private:
  CaseSpec c_;
};

}  // namespace heed::test
