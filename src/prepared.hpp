#pragma once
// A validated call with its route, ready to launch: the steps `attention` takes for one call and a
// Runner (heed/runner.hpp) takes once for many, so that both check and plan the same way.

#include <cstddef>
#include <optional>

#include "call/call.hpp"
#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::detail {

// How a CUDA call's route is held: from this thread's plan cache (valid until its next call:
// what one attention call needs), or a copy of its own (a Runner's).
enum class Planning { Memoized, Owned };

struct PreparedCall {
  call::Call call;
  Device device;
  std::optional<plan::CpuRoute> cpu;
  std::optional<plan::CudaRoute> owned_cuda;
  const plan::CudaRoute* memoized_cuda = nullptr;

  const plan::CudaRoute& cuda() const { return owned_cuda ? *owned_cuda : *memoized_cuda; }
  const AttentionPlan& plan() const { return cpu ? cpu->plan : cuda().plan; }
  bool on_cuda() const { return device.type == DeviceType::CUDA; }
};

// The plan of a validated problem on `device` (the CPU or, when built, a CUDA device).
AttentionPlan plan_on(const call::Problem& problem, Device device);

// Everything a call checks and decides before its launches: the output's own checks, the plan,
// the caller's workspace against it and, on CUDA, that the tensors are the device's memory (for a
// non-empty output).
PreparedCall prepare(const call::Call& c, Device device, const AttentionOptions& options, Planning planning);

// Runs a prepared call with scratch of its own for the call (or options.workspace).
void run_once(const PreparedCall& p, const AttentionOptions& options, Stream stream);

// Runs a prepared call on scratch the caller holds: the launches and nothing else.
void launch(const PreparedCall& p, std::byte* scratch, Stream stream);

}  // namespace heed::detail
