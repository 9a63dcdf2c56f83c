// The memory model: scratch_bytes is the plan's promise of peak - active during the call.
// Measured <= scratch_bytes + allocator rounding, >= 80% of it where it is >= 8 MiB; with a
// caller workspace heed allocates nothing; a workspace that is too small is rejected.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <unistd.h>

#include "memory/cpu_allocator.hpp"
#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kLargeScratch = 8 * kMiB;

CaseSpec scratch_case(std::string name, std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads,
                      std::int64_t q_len, std::int64_t kv_len, std::int64_t head_dim, DType dtype,
                      RouteChoice route, std::optional<std::int64_t> cap = std::nullopt) {
  CaseSpec spec = Make(std::move(name), batch, q_heads, kv_heads, q_len, kv_len, head_dim, head_dim, dtype).route(route);
  spec.max_score_bytes = cap;
  return spec;
}

CaseSpec budgeted(CaseSpec spec, std::int64_t bytes) {
  spec.max_scratch_bytes = bytes;
  return spec;
}

struct ScratchCase {
  CaseSpec spec;
  bool large = false;  // the plan's scratch must reach 8 MiB (so the 80% bound applies)
};

void PrintTo(const ScratchCase& c, std::ostream* os) { *os << c.spec.name; }

std::vector<ScratchCase> scratch_cases() {
  constexpr auto f32 = DType::Float32;
  constexpr auto f16 = DType::Float16;
  constexpr auto bf16 = DType::BFloat16;
  constexpr auto Auto = RouteChoice::Auto;
  constexpr auto Vector = RouteChoice::Vector;
  constexpr auto Tiled = RouteChoice::Tiled;
  constexpr auto Composed = RouteChoice::Composed;
  return {
      {scratch_case("vector_single_pass", 2, 8, 2, 1, 300, 64, f32, Auto)},
      {scratch_case("vector_two_pass", 1, 8, 1, 1, 3000, 128, bf16, Vector)},
      {scratch_case("vector_rows", 1, 4, 1, 7, 500, 64, f16, Vector)},
      {scratch_case("tiled_f32", 1, 4, 2, 300, 500, 64, f32, Tiled)},
      {scratch_case("tiled_bf16_d256", 1, 2, 2, 100, 300, 256, bf16, Auto)},
      {scratch_case("tiled_capped", 1, 2, 2, 100, 300, 64, f32, Tiled, 512)},
      {scratch_case("composed_small", 1, 2, 2, 60, 100, 64, f32, Auto)},
      {scratch_case("composed_f16_packed", 1, 2, 2, 60, 100, 64, f16, Composed)},
      // One head's scores alone exceed 8 MiB: 1536 x 1536 x 4 bytes.
      {scratch_case("composed_large", 1, 2, 2, 1536, 1536, 64, f32, Composed), true},
      {scratch_case("composed_large_bf16", 1, 1, 1, 1536, 1536, 64, bf16, Composed), true},
      // Blocks of 786 rows x 3000 keys (9 MiB of scores) per worker.
      {scratch_case("composed_blocks_large", 1, 1, 1, 1500, 3000, 64, f32, Composed, 9 * 1024 * 1024), true},
      {scratch_case("composed_blocks_small", 1, 2, 2, 200, 100, 64, f32, Auto, 100 * 4 * 16)},
      // Under a scratch budget (on bfloat16 matrix units: K and V packed per key head, per task).
      {budgeted(scratch_case("tiled_bf16_budget_head", 1, 8, 2, 512, 4000, 64, bf16, Auto), 2 << 20)},
      {budgeted(scratch_case("tiled_bf16_budget_task", 1, 4, 1, 32, 20000, 128, bf16, Auto), 2 << 20)},
      {budgeted(scratch_case("tiled_f32_budget_workers", 1, 8, 2, 256, 2048, 64, f32, Tiled), 600000)},
  };
}

class Scratch : public ::testing::TestWithParam<ScratchCase> {};

TEST_P(Scratch, MeasuredPeakMatchesThePlan) {
  const ScratchCase& c = GetParam();
  const auto problem = make_problem(c.spec);
  const AttentionPlan plan = problem->plan();
  SCOPED_TRACE(plan.to_json());
  if (c.large) {
    ASSERT_GE(plan.scratch_bytes, kLargeScratch) << "the case was chosen to reach 8 MiB";
  }

  // The buffers lay out scratch_bytes: each fits inside it.
  for (const ScratchBuffer& buffer : plan.buffers) {
    EXPECT_LE(buffer.offset + buffer.bytes, plan.scratch_bytes) << buffer.name;
  }
  reset_peak();
  const MemoryStats before = memory_stats();
  EXPECT_EQ(before.peak, before.active) << "reset_peak sets the peak to what is held";
  problem->run();
  const MemoryStats after = memory_stats();
  const std::size_t measured = after.peak - before.active;
  const std::size_t rounding = plan.buffers.size() * kAllocationAlignment;
  EXPECT_LE(measured, plan.scratch_bytes + rounding) << "measured " << measured << ", planned " << plan.scratch_bytes;
  if (plan.scratch_bytes >= kLargeScratch) {
    EXPECT_GE(static_cast<double>(measured), 0.8 * static_cast<double>(plan.scratch_bytes))
        << "measured " << measured << ", planned " << plan.scratch_bytes;
  }
  EXPECT_EQ(after.active, before.active) << "scratch was not given back";
}

TEST_P(Scratch, CallerWorkspaceMeansNoAllocation) {
  const ScratchCase& c = GetParam();
  const auto problem = make_problem(c.spec);
  const AttentionPlan plan = problem->plan();
  // A 64-byte aligned workspace of exactly scratch_bytes.
  const std::size_t bytes = std::max<std::size_t>(plan.scratch_bytes, 1);
  std::unique_ptr<void, decltype(&std::free)> workspace(
      std::aligned_alloc(kAllocationAlignment, (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment),
      &std::free);
  ASSERT_NE(workspace, nullptr);
  problem->options().workspace = workspace.get();
  problem->options().workspace_bytes = plan.scratch_bytes;

  reset_peak();
  const MemoryStats before = memory_stats();
  problem->run();
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.peak - before.active, 0u) << "heed allocated despite a workspace";
  EXPECT_EQ(after.active, before.active);

  // The answer through the workspace is the oracle's answer too.
  if (c.spec.oracle_cost() <= 1e8) {
    EXPECT_TRUE(matches_reference(problem->out().view(), problem->reference()));
  }
}

TEST_P(Scratch, WorkspaceTooSmallIsRejected) {
  const ScratchCase& c = GetParam();
  const auto problem = make_problem(c.spec);
  const AttentionPlan plan = problem->plan();
  ASSERT_GT(plan.scratch_bytes, 0u);
  std::vector<unsigned char> workspace(plan.scratch_bytes, 0);
  problem->options().workspace = workspace.data();
  problem->options().workspace_bytes = plan.scratch_bytes - 1;
  try {
    problem->run();
    ADD_FAILURE() << "a workspace of scratch_bytes - 1 was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    EXPECT_EQ(std::string(error.what()).rfind("[heed::attention]", 0), 0u) << error.what();
    EXPECT_NE(std::string(error.what()).find(std::to_string(plan.scratch_bytes)), std::string::npos) << error.what();
  }
  EXPECT_EQ(problem->out().storage(), problem->out_before()) << "out written on error";
}

// The workspace must be aligned to 4 bytes (docs/design.md §8).
TEST_P(Scratch, MisalignedWorkspaceIsRejected) {
  const ScratchCase& c = GetParam();
  const auto problem = make_problem(c.spec);
  const AttentionPlan plan = problem->plan();
  std::vector<unsigned char> workspace(plan.scratch_bytes + 8, 0);
  problem->options().workspace = workspace.data() + 1;
  problem->options().workspace_bytes = plan.scratch_bytes + 4;
  try {
    problem->run();
    ADD_FAILURE() << "a workspace at an odd address was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("align"), std::string::npos) << error.what();
  }
  EXPECT_EQ(problem->out().storage(), problem->out_before()) << "out written on error";
}

INSTANTIATE_TEST_SUITE_P(Kernels, Scratch, ::testing::ValuesIn(scratch_cases()),
                         [](const auto& param_info) { return param_info.param.spec.name; });

}  // namespace
}  // namespace heed::test

namespace heed::test {
namespace {

// Scratch beyond the machine's memory is refused with OutOfMemory before any work: zero-stride
// inputs of a huge head size cost nothing to hold, their tile scratch (terabytes) cannot be
// served. Under Linux's overcommit such a malloc may succeed; heed must not rely on it failing.
TEST(ScratchLimits, ScratchBeyondThePhysicalMemoryIsOutOfMemory) {
  const std::int64_t head_dim = std::int64_t{1} << 34;
  float zero = 0.0f;
  std::vector<float> out_storage(17, 7.0f);
  const TensorView q(&zero, DType::Float32, Shape{1, 1, 17, head_dim}, {0, 0, 0, 0});
  const TensorView v(&zero, DType::Float32, Shape{1, 1, 17, 1}, {0, 0, 0, 0});
  TensorView out(out_storage.data(), DType::Float32, Shape{1, 1, 17, 1});
  const AttentionOptions options;
  ASSERT_GT(plan_attention(q, q, v, options).scratch_bytes, std::size_t{1} << 40);
  try {
    attention(q, q, v, out, 1.0f, options);
    ADD_FAILURE() << "terabytes of scratch were allocated";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::OutOfMemory) << error.what();
    EXPECT_NE(std::string(error.what()).find("could not allocate"), std::string::npos) << error.what();
  }
  for (float value : out_storage) EXPECT_EQ(value, 7.0f) << "out written on error";
  EXPECT_EQ(memory_stats().active, 0u);
}

// Owned scratch: the block a thread released (up to kScratchCacheBytes) serves its next call,
// so calls do not fault in fresh pages each time; active and peak count what a call uses; a
// block above the cap is freed and leaves the cached one in place.
TEST(ScratchLimits, AThreadReusesItsReleasedScratchBlock) {
  const std::size_t before = memory_stats().active;
  const std::byte* four = nullptr;
  {
    const memory::Scratch scratch(4 * kMiB, nullptr, "test");
    four = scratch.data();
    EXPECT_EQ(memory_stats().active, before + 4 * kMiB);
  }
  EXPECT_EQ(memory_stats().active, before);
  {
    const memory::Scratch scratch(kMiB + 1, nullptr, "test");
    EXPECT_EQ(scratch.data(), four) << "the released block serves a smaller request";
    EXPECT_EQ(memory_stats().active, before + memory::rounded_size(kMiB + 1));
  }
  const std::byte* eight = nullptr;
  {
    const memory::Scratch scratch(8 * kMiB, nullptr, "test");  // larger than the cached block: a new one
    eight = scratch.data();
  }
  {
    const memory::Scratch huge(memory::kScratchCacheBytes + 64, nullptr, "test");
    EXPECT_EQ(memory_stats().active, before + memory::kScratchCacheBytes + 64);
  }
  {
    const memory::Scratch scratch(8 * kMiB, nullptr, "test");
    EXPECT_EQ(scratch.data(), eight) << "a block above the cap does not replace the cached one";
  }
  float workspace[16];
  {
    const memory::Scratch scratch(sizeof workspace, workspace, "test");
    EXPECT_EQ(static_cast<void*>(scratch.data()), static_cast<void*>(workspace));
    EXPECT_EQ(memory_stats().active, before) << "a caller's workspace is not counted";
  }
  EXPECT_EQ(memory_stats().active, before);
}

// Many threads keep at most the cache limit between them; each thread's block goes
// when the thread ends. (The blocks are never touched: address space, not memory.)
TEST(ScratchLimits, ThreadsTogetherCacheAtMostTheTotal) {
  const std::size_t block = 200 * kMiB;
  std::vector<std::thread> threads;
  std::atomic<int> released{0};
  std::atomic<bool> finish{false};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      { const memory::Scratch scratch(block, nullptr, "test"); }
      ++released;
      while (!finish.load()) std::this_thread::yield();
    });
  }
  while (released.load() < 8) std::this_thread::yield();
  EXPECT_LE(memory::cached_scratch_bytes(), cache_limit());
  EXPECT_GE(memory::cached_scratch_bytes(), block) << "at least one thread keeps its block";
  finish = true;
  for (std::thread& thread : threads) thread.join();
  EXPECT_LT(memory::cached_scratch_bytes(), block) << "ended threads hold nothing";
}

// A scratch budget: the tiled route's K and V packed per task where it would pack them whole,
// correct against the oracle, the measured scratch within the plan's and the plan's within the
// budget.
void expect_within_budget(const CaseSpec& spec, const char* form) {
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  EXPECT_LE(plan.scratch_bytes, static_cast<std::size_t>(*spec.max_scratch_bytes)) << plan.explain();
  if (form != nullptr) {
    EXPECT_NE(plan.explain().find("scratch bound by max_scratch_bytes"), std::string::npos) << plan.explain();
    EXPECT_NE(plan.explain().find(form), std::string::npos) << plan.explain();
  }
  (void)release_cached();
  reset_peak();
  const std::size_t active = memory_stats().active;
  problem->run();
  EXPECT_LE(memory_stats().peak - active, plan.scratch_bytes);
  EXPECT_TRUE(matches_reference(problem->out().view(), problem->reference()));
}

TEST(ScratchBudget, KAndVArePackedPerTaskUnderABudget) {
  CaseSpec spec = Make("budget_bf16", 1, 8, 2, 96, 3000, 64, 64, DType::BFloat16).budget(std::int64_t{1} << 20);
  spec.causal = true;
  CaseSpec unbounded = spec;
  unbounded.max_scratch_bytes.reset();
  const AttentionPlan whole = make_problem(unbounded)->plan();
  if (whole.explain().find("K and V packed once") == std::string::npos) {
    GTEST_SKIP() << "no bfloat16 matrix units here: the tiled route packs no K and V";
  }
  EXPECT_GT(whole.scratch_bytes, std::size_t{1} << 20) << whole.explain();
  expect_within_budget(spec, "K and V packed per task");
}

// Where one (batch, key head)'s packed K and V fit the budget and its query blocks keep the
// workers busy, K and V are packed one key head at a time (no task repacks a tile).
TEST(ScratchBudget, KAndVArePackedPerKeyHeadWhereOneFits) {
  CaseSpec spec = Make("budget_per_head", 1, 8, 2, 512, 4000, 64, 64, DType::BFloat16);
  const AttentionPlan whole = make_problem(spec)->plan();
  if (whole.explain().find("K and V packed once") == std::string::npos) {
    GTEST_SKIP() << "no bfloat16 matrix units here: the tiled route packs no K and V";
  }
  spec.max_scratch_bytes = static_cast<std::int64_t>(whole.scratch_bytes) - 1;
  expect_within_budget(spec, "K and V packed per key head");
}

// 128k keys of bfloat16 prefill within 64 MiB, where packing K and V whole takes 64 MiB plus
// the tiles (on bfloat16 matrix units; elsewhere the plan fits as it is).
TEST(ScratchBudget, A128kKeyPrefillRunsWithin64MiB) {
  const CaseSpec spec = Make("budget_128k", 1, 4, 1, 32, 131072, 128, 128, DType::BFloat16).budget(64 * kMiB);
  CaseSpec unbounded = spec;
  unbounded.max_scratch_bytes.reset();
  const bool over = make_problem(unbounded)->plan().scratch_bytes > 64 * kMiB;
  expect_within_budget(spec, over ? "K and V packed per task" : nullptr);
}

// Fewer workers where a smaller form is not enough; below what one worker needs, the error names
// the smallest budget that fits, before any work.
TEST(ScratchBudget, FewerWorkersThenTheSmallestBudgetNamed) {
  const CaseSpec spec = Make("budget_f32", 1, 8, 2, 256, 2048, 64, 64, DType::Float32).route(RouteChoice::Tiled);
  const AttentionPlan unbounded = make_problem(spec)->plan();
  if (unbounded.workers < 2) GTEST_SKIP() << "one worker: no fewer to take";
  CaseSpec fewer = spec;
  fewer.max_scratch_bytes = static_cast<std::int64_t>(unbounded.scratch_bytes) - 1;
  const AttentionPlan narrowed = make_problem(fewer)->plan();
  EXPECT_LT(narrowed.workers, unbounded.workers) << narrowed.explain();
  expect_within_budget(fewer, "workers");
  CaseSpec tight = spec;
  tight.max_scratch_bytes = 1024;
  const auto problem = make_problem(tight);
  try {
    problem->run();
    ADD_FAILURE() << "a budget below one worker's scratch was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("the smallest budget that fits is"), std::string::npos) << error.what();
  }
  EXPECT_EQ(problem->out().storage(), problem->out_before()) << "out written on error";
}

// Resident bytes of this process (/proc/self/statm), or 0 where that cannot be read.
std::size_t resident_bytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  unsigned long long pages = 0, resident = 0;
  const int read = std::fscanf(file, "%llu %llu", &pages, &resident);
  std::fclose(file);
  return read == 2 ? static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE)) : 0;
}

// 1000 calls of mixed shapes, routes and dtypes: the resident memory grows by no more than what
// heed's caches hold beyond the warm-up, plus 16 MiB (the C library's own arenas): no leak.
TEST(ScratchCache, ResidentMemoryStaysWithinTheCachesOverAThousandCalls) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed blocks resident (the Release run measures this)";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed blocks resident (the Release run measures this)";
#endif
#endif
  if (resident_bytes() == 0) GTEST_SKIP() << "/proc/self/statm cannot be read here";
  std::vector<std::unique_ptr<Problem>> problems;
  problems.push_back(make_problem(Make("rss_decode", 2, 8, 2, 1, 700, 64, 64, DType::Float32)));
  problems.push_back(make_problem(Make("rss_tiled_bf16", 1, 4, 2, 96, 1500, 64, 64, DType::BFloat16)));
  problems.push_back(make_problem(Make("rss_tiled_f16", 1, 4, 4, 64, 640, 32, 32, DType::Float16)));
  problems.push_back(
      make_problem(Make("rss_composed", 1, 4, 2, 40, 300, 64, 64, DType::Float32).route(RouteChoice::Composed)));
  problems.push_back(make_problem(Make("rss_bf16_budget", 1, 4, 1, 64, 2048, 64, 64, DType::BFloat16).budget(kMiB)));
  for (auto& problem : problems) problem->run();  // warm-up: pages, caches, BLAS and thread state
  const std::size_t resident = resident_bytes(), cached = memory_stats().cached;
  for (int call = 0; call < 1000; ++call) problems[static_cast<std::size_t>(call) % problems.size()]->run();
  const std::size_t grown = resident_bytes() > resident ? resident_bytes() - resident : 0;
  const std::size_t cached_more = memory_stats().cached > cached ? memory_stats().cached - cached : 0;
  EXPECT_LE(grown, cached_more + 16 * kMiB) << "resident " << resident << " -> +" << grown;
  EXPECT_EQ(memory_stats().active, 0u);
}

// memory_stats' cached counts the blocks threads keep between calls (a block in use is active,
// not cached); release_cached returns them from any thread, and the next call allocates afresh.
TEST(ScratchCache, CachedIsReportedAndReleasedFromAnyThread) {
  (void)release_cached();
  const std::size_t before = memory_stats().active;
  EXPECT_EQ(memory_stats().cached, 0u);
  {
    const memory::Scratch scratch(4 * kMiB, nullptr, "test");
    EXPECT_EQ(memory_stats().cached, 0u) << "a block in use is active, not cached";
    EXPECT_EQ(memory_stats().active, before + 4 * kMiB);
  }
  EXPECT_EQ(memory_stats().cached, 4 * kMiB);
  EXPECT_EQ(memory_stats().active, before);
  std::size_t released = 0;
  std::thread([&] { released = release_cached(); }).join();
  EXPECT_EQ(released, 4 * kMiB);
  EXPECT_EQ(memory_stats().cached, 0u);
  EXPECT_EQ(release_cached(), 0u);
  {
    const memory::Scratch scratch(kMiB, nullptr, "test");
    EXPECT_EQ(memory_stats().active, before + kMiB) << "a fresh block after the release";
  }
  EXPECT_EQ(memory_stats().cached, kMiB);
}

// An attention call's scratch stays cached after the call and goes with release_cached.
TEST(ScratchCache, ACallsScratchIsCachedUntilReleased) {
  (void)release_cached();
  const CaseSpec spec = scratch_case("cached_bf16_tiled", 1, 4, 2, 256, 1024, 64, DType::BFloat16, RouteChoice::Tiled);
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  ASSERT_GT(plan.scratch_bytes, 0u) << plan.explain();
  problem->run();
  EXPECT_EQ(memory_stats().cached, memory::rounded_size(plan.scratch_bytes));
  EXPECT_TRUE(matches_reference(problem->out().view(), problem->reference()));
  EXPECT_EQ(release_cached(), memory::rounded_size(plan.scratch_bytes));
  EXPECT_EQ(memory_stats().cached, 0u);
}

// Calls on many threads while another thread releases the caches again and again: every call
// keeps its block while it runs (ASan sees no use after free) and gives the same output.
TEST(ScratchCache, ReleasingWhileOtherThreadsRunCallsIsSafe) {
  const CaseSpec spec = scratch_case("release_race", 1, 4, 2, 64, 512, 64, DType::Float32, RouteChoice::Tiled);
  ASSERT_GT(make_problem(spec)->plan().scratch_bytes, 0u);
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      const auto problem = make_problem(spec);
      const std::vector<double> reference = problem->reference();
      for (int i = 0; i < 40; ++i) {
        problem->run();
        if (!matches_reference(problem->out().view(), reference)) ++mismatches;
      }
    });
  }
  std::thread releaser([&] {
    while (!done.load()) {
      (void)release_cached();
      std::this_thread::yield();
    }
  });
  for (std::thread& caller : callers) caller.join();
  done = true;
  releaser.join();
  EXPECT_EQ(mismatches.load(), 0);
  (void)release_cached();
  EXPECT_EQ(memory_stats().cached, 0u);
}

// The cache limit: the default (HEED_CACHE_BYTES where set), a lower one releasing what is above
// it at once, 0 caching nothing.
TEST(ScratchCache, TheLimitBoundsWhatIsCached) {
  const std::size_t physical = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                               static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
  if (const char* set = std::getenv("HEED_CACHE_BYTES")) {
    EXPECT_EQ(cache_limit(), std::strtoull(set, nullptr, 10));
  } else {
    EXPECT_EQ(cache_limit(), std::min(memory::kScratchCacheTotalBytes, physical / 8));
  }
  const std::size_t limit = cache_limit();
  { const memory::Scratch scratch(4 * kMiB, nullptr, "test"); }
  EXPECT_EQ(memory_stats().cached, 4 * kMiB);
  set_cache_limit(Device::cpu(), kMiB);
  EXPECT_EQ(cache_limit(), kMiB);
  EXPECT_EQ(memory_stats().cached, 0u) << "the 4 MiB block is above the new limit";
  { const memory::Scratch scratch(2 * kMiB, nullptr, "test"); }
  EXPECT_EQ(memory_stats().cached, 0u) << "a 2 MiB block is not kept under a 1 MiB limit";
  { const memory::Scratch scratch(kMiB / 2, nullptr, "test"); }
  EXPECT_EQ(memory_stats().cached, kMiB / 2);
  set_cache_limit(Device::cpu(), 0);
  EXPECT_EQ(memory_stats().cached, 0u);
  set_cache_limit(Device::cpu(), limit);
  EXPECT_EQ(cache_limit(), limit);
}

}  // namespace
}  // namespace heed::test
