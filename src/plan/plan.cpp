#include "heed/plan.hpp"

#include <cstdint>
#include <cstdio>

#include "core/format.hpp"
#include "heed/error.hpp"
#include "plan/cpu_plan.hpp"
#include "plan/planner.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#endif

namespace heed {

const char* route_name(const Kernel& kernel) {
  switch (kernel.index()) {
    case 0: return "vector";
    case 1: return "tiled";
    case 2: return "composed";
    case 3: return "composed_blocks";
  }
  return "unknown";
}

std::string AttentionPlan::explain() const {
  std::string text;
  for (const std::string& line : reasons) text += line + "\n";
  return text;
}

namespace {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string kernel_json(const Kernel& kernel) {
  std::string fields;
  if (const auto* vector = std::get_if<route::Vector>(&kernel)) {
    fields = format(", \"passes\": {}, \"blocks\": {}, \"dispatches\": {}", vector->passes, vector->blocks,
                    vector->dispatches);
  } else if (const auto* tiled = std::get_if<route::Tiled>(&kernel)) {
    fields = format(", \"block_q\": {}, \"block_k\": {}", tiled->block_q, tiled->block_k);
  } else if (const auto* blocks = std::get_if<route::ComposedBlocks>(&kernel)) {
    fields = format(", \"rows\": {}", blocks->rows);
  }
  return format("{\"route\": \"{}\"{}}", route_name(kernel), fields);
}

}  // namespace

std::string AttentionPlan::to_json() const {
  std::string out = format("{\"device\": {}, \"dtype\": \"{}\", \"kernel\": {}, \"kernel_name\": {}, \"workers\": {}, "
                           "\"scratch_bytes\": {}, \"max_intermediate_bytes\": {}, \"capped\": {}, \"buffers\": [",
                           json_string(device.to_string()), to_string(dtype), kernel_json(kernel),
                           json_string(kernel_name), workers, scratch_bytes, max_intermediate_bytes,
                           capped ? "true" : "false");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const ScratchBuffer& b = buffers[i];
    out += format("{}{\"name\": {}, \"offset\": {}, \"bytes\": {}, \"slices\": {}}", i ? ", " : "",
                  json_string(b.name), b.offset, b.bytes, b.slices);
  }
  out += "], \"explanation\": [";
  for (std::size_t i = 0; i < reasons.size(); ++i) out += format("{}{}", i ? ", " : "", json_string(reasons[i]));
  out += "]}";
  return out;
}

namespace plan {
namespace {

// The rows of a [B, H, L, E] view are contiguous and do not overlap (leading dimension >= E).
bool rows_contiguous(const TensorView& view) {
  return view.last_dim_contiguous() && (view.shape[2] <= 1 || view.strides[2] >= view.shape[3]);
}

// Every row of a [B, H, L, E] view is whole 16-byte chunks at 16-byte aligned addresses.
bool rows_wide(const TensorView& view) {
  const auto element = static_cast<std::int64_t>(size_of(view.dtype));
  if (view.shape[3] > 1 && view.strides[3] != 1) return false;
  // Modulo first, so that huge sizes and strides cannot overflow (they are rejected elsewhere).
  if (((view.shape[3] % 16) * element) % 16 != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(view.data) % 16 != 0) return false;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (view.shape[static_cast<int>(axis)] > 1 && ((view.strides[axis] % 16) * element) % 16 != 0) return false;
  }
  return true;
}

// The batch stride is the heads times the head stride (or one batch): (b, h) is b·H + h head
// strides from the start.
bool batch_folds(const TensorView& view) {
  if (view.shape[0] <= 1) return true;
  std::int64_t batch_stride = 0;
  return !__builtin_mul_overflow(view.shape[1], view.strides[1], &batch_stride) && view.strides[0] == batch_stride;
}

// Strides along B, H and L are positive where the size is above 1, and under 2^40 bytes.
bool strides_positive(const TensorView& view) {
  const auto element = static_cast<std::int64_t>(size_of(view.dtype));
  constexpr std::int64_t kLimit = std::int64_t{1} << 40;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (view.shape[static_cast<int>(axis)] > 1 && (view.strides[axis] <= 0 || view.strides[axis] >= kLimit / element)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void require_backend(Device device) {
  if (device.type != DeviceType::CPU) {
    throw Error(ErrorKind::Unsupported,
                format("[{}] device {}: this build of heed has no CUDA backend", kOp, device.to_string()));
  }
}

AttentionPlan plan_on(const Problem& problem, Device device) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return plan_cuda(problem, cuda::device_info(device, kOp)).plan;
#endif
  require_backend(device);
  return plan_cpu(problem).plan;
}

Problem validate_views(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttentionOptions& options) {
  for (const auto& [view, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (view->strides.size() != static_cast<std::size_t>(view->shape.rank())) {
      throw Error(ErrorKind::InvalidArgument, format("[{}] {} has {} strides for shape {}", kOp, name,
                                                     view->strides.size(), view->shape.to_string()));
    }
  }
  Problem problem = validate_problem(q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, options);
  problem.rows_contiguous = rows_contiguous(q) && rows_contiguous(k) && rows_contiguous(v);
  problem.rows_wide = rows_wide(q) && rows_wide(k) && rows_wide(v);
  problem.batch_folds = batch_folds(q) && batch_folds(k) && batch_folds(v);
  problem.kv_strides_positive = strides_positive(k) && strides_positive(v);
  for (const auto& [view, name] : {std::pair{&k, "k"}, {&v, "v"}}) {
    if (!(view->device == q.device)) {
      throw Error(ErrorKind::InvalidArgument, format("[{}] {} is on {} but q is on {}", kOp, name,
                                                     view->device.to_string(), q.device.to_string()));
    }
  }
  return problem;
}

}  // namespace plan

AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options, Device device) {
  const plan::Problem problem = plan::validate_problem(q, k, v, dtype, dtype, dtype, options);
  return plan::plan_on(problem, device);
}

AttentionPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options) {
  const plan::Problem problem = plan::validate_views(q, k, v, options);
  return plan::plan_on(problem, q.device);
}

}  // namespace heed
