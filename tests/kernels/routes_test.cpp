// The plan names the kernel that runs: with the profiler in Shapes mode, every grid case
// records plan.kernel_name with the grid its route implies, and the Auto grid reaches all
// four routes.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/grid_cases.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

bool empty_output(const CaseSpec& spec) {
  return spec.batch == 0 || spec.q_heads == 0 || spec.q_len == 0 || spec.value_dim == 0;
}

std::string dispatch_list(const std::vector<Dispatch>& recorded) {
  std::string text;
  for (const Dispatch& d : recorded) {
    text += "  " + d.name + " [" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) +
            "] x" + std::to_string(d.count) + "\n";
  }
  return text.empty() ? "  (none)\n" : text;
}

const Dispatch* find_dispatch(const std::vector<Dispatch>& recorded, const std::string& name) {
  for (const Dispatch& d : recorded) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// Runs the case with the profiler on and returns what it recorded.
std::vector<Dispatch> profiled_run(Problem& problem) {
  profile::set_mode(profile::Mode::Shapes);
  profile::reset();
  problem.run();
  std::vector<Dispatch> recorded = dispatches();
  profile::reset();
  profile::set_mode(profile::Mode::Off);
  return recorded;
}

class Routes : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(Routes, ProfilerRecordsThePlannedKernel) {
  const CaseSpec& spec = GetParam();
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  const std::vector<Dispatch> recorded = profiled_run(*problem);
  SCOPED_TRACE("plan " + plan.to_json() + "\nrecorded:\n" + dispatch_list(recorded));

  ASSERT_LT(plan.kernel.index(), 4u);  // one of Vector, Tiled, Composed, ComposedBlocks
  const std::string dtype = short_name(spec.dtype);
  EXPECT_EQ(plan.kernel_name, std::string("heed_cpu_") + route_name(plan.kernel) + "_" + dtype);

  if (empty_output(spec)) {
    EXPECT_TRUE(recorded.empty()) << "an empty output dispatches nothing";
    EXPECT_EQ(plan.scratch_bytes, 0u) << "an empty output holds no scratch";
    EXPECT_EQ(plan.workers, 0);
    return;
  }
  EXPECT_GE(plan.workers, 1);
  const Dispatch* main = find_dispatch(recorded, plan.kernel_name);
  ASSERT_NE(main, nullptr) << plan.kernel_name << " was not dispatched";
  EXPECT_EQ(main->count, 1);
  EXPECT_EQ(main->z, spec.batch);

  const std::string merge_name = "heed_cpu_vector_merge_" + dtype;
  const Dispatch* merge = find_dispatch(recorded, merge_name);
  if (const auto* vector = std::get_if<route::Vector>(&plan.kernel)) {
    EXPECT_EQ(main->x, vector->blocks);
    EXPECT_EQ(main->y, spec.kv_heads);
    EXPECT_TRUE(vector->passes == 1 || vector->passes == 2) << vector->passes;
    EXPECT_EQ(vector->passes == 2, vector->blocks > 1);
    if (vector->passes == 2) {
      ASSERT_NE(merge, nullptr) << merge_name << " missing for two passes";
      EXPECT_EQ(merge->count, 1);
      EXPECT_EQ(merge->x, 1);
      EXPECT_EQ(merge->y, spec.kv_heads);
      EXPECT_EQ(merge->z, spec.batch);
    } else {
      EXPECT_EQ(merge, nullptr) << "merge dispatched for a single pass";
    }
  } else if (const auto* tiled = std::get_if<route::Tiled>(&plan.kernel)) {
    ASSERT_GT(tiled->block_q, 0);
    EXPECT_GT(tiled->block_k, 0);
    // A tiled task holds block_q query positions of every query head of one key head
    // (docs/design.md §8): grid [ceil(Lq / block_q), Hkv, B].
    EXPECT_EQ(main->x, ceil_div(spec.q_len, tiled->block_q));
    EXPECT_EQ(main->y, spec.kv_heads);
    EXPECT_EQ(merge, nullptr);
  } else if (std::holds_alternative<route::Composed>(plan.kernel)) {
    EXPECT_EQ(main->x, 1);
    EXPECT_EQ(main->y, spec.q_heads);
    EXPECT_EQ(merge, nullptr);
  } else {
    const auto& blocks = std::get<route::ComposedBlocks>(plan.kernel);
    ASSERT_GT(blocks.rows, 0);
    EXPECT_LT(blocks.rows, spec.q_len) << "blocks of all rows are the plain composed route";
    EXPECT_EQ(main->x, ceil_div(spec.q_len, blocks.rows));
    EXPECT_EQ(main->y, spec.q_heads);
    EXPECT_TRUE(plan.capped);
  }
  // Every recorded dispatch is a CPU kernel of this dtype.
  for (const Dispatch& d : recorded) {
    EXPECT_EQ(d.name.rfind("heed_cpu_", 0), 0u) << d.name;
    EXPECT_GE(d.count, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Quick, Routes, ::testing::ValuesIn(quick_cases()), CaseName());
// Registered with ctest as one test, heed_kernel_tests_long_tier, which sets HEED_TEST_LONG=1.
INSTANTIATE_TEST_SUITE_P(Long, Routes, ::testing::ValuesIn(long_tier_cases()), CaseName());

TEST(RoutesCoverage, AutoGridReachesEveryRoute) {
  std::set<std::size_t> reached;
  for (const CaseSpec& spec : tier_cases()) {
    if (spec.route != RouteChoice::Auto || empty_output(spec)) continue;
    reached.insert(make_problem(spec)->plan().kernel.index());
  }
  EXPECT_TRUE(reached.count(0)) << "Vector not reached by the Auto grid";
  EXPECT_TRUE(reached.count(1)) << "Tiled not reached by the Auto grid";
  EXPECT_TRUE(reached.count(2)) << "Composed not reached by the Auto grid";
  EXPECT_TRUE(reached.count(3)) << "ComposedBlocks not reached by the Auto grid";
}

TEST(RoutesCoverage, ForcedGridReachesEveryRoute) {
  std::set<std::size_t> reached;
  for (const CaseSpec& spec : tier_cases()) {
    if (spec.route == RouteChoice::Auto || empty_output(spec)) continue;
    reached.insert(make_problem(spec)->plan().kernel.index());
  }
  EXPECT_EQ(reached, (std::set<std::size_t>{0, 1, 2, 3}));
}

TEST(ProfilerOff, RecordsNothing) {
  CaseSpec spec;
  spec.name = "profiler_off";
  spec.q_heads = 2;
  spec.kv_heads = 2;
  spec.q_len = 20;
  spec.kv_len = 50;
  const auto problem = make_problem(spec);
  profile::set_mode(profile::Mode::Off);
  profile::reset();
  problem->run();
  EXPECT_TRUE(profile::entries().empty());
  EXPECT_TRUE(profile::report().empty()) << profile::report();
}

TEST(ProfilerShapes, CountsRepeatedDispatchesAndReports) {
  CaseSpec spec;
  spec.name = "profiler_repeat";
  spec.batch = 2;
  spec.q_heads = 3;
  spec.kv_heads = 3;
  spec.q_len = 20;
  spec.kv_len = 50;
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  profile::set_mode(profile::Mode::Shapes);
  profile::reset();
  for (int call = 0; call < 3; ++call) problem->run();
  const std::vector<Dispatch> recorded = dispatches();
  const std::string report = profile::report();
  profile::reset();
  profile::set_mode(profile::Mode::Off);
  const Dispatch* main = find_dispatch(recorded, plan.kernel_name);
  ASSERT_NE(main, nullptr) << dispatch_list(recorded);
  EXPECT_EQ(main->count, 3);
  // "name [x, y, z] xCOUNT", one line per entry.
  const std::string line = plan.kernel_name + " [" + std::to_string(main->x) + ", " + std::to_string(main->y) + ", " +
                           std::to_string(main->z) + "] x3";
  EXPECT_NE(report.find(line), std::string::npos) << report;
  EXPECT_EQ(profile::entries().size(), 0u) << "reset clears the entries";
}

TEST(ProfilerTime, AddsDurationsToTheSameEntries) {
  CaseSpec spec;
  spec.name = "profiler_time";
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.q_len = 1;
  spec.kv_len = 700;
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  profile::set_mode(profile::Mode::Time);
  profile::reset();
  problem->run();
  problem->run();
  const std::vector<profile::Record> records = profile::records();
  const std::string report = profile::report();
  profile::reset();
  profile::set_mode(profile::Mode::Off);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().key.rfind(plan.kernel_name + " [", 0), 0u) << records.front().key;
  EXPECT_EQ(records.front().count, 2);
  EXPECT_GE(records.front().seconds, 0.0);
  EXPECT_NE(report.find(" x2 "), std::string::npos) << report;
  EXPECT_NE(report.find(" ms\n"), std::string::npos) << "time mode reports milliseconds: " << report;
}

}  // namespace
}  // namespace heed::test
