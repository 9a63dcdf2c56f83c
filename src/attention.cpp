// The top of the call: every entry point validates into one descriptor, asks the device's facts
// (discovered once, device/ and core/cpu_info) and the environment's overrides, and hands both to
// the backend's planner, so that no planner reads a device or the environment itself.

#include "heed/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "call/validate.hpp"
#include "core/cpu_info.hpp"
#include "core/format.hpp"
#include "cpu/attention_cpu.hpp"
#include "cpu/merge.hpp"
#include "heed/error.hpp"
#include "heed/plan.hpp"
#include "heed/serving.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/merge.hpp"
#include "cuda/runtime.hpp"
#include "device/cuda_device.hpp"
#include "plan/cuda_plan.hpp"
#endif

namespace heed {
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

// The plan of a validated problem on `device` (the CPU or, when built, a CUDA device).
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

// Plans and runs a validated call of any form on q's device.
void run_call(const call::Call& c, Device device, const AttentionOptions& options, Stream stream) {
  if (c.has_lse && c.value_dim == 0 && c.batch > 0 && c.q_heads > 0 && c.q_len > 0) {
    throw Error(ErrorKind::InvalidArgument, format("[{}] lse needs Dv >= 1 (out has no values to weigh)", op_of(c)));
  }
  const plan::PlanOverrides& overrides = plan::environment_overrides();
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    require_cuda_form(c);
    const plan::CudaRoute& route = plan::plan_cuda_cached(c, device::cuda_device_info(device, op_of(c)), overrides);
    call::check_workspace(c, options, route.plan.scratch_bytes);
    if (c.empty_output()) return;
    // Only the CUDA runtime can tell device memory from host memory.
    cuda::check_device_pointers(c, device);
    cuda::run_attention(c, options, route, stream.handle);
    return;
  }
#else
  (void)stream;
#endif
  plan::require_backend(device, op_of(c));
  const plan::CpuRoute route = plan::plan_cpu(c, cpu_info(), overrides);
  call::check_workspace(c, options, route.plan.scratch_bytes);
  if (c.empty_output()) return;
  memory::Scratch scratch(route.plan.scratch_bytes, options.workspace, op_of(c));
  cpu::run_attention(c, route, scratch.data());
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
  run_call(call::validate_call(q, k, v, out, scale, options), q.device, options, stream);
}

AttentionPlan plan_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const RaggedBatch& batch, const AttentionOptions& options) {
  return plan_on(call::validate_ragged(q, k, v, batch, nullptr, 1.0f, options), q.device);
}

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                      TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  run_call(call::validate_ragged(q, k, v, batch, &out, scale, options), q.device, options, stream);
}

AttentionPlan plan_attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                   const PagedKv& pages, const AttentionOptions& options) {
  return plan_on(call::validate_paged(q, k_cache, v_cache, pages, nullptr, 1.0f, options), q.device);
}

void attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache, const PagedKv& pages,
                     TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  run_call(call::validate_paged(q, k_cache, v_cache, pages, &out, scale, options), q.device, options, stream);
}

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b, const TensorView& lse_b,
                  TensorView& out, TensorView& lse, Stream stream) {
  const call::Merge m = call::validate_merge(out_a, lse_a, out_b, lse_b, out, lse);
  (void)stream;
  if (out.device.type == DeviceType::CUDA) {
#if HEED_HAS_CUDA
    cuda::merge_states(m, out.device, stream.handle);
    return;
#else
    throw Error(ErrorKind::Unsupported, "[heed::merge_states] this build has no CUDA backend");
#endif
  }
  plan::require_backend(out.device, "heed::merge_states");
  cpu::merge_states(m);
}

}  // namespace heed
