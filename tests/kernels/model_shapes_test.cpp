// The model shapes of the benchmark suite (bench/cases.hpp), scaled down in length so the
// oracle can check them: the tests and the benchmarks read the same case table.

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cases.hpp"
#include "support/problem.hpp"

namespace heed::cases {
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
}  // namespace heed::cases

namespace heed::test {
namespace {

// Oracle multiply-adds one scaled model case may cost.
constexpr double kOracleBudget = 6e7;

MaskKind mask_of(cases::MaskKind kind) {
  switch (kind) {
    case cases::MaskKind::None: return MaskKind::None;
    case cases::MaskKind::Bool: return MaskKind::Bool2D;
    case cases::MaskKind::Additive: return MaskKind::Additive;
    case cases::MaskKind::KeyPadding: return MaskKind::KeyPadding;
  }
  return MaskKind::None;
}

// The longest of a few lengths whose visible pairs fit the oracle budget.
cases::Case scaled_to_budget(const cases::Case& model) {
  for (std::int64_t max_len : {256, 129, 64, 33, 17, 8}) {
    const cases::Case scaled = model.scaled(max_len);
    if (scaled.visible_pairs() * static_cast<double>(scaled.head_dim + scaled.value_dim) <= kOracleBudget) {
      return scaled;
    }
  }
  return model.scaled(1);
}

CaseSpec spec_of(const cases::Case& c) {
  CaseSpec spec;
  spec.name = "model_" + c.name;
  spec.batch = c.batch;
  spec.q_heads = c.q_heads;
  spec.kv_heads = c.kv_heads;
  spec.q_len = c.q_len;
  spec.kv_len = c.kv_len;
  spec.head_dim = c.head_dim;
  spec.value_dim = c.value_dim;
  spec.dtype = c.dtype;
  spec.causal = c.causal;
  spec.window = c.window;
  spec.sinks = c.sinks;
  spec.mask = mask_of(c.mask);
  spec.mask_dtype = c.dtype;
  spec.max_score_bytes = c.max_score_bytes;
  return spec;
}

TEST(ModelShapes, SuiteIsNotEmpty) {
  EXPECT_GE(cases::default_suite().size(), 6u);
  for (const cases::Case& c : cases::default_suite()) {
    EXPECT_EQ(cases::find_case(c.name), &c) << c.name;
    const cases::Case scaled = c.scaled(17);
    EXPECT_LE(scaled.q_len, 17);
    EXPECT_LE(scaled.kv_len, 17);
    EXPECT_EQ(scaled.head_dim, c.head_dim);
    EXPECT_EQ(scaled.q_heads, c.q_heads);
  }
}

class ModelShapes : public ::testing::TestWithParam<cases::Case> {};

TEST_P(ModelShapes, ScaledCaseMatchesOracle) {
  const cases::Case scaled = scaled_to_budget(GetParam());
  const CaseSpec spec = spec_of(scaled);
  SCOPED_TRACE(spec.name + " at Lq " + std::to_string(spec.q_len) + ", Lk " + std::to_string(spec.kv_len));
  const auto problem = make_problem(spec);
  const AttentionPlan plan = problem->plan();
  SCOPED_TRACE(plan.to_json());
  problem->run();
  EXPECT_TRUE(gaps_untouched(problem->out(), problem->out_before()));
  EXPECT_TRUE(matches_reference(problem->out().view(), problem->reference()));
}

INSTANTIATE_TEST_SUITE_P(Suite, ModelShapes, ::testing::ValuesIn(cases::default_suite()),
                         [](const auto& param_info) {
                           std::string name = param_info.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace heed::test
