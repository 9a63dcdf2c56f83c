// The steps of an attention call between validation and the kernels: every entry point asks the
// device's facts (discovered once, device/ and core/cpu_info) and the environment's overrides
// here and hands both to the backend's planner, so that no planner reads a device or the
// environment itself.

#include "prepared.hpp"

#include <cstdint>
#include <limits>

#include "core/cpu_info.hpp"
#include "core/format.hpp"
#include "cpu/attention_cpu.hpp"
#include "heed/error.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#include "device/cuda_device.hpp"
#endif

namespace heed::detail {
namespace {

using call::op_of;

#if HEED_HAS_CUDA
// Every form reaches the CUDA planner, which refuses per route with its reason (plan/cuda_plan.cpp).
// Device-resident metadata is clamped where the kernels read it; validation sized the plan from
// max_seqlen_* or, without them, from the totals. Paged keys are counted in 32 bits on the device.
void require_cuda_form(const call::Problem& p) {
  if (p.form == call::Form::Paged && p.kv_len > std::numeric_limits<std::int32_t>::max()) {
    throw Error(ErrorKind::InvalidArgument,
                format("[{}] max_seqlen_k {} exceeds the int32 range of seqlens_k", op_of(p), p.kv_len));
  }
}
#endif

}  // namespace

AttentionPlan plan_on(const call::Problem& problem, Device device) {
  const plan::PlanOverrides& overrides = plan::environment_overrides();
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    require_cuda_form(problem);
    return plan::plan_cuda(problem, heed::device::cuda_device_info(device, op_of(problem)), overrides).plan;
  }
#endif
  plan::require_backend(device, op_of(problem));
  return plan::plan_cpu(problem, cpu_info(), overrides).plan;
}

PreparedCall prepare(const call::Call& c, Device device, const AttentionOptions& options, Planning planning) {
  if (c.has_lse && c.value_dim == 0 && c.batch > 0 && c.q_heads > 0 && c.q_len > 0) {
    throw Error(ErrorKind::InvalidArgument, format("[{}] lse needs Dv >= 1 (out has no values to weigh)", op_of(c)));
  }
  PreparedCall p{c, device, std::nullopt, std::nullopt, nullptr};
  const plan::PlanOverrides& overrides = plan::environment_overrides();
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    require_cuda_form(c);
    const plan::CudaDeviceInfo& info = heed::device::cuda_device_info(device, op_of(c));
    if (planning == Planning::Owned) {
      p.owned_cuda = plan::plan_cuda(c, info, overrides);
    } else {
      p.memoized_cuda = &plan::plan_cuda_cached(c, info, overrides);
    }
    call::check_workspace(c, options, p.plan().scratch_bytes);
    // Only the CUDA runtime can tell device memory from host memory.
    if (!c.empty_output()) cuda::check_device_pointers(c, device);
    return p;
  }
#else
  (void)planning;
#endif
  plan::require_backend(device, op_of(c));
  p.cpu = plan::plan_cpu(c, cpu_info(), overrides);
  call::check_workspace(c, options, p.plan().scratch_bytes);
  return p;
}

void run_once(const PreparedCall& p, const AttentionOptions& options, Stream stream) {
  if (p.call.empty_output()) return;
#if HEED_HAS_CUDA
  if (p.on_cuda()) {
    cuda::run_attention(p.call, options, p.cuda(), stream.handle);
    return;
  }
#endif
  memory::Scratch scratch(p.plan().scratch_bytes, options.workspace, op_of(p.call));
  launch(p, scratch.data(), stream);
}

void launch(const PreparedCall& p, std::byte* scratch, Stream stream) {
  if (p.call.empty_output()) return;
#if HEED_HAS_CUDA
  if (p.on_cuda()) {
    cuda::launch_attention(p.call, p.cuda(), scratch, stream.handle);
    return;
  }
#endif
  (void)stream;
  cpu::run_attention(p.call, *p.cpu, scratch);
}

}  // namespace heed::detail
