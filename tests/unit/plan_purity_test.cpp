// plan_attention is pure: the same inputs give equal plans (operator== and to_json) when
// repeated, from other threads, in another process, after kernels have run and while 1 GiB
// of memory is held.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "heed/heed.hpp"

namespace heed {
namespace {

constexpr const char* kChildEnv = "HEED_PLAN_PURITY_CHILD";
constexpr const char* kBegin = "<<<HEED_PLAN_BEGIN>>>";
constexpr const char* kEnd = "<<<HEED_PLAN_END>>>";

struct PlanInput {
  Shape q, k, v;
  DType dtype = DType::Float32;
  AttentionOptions options;
};

// Masks and sinks are read only for their shape and dtype; their bytes live here.
unsigned char* option_bytes() {
  static std::vector<unsigned char> bytes(1 << 16, 0);
  return bytes.data();
}

std::vector<PlanInput> plan_inputs() {
  std::vector<PlanInput> inputs;
  auto add = [&](Shape q, Shape k, Shape v, DType dtype, AttentionOptions options = {}) {
    inputs.push_back({std::move(q), std::move(k), std::move(v), dtype, std::move(options)});
  };
  add({1, 32, 1, 128}, {1, 8, 4096, 128}, {1, 8, 4096, 128}, DType::Float32);  // decode, GQA
  add({4, 8, 1, 64}, {4, 1, 300, 64}, {4, 1, 300, 64}, DType::BFloat16);      // decode, MQA
  AttentionOptions causal;
  causal.causal = true;
  add({1, 32, 512, 128}, {1, 8, 512, 128}, {1, 8, 512, 128}, DType::Float16, causal);  // prefill
  AttentionOptions capped = causal;
  capped.max_score_bytes = 64 * 1024;
  add({2, 4, 1000, 64}, {2, 4, 1000, 64}, {2, 4, 1000, 64}, DType::Float32, capped);
  AttentionOptions composed;
  composed.route = RouteChoice::Composed;
  composed.max_score_bytes = 100000;
  add({1, 2, 129, 192}, {1, 2, 129, 192}, {1, 2, 129, 128}, DType::Float32, composed);
  AttentionOptions window_sinks = causal;
  window_sinks.window = 128;
  window_sinks.sinks = TensorView(option_bytes(), DType::Float32, Shape{64});
  add({1, 64, 77, 64}, {1, 8, 2000, 64}, {1, 8, 2000, 64}, DType::BFloat16, window_sinks);
  AttentionOptions masked;
  masked.mask = TensorView(option_bytes(), DType::Bool, Shape{3, 1, 1, 17});
  add({3, 12, 17, 64}, {3, 12, 17, 64}, {3, 12, 17, 64}, DType::Float32, masked);
  AttentionOptions additive;
  additive.mask = TensorView(option_bytes(), DType::Float32, Shape{7, 127});
  additive.route = RouteChoice::Tiled;
  add({1, 2, 7, 256}, {1, 2, 127, 256}, {1, 2, 127, 256}, DType::Float16, additive);
  add({1, 4, 64, 64}, {1, 4, 100, 64}, {1, 4, 100, 64}, DType::Float16);  // composed, packed
  add({0, 2, 7, 64}, {0, 2, 7, 64}, {0, 2, 7, 64}, DType::Float32);  // empty
  add({1, 2, 7, 64}, {1, 2, 0, 64}, {1, 2, 0, 64}, DType::Float32);  // Lk = 0
  return inputs;
}

std::vector<AttentionPlan> plan_all() {
  std::vector<AttentionPlan> plans;
  for (const PlanInput& in : plan_inputs()) plans.push_back(plan_attention(in.q, in.k, in.v, in.dtype, in.options, Device::cpu()));
  return plans;
}

void expect_same_plans(const std::vector<AttentionPlan>& got, const std::vector<AttentionPlan>& want,
                       const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << where << ": plan " << i << " differs\n  got  " << got[i].to_json()
                                   << "\n  want " << want[i].to_json();
    EXPECT_EQ(got[i].to_json(), want[i].to_json()) << where << ": plan " << i;
  }
}

// Runs a few small calls so that whatever heed starts lazily (threads, pools) is running.
void run_some_attention() {
  std::vector<float> q(2 * 4 * 33 * 64, 0.5f), k(2 * 2 * 65 * 64, 0.25f), v(2 * 2 * 65 * 64, 1.0f),
      out(2 * 4 * 33 * 64);
  TensorView qv(q.data(), DType::Float32, Shape{2, 4, 33, 64}), kv(k.data(), DType::Float32, Shape{2, 2, 65, 64}),
      vv(v.data(), DType::Float32, Shape{2, 2, 65, 64}), ov(out.data(), DType::Float32, Shape{2, 4, 33, 64});
  for (RouteChoice route : {RouteChoice::Auto, RouteChoice::Tiled, RouteChoice::Composed}) {
    AttentionOptions options;
    options.route = route;
    attention(qv, kv, vv, ov, 0.125f, options);
  }
}

// The child side of InAnotherProcess: prints every plan between markers. Run on its own it
// still checks that each plan serialises to one JSON object.
TEST(PlanPurity, ChildPrintsPlans) {
  const bool child = std::getenv(kChildEnv) != nullptr;
  const std::vector<AttentionPlan> plans = plan_all();  // before anything else has run
  for (const AttentionPlan& plan : plans) {
    const std::string json = plan.to_json();
    ASSERT_FALSE(json.empty());
    EXPECT_EQ(json.front(), '{');
    EXPECT_EQ(json.back(), '}');
    if (child) std::printf("%s%s%s\n", kBegin, json.c_str(), kEnd);
  }
  std::fflush(stdout);
}

TEST(PlanPurity, Repeated) {
  const std::vector<AttentionPlan> first = plan_all();
  for (int repeat = 0; repeat < 20; ++repeat) expect_same_plans(plan_all(), first, "repeat " + std::to_string(repeat));
}

TEST(PlanPurity, AfterKernelsRanAndWithProfilerOn) {
  const std::vector<AttentionPlan> before = plan_all();
  run_some_attention();
  expect_same_plans(plan_all(), before, "after attention ran");
  const profile::Mode mode = profile::mode();
  profile::set_mode(profile::Mode::Shapes);
  expect_same_plans(plan_all(), before, "with the profiler on");
  profile::set_mode(mode);
}

TEST(PlanPurity, FromOtherThreads) {
  const std::vector<AttentionPlan> here = plan_all();
  std::vector<std::vector<AttentionPlan>> there(4);
  std::vector<std::thread> threads;
  for (auto& result : there) threads.emplace_back([&result] { result = plan_all(); });
  for (auto& thread : threads) thread.join();
  for (std::size_t t = 0; t < there.size(); ++t) expect_same_plans(there[t], here, "thread " + std::to_string(t));
}

TEST(PlanPurity, ViewsAndShapesAgreeForContiguousInputs) {
  const std::vector<PlanInput> inputs = plan_inputs();
  const std::vector<AttentionPlan> from_shapes = plan_all();
  std::vector<unsigned char> bytes(64);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const PlanInput& in = inputs[i];
    // Views over a tiny buffer: planning reads no data.
    const TensorView q(bytes.data(), in.dtype, in.q), k(bytes.data() + 8, in.dtype, in.k), v(bytes.data() + 16, in.dtype, in.v);
    const AttentionPlan from_views = plan_attention(q, k, v, in.options);
    EXPECT_TRUE(from_views == from_shapes[i]) << "input " << i << "\n  views  " << from_views.to_json()
                                              << "\n  shapes " << from_shapes[i].to_json();
  }
}

TEST(PlanPurity, UnderMemoryPressure) {
  const std::vector<AttentionPlan> before = plan_all();
  constexpr std::size_t kGiB = std::size_t{1} << 30;
  void* held = std::malloc(kGiB);
  ASSERT_NE(held, nullptr);
  std::memset(held, 1, kGiB);  // touch every page so the memory is really taken
  const MemoryStats stats_before = memory_stats();
  const std::vector<AttentionPlan> during = plan_all();
  const MemoryStats stats_after = memory_stats();
  std::free(held);
  expect_same_plans(during, before, "while holding 1 GiB");
  EXPECT_EQ(stats_after.active, stats_before.active) << "planning holds memory through heed's allocator";
}

std::string self_path() {
  std::vector<char> path(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) return {};
  return std::string(path.data(), static_cast<std::size_t>(length));
}

TEST(PlanPurity, InAnotherProcess) {
  const std::string exe = self_path();
  ASSERT_FALSE(exe.empty()) << "cannot read /proc/self/exe";
  const std::string command = std::string(kChildEnv) + "=1 HEED_PROFILE=shapes '" + exe +
                              "' --gtest_filter=PlanPurity.ChildPrintsPlans 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int status = pclose(pipe);
  ASSERT_EQ(status, 0) << "child failed:\n" << output;

  std::vector<std::string> child_json;
  for (std::size_t at = output.find(kBegin); at != std::string::npos; at = output.find(kBegin, at)) {
    const std::size_t start = at + std::strlen(kBegin);
    const std::size_t end = output.find(kEnd, start);
    ASSERT_NE(end, std::string::npos) << output;
    child_json.push_back(output.substr(start, end - start));
    at = end;
  }
  const std::vector<AttentionPlan> here = plan_all();
  ASSERT_EQ(child_json.size(), here.size()) << output;
  for (std::size_t i = 0; i < here.size(); ++i) EXPECT_EQ(child_json[i], here[i].to_json()) << "plan " << i;
}

}  // namespace
}  // namespace heed
