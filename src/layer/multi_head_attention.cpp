// The encoder attention layer: three stages on heed's thread pool.
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
#include "memory/cpu_allocator.hpp"
#include "plan/cpu_tables.hpp"
#include "plan/scratch_layout.hpp"

namespace heed {
namespace {

constexpr const char* kOp = "heed::MultiHeadAttention";
constexpr const char* kProjectKernel = "heed_cpu_mha_qkv_f32";
constexpr const char* kOutputKernel = "heed_cpu_mha_out_f32";

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, std::string("[") + kOp + "] " + message);
}

[[noreturn]] void unsupported(const std::string& message) {
  throw Error(ErrorKind::Unsupported, std::string("[") + kOp + "] " + message);
}

// float32 on the CPU: what every tensor of the layer must be.
void check_float32_cpu(const TensorView& view, const char* name) {
  if (view.device.type != DeviceType::CPU) {
    unsupported(format("{} is on {}; the layer runs on the CPU in this build", name, view.device.to_string()));
  }
  if (view.dtype == DType::Float16 || view.dtype == DType::BFloat16) {
    unsupported(format("{} has dtype {}; the layer runs in float32 only", name, to_string(view.dtype)));
  }
  if (view.dtype != DType::Float32) invalid(format("{} has dtype {}; it must be float32", name, to_string(view.dtype)));
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

// A weight [rows, cols] as a BLAS operand: row-major (ld = row stride) or, transposed in
// memory, column-major (ld = column stride).
struct WeightOperand {
  const float* data = nullptr;
  std::int64_t ld = 0;
  bool row_major = true;
};

WeightOperand weight_operand(const TensorView& w) {
  const std::int64_t rows = w.shape[0], cols = w.shape[1];
  const std::int64_t row_stride = w.strides[0], col_stride = w.strides[1];
  const auto* data = static_cast<const float*>(w.data);
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols)) {
    return {data, rows == 1 ? cols : row_stride, true};
  }
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows)) {
    return {data, cols == 1 ? rows : col_stride, false};
  }
  return {nullptr, 0, true};
}

void check_weight(const TensorView& w, const char* name, std::int64_t rows, std::int64_t cols) {
  if (w.rank() != 2 || w.shape[0] != rows || w.shape[1] != cols) {
    invalid(format("{} shape {} must be [{}, {}]", name, w.shape.to_string(), rows, cols));
  }
  check_float32_cpu(w, name);
  const WeightOperand operand = weight_operand(w);
  if (operand.data == nullptr) {
    invalid(format("{} strides [{}, {}] need unit stride in one dimension and rows that do not overlap", name,
                   w.strides[0], w.strides[1]));
  }
  check_blas_int(operand.ld, "weight leading stride");
}

void check_bias(const std::optional<TensorView>& b, const char* name, std::int64_t size) {
  if (!b) return;
  if (b->rank() != 1 || b->shape[0] != size) {
    invalid(format("{} shape {} must be [{}]", name, b->shape.to_string(), size));
  }
  check_float32_cpu(*b, name);
}

// Hidden states or the output: [B, L, hidden], rows of `hidden` contiguous floats.
void check_rows(const TensorView& x, const char* name, std::int64_t hidden) {
  if (x.rank() != 3 || x.shape[2] != hidden) {
    invalid(format("{} shape {} must be [batch, length, {}]", name, x.shape.to_string(), hidden));
  }
  check_float32_cpu(x, name);
  if (x.shape[0] < 0 || x.shape[1] < 0) invalid(format("{} shape {} has a negative size", name, x.shape.to_string()));
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

// The heads of projected rows [B, L, heads, D] as a [B, heads, L, D] view.
TensorView heads_view(float* data, std::int64_t batch, std::int64_t length, std::int64_t heads, std::int64_t dim) {
  return TensorView(data, DType::Float32, Shape{batch, heads, length, dim},
                    {length * heads * dim, dim, heads * dim, 1});
}

// Key padding [B, L] as the attention's boolean mask [B, 1, 1, L].
TensorView key_mask_view(const TensorView* mask, std::int64_t batch, std::int64_t length) {
  if (mask == nullptr) return TensorView(nullptr, DType::Bool, Shape{batch, 1, 1, length}, {length, 0, 0, 1});
  return TensorView(mask->data, DType::Bool, Shape{batch, 1, 1, length}, {mask->strides[0], 0, 0, mask->strides[1]});
}

std::size_t float_bytes(std::int64_t a, std::int64_t b, std::int64_t c, const char* what) {
  const std::int64_t count = checked_mul(checked_mul(a, b, kOp, what), c, kOp, what);
  return static_cast<std::size_t>(checked_mul(count, static_cast<std::int64_t>(sizeof(float)), kOp, what));
}

// The workspace regions of one call, laid out as the plan states them.
struct Layout {
  MultiHeadAttentionPlan plan;
  plan::Region q, k, v, heads_out, attention;
};

Layout lay_out(const MultiHeadAttentionConfig& c, std::int64_t batch, std::int64_t length,
               const TensorView* mask, bool key_padding) {
  if (batch < 0 || length < 0) invalid(format("batch ({}) and length ({}) must be >= 0", batch, length));
  Layout out;
  MultiHeadAttentionPlan& p = out.plan;
  const std::int64_t q_width = c.q_heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  const std::int64_t positions = checked_mul(batch, length, kOp, "batch x length");
  check_blas_int(positions, "batch x length");

  AttentionOptions options;
  if (key_padding) options.mask = key_mask_view(mask, batch, length);
  p.attention = plan_attention(heads_view(nullptr, batch, length, c.q_heads, c.head_dim),
                               heads_view(nullptr, batch, length, c.kv_heads, c.head_dim),
                               heads_view(nullptr, batch, length, c.kv_heads, c.head_dim), options);

  p.block_rows = std::clamp<std::int64_t>(length, 1, plan::cpu::kLayerProjectionRows);
  const std::int64_t blocks = (length + p.block_rows - 1) / p.block_rows;
  const std::int64_t tasks = batch * blocks * 3;
  p.workers = static_cast<int>(std::clamp<std::int64_t>(tasks, 1, cpu_info().threads));

  plan::ScratchLayout layout;
  out.q = layout.add("q", float_bytes(positions, q_width, 1, "q"));
  out.k = layout.add("k", float_bytes(positions, kv_width, 1, "k"));
  out.v = layout.add("v", float_bytes(positions, kv_width, 1, "v"));
  out.heads_out = layout.add("heads_out", float_bytes(positions, q_width, 1, "heads_out"));
  out.attention = layout.add("attention", p.attention.scratch_bytes);
  p.workspace_bytes = positions == 0 ? 0 : layout.total_bytes();
  p.buffers = positions == 0 ? std::vector<ScratchBuffer>{} : layout.buffers();

  p.reasons.push_back(format("layer: hidden {}, {} query heads, {} key/value heads, head_dim {}; B {}, L {}{}", c.hidden,
                             c.q_heads, c.kv_heads, c.head_dim, batch, length,
                             key_padding ? ", key padding mask [B, L] as [B, 1, 1, L]" : ", no mask"));
  p.reasons.push_back(format("projections: {} (q, k, v) and {} (out) tasks of {} positions (plan::cpu::"
                             "kLayerProjectionRows {}) on {} threads, BLAS single-threaded in each",
                             tasks, batch * blocks, p.block_rows, plan::cpu::kLayerProjectionRows, p.workers));
  p.reasons.push_back(format("workspace: {} bytes = q {} + k {} + v {} + heads_out {} + attention scratch {} "
                             "(64-byte aligned regions)",
                             p.workspace_bytes, out.q.slice_bytes, out.k.slice_bytes, out.v.slice_bytes,
                             out.heads_out.slice_bytes, p.attention.scratch_bytes));
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
              cpu::blas_int(n), cpu::blas_int(k), 1.0f, a, cpu::blas_int(lda), operand.data, cpu::blas_int(operand.ld),
              1.0f, c, cpu::blas_int(ldc));
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
  check_weight(weights.q_weight, "q_weight", q_width, c.hidden);
  check_weight(weights.k_weight, "k_weight", kv_width, c.hidden);
  check_weight(weights.v_weight, "v_weight", kv_width, c.hidden);
  check_weight(weights.out_weight, "out_weight", c.hidden, q_width);
  check_bias(weights.q_bias, "q_bias", q_width);
  check_bias(weights.k_bias, "k_bias", kv_width);
  check_bias(weights.v_bias, "v_bias", kv_width);
  check_bias(weights.out_bias, "out_bias", c.hidden);
}

MultiHeadAttentionPlan MultiHeadAttention::plan(std::int64_t batch, std::int64_t length, bool key_padding) const {
  return lay_out(config_, batch, length, nullptr, key_padding).plan;
}

void MultiHeadAttention::forward(const TensorView& hidden, const std::optional<TensorView>& key_padding_mask,
                                 TensorView& out, void* workspace, std::size_t workspace_bytes) const {
  const MultiHeadAttentionConfig& c = config_;
  check_rows(hidden, "hidden", c.hidden);
  check_rows(out, "out", c.hidden);
  if (out.shape[0] > 1 && out.strides[0] == 0) invalid("out has batch stride 0: its rows would overlap");
  const std::int64_t batch = hidden.shape[0], length = hidden.shape[1];
  if (!(out.shape == hidden.shape)) {
    invalid(format("out shape {} must equal hidden's {}", out.shape.to_string(), hidden.shape.to_string()));
  }
  const TensorView* mask = key_padding_mask ? &*key_padding_mask : nullptr;
  if (mask != nullptr) {
    if (mask->dtype != DType::Bool) {
      invalid(format("key_padding_mask has dtype {}; it must be bool (true = a real token)", to_string(mask->dtype)));
    }
    if (mask->rank() != 2 || mask->shape[0] != batch || mask->shape[1] != length) {
      invalid(format("key_padding_mask shape {} must be [{}, {}]", mask->shape.to_string(), batch, length));
    }
    if (mask->strides.size() != 2) invalid(format("key_padding_mask has {} strides", mask->strides.size()));
    if (mask->device.type != DeviceType::CPU) {
      unsupported(format("key_padding_mask is on {}; the layer runs on the CPU in this build", mask->device.to_string()));
    }
    if (mask->data == nullptr && mask->shape.numel(kOp) > 0) invalid("key_padding_mask data is null");
  }
  const Layout l = lay_out(c, batch, length, mask, mask != nullptr);
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
  const std::int64_t x_ld = length > 1 ? hidden.strides[1] : c.hidden;
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

  AttentionOptions options;
  if (mask != nullptr) options.mask = key_mask_view(mask, batch, length);
  options.workspace = l.attention.at<std::byte>(base);
  options.workspace_bytes = l.plan.attention.scratch_bytes;
  TensorView heads = heads_view(heads_out, batch, length, c.q_heads, c.head_dim);
  attention(heads_view(q, batch, length, c.q_heads, c.head_dim), heads_view(k, batch, length, c.kv_heads, c.head_dim),
            heads_view(v, batch, length, c.kv_heads, c.head_dim), heads, scale_, options);

  auto* y = static_cast<float*>(out.data);
  const std::int64_t y_ld = length > 1 ? out.strides[1] : c.hidden;
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
