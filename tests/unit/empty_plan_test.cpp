// Empty outputs (B, Hq, Lq or Dv = 0) plan on every route and device without overflow, whatever
// the other sizes (validation bounds no product of them then: [0, 8, 2^63 - 1, 64] is legal),
// and hold nothing. Run under UndefinedBehaviorSanitizer in CI, where an overflow fails.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/problem.hpp"

namespace heed {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

struct EmptyCase {
  const char* name;
  Shape q, k, v;
};

std::vector<EmptyCase> empty_cases() {
  return {
      {"batch_0_huge_lengths", {0, 8, kMax, 64}, {0, 1, kMax, 64}, {0, 1, kMax, 64}},
      {"batch_0_huge_heads", {0, kMax, 3, 64}, {0, 1, 5, 64}, {0, 1, 5, 64}},
      {"batch_0_huge_head_sizes", {0, 2, 7, kMax}, {0, 1, 300, kMax}, {0, 1, 300, kMax}},
      {"batch_0_all_huge", {0, kMax, kMax, kMax}, {0, kMax, kMax, kMax}, {0, kMax, kMax, kMax}},
      {"no_heads_huge_lengths", {kMax, 0, kMax, 64}, {kMax, 0, kMax, 64}, {kMax, 0, kMax, 64}},
      {"no_queries_huge_keys", {1, 2, 0, 0}, {1, 1, kMax, 0}, {1, 1, kMax, 0}},
      {"no_values_huge_heads", {1, kMax, 1, 0}, {1, 1, 0, 0}, {1, 1, 0, 0}},
  };
}

const std::vector<RouteChoice> kRoutes = {RouteChoice::Auto, RouteChoice::Vector, RouteChoice::Tiled,
                                          RouteChoice::Composed};

// Nothing held, nothing runs, and every figure of the explanation in range (no wrapped, negative
// value: the shapes themselves are non-negative).
void expect_empty_plan(const AttentionPlan& plan, const std::string& where) {
  SCOPED_TRACE(where + "\n" + plan.explain());
  EXPECT_EQ(plan.workers, 0);
  EXPECT_EQ(plan.scratch_bytes, 0u);
  EXPECT_EQ(plan.max_intermediate_bytes, 0u);
  EXPECT_TRUE(plan.buffers.empty());
  EXPECT_FALSE(plan.capped);
  const std::string text = plan.explain();
  EXPECT_NE(text.find("empty output: nothing runs and no scratch is held"), std::string::npos);
  for (std::size_t at = text.find('-'); at != std::string::npos; at = text.find('-', at + 1)) {
    EXPECT_FALSE(at + 1 < text.size() && text[at + 1] >= '0' && text[at + 1] <= '9') << "a negative figure";
  }
}

AttentionOptions options_for(RouteChoice route, bool capped) {
  AttentionOptions options;
  options.route = route;
  if (capped) options.max_score_bytes = 1;  // below every route's smallest tile: nothing is held
  return options;
}

TEST(EmptyPlan, CpuPlansEveryRouteWithoutOverflow) {
  for (const EmptyCase& c : empty_cases()) {
    for (RouteChoice route : kRoutes) {
      for (bool capped : {false, true}) {
        const std::string where = std::string(c.name) + " route " + std::to_string(static_cast<int>(route)) +
                                  (capped ? " capped" : "");
        AttentionPlan plan;
        ASSERT_NO_THROW(plan = plan_attention(c.q, c.k, c.v, DType::BFloat16, options_for(route, capped),
                                              Device::cpu()))
            << where;
        expect_empty_plan(plan, where);
        EXPECT_EQ(plan.kernel_name, std::string("heed_cpu_") + route_name(plan.kernel) + "_bf16") << where;
      }
    }
  }
}

TEST(EmptyPlan, ForcedRoutesKeepTheirKernelAndAutoTakesTheComposedOne) {
  const EmptyCase c = empty_cases().front();
  const auto kernel = [&](RouteChoice route) {
    return plan_attention(c.q, c.k, c.v, DType::Float32, options_for(route, false), Device::cpu()).kernel;
  };
  EXPECT_TRUE(std::holds_alternative<route::Composed>(kernel(RouteChoice::Auto)));
  EXPECT_TRUE(std::holds_alternative<route::Vector>(kernel(RouteChoice::Vector)));
  EXPECT_TRUE(std::holds_alternative<route::Tiled>(kernel(RouteChoice::Tiled)));
  EXPECT_TRUE(std::holds_alternative<route::Composed>(kernel(RouteChoice::Composed)));
}

// Views of the shapes (their contiguous strides saturate where the products pass int64) plan the
// same, and the op runs nothing.
TEST(EmptyPlan, ViewsPlanAndRunWithoutOverflow) {
  for (const EmptyCase& c : empty_cases()) {
    const TensorView q(nullptr, DType::Float32, c.q), k(nullptr, DType::Float32, c.k), v(nullptr, DType::Float32, c.v);
    TensorView out(nullptr, DType::Float32, Shape{c.q[0], c.q[1], c.q[2], c.v[3]});
    AttentionPlan plan;
    ASSERT_NO_THROW(plan = plan_attention(q, k, v, {})) << c.name;
    expect_empty_plan(plan, c.name);
    EXPECT_NO_THROW(attention(q, k, v, out, 0.125f, {})) << c.name;
  }
}

plan::CudaDeviceInfo h200() {
  plan::CudaDeviceInfo info;
  info.sm_count = 132;
  info.major = 9;
  info.shared_per_block = 227 << 10;
  info.name = "NVIDIA H200";
  info.wgmma_built = true;
  return info;
}

// The CUDA planner is host code: the same shapes on an H200's properties.
TEST(EmptyPlan, CudaPlansEveryRouteWithoutOverflow) {
  for (const EmptyCase& c : empty_cases()) {
    for (RouteChoice route : kRoutes) {
      for (bool capped : {false, true}) {
        const std::string where = std::string(c.name) + " route " + std::to_string(static_cast<int>(route)) +
                                  (capped ? " capped" : "");
        plan::CudaRoute r;
        ASSERT_NO_THROW(r = plan::plan_cuda(plan::validate_problem(c.q, c.k, c.v, DType::BFloat16, DType::BFloat16,
                                                                   DType::BFloat16, options_for(route, capped)),
                                            h200()))
            << where;
        expect_empty_plan(r.plan, where);
        EXPECT_EQ(r.plan.kernel_name, std::string("heed_cuda_") + route_name(r.plan.kernel) + "_bf16") << where;
      }
    }
  }
}

// A non-empty problem at int64's edge: 16 rows and 16 keys of head size 2^57 - 1 (each tensor just
// under 2^63 bytes) make tiles of 2^63 floats, beyond int64, which the tiled route's explanation
// must not convert to a wrapped, negative count.
TEST(EmptyPlan, TiledTileCountBeyondInt64IsNotWrapped) {
  constexpr std::int64_t kHead = (std::int64_t{1} << 57) - 1;
  const Shape q{1, 1, 16, kHead};
  AttentionOptions options;
  options.route = RouteChoice::Tiled;
  AttentionPlan plan;
  try {
    plan = plan_attention(q, q, q, DType::Float32, options, Device::cpu());
  } catch (const Error& e) {  // rejecting the sizes by name is as good
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    return;
  }
  const std::string text = plan.explain();
  const std::size_t tiles = text.find("floats of tiles");
  ASSERT_NE(tiles, std::string::npos) << text;
  const std::size_t line = text.rfind('\n', tiles);
  EXPECT_EQ(text.substr(line + 1, tiles - line - 1).find('-'), std::string::npos) << text;
}

}  // namespace
}  // namespace heed
