// The score cap: where no route fits, the error names the smallest cap that would; that cap
// plans and runs, and one byte less does not.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "support/case_builder.hpp"
#include "support/problem.hpp"

namespace heed::test {
namespace {

// The first integer after the word "smallest" in the message.
std::optional<std::int64_t> smallest_cap_in(const std::string& message) {
  const std::size_t word = message.find("smallest");
  if (word == std::string::npos) return std::nullopt;
  std::size_t at = word;
  while (at < message.size() && !std::isdigit(static_cast<unsigned char>(message[at]))) ++at;
  if (at == message.size()) return std::nullopt;
  std::size_t end = at;
  while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
  return std::stoll(message.substr(at, end - at));
}

std::optional<Error> plan_error(const Problem& problem) {
  try {
    (void)problem.plan();
  } catch (const Error& error) {
    return error;
  }
  return std::nullopt;
}

struct CapCase {
  CaseSpec spec;
  std::int64_t expected_min_cap;
};

void PrintTo(const CapCase& c, std::ostream* os) { *os << c.spec.name; }

CaseSpec cap_spec(std::string name, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
                  std::int64_t kv_len, RouteChoice route, DType dtype = DType::Float32) {
  return Make(std::move(name), 2, q_heads, kv_heads, q_len, kv_len, 64, 64, dtype).causal().route(route).cap(1);
}

// The smallest caps of docs/design.md §8: tiled group x 16 x 4 bytes, vector group x Lq x 16
// x 4, composed one row of Lk float32 scores; Auto names the smallest of the three.
constexpr std::int64_t kKeyLanes = 16;
std::int64_t tiled_min(const CaseSpec& s) { return s.q_heads / s.kv_heads * kKeyLanes * 4; }
std::int64_t vector_min(const CaseSpec& s) { return s.q_heads / s.kv_heads * s.q_len * kKeyLanes * 4; }
std::int64_t composed_min(const CaseSpec& s) { return s.kv_len * 4; }

CapCase with_min(const CaseSpec& spec) {
  switch (spec.route) {
    case RouteChoice::Tiled: return {spec, tiled_min(spec)};
    case RouteChoice::Vector: return {spec, vector_min(spec)};
    case RouteChoice::Composed: return {spec, composed_min(spec)};
    case RouteChoice::Auto: break;
  }
  return {spec, std::min({tiled_min(spec), vector_min(spec), composed_min(spec)})};
}

std::vector<CapCase> cap_cases() {
  return {
      with_min(cap_spec("auto_prefill", 4, 2, 33, 140, RouteChoice::Auto)),
      with_min(cap_spec("auto_decode", 8, 2, 1, 300, RouteChoice::Auto, DType::BFloat16)),
      with_min(cap_spec("auto_short_keys", 2, 2, 40, 50, RouteChoice::Auto, DType::Float16)),
      with_min(cap_spec("auto_decode_short_keys", 8, 8, 1, 20, RouteChoice::Auto)),
      with_min(cap_spec("tiled", 2, 1, 17, 129, RouteChoice::Tiled)),
      with_min(cap_spec("composed", 2, 2, 50, 129, RouteChoice::Composed)),
      with_min(cap_spec("composed_long", 2, 2, 7, 1000, RouteChoice::Composed, DType::BFloat16)),
      with_min(cap_spec("vector", 8, 2, 3, 300, RouteChoice::Vector)),
  };
}

class Cap : public ::testing::TestWithParam<CapCase> {};

TEST_P(Cap, ErrorNamesTheSmallestCapThatWorks) {
  CapCase c = GetParam();
  const auto problem = make_problem(c.spec);
  const auto error = plan_error(*problem);
  ASSERT_TRUE(error.has_value()) << "a cap of 1 byte was accepted: " << problem->plan().to_json();
  EXPECT_EQ(error->kind(), ErrorKind::InvalidArgument);
  const std::string message = error->what();
  EXPECT_EQ(message.rfind("[heed::attention]", 0), 0u) << message;
  const auto smallest = smallest_cap_in(message);
  ASSERT_TRUE(smallest.has_value()) << "no smallest cap in: " << message;
  EXPECT_EQ(*smallest, c.expected_min_cap) << message;

  // The op rejects it the same way and leaves out alone.
  try {
    problem->run();
    ADD_FAILURE() << "attention accepted a cap of 1 byte";
  } catch (const Error& op_error) {
    EXPECT_STREQ(op_error.what(), message.c_str());
  }
  EXPECT_EQ(problem->out().storage(), problem->out_before());

  // One byte less than the named cap still fails.
  c.spec.max_score_bytes = *smallest - 1;
  if (*smallest > 1) {
    const auto below = make_problem(c.spec);
    const auto below_error = plan_error(*below);
    ASSERT_TRUE(below_error.has_value()) << "cap " << *smallest - 1 << " was accepted";
    EXPECT_EQ(below_error->kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(smallest_cap_in(below_error->what()), smallest) << below_error->what();
  }

  // The named cap plans, respects itself, and runs to the oracle's answer.
  c.spec.max_score_bytes = *smallest;
  const auto at_cap = make_problem(c.spec);
  AttentionPlan plan;
  ASSERT_NO_THROW(plan = at_cap->plan());
  EXPECT_LE(plan.max_intermediate_bytes, static_cast<std::size_t>(*smallest)) << plan.to_json();
  EXPECT_TRUE(plan.capped) << plan.to_json();
  ASSERT_NO_THROW(at_cap->run());
  EXPECT_TRUE(matches_reference(at_cap->out().view(), at_cap->reference()));
}

INSTANTIATE_TEST_SUITE_P(Kernels, Cap, ::testing::ValuesIn(cap_cases()),
                         [](const auto& param_info) { return param_info.param.spec.name; });

// Every cap is either honoured (the largest intermediate never exceeds it) or refused with
// a larger cap that plans.
TEST(CapSweep, IntermediateNeverExceedsTheCap) {
  CaseSpec spec = cap_spec("sweep", 4, 2, 65, 200, RouteChoice::Auto);
  for (RouteChoice route : {RouteChoice::Auto, RouteChoice::Tiled, RouteChoice::Composed, RouteChoice::Vector}) {
    spec.route = route;
    for (std::int64_t cap : {4, 5, 63, 64, 65, 799, 800, 801, 4096, 12345, 52000, 200000, 10000000}) {
      spec.max_score_bytes = cap;
      const auto problem = make_problem(spec);
      AttentionPlan plan;
      try {
        plan = problem->plan();
      } catch (const Error& error) {
        // A refusal names a larger cap, and that cap plans.
        EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
        const auto smallest = smallest_cap_in(error.what());
        ASSERT_TRUE(smallest.has_value()) << error.what();
        EXPECT_GT(*smallest, cap) << error.what();
        spec.max_score_bytes = *smallest;
        EXPECT_NO_THROW((void)make_problem(spec)->plan()) << "cap " << *smallest << " named by: " << error.what();
        continue;
      }
      EXPECT_LE(plan.max_intermediate_bytes, static_cast<std::size_t>(cap))
          << "route " << static_cast<int>(route) << " cap " << cap << ": " << plan.to_json();
    }
  }
}

}  // namespace
}  // namespace heed::test
