// The case table shared by the benchmark suite and the tests.

#include "cases.hpp"

#include <algorithm>

namespace heed::cases {

namespace {

// Keys visible to query row `row` under causal (bottom-right) and window geometry.
std::int64_t visible_keys_of_row(const Case& c, std::int64_t row) {
  const std::int64_t diagonal = row + (c.kv_len - c.q_len);  // last key the row may see
  std::int64_t last_key = c.kv_len - 1;
  std::int64_t first_key = 0;
  if (c.causal) last_key = std::min(last_key, diagonal);
  if (c.window) first_key = std::max<std::int64_t>(0, diagonal - *c.window + 1);
  return std::max<std::int64_t>(0, last_key - first_key + 1);
}

Case model_case(std::string name, std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads,
                std::int64_t q_len, std::int64_t kv_len, std::int64_t head_dim, DType dtype) {
  Case c;
  c.name = std::move(name);
  c.batch = batch;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.head_dim = head_dim;
  c.value_dim = head_dim;
  c.dtype = dtype;
  return c;
}

Case causal(Case c) {
  c.causal = true;
  return c;
}

std::vector<Case> build_default_suite() {
  constexpr DType f32 = DType::Float32;
  constexpr DType bf16 = DType::BFloat16;
  // Llama-3-8B: 32 query heads over 8 key/value heads, head size 128.
  constexpr std::int64_t kLlamaContext = 32768;
  std::vector<Case> suite;
  suite.push_back(model_case("bert-base", 32, 12, 12, 512, 512, 64, f32));
  suite.push_back(model_case("bge-small", 32, 12, 12, 512, 512, 32, f32));
  suite.push_back(causal(model_case("llama3-8b-prefill", 1, 32, 8, 4096, 4096, 128, f32)));
  suite.push_back(causal(model_case("llama3-8b-prefill-bf16", 1, 32, 8, 4096, 4096, 128, bf16)));
  suite.push_back(causal(model_case("llama3-8b-prefill-f16", 1, 32, 8, 4096, 4096, 128, DType::Float16)));
  suite.push_back(model_case("llama3-8b-prefill-full", 1, 32, 8, 4096, 4096, 128, f32));
  suite.push_back(model_case("llama3-8b-decode", 1, 32, 8, 1, kLlamaContext, 128, f32));
  suite.push_back(model_case("llama3-8b-decode-bf16", 1, 32, 8, 1, kLlamaContext, 128, bf16));
  suite.push_back(model_case("llama3-8b-decode-f16", 1, 32, 8, 1, kLlamaContext, 128, DType::Float16));
  suite.push_back(model_case("llama3-8b-decode-128k", 1, 32, 8, 1, 4 * kLlamaContext, 128, f32));
  suite.push_back(causal(model_case("qwen-d256", 1, 16, 2, 2048, 2048, 256, bf16)));
  Case gpt_oss = causal(model_case("gpt-oss-window", 1, 64, 8, 4096, 4096, 64, bf16));
  gpt_oss.window = 128;
  gpt_oss.sinks = true;
  suite.push_back(gpt_oss);
  return suite;
}

}  // namespace

double Case::visible_pairs() const {
  double pairs_per_head = 0.0;
  for (std::int64_t row = 0; row < q_len; ++row) {
    pairs_per_head += static_cast<double>(visible_keys_of_row(*this, row));
  }
  return pairs_per_head * static_cast<double>(batch) * static_cast<double>(q_heads);
}

double Case::flops() const {
  return 2.0 * static_cast<double>(head_dim + value_dim) * visible_pairs();
}

double Case::bytes() const {
  const double query_rows = static_cast<double>(batch * q_heads * q_len);
  const double key_rows = static_cast<double>(batch * kv_heads * kv_len);
  const double elements = query_rows * static_cast<double>(head_dim)      // q
                          + key_rows * static_cast<double>(head_dim)      // k
                          + key_rows * static_cast<double>(value_dim)     // v
                          + query_rows * static_cast<double>(value_dim);  // out
  return static_cast<double>(size_of(dtype)) * elements;
}

bool Case::memory_bound() const {
  // Up to 16 query rows per key row, the kernel does too little work per byte of K/V to be
  // limited by arithmetic.
  constexpr std::int64_t kMemoryBoundRowsPerKeyHead = 16;
  const std::int64_t group = kv_heads > 0 ? q_heads / kv_heads : 0;
  return q_len * group <= kMemoryBoundRowsPerKeyHead;
}

Case Case::scaled(std::int64_t max_len) const {
  Case shrunk = *this;
  shrunk.q_len = std::min(q_len, max_len);
  shrunk.kv_len = std::min(kv_len, max_len);
  return shrunk;
}

const std::vector<Case>& default_suite() {
  static const std::vector<Case> suite = build_default_suite();
  return suite;
}

const Case* find_case(const std::string& name) {
  const auto& suite = default_suite();
  const auto found =
      std::find_if(suite.begin(), suite.end(), [&](const Case& c) { return c.name == name; });
  return found == suite.end() ? nullptr : &*found;
}

}  // namespace heed::cases
