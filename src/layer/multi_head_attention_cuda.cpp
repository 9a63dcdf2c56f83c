// The encoder layer on CUDA, on the caller's stream, in the layer's dtype (float32, float16 or
// bfloat16; cuBLAS accumulates in float32, without TF32):
//   1. q, k, v: each output region first holds its bias (heed_cuda_mha_bias_<dtype>), then one
//      cuBLAS GEMM over all B·L positions adds x·Wᵀ to it (beta = 1), so the bias enters the
//      float32 accumulator before the one rounding to the dtype; rows [B, L, H, D].
//   2. heed::attention on [B, H, L, D] views of those rows (the CUDA planner's route), the
//      caller's mask as [B, 1, 1, L], its scratch inside the layer's workspace.
//   3. out: the bias, the GEMM over the heads' output, then padded positions' rows set to
//      zero (heed_cuda_mha_pad_<dtype>).
// The workspace (one allocation from heed's caching pool, or the caller's) is taken before
// the first launch, so running out of memory writes nothing.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/format.hpp"
#include "cuda/allocator.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/layer_kernels.hpp"
#include "cuda/runtime.hpp"
#include "device/cuda_device.hpp"
#include "heed/attention.hpp"
#include "layer/layer_internal.hpp"

namespace heed::layer {
namespace {

DType element_type(DType dtype) {
  switch (dtype) {
    case DType::Float16: return DType::Float16;
    case DType::BFloat16: return DType::BFloat16;
    default: return DType::Float32;
  }
}

cudaDataType blas_type(DType dtype) {
  switch (dtype) {
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// Rows of B sequences of L positions: element (b, i, e) at data + b·batch_stride + i·ld + e.
struct Rows {
  const void* data = nullptr;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};

// y = x·Wᵀ + y (beta = 1) for x [B, L, K] and y [B, L, N] rows, W [N, K] as stored: one GEMM
// over all B·L positions when both x's and y's sequences follow each other evenly, else a
// strided-batched GEMM of L positions per sequence (a sequence at a time for negative strides).
void project(cublasHandle_t blas, DType dtype, const Rows& x, const TensorView& w, const Rows& y, std::int64_t batch,
             std::int64_t length, const char* what) {
  const std::int64_t n = w.shape[0], k = w.shape[1];
  const WeightOperand weight = weight_operand(w);
  const bool even = batch == 1 || (x.batch_stride == length * x.ld && y.batch_stride == length * y.ld);
  const std::int64_t rows = even ? batch * length : length;
  const cudaDataType type = blas_type(dtype);
  const std::size_t element = size_of(dtype);
  const float one = 1.0f;
  // Column-major: yᵀ (N × rows, ld y.ld) = op(W) (N × K) · xᵀ (K × rows, ld x.ld).
  const auto gemm = [&](const void* x_data, void* y_data, std::int64_t count) {
    cuda::check_blas(cublasGemmStridedBatchedEx(blas, weight.row_major ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                          static_cast<int>(n), static_cast<int>(rows), static_cast<int>(k), &one,
                                          weight.data, type, static_cast<int>(weight.ld), 0, x_data, type,
                                          static_cast<int>(x.ld), x.batch_stride, &one, y_data, type,
                                          static_cast<int>(y.ld), y.batch_stride, static_cast<int>(count),
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     kOp, what);
  };
  auto* y_data = const_cast<void*>(y.data);
  if (even || (x.batch_stride >= 0 && y.batch_stride >= 0)) return gemm(x.data, y_data, even ? 1 : batch);
  for (std::int64_t b = 0; b < batch; ++b) {
    gemm(static_cast<const char*>(x.data) + b * x.batch_stride * static_cast<std::int64_t>(element),
         static_cast<char*>(y_data) + b * y.batch_stride * static_cast<std::int64_t>(element), 1);
  }
}

}  // namespace

void check_cuda_weights(const MultiHeadAttentionWeights& weights) {
  const Device device = weights.q_weight.device;
  (void)heed::device::cuda_device_info(device, kOp);  // Unsupported without the device
  for (const auto& [view, name] : {std::pair{&weights.q_weight, "q_weight"}, {&weights.k_weight, "k_weight"},
                                   {&weights.v_weight, "v_weight"}, {&weights.out_weight, "out_weight"}}) {
    cuda::check_device_pointer(view->data, device, name, kOp);
  }
  for (const auto& [bias, name] : {std::pair{&weights.q_bias, "q_bias"}, {&weights.k_bias, "k_bias"},
                                   {&weights.v_bias, "v_bias"}, {&weights.out_bias, "out_bias"}}) {
    if (*bias) cuda::check_device_pointer((*bias)->data, device, name, kOp);
  }
}

void check_cuda_call(const TensorView& hidden, const TensorView* mask, const TensorView& out, const void* workspace) {
  const Device device = hidden.device;
  cuda::check_device_pointer(hidden.data, device, "hidden", kOp);
  cuda::check_device_pointer(out.data, device, "out", kOp);
  if (mask != nullptr) cuda::check_device_pointer(mask->data, device, "key_padding_mask", kOp);
  if (workspace != nullptr) cuda::check_device_pointer(workspace, device, "workspace", kOp);
}

void forward_cuda(const MultiHeadAttentionConfig& c, const MultiHeadAttentionWeights& weights, float scale,
                  const Layout& layout, const TensorView& hidden, const TensorView* mask, TensorView& out,
                  void* workspace, Stream stream) {
  const Device device = weights.q_weight.device;
  const DType dtype = weights.q_weight.dtype;
  const DType type = element_type(dtype);
  const std::int64_t batch = hidden.shape[0], length = hidden.shape[1];
  const std::int64_t q_width = c.q_heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  const std::string suffix = short_name(dtype);
  const std::string qkv_name = "heed_cuda_mha_qkv_" + suffix, out_name = "heed_cuda_mha_out_" + suffix;
  const std::string bias_name = "heed_cuda_mha_bias_" + suffix, pad_name = "heed_cuda_mha_pad_" + suffix;

  cuda::DeviceGuard guard(device.index, kOp);
  const auto cuda_stream = static_cast<cudaStream_t>(stream.handle);
  const cuda::Scratch scratch(device.index, layout.plan.workspace_bytes, workspace, stream.handle, kOp);
  std::byte* base = scratch.data();
  void* q = layout.q.at<void>(base);
  void* k = layout.k.at<void>(base);
  void* v = layout.v.at<void>(base);
  void* heads_out = layout.heads_out.at<void>(base);
  const cublasHandle_t blas = cuda::blas_handle(device.index, cuda_stream, kOp);
  const Rows x{hidden.data, row_stride(hidden), hidden.strides[0]};

  {
    cuda::LaunchRecord stage(qkv_name.c_str(), 1, 3, batch, cuda_stream);
    const struct {
      void* rows;
      const TensorView& weight;
      const std::optional<TensorView>& bias;
      std::int64_t width;
      const char* what;
    } projections[3] = {
        {q, weights.q_weight, weights.q_bias, q_width, "cublasGemmStridedBatchedEx (q projection)"},
        {k, weights.k_weight, weights.k_bias, kv_width, "cublasGemmStridedBatchedEx (k projection)"},
        {v, weights.v_weight, weights.v_bias, kv_width, "cublasGemmStridedBatchedEx (v projection)"},
    };
    for (const auto& p : projections) {
      const cuda::LayerRows rows{p.rows, type, 1, batch * length, p.width, 0, p.width};
      cuda::fill_rows_with_bias(rows, p.bias ? p.bias->data : nullptr, p.bias ? p.bias->strides[0] : 0,
                                bias_name.c_str(), cuda_stream);
      project(blas, dtype, x, p.weight, Rows{p.rows, p.width, length * p.width}, batch, length, p.what);
    }
  }

  const auto heads = [&](void* data, std::int64_t count) {
    return heads_view(data, dtype, device, batch, length, count, c.head_dim);
  };
  TensorView heads_out_view = heads(heads_out, c.q_heads);
  attention(heads(q, c.q_heads), heads(k, c.kv_heads), heads(v, c.kv_heads), heads_out_view, scale,
            attention_options(layout, mask, device, batch, length, base), stream);

  cuda::LaunchRecord stage(out_name.c_str(), 1, 1, batch, cuda_stream);
  const std::int64_t y_ld = row_stride(out);
  const cuda::LayerRows rows{out.data, type, batch, length, c.hidden, out.strides[0], y_ld};
  const std::optional<TensorView>& bias = weights.out_bias;
  cuda::fill_rows_with_bias(rows, bias ? bias->data : nullptr, bias ? bias->strides[0] : 0, bias_name.c_str(),
                            cuda_stream);
  project(blas, dtype, Rows{heads_out, q_width, length * q_width}, weights.out_weight,
          Rows{out.data, y_ld, out.strides[0]}, batch, length, "cublasGemmStridedBatchedEx (out projection)");
  if (mask != nullptr) {
    const std::int64_t mask_strides[2] = {mask->strides[0], mask->strides[1]};
    cuda::zero_masked_rows(rows, mask->data, mask_strides, pad_name.c_str(), cuda_stream);
  }
}

}  // namespace heed::layer
