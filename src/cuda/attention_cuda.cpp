// The CUDA backend's entry: plain kernel parameters from the caller's views, then the route.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/check.hpp"
#include "cuda/composed.hpp"
#include "cuda/runtime.hpp"
#include "cuda/tiled.hpp"
#include "cuda/vector.hpp"
#include "memory/cuda_allocator.hpp"

namespace heed::cuda {
namespace {

constexpr const char* kOp = "heed::attention";
constexpr float kLog2e = 1.4426950408889634f;

ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ElementType::Float32;
    case DType::Float16: return ElementType::Float16;
    case DType::BFloat16: return ElementType::BFloat16;
    case DType::Bool: return ElementType::Bool;
  }
  return ElementType::Float32;
}

Strides4 strides_of(const TensorView& view) {
  return Strides4{{view.strides[0], view.strides[1], view.strides[2], view.strides[3]}};
}

// A rank-2 [Lq, Lk] or rank-4 mask as [b, h, i, j] strides, zero along broadcast dimensions.
MaskArgs mask_args(const TensorView& mask) {
  MaskArgs args;
  args.data = mask.data;
  args.type = element_type(mask.dtype);
  args.kind = mask.dtype == DType::Bool ? MaskType::Bool : MaskType::Additive;
  const int offset = 4 - mask.rank();
  for (int axis = 0; axis < mask.rank(); ++axis) {
    args.strides.s[axis + offset] = mask.shape[axis] == 1 ? 0 : mask.strides[static_cast<std::size_t>(axis)];
  }
  return args;
}

Geometry geometry(const TensorView& q, const TensorView& k, const TensorView& v, const AttentionOptions& options) {
  Geometry g;
  g.batch = q.shape[0];
  g.q_heads = q.shape[1];
  g.kv_heads = k.shape[1];
  g.group = g.kv_heads > 0 ? g.q_heads / g.kv_heads : 1;
  g.q_len = q.shape[2];
  g.kv_len = k.shape[2];
  g.head_dim = q.shape[3];
  g.value_dim = v.shape[3];
  g.causal = options.causal;
  g.window = options.window.value_or(0);
  if (options.mask) g.mask = mask_args(*options.mask);
  if (options.sinks) {
    g.sinks.data = options.sinks->data;
    g.sinks.type = element_type(options.sinks->dtype);
    g.sinks.stride = options.sinks->strides[0];
  }
  return g;
}

// Rows of `view` can be read as 16-byte chunks: stride-1 last dimension, a whole number of
// chunks per row and every row start 16-byte aligned.
bool wide_rows(const TensorView& view) {
  const auto element = static_cast<std::int64_t>(size_of(view.dtype));
  const std::int64_t per_chunk = 16 / element;
  if (view.shape[3] > 1 && view.strides[3] != 1) return false;
  if (view.shape[3] % per_chunk != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(view.data) % 16 != 0) return false;
  for (int axis = 0; axis < 3; ++axis) {
    if (view.shape[axis] > 1 && view.strides[static_cast<std::size_t>(axis)] % per_chunk != 0) return false;
  }
  return true;
}

}  // namespace

void run_attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
                   const AttentionOptions& options, const plan::CudaRoute& route, void* stream_handle) {
  const int device = route.plan.device.index;
  DeviceGuard guard(device, kOp);
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  memory::CudaScratch scratch(device, route.plan.scratch_bytes, options.workspace, stream_handle, kOp);
  CallArgs call;
  call.g = geometry(q, k, v, options);
  call.type = element_type(q.dtype);
  call.q = q.data;
  call.k = k.data;
  call.v = v.data;
  call.out = out.data;
  call.q_strides = strides_of(q);
  call.k_strides = strides_of(k);
  call.v_strides = strides_of(v);
  call.out_strides = strides_of(out);
  if (std::holds_alternative<route::Vector>(route.plan.kernel)) {
    VectorArgs a;
    static_cast<CallArgs&>(a) = call;
    a.scale_log2 = scale * kLog2e;
    a.wide_loads = wide_rows(q) && wide_rows(k) && wide_rows(v);
    const plan::CudaVectorShape& s = route.vector;
    a.lanes_per_key = s.lanes_per_key;
    a.rows = s.rows;
    a.row_tiles = s.row_tiles;
    a.span_begin = s.span_begin;
    a.span_end = s.span_end;
    a.partitions = s.partitions;
    a.keys_per_partition = s.keys_per_partition;
    a.partials = route.partials.at<float>(scratch.data());
    run_vector(a, route, stream);
  } else if (std::holds_alternative<route::Tiled>(route.plan.kernel)) {
    TiledArgs a;
    static_cast<CallArgs&>(a) = call;
    a.scale_log2 = scale * kLog2e;
    a.rows = route.tiled.rows;
    a.row_blocks = route.tiled.row_blocks;
    a.wide_out = wide_rows(out);
    a.value_parts = route.tiled.value_parts;
    a.heads_inner = route.tiled.heads_inner;
    run_tiled(a, route, stream);
  } else {
    ComposedArgs a;
    static_cast<CallArgs&>(a) = call;
    a.scale = scale;
    run_composed(a, route, scratch.data(), device, stream);
  }
}

}  // namespace heed::cuda
