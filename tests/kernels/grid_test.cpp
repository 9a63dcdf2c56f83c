// Every route against the float64 oracle over the hand-chosen grid: odd sizes, head sizes,
// GQA/MQA, every mask kind, windows, sinks, caps, strided inputs and outputs, each dtype,
// fully masked rows and empty sizes. The output is poisoned (NaN) before each call.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "core/cpu_info.hpp"
#include "plan/cpu_tables.hpp"
#include "kernels/grid_cases.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

bool empty_output(const CaseSpec& spec) {
  return spec.batch == 0 || spec.q_heads == 0 || spec.q_len == 0 || spec.value_dim == 0;
}

class Grid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(Grid, MatchesOracle) {
  const CaseSpec& spec = GetParam();
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  SCOPED_TRACE(plan.to_json());

  // A forced route is the route that runs (Composed may be split into blocks by the cap).
  switch (spec.route) {
    case RouteChoice::Vector: EXPECT_TRUE(std::holds_alternative<route::Vector>(plan.kernel)); break;
    case RouteChoice::Tiled: EXPECT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel)); break;
    case RouteChoice::Composed:
      EXPECT_TRUE(std::holds_alternative<route::Composed>(plan.kernel) ||
                  std::holds_alternative<route::ComposedBlocks>(plan.kernel));
      break;
    case RouteChoice::Auto: break;
  }
  // No score-sized intermediate exceeds the cap.
  if (spec.max_score_bytes) {
    EXPECT_LE(plan.max_intermediate_bytes, static_cast<std::size_t>(*spec.max_score_bytes));
  }

  problem->run();
  // Nothing outside the output's elements is written; with an empty output nothing at all.
  EXPECT_TRUE(gaps_untouched(problem->out(), problem->out_before()));

  const std::vector<double> reference = problem->reference();
  EXPECT_TRUE(matches_reference(problem->out().view(), reference));
  const Comparison comparison = compare(problem->out().view(), reference);
  if (spec.nan_query) {
    EXPECT_GT(comparison.expected_nan, 0) << "a NaN in q must give its row NaN";
  }
  if (spec.expect_masked_rows) {
    EXPECT_GT(comparison.zero_rows, 0) << "the case was meant to have fully masked rows";
  }
  if (empty_output(spec)) {
    EXPECT_EQ(comparison.count, 0);
  } else {
    EXPECT_GT(comparison.count, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Quick, Grid, ::testing::ValuesIn(quick_cases()), CaseName());
// Registered with ctest as one test, heed_kernel_tests_long_tier, which sets HEED_TEST_LONG=1.
INSTANTIATE_TEST_SUITE_P(Long, Grid, ::testing::ValuesIn(long_tier_cases()), CaseName());

// The same inputs through every route give the same answer within the tolerance of the
// dtype (each route is also checked against the oracle above).
TEST(GridAgreement, RoutesAgreeWithEachOther) {
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    CaseSpec spec;
    spec.name = std::string("agreement_") + short_name(dtype);
    spec.batch = 2;
    spec.q_heads = 4;
    spec.kv_heads = 2;
    spec.q_len = 9;
    spec.kv_len = 140;
    spec.dtype = dtype;
    spec.causal = true;
    spec.window = 100;
    spec.sinks = true;
    spec.mask = MaskKind::Bool2D;
    std::vector<std::vector<double>> outputs;
    for (RouteChoice route : {RouteChoice::Vector, RouteChoice::Tiled, RouteChoice::Composed}) {
      spec.route = route;
      const auto problem = make_problem(spec);
      problem->run();
      std::vector<double> values;
      for (std::int64_t n = 0; n < problem->out().numel(); ++n) values.push_back(problem->out().get(n));
      outputs.push_back(values);
    }
    const Tolerance tol = tolerance(dtype);
    for (std::size_t route = 1; route < outputs.size(); ++route) {
      ASSERT_EQ(outputs[route].size(), outputs[0].size());
      for (std::size_t n = 0; n < outputs[0].size(); ++n) {
        // Both are within tol of the oracle, so within twice tol of each other.
        ASSERT_LE(std::abs(outputs[route][n] - outputs[0][n]), 2 * (tol.atol + tol.rtol * std::abs(outputs[0][n])))
            << short_name(dtype) << " route " << route << " element " << n;
      }
    }
  }
}

// float32 is float32 on every route and instruction set, AMX tiles included (where float32 runs
// as three bfloat16 parts, six tile products): the tiled route's error against the oracle stays
// within twice the composed route's (float32 BLAS products), where a two-part (16-bit) split
// measured 4x-13x it on these shapes and would still pass the grid's 1e-4 tolerance on some.
TEST(Float32Precision, TiledErrorAtFloat32Rounding) {
  struct Shape {
    std::int64_t q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    bool causal;
    MaskKind mask;
    double stddev;
  };
  const Shape shapes[] = {
      {8, 2, 150, 300, 64, 64, false, MaskKind::None, 1.5},
      {4, 4, 200, 200, 128, 128, true, MaskKind::None, 1.5},
      {4, 1, 97, 333, 128, 80, false, MaskKind::Additive, 3.0},
      {2, 2, 64, 700, 192, 128, false, MaskKind::None, 4.0},
  };
  for (const Shape& shape : shapes) {
    CaseSpec spec;
    spec.name = "float32_precision";
    spec.q_heads = shape.q_heads;
    spec.kv_heads = shape.kv_heads;
    spec.q_len = shape.q_len;
    spec.kv_len = shape.kv_len;
    spec.head_dim = shape.head_dim;
    spec.value_dim = shape.value_dim;
    spec.causal = shape.causal;
    spec.mask = shape.mask;
    spec.input_stddev = shape.stddev;
    double worst[2] = {};  // tiled, composed: max |got - ref| / (1 + |ref|)
    for (int route = 0; route < 2; ++route) {
      spec.route = route == 0 ? RouteChoice::Tiled : RouteChoice::Composed;
      const auto problem = make_problem(spec);
      const AttentionPlan plan = problem->plan();
      SCOPED_TRACE(plan.explain());
      if (route == 0) {  // where the CPU has AMX tiles, the tiled route runs float32 on them from D 128
        EXPECT_EQ(plan.explain().find("float32 on the tiles") != std::string::npos,
                  cpu_info().isa == CpuIsa::Amx && shape.head_dim >= plan::cpu::kAmxFloat32MinHeadDim);
      }
      problem->run();
      const std::vector<double> reference = problem->reference();
      for (std::int64_t n = 0; n < problem->out().numel(); ++n) {
        const double ref = reference[static_cast<std::size_t>(n)];
        worst[route] = std::max(worst[route], std::abs(problem->out().get(n) - ref) / (1.0 + std::abs(ref)));
      }
    }
    EXPECT_LE(worst[0], 2 * worst[1]) << "D " << shape.head_dim << " Lk " << shape.kv_len << ": tiled " << worst[0]
                                      << ", composed " << worst[1];
  }
}

// Calls from several threads at once (the pool runs one job at a time) each get their own
// correct answer.
TEST(GridConcurrency, CallsFromSeveralThreads) {
  std::vector<std::unique_ptr<Problem>> problems;
  for (int t = 0; t < 4; ++t) {
    CaseSpec spec;
    spec.name = "concurrent_" + std::to_string(t);
    spec.batch = 2;
    spec.q_heads = 4;
    spec.kv_heads = 2;
    spec.q_len = t % 2 == 0 ? 1 : 40;  // vector and tiled
    spec.kv_len = 300 + 50 * t;
    spec.causal = t >= 2;
    spec.route = t == 3 ? RouteChoice::Composed : RouteChoice::Auto;
    problems.push_back(make_problem(spec));
  }
  std::vector<std::thread> threads;
  for (auto& problem : problems) {
    threads.emplace_back([&problem] {
      for (int repeat = 0; repeat < 5; ++repeat) problem->run();
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& problem : problems) {
    EXPECT_TRUE(matches_reference(problem->out().view(), problem->reference())) << problem->spec().name;
  }
}

}  // namespace
}  // namespace heed::test
