#pragma once
// Entry points shared by plan_attention and attention.

#include <string>

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/tensor.hpp"
#include "plan/problem.hpp"

namespace heed::plan {

// Throws Unsupported when this build has no backend for the device.
void require_backend(Device device, const char* op);
// The plan of an empty output (B, Hq, Lq or Dv = 0), for every backend: the caller's route, else
// the composed one; nothing runs and no scratch is held. `workers` is the backend's line on its
// workers; the backend names the kernel.
void plan_empty_output(AttentionPlan& plan, const Problem& p, const std::string& workers);
// Refuses p's max_scratch_bytes, which `plan` (the smallest form its route has) does not meet,
// naming the smallest budget that fits.
[[noreturn]] void refuse_scratch_budget(const Problem& p, const AttentionPlan& plan);

}  // namespace heed::plan
