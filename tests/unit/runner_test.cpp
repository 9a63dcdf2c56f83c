// heed::Runner on the CPU: its runs give the plain call's output, bit for bit (same plan, same
// kernels), for the dense, ragged and paged forms; again after the data and the metadata change in
// place; and it rejects bad input at construction, as the plain call does.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "heed/heed.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

constexpr float kScale = 0.2f;

Tensor random_tensor(const Shape& shape, std::mt19937_64& rng) {
  Tensor t(shape, DType::Float32);
  t.fill_random(rng);
  return t;
}

::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (a.storage() == b.storage()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the runner's output differs from the plain call's";
}

void set_values(IntTensor& t, const std::vector<std::int64_t>& values) {
  auto* data = static_cast<std::int32_t*>(t.view().data);
  for (std::size_t i = 0; i < values.size(); ++i) data[i] = static_cast<std::int32_t>(values[i]);
}

TEST(Runner, DenseMatchesThePlainCallBeforeAndAfterTheDataChange) {
  std::mt19937_64 rng(seed_of("runner_dense"));
  Tensor q = random_tensor({2, 4, 17, 32}, rng), k = random_tensor({2, 2, 33, 32}, rng);
  Tensor v = random_tensor({2, 2, 33, 32}, rng);
  Tensor out({2, 4, 17, 32}, DType::Float32), expected({2, 4, 17, 32}, DType::Float32);
  AttentionOptions options;
  options.causal = true;
  Runner runner = Runner::dense(q.view(), k.view(), v.view(), out.view(), kScale, options);
  EXPECT_EQ(runner.plan(), plan_attention(q.view(), k.view(), v.view(), options));
  for (int round = 0; round < 2; ++round) {
    out.poison();
    runner.run();
    attention(q.view(), k.view(), v.view(), expected.view(), kScale, options);
    EXPECT_TRUE(same_bytes(out, expected)) << "round " << round;
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
  }
}

TEST(Runner, VarlenFollowsItsMetadataChangedInPlace) {
  std::mt19937_64 rng(seed_of("runner_varlen"));
  Tensor q = random_tensor({40, 4, 32}, rng), k = random_tensor({90, 2, 32}, rng);
  Tensor v = random_tensor({90, 2, 32}, rng);
  Tensor out({40, 4, 32}, DType::Float32), expected({40, 4, 32}, DType::Float32);
  IntTensor cu_q({4}, cumulative({10, 25, 5})), cu_k({4}, cumulative({30, 40, 20}));
  RaggedBatch batch{cu_q.view(), cu_k.view(), 30, 50};
  AttentionOptions options;
  options.causal = true;
  Runner runner = Runner::varlen(q.view(), k.view(), v.view(), batch, out.view(), kScale, options);
  EXPECT_EQ(runner.plan(), plan_attention_varlen(q.view(), k.view(), v.view(), batch, options));
  for (int round = 0; round < 2; ++round) {
    out.poison();
    runner.run();
    attention_varlen(q.view(), k.view(), v.view(), batch, expected.view(), kScale, options);
    EXPECT_TRUE(same_bytes(out, expected)) << "round " << round;
    // A new split of the same rows (the last sequence unused: no queries, no keys), new data.
    set_values(cu_q, cumulative({28, 12, 0}));
    set_values(cu_k, cumulative({50, 40, 0}));
    runner.update_metadata();
    q.fill_random(rng);
    v.fill_random(rng);
  }
}

TEST(Runner, PagedFollowsItsBlockTableAndLengthsChangedInPlace) {
  std::mt19937_64 rng(seed_of("runner_paged"));
  const std::int64_t pages = 12, page_size = 8;
  Tensor q = random_tensor({3, 4, 32}, rng), k_cache = random_tensor({pages, page_size, 2, 32}, rng);
  Tensor v_cache = random_tensor({pages, page_size, 2, 32}, rng);
  Tensor out({3, 4, 32}, DType::Float32), expected({3, 4, 32}, DType::Float32);
  IntTensor table({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  IntTensor lengths({3}, {30, 17, 1});
  PagedKv kv{table.view(), lengths.view(), std::nullopt, std::nullopt, 32};
  AttentionOptions options;
  Runner runner = Runner::paged(q.view(), k_cache.view(), v_cache.view(), kv, out.view(), kScale, options);
  for (int round = 0; round < 2; ++round) {
    out.poison();
    runner.run();
    attention_paged(q.view(), k_cache.view(), v_cache.view(), kv, expected.view(), kScale, options);
    EXPECT_TRUE(same_bytes(out, expected)) << "round " << round;
    // Pages shuffled and shared, lengths changed (one sequence unused), new keys.
    set_values(table, {11, 3, 3, 0, 7, 2, 9, 1, 5, 5, 5, 5});
    set_values(lengths, {25, 0, 32});
    runner.update_metadata();
    k_cache.fill_random(rng);
  }
}

TEST(Runner, UpdateMetadataRejectsLengthsBeyondThePlan) {
  std::mt19937_64 rng(seed_of("runner_bounds"));
  Tensor q = random_tensor({2, 2, 16}, rng), k_cache = random_tensor({4, 4, 1, 16}, rng);
  Tensor v_cache = random_tensor({4, 4, 1, 16}, rng);
  Tensor out({2, 2, 16}, DType::Float32);
  IntTensor table({2, 2}, {0, 1, 2, 3});
  IntTensor lengths({2}, {3, 5});
  PagedKv kv{table.view(), lengths.view(), std::nullopt, std::nullopt, std::nullopt};
  Runner runner = Runner::paged(q.view(), k_cache.view(), v_cache.view(), kv, out.view(), kScale, {});
  set_values(lengths, {8, 5});  // above the bound of construction, the longest then (5)
  try {
    runner.update_metadata();
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_seqlen_k (5)"), std::string::npos) << e.what();
  }
  runner.run();  // clamped to the plan's bound: no access outside the cache
}

TEST(Runner, RejectsBadInputAtConstructionAsThePlainCallDoes) {
  std::mt19937_64 rng(seed_of("runner_errors"));
  Tensor q = random_tensor({1, 3, 4, 16}, rng), k = random_tensor({1, 2, 5, 16}, rng);
  Tensor v = random_tensor({1, 2, 5, 16}, rng);
  Tensor out({1, 3, 4, 16}, DType::Float32);
  out.poison();
  const std::vector<unsigned char> before = out.storage();
  try {
    (void)Runner::dense(q.view(), k.view(), v.view(), out.view(), kScale, {});
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_STREQ(e.what(), "[heed::attention] Hq (3) must be a multiple of Hkv (2)");
  }
  EXPECT_EQ(out.storage(), before);
}

TEST(Runner, HoldsItsScratchFromConstructionToDestruction) {
  std::mt19937_64 rng(seed_of("runner_scratch"));
  // A long decode: the vector route in key blocks, whose partials are scratch.
  Tensor q = random_tensor({1, 8, 1, 64}, rng), k = random_tensor({1, 1, 4096, 64}, rng);
  Tensor v = random_tensor({1, 1, 4096, 64}, rng);
  Tensor out({1, 8, 1, 64}, DType::Float32);
  const std::size_t before = memory_stats(Device::cpu()).active;
  {
    Runner runner = Runner::dense(q.view(), k.view(), v.view(), out.view(), kScale, {});
    ASSERT_GT(runner.plan().scratch_bytes, 0u) << runner.plan().explain();
    EXPECT_EQ(memory_stats(Device::cpu()).active - before, runner.plan().scratch_bytes);
    runner.run();
    EXPECT_EQ(memory_stats(Device::cpu()).active - before, runner.plan().scratch_bytes);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).active, before);
}

}  // namespace
}  // namespace heed::test
