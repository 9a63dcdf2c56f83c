#include "cpu/attention_cpu.hpp"

#include "cpu/kernels.hpp"
#include "cpu/params.hpp"

namespace heed::cpu {
namespace {

Strides strides_of(const TensorView& view) {
  return {view.strides[0], view.strides[1], view.strides[2], view.strides[3]};
}

// A rank-2 [Lq, Lk] or rank-4 mask as [b, h, i, j] strides, zero along broadcast dimensions.
MaskParams mask_params(const TensorView& mask) {
  MaskParams params;
  params.data = mask.data;
  params.dtype = mask.dtype;
  params.kind = mask.dtype == DType::Bool ? plan::MaskKind::Bool : plan::MaskKind::Additive;
  const int offset = 4 - mask.rank();
  for (int axis = 0; axis < mask.rank(); ++axis) {
    const auto index = static_cast<std::size_t>(axis);
    params.strides[index + static_cast<std::size_t>(offset)] = mask.shape[axis] == 1 ? 0 : mask.strides[index];
  }
  return params;
}

}  // namespace

void run_attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
                   const AttentionOptions& options, const plan::CpuRoute& route, std::byte* scratch) {
  AttentionParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.dtype = q.dtype;
  p.batch = q.shape[0];
  p.q_heads = q.shape[1];
  p.kv_heads = k.shape[1];
  p.q_len = q.shape[2];
  p.kv_len = k.shape[2];
  p.head_dim = q.shape[3];
  p.value_dim = v.shape[3];
  p.q_strides = strides_of(q);
  p.k_strides = strides_of(k);
  p.v_strides = strides_of(v);
  p.out_strides = strides_of(out);
  p.scale = scale;
  p.causal = options.causal;
  p.window = options.window.value_or(0);
  if (options.mask) p.mask = mask_params(*options.mask);
  if (options.sinks) {
    p.sinks = options.sinks->data;
    p.sinks_dtype = options.sinks->dtype;
    p.sinks_stride = options.sinks->strides[0];
  }
  switch (route.plan.kernel.index()) {
    case 0: run_vector(p, route, scratch); break;
    case 1: run_tiled(p, route, scratch); break;
    default: run_composed(p, route, scratch); break;
  }
}

}  // namespace heed::cpu
