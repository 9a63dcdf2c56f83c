#pragma once

#include <cstddef>

#include "heed/options.hpp"
#include "heed/tensor.hpp"
#include "plan/cpu_plan.hpp"

namespace heed::cpu {

// Runs a validated call on the CPU with the route's scratch (at least its scratch_bytes).
void run_attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
                   const AttentionOptions& options, const plan::CpuRoute& route, std::byte* scratch);

}  // namespace heed::cpu
