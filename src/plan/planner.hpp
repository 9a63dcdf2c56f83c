#pragma once
// Entry points shared by plan_attention and attention.

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/tensor.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

// Validates shapes, dtypes, strides, devices and options of the three views.
Problem validate_views(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttentionOptions& options);
// Throws Unsupported when this build has no backend for the device.
void require_backend(Device device);
// The plan of a validated problem on `device` (the CPU or, when built, a CUDA device).
AttentionPlan plan_on(const Problem& problem, Device device);

}  // namespace heed::plan
