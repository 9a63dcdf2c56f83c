// The top of the call: attention and plan_attention validate, ask the device's facts (discovered
// once, device/ and core/cpu_info) and the environment's overrides, and hand both to the
// backend's planner, so that no planner reads a device or the environment itself.

#include "heed/attention.hpp"

#include "call/validate.hpp"
#include "core/cpu_info.hpp"
#include "cpu/attention_cpu.hpp"
#include "heed/plan.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#include "device/cuda_device.hpp"
#include "plan/cuda_plan.hpp"
#endif

namespace heed {
namespace {

// The plan of a validated problem on `device` (the CPU or, when built, a CUDA device).
AttentionPlan plan_on(const plan::Problem& problem, Device device) {
  const plan::PlanOverrides& overrides = plan::environment_overrides();
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    return plan::plan_cuda(problem, heed::device::cuda_device_info(device, call::kOp), overrides).plan;
  }
#endif
  plan::require_backend(device);
  return plan::plan_cpu(problem, cpu_info(), overrides).plan;
}

}  // namespace

AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options, Device device) {
  return plan_on(call::validate_problem(q, k, v, dtype, dtype, dtype, options), device);
}

AttentionPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options) {
  return plan_on(call::validate_views(q, k, v, options), q.device);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
               const AttentionOptions& options, Stream stream) {
  const call::Call c = call::validate_call(q, k, v, out, scale, options);
  const plan::PlanOverrides& overrides = plan::environment_overrides();
#if HEED_HAS_CUDA
  if (q.device.type == DeviceType::CUDA) {
    const plan::CudaRoute& route =
        plan::plan_cuda_cached(c, device::cuda_device_info(q.device, call::kOp), overrides);
    call::check_workspace(options, route.plan.scratch_bytes);
    if (c.empty_output()) return;
    // Only the CUDA runtime can tell device memory from host memory.
    cuda::check_device_pointers(c, q.device);
    cuda::run_attention(c, options, route, stream.handle);
    return;
  }
#else
  (void)stream;
#endif
  plan::require_backend(q.device);
  const plan::CpuRoute route = plan::plan_cpu(c, cpu_info(), overrides);
  call::check_workspace(options, route.plan.scratch_bytes);
  if (c.empty_output()) return;
  memory::Scratch scratch(route.plan.scratch_bytes, options.workspace, call::kOp);
  cpu::run_attention(c, route, scratch.data());
}

}  // namespace heed
