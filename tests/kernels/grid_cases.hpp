#pragma once
// The hand-chosen grid of kernel cases, in two tiers: quick (default) and long
// (HEED_TEST_LONG=1). Read by the grid, routes and scratch tests.

#include <ostream>
#include <string>
#include <vector>

#include "support/problem.hpp"

namespace heed::test {

const std::vector<CaseSpec>& quick_cases();
const std::vector<CaseSpec>& long_cases();
// The long tier when HEED_TEST_LONG=1, else nothing.
std::vector<CaseSpec> long_tier_cases();
// The quick tier, plus the long tier when HEED_TEST_LONG=1.
std::vector<CaseSpec> tier_cases();

// gtest parameter names: the case name.
struct CaseName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

inline void PrintTo(const CaseSpec& spec, std::ostream* os) { *os << spec.name; }

}  // namespace heed::test
