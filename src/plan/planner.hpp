#pragma once
// Entry points shared by plan_attention and attention.

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/tensor.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

// Throws Unsupported when this build has no backend for the device.
void require_backend(Device device);
// The plan of a validated problem on `device` (the CPU or, when built, a CUDA device).
AttentionPlan plan_on(const Problem& problem, Device device);

}  // namespace heed::plan
