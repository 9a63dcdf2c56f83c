#pragma once
// The CUDA tiled route's cases for the gpu grid (cuda_grid_test.cpp): every head size (multiples
// of 8 up to 256, and 512) in float16 and bfloat16, and every option of the contract on the tiled
// kernel.

#include <vector>

#include "support/problem.hpp"

namespace heed::test {

// Quick tier: each case's oracle costs at most ~1.3e8 double multiply-adds.
std::vector<CaseSpec> tiled_cuda_cases();
// Long tier (HEED_TEST_LONG=1, else empty): longer sequences, several row blocks per head.
std::vector<CaseSpec> tiled_cuda_long_cases();

// Whether the CUDA tiled kernel serves the case's dtype, head sizes and layout (its caps aside).
bool cuda_tiled_serves(const CaseSpec& spec);

}  // namespace heed::test
