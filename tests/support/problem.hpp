#pragma once
// One attention problem for the kernel tests: a hand-written case description and the
// tensors (q, k, v, out, mask, sinks) built from it with fresh random data.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/support.hpp"

namespace heed::test {

enum class MaskKind {
  None,
  Bool2D,        // [Lq, Lk] bool, rows i % 5 == 2 fully masked
  Bool4D,        // [B, Hq, Lq, Lk] bool, rows i % 5 == 2 of (b 0, h 0) fully masked
  BoolExpanded,  // [B, Hq, Lq, Lk] bool with stride 0 over heads (an expanded [B, 1, Lq, Lk])
  Additive,      // [1, Hq, Lq, Lk] floating, 20% -inf, rows i % 7 == 3 all -inf
  KeyPadding,    // [B, 1, 1, Lk] bool; the last batch (when B >= 2) has no valid key
};
const char* to_string(MaskKind kind);

struct CaseSpec {
  std::string name;
  std::int64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 1, kv_len = 1;
  std::int64_t head_dim = 64, value_dim = 64;
  DType dtype = DType::Float32;
  bool causal = false;
  std::optional<std::int64_t> window;
  bool sinks = false;
  std::optional<float> softcap;
  DType sink_dtype = DType::Float32;
  MaskKind mask = MaskKind::None;
  DType mask_dtype = DType::Float32;  // of an Additive mask
  Layout mask_layout = Layout::Contiguous;   // of Bool2D, Bool4D and Additive masks
  Layout sinks_layout = Layout::Contiguous;  // StridedLast: sinks with stride 2
  std::optional<std::int64_t> max_score_bytes;
  std::optional<std::int64_t> max_scratch_bytes;
  RouteChoice route = RouteChoice::Auto;
  Layout layout = Layout::Contiguous;      // of q, k and v
  std::optional<Layout> q_layout;          // of q where it differs from k and v
  Layout out_layout = Layout::Contiguous;
  double scale = 0;                        // 0: 1 / sqrt(head_dim)
  double input_stddev = 1.5;                // of q and k: logits of spread ~2.25, not a flat softmax
  bool expect_masked_rows = false;         // the case must produce fully masked rows
  bool nan_query = false;                  // one element of q's row (0, 0, min(1, Lq - 1)) is NaN

  Shape q_shape() const { return {batch, q_heads, q_len, head_dim}; }
  Shape k_shape() const { return {batch, kv_heads, kv_len, head_dim}; }
  Shape v_shape() const { return {batch, kv_heads, kv_len, value_dim}; }
  Shape out_shape() const { return {batch, q_heads, q_len, value_dim}; }
  // Double multiply-adds of the oracle: B * Hq * Lq * Lk * (D + Dv).
  double oracle_cost() const;
};

// The tensors of one case. Not movable: options holds views into the tensors.
class Problem {
 public:
  explicit Problem(const CaseSpec& spec);
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  const CaseSpec& spec() const { return spec_; }
  Tensor& q() { return q_; }
  Tensor& k() { return k_; }
  Tensor& v() { return v_; }
  Tensor& out() { return out_; }
  const AttentionOptions& options() const { return options_; }
  AttentionOptions& options() { return options_; }
  float scale() const { return scale_; }

  AttentionPlan plan() const;
  // Poisons every byte of out's storage (kept in out_before()), then runs heed::attention.
  void run();
  const std::vector<unsigned char>& out_before() const { return out_before_; }
  std::vector<double> reference() const;

 private:
  CaseSpec spec_;
  Tensor q_, k_, v_, out_;
  std::optional<Tensor> mask_, sinks_;
  AttentionOptions options_;
  float scale_ = 1.0f;
  std::vector<unsigned char> out_before_;
};

std::unique_ptr<Problem> make_problem(const CaseSpec& spec);

// "name [x, y, z]" of a profiler entry, split.
struct Dispatch {
  std::string name;
  std::int64_t x = -1, y = -1, z = -1;
  std::int64_t count = 0;
};
std::vector<Dispatch> dispatches();  // profile::entries(), parsed

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace heed::test
