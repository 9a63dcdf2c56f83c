#pragma once
// The one case table: the benchmark suite and the tests read the same cases. Each case
// knows its FLOPs and the bytes it must move.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "heed/dtype.hpp"

namespace heed::cases {

enum class MaskKind { None, Bool, Additive, KeyPadding };

struct Case {
  std::string name;
  std::int64_t batch = 1;
  std::int64_t q_heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t q_len = 1;
  std::int64_t kv_len = 1;
  std::int64_t head_dim = 64;
  std::int64_t value_dim = 64;
  DType dtype = DType::Float32;
  bool causal = false;
  std::optional<std::int64_t> window;
  bool sinks = false;
  MaskKind mask = MaskKind::None;
  std::optional<std::int64_t> max_score_bytes;

  // (query, key) pairs that are not masked by causal/window geometry, over all b and heads.
  double visible_pairs() const;
  // 2·(D + Dv) per visible pair: Q·Kᵀ and P·V.
  double flops() const;
  // q, k, v read once and out written once, in the case's dtype.
  double bytes() const;
  // Few queries per key head: the figure of merit is bandwidth, not FLOP/s.
  bool memory_bound() const;
  // The same case with Lq and Lk limited to max_len (for tests of the model shapes).
  Case scaled(std::int64_t max_len) const;
};

// Real model shapes: BERT-base, bge-small, Llama-3-8B prefill and decode, Qwen-style
// head size 256, gpt-oss window 128 with sinks.
const std::vector<Case>& default_suite();
const Case* find_case(const std::string& name);

}  // namespace heed::cases
