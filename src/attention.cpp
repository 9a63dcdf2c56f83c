#include "heed/attention.hpp"

#include <cmath>
#include <cstdint>

#include "core/format.hpp"
#include "cpu/attention_cpu.hpp"
#include "heed/error.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#include "plan/cuda_plan.hpp"
#endif

namespace heed {
namespace {

using plan::kOp;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, std::string("[") + kOp + "] " + message);
}

void check_data(const TensorView& view, const char* name) {
  if (view.data == nullptr && view.shape.numel(kOp) > 0) {
    invalid(format("{} data is null for non-empty shape {}", name, view.shape.to_string()));
  }
}

// What only the op checks: the output, data pointers, devices of the options, scale, workspace.
void check_call(const TensorView& q, const TensorView& v, const TensorView& out, float scale,
                const AttentionOptions& options, std::size_t scratch_bytes) {
  const Shape expected{q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
  if (!(out.shape == expected)) {
    invalid(format("out shape {} must be {}", out.shape.to_string(), expected.to_string()));
  }
  if (out.strides.size() != 4) invalid(format("out has {} strides for shape {}", out.strides.size(), out.shape.to_string()));
  if (out.dtype != q.dtype) invalid(format("out dtype {} must equal q dtype {}", to_string(out.dtype), to_string(q.dtype)));
  if (!(out.device == q.device)) invalid(format("out is on {} but q is on {}", out.device.to_string(), q.device.to_string()));
  if (!std::isfinite(scale)) invalid(format("scale must be finite, got {}", scale));
  check_data(out, "out");
  if (options.mask) {
    check_data(*options.mask, "mask");
    if (!(options.mask->device == q.device)) invalid(format("mask is on {} but q is on {}", options.mask->device.to_string(), q.device.to_string()));
  }
  if (options.sinks) {
    check_data(*options.sinks, "sinks");
    if (!(options.sinks->device == q.device)) invalid(format("sinks are on {} but q is on {}", options.sinks->device.to_string(), q.device.to_string()));
  }
  if (options.workspace != nullptr) {
    if (options.workspace_bytes < scratch_bytes) {
      invalid(format("workspace of {} bytes is smaller than the plan's scratch_bytes {}", options.workspace_bytes, scratch_bytes));
    }
    if (reinterpret_cast<std::uintptr_t>(options.workspace) % alignof(float) != 0) {
      invalid(format("workspace must be aligned to {} bytes", alignof(float)));
    }
  }
}

#if HEED_HAS_CUDA
void attention_cuda(const plan::Problem& problem, const TensorView& q, const TensorView& k, const TensorView& v,
                    TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  const plan::CudaRoute& route = plan::plan_cuda_cached(problem, cuda::device_info(q.device, kOp));
  check_call(q, v, out, scale, options, route.plan.scratch_bytes);
  if (problem.empty_output()) return;
  for (const auto& [view, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    if (view->shape.numel(kOp) > 0) cuda::check_device_pointer(view->data, q.device, name);
  }
  if (options.mask && options.mask->shape.numel(kOp) > 0) cuda::check_device_pointer(options.mask->data, q.device, "mask");
  if (options.sinks && options.sinks->shape.numel(kOp) > 0) cuda::check_device_pointer(options.sinks->data, q.device, "sinks");
  cuda::run_attention(q, k, v, out, scale, options, route, stream.handle);
}
#endif

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
               const AttentionOptions& options, Stream stream) {
  const plan::Problem problem = plan::validate_views(q, k, v, options);
  check_data(q, "q");
  check_data(k, "k");
  check_data(v, "v");
#if HEED_HAS_CUDA
  if (q.device.type == DeviceType::CUDA) return attention_cuda(problem, q, k, v, out, scale, options, stream);
#else
  (void)stream;
#endif
  plan::require_backend(q.device);
  const plan::CpuRoute route = plan::plan_cpu(problem);
  check_call(q, v, out, scale, options, route.plan.scratch_bytes);
  if (problem.empty_output()) return;
  memory::Scratch scratch(route.plan.scratch_bytes, options.workspace, kOp);
  cpu::run_attention(q, k, v, out, scale, options, route, scratch.data());
}

}  // namespace heed
