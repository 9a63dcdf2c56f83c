// The encoder attention layer: validation and planning for both devices, and the CPU's three
// stages on heed's thread pool (the CUDA stages are in multi_head_attention_cuda.cpp).
//   1. q, k, v = x·Wᵀ + b per (batch, block of positions, projection), BLAS single-threaded
//      in each task, written as [B, L, H, D] rows (the heads' views are stride permutations).
//   2. heed::attention over those views, the key padding mask broadcast as [B, 1, 1, L],
//      into a [B, L, Hq, D] buffer (again a stride permutation of [B, Hq, L, D]).
//   3. out = a·Woᵀ + bo per (batch, block of positions); padded positions' rows set to zero.

#include "heed/layer.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/cpu_info.hpp"
#include "core/format.hpp"
#include "cpu/blas.hpp"
#include "cpu/parallel.hpp"
#include "heed/attention.hpp"
#include "heed/error.hpp"
#include "heed/profile.hpp"
#include "layer/layer_internal.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_tables.hpp"
#include "plan/scratch_layout.hpp"

namespace heed {
namespace layer {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, std::string("[") + kOp + "] " + message);
}

[[noreturn]] void unsupported(const std::string& message) {
  throw Error(ErrorKind::Unsupported, std::string("[") + kOp + "] " + message);
}

WeightOperand weight_operand(const TensorView& w) {
  const std::int64_t rows = w.shape[0], cols = w.shape[1];
  const std::int64_t row_stride = w.strides[0], col_stride = w.strides[1];
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols)) {
    return {w.data, rows == 1 ? cols : row_stride, true};
  }
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows)) {
    return {w.data, cols == 1 ? rows : col_stride, false};
  }
  return {nullptr, 0, true};
}

TensorView heads_view(void* data, DType dtype, Device device, std::int64_t batch, std::int64_t length,
                      std::int64_t heads, std::int64_t dim) {
  return TensorView(data, dtype, Shape{batch, heads, length, dim}, {length * heads * dim, dim, heads * dim, 1},
                    device);
}

TensorView key_mask_view(const TensorView* mask, Device device, std::int64_t batch, std::int64_t length) {
  if (mask == nullptr) return TensorView(nullptr, DType::Bool, Shape{batch, 1, 1, length}, {length, 0, 0, 1}, device);
  return TensorView(mask->data, DType::Bool, Shape{batch, 1, 1, length}, {mask->strides[0], 0, 0, mask->strides[1]},
                    device);
}

AttentionOptions attention_options(const Layout& layout, const TensorView* mask, Device device, std::int64_t batch,
                                   std::int64_t length, std::byte* workspace) {
  AttentionOptions options;
  if (mask != nullptr) options.mask = key_mask_view(mask, device, batch, length);
  options.workspace = layout.attention.at<std::byte>(workspace);
  options.workspace_bytes = layout.plan.attention.scratch_bytes;
  return options;
}

}  // namespace layer

namespace {

using layer::invalid;
using layer::kOp;
using layer::unsupported;
using layer::WeightOperand;
using layer::weight_operand;

constexpr const char* kProjectKernel = "heed_cpu_mha_qkv_f32";
constexpr const char* kOutputKernel = "heed_cpu_mha_out_f32";

// The layer's device and dtype, q_weight's: float32 on the CPU; float32, float16 or bfloat16 on
// CUDA (where heed is built with it).
void check_layer_kind(const TensorView& q_weight) {
  if (!is_floating(q_weight.dtype)) {
    invalid(format("q_weight has dtype {}; the layer takes float32, float16 or bfloat16", to_string(q_weight.dtype)));
  }
  if (q_weight.device.type == DeviceType::CPU && q_weight.dtype != DType::Float32) {
    unsupported(format("q_weight has dtype {}; the layer runs in float32 on the CPU (float16 and bfloat16 on CUDA)",
                       to_string(q_weight.dtype)));
  }
}

// A tensor of the layer: on the layer's device and of its dtype.
void check_tensor(const TensorView& view, const char* name, Device device, DType dtype) {
#if !HEED_HAS_CUDA
  if (view.device.type == DeviceType::CUDA) {
    unsupported(format("{} is on {}; this build of heed has no CUDA backend", name, view.device.to_string()));
  }
#endif
  if (!(view.device == device)) {
    invalid(format("{} is on {} but the layer's weights are on {}", name, view.device.to_string(), device.to_string()));
  }
  if (view.dtype != dtype) {
    invalid(format("{} has dtype {} but the layer's weights have {}", name, to_string(view.dtype), to_string(dtype)));
  }
  if (view.strides.size() != static_cast<std::size_t>(view.rank())) {
    invalid(format("{} has {} strides for shape {}", name, view.strides.size(), view.shape.to_string()));
  }
  if (view.data == nullptr && view.shape.numel(kOp) > 0) {
    invalid(format("{} data is null for non-empty shape {}", name, view.shape.to_string()));
  }
}

void check_blas_int(std::int64_t value, const char* name) {
  if (value > INT_MAX) invalid(format("{} ({}) exceeds BLAS's int ({})", name, value, INT_MAX));
}

void check_weight(const TensorView& w, const char* name, std::int64_t rows, std::int64_t cols, Device device,
                  DType dtype) {
  if (w.rank() != 2 || w.shape[0] != rows || w.shape[1] != cols) {
    invalid(format("{} shape {} must be [{}, {}]", name, w.shape.to_string(), rows, cols));
  }
  check_tensor(w, name, device, dtype);
  const WeightOperand operand = weight_operand(w);
  if (operand.data == nullptr) {
    invalid(format("{} strides [{}, {}] need unit stride in one dimension and rows that do not overlap", name,
                   w.strides[0], w.strides[1]));
  }
  check_blas_int(operand.ld, "weight leading stride");
}

void check_bias(const std::optional<TensorView>& b, const char* name, std::int64_t size, Device device, DType dtype) {
  if (!b) return;
  if (b->rank() != 1 || b->shape[0] != size) {
    invalid(format("{} shape {} must be [{}]", name, b->shape.to_string(), size));
  }
  check_tensor(*b, name, device, dtype);
}

// Hidden states or the output: [B, L, hidden], rows of `hidden` contiguous elements.
void check_rows(const TensorView& x, const char* name, std::int64_t hidden, Device device, DType dtype) {
  if (x.rank() != 3 || x.shape[2] != hidden) {
    invalid(format("{} shape {} must be [batch, length, {}]", name, x.shape.to_string(), hidden));
  }
  check_tensor(x, name, device, dtype);
  if (x.shape[0] < 0 || x.shape[1] < 0) invalid(format("{} shape {} has a negative size", name, x.shape.to_string()));
  if (x.shape[0] == 0 || x.shape[1] == 0) return;  // no rows: any strides (numpy's may be zeros)
  if (x.strides[2] != 1 && hidden > 1) {
    invalid(format("{} strides {} need a contiguous last dimension (stride 1)", name,
                   Shape(x.strides).to_string()));
  }
  if (x.shape[1] > 1 && x.strides[1] < hidden) {
    invalid(format("{} position stride ({}) must be at least hidden ({}): rows may not overlap", name, x.strides[1],
                   hidden));
  }
  check_blas_int(x.strides[1], "position stride");
}

void check_mask(const TensorView* mask, std::int64_t batch, std::int64_t length, Device device) {
  if (mask == nullptr) return;
#if !HEED_HAS_CUDA
  if (mask->device.type == DeviceType::CUDA) {
    unsupported(format("key_padding_mask is on {}; this build of heed has no CUDA backend", mask->device.to_string()));
  }
#endif
  if (mask->dtype != DType::Bool) {
    invalid(format("key_padding_mask has dtype {}; it must be bool (true = a real token)", to_string(mask->dtype)));
  }
  if (mask->rank() != 2 || mask->shape[0] != batch || mask->shape[1] != length) {
    invalid(format("key_padding_mask shape {} must be [{}, {}]", mask->shape.to_string(), batch, length));
  }
  if (mask->strides.size() != 2) invalid(format("key_padding_mask has {} strides", mask->strides.size()));
  if (!(mask->device == device)) {
    invalid(format("key_padding_mask is on {} but the layer's weights are on {}", mask->device.to_string(),
                   device.to_string()));
  }
  if (mask->data == nullptr && mask->shape.numel(kOp) > 0) invalid("key_padding_mask data is null");
}

std::size_t region_bytes(std::int64_t positions, std::int64_t width, DType dtype, const char* what) {
  const std::int64_t count = checked_mul(positions, width, kOp, what);
  return static_cast<std::size_t>(checked_mul(count, static_cast<std::int64_t>(size_of(dtype)), kOp, what));
}

// How the projections run: heed's pool and BLAS on the CPU, cuBLAS on CUDA. Sets workers,
// block_rows and the reason.
void plan_projections(MultiHeadAttentionPlan& p, std::int64_t batch, std::int64_t length, Device device,
                      DType dtype) {
  const std::int64_t positions = batch * length;
  if (device.type == DeviceType::CUDA) {
    p.workers = 1;
    p.block_rows = positions;
    p.reasons.push_back(format(
        "projections: 4 cuBLAS GEMMs (q, k, v, out) of B x L = {} positions each, {} in and out, float32 "
        "accumulation (no TF32), on the caller's stream; each output first holds its bias "
        "(heed_cuda_mha_bias_{}), which the GEMM adds to (beta = 1), so the bias is added before the one rounding",
        positions, to_string(dtype), short_name(dtype)));
    return;
  }
  p.block_rows = std::clamp<std::int64_t>(length, 1, plan::cpu::kLayerProjectionRows);
  const std::int64_t blocks = (length + p.block_rows - 1) / p.block_rows;
  const std::int64_t tasks = batch * blocks * 3;
  p.workers = static_cast<int>(std::clamp<std::int64_t>(tasks, 1, cpu_info().threads));
  p.reasons.push_back(format("projections: {} (q, k, v) and {} (out) tasks of {} positions (plan::cpu::"
                             "kLayerProjectionRows {}) on {} threads, BLAS single-threaded in each",
                             tasks, batch * blocks, p.block_rows, plan::cpu::kLayerProjectionRows, p.workers));
}

layer::Layout lay_out(const MultiHeadAttentionConfig& c, Device device, DType dtype, std::int64_t batch,
                      std::int64_t length, const TensorView* mask, bool key_padding) {
  if (batch < 0 || length < 0) invalid(format("batch ({}) and length ({}) must be >= 0", batch, length));
  layer::Layout out;
  MultiHeadAttentionPlan& p = out.plan;
  const std::int64_t q_width = c.q_heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  const std::int64_t positions = checked_mul(batch, length, kOp, "batch x length");
  check_blas_int(positions, "batch x length");
  check_blas_int(length, "length");  // also where B = 0: the heads' strides multiply it by q_heads x head_dim

  AttentionOptions options;
  if (key_padding) options.mask = layer::key_mask_view(mask, device, batch, length);
  const auto heads = [&](std::int64_t count) {
    return layer::heads_view(nullptr, dtype, device, batch, length, count, c.head_dim);
  };
  p.attention = plan_attention(heads(c.q_heads), heads(c.kv_heads), heads(c.kv_heads), options);

  p.reasons.push_back(format("layer: hidden {}, {} query heads, {} key/value heads, head_dim {}; B {}, L {}{}; {} on {}",
                             c.hidden, c.q_heads, c.kv_heads, c.head_dim, batch, length,
                             key_padding ? ", key padding mask [B, L] as [B, 1, 1, L]" : ", no mask",
                             to_string(dtype), device.to_string()));
  plan_projections(p, batch, length, device, dtype);

  plan::ScratchLayout layout;
  out.q = layout.add("q", region_bytes(positions, q_width, dtype, "q"));
  out.k = layout.add("k", region_bytes(positions, kv_width, dtype, "k"));
  out.v = layout.add("v", region_bytes(positions, kv_width, dtype, "v"));
  out.heads_out = layout.add("heads_out", region_bytes(positions, q_width, dtype, "heads_out"));
  out.attention = layout.add("attention", p.attention.scratch_bytes);
  p.workspace_bytes = positions == 0 ? 0 : layout.total_bytes();
  p.buffers = positions == 0 ? std::vector<ScratchBuffer>{} : layout.buffers();
  p.reasons.push_back(format("workspace: {} bytes{} = q {} + k {} + v {} + heads_out {} + attention scratch {} "
                             "(64-byte aligned regions)",
                             p.workspace_bytes, device.type == DeviceType::CUDA ? " of device memory" : "",
                             out.q.slice_bytes, out.k.slice_bytes, out.v.slice_bytes, out.heads_out.slice_bytes,
                             p.attention.scratch_bytes));
  return out;
}

// rows × cols of C (leading dimension ldc) = bias broadcast over rows, or zeros.
void fill_bias(float* c, std::int64_t rows, std::int64_t cols, std::int64_t ldc, const std::optional<TensorView>& bias) {
  for (std::int64_t row = 0; row < rows; ++row) {
    float* dst = c + row * ldc;
    if (!bias) {
      std::fill(dst, dst + cols, 0.0f);
      continue;
    }
    const auto* b = static_cast<const float*>(bias->data);
    const std::int64_t stride = bias->strides[0];
    for (std::int64_t j = 0; j < cols; ++j) dst[j] = b[j * stride];
  }
}

// C[rows, N] += A[rows, K] · Wᵀ, with W [N, K] as stored.
void multiply_by_weight(const float* a, std::int64_t lda, std::int64_t rows, const TensorView& w, float* c,
                        std::int64_t ldc) {
  const std::int64_t n = w.shape[0], k = w.shape[1];
  const WeightOperand operand = weight_operand(w);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, operand.row_major ? CblasTrans : CblasNoTrans, cpu::blas_int(rows),
              cpu::blas_int(n), cpu::blas_int(k), 1.0f, a, cpu::blas_int(lda), static_cast<const float*>(operand.data),
              cpu::blas_int(operand.ld), 1.0f, c, cpu::blas_int(ldc));
}

}  // namespace

std::string MultiHeadAttentionPlan::explain() const {
  std::string text;
  for (const std::string& reason : reasons) text += reason + "\n";
  return text + attention.explain();
}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config, const MultiHeadAttentionWeights& weights)
    : config_(config), weights_(weights) {
  const MultiHeadAttentionConfig& c = config_;
  if (c.hidden < 1 || c.q_heads < 1 || c.kv_heads < 1 || c.head_dim < 1) {
    invalid(format("hidden ({}), q_heads ({}), kv_heads ({}) and head_dim ({}) must be >= 1", c.hidden, c.q_heads,
                   c.kv_heads, c.head_dim));
  }
  if (c.q_heads % c.kv_heads != 0) {
    invalid(format("q_heads ({}) must be a multiple of kv_heads ({})", c.q_heads, c.kv_heads));
  }
  const std::int64_t q_width = checked_mul(c.q_heads, c.head_dim, kOp, "q_heads x head_dim");
  const std::int64_t kv_width = c.kv_heads * c.head_dim;
  check_blas_int(c.hidden, "hidden");
  check_blas_int(q_width, "q_heads x head_dim");
  scale_ = c.scale.value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))));
  if (!std::isfinite(scale_)) invalid(format("scale must be finite, got {}", scale_));
  const Device on = device();
  const DType type = dtype();
  check_weight(weights.q_weight, "q_weight", q_width, c.hidden, on, type);
  check_layer_kind(weights.q_weight);
  check_weight(weights.k_weight, "k_weight", kv_width, c.hidden, on, type);
  check_weight(weights.v_weight, "v_weight", kv_width, c.hidden, on, type);
  check_weight(weights.out_weight, "out_weight", c.hidden, q_width, on, type);
  check_bias(weights.q_bias, "q_bias", q_width, on, type);
  check_bias(weights.k_bias, "k_bias", kv_width, on, type);
  check_bias(weights.v_bias, "v_bias", kv_width, on, type);
  check_bias(weights.out_bias, "out_bias", c.hidden, on, type);
#if HEED_HAS_CUDA
  if (on.type == DeviceType::CUDA) layer::check_cuda_weights(weights);
#endif
}

MultiHeadAttentionPlan MultiHeadAttention::plan(std::int64_t batch, std::int64_t length, bool key_padding) const {
  return lay_out(config_, device(), dtype(), batch, length, nullptr, key_padding).plan;
}

void MultiHeadAttention::forward(const TensorView& hidden, const std::optional<TensorView>& key_padding_mask,
                                 TensorView& out, void* workspace, std::size_t workspace_bytes, Stream stream) const {
  const MultiHeadAttentionConfig& c = config_;
  check_rows(hidden, "hidden", c.hidden, device(), dtype());
  check_rows(out, "out", c.hidden, device(), dtype());
  const std::int64_t batch = hidden.shape[0], length = hidden.shape[1];
  if (out.shape[0] > 1 && out.shape[1] > 0 && out.strides[0] == 0) {
    invalid("out has batch stride 0: its rows would overlap");
  }
  if (!(out.shape == hidden.shape)) {
    invalid(format("out shape {} must equal hidden's {}", out.shape.to_string(), hidden.shape.to_string()));
  }
  const TensorView* mask = key_padding_mask ? &*key_padding_mask : nullptr;
  check_mask(mask, batch, length, device());
  const layer::Layout l = lay_out(c, device(), dtype(), batch, length, mask, mask != nullptr);
  if (workspace != nullptr) {
    if (workspace_bytes < l.plan.workspace_bytes) {
      invalid(format("workspace of {} bytes is smaller than the plan's workspace_bytes {}", workspace_bytes,
                     l.plan.workspace_bytes));
    }
    if (reinterpret_cast<std::uintptr_t>(workspace) % alignof(float) != 0) {
      invalid(format("workspace must be aligned to {} bytes", alignof(float)));
    }
  }
  if (batch == 0 || length == 0) return;
#if HEED_HAS_CUDA
  if (device().type == DeviceType::CUDA) {
    layer::check_cuda_call(hidden, mask, out, workspace);
    return layer::forward_cuda(c, weights_, scale_, l, hidden, mask, out, workspace, stream);
  }
#else
  (void)stream;
#endif

  const memory::Scratch scratch(l.plan.workspace_bytes, workspace, kOp);
  std::byte* base = scratch.data();
  float* q = l.q.at<float>(base);
  float* k = l.k.at<float>(base);
  float* v = l.v.at<float>(base);
  float* heads_out = l.heads_out.at<float>(base);
  const std::int64_t q_width = c.q_heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  const std::int64_t rows = l.plan.block_rows;
  const std::int64_t blocks = (length + rows - 1) / rows;
  const auto* x = static_cast<const float*>(hidden.data);
  const std::int64_t x_ld = layer::row_stride(hidden);
  cpu::use_single_threaded_blas();

  {
    const profile::Dispatch dispatch(kProjectKernel, blocks, 3, batch);
    cpu::parallel_for(l.plan.workers, batch * blocks * 3, [&](std::int64_t task, int) {
      const std::int64_t which = task % 3, block = (task / 3) % blocks, b = task / (3 * blocks);
      const std::int64_t first = block * rows, count = std::min(rows, length - first);
      const TensorView& w = which == 0 ? weights_.q_weight : which == 1 ? weights_.k_weight : weights_.v_weight;
      const std::optional<TensorView>& bias = which == 0 ? weights_.q_bias : which == 1 ? weights_.k_bias : weights_.v_bias;
      const std::int64_t width = which == 0 ? q_width : kv_width;
      float* dst = (which == 0 ? q : which == 1 ? k : v) + (b * length + first) * width;
      fill_bias(dst, count, width, width, bias);
      multiply_by_weight(x + b * hidden.strides[0] + first * x_ld, x_ld, count, w, dst, width);
    });
  }

  const AttentionOptions options = layer::attention_options(l, mask, device(), batch, length, base);
  const auto heads = [&](float* data, std::int64_t count) {
    return layer::heads_view(data, DType::Float32, device(), batch, length, count, c.head_dim);
  };
  TensorView heads_out_view = heads(heads_out, c.q_heads);
  attention(heads(q, c.q_heads), heads(k, c.kv_heads), heads(v, c.kv_heads), heads_out_view, scale_, options);

  auto* y = static_cast<float*>(out.data);
  const std::int64_t y_ld = layer::row_stride(out);
  const profile::Dispatch dispatch(kOutputKernel, blocks, 1, batch);
  cpu::parallel_for(l.plan.workers, batch * blocks, [&](std::int64_t task, int) {
    const std::int64_t block = task % blocks, b = task / blocks;
    const std::int64_t first = block * rows, count = std::min(rows, length - first);
    float* dst = y + b * out.strides[0] + first * y_ld;
    fill_bias(dst, count, c.hidden, y_ld, weights_.out_bias);
    multiply_by_weight(heads_out + (b * length + first) * q_width, q_width, count, weights_.out_weight, dst, y_ld);
    if (mask == nullptr) return;
    const auto* m = static_cast<const unsigned char*>(mask->data);
    for (std::int64_t i = first; i < first + count; ++i) {
      float* row = dst + (i - first) * y_ld;
      if (m[b * mask->strides[0] + i * mask->strides[1]] == 0) std::fill(row, row + c.hidden, 0.0f);
    }
  });
}

}  // namespace heed
