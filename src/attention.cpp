#include "heed/attention.hpp"

#include "call/validate.hpp"
#include "cpu/attention_cpu.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#include "plan/cuda_plan.hpp"
#endif

namespace heed {

void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
               const AttentionOptions& options, Stream stream) {
  const call::Call c = call::validate_call(q, k, v, out, scale, options);
#if HEED_HAS_CUDA
  if (q.device.type == DeviceType::CUDA) {
    const plan::CudaRoute& route = plan::plan_cuda_cached(c, cuda::device_info(q.device, call::kOp));
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
  const plan::CpuRoute route = plan::plan_cpu(c);
  call::check_workspace(options, route.plan.scratch_bytes);
  if (c.empty_output()) return;
  memory::Scratch scratch(route.plan.scratch_bytes, options.workspace, call::kOp);
  cpu::run_attention(c, route, scratch.data());
}

}  // namespace heed
