#pragma once

#include <cstddef>

#include "call/call.hpp"
#include "plan/cpu_plan.hpp"

namespace heed::cpu {

// Runs a validated call on the CPU with the route's scratch (at least its scratch_bytes).
void run_attention(const call::Call& call, const plan::CpuRoute& route, std::byte* scratch);

}  // namespace heed::cpu
