#include "cuda/composed.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <limits>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/common.cuh"
#include "cuda/launch.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {
namespace {

constexpr const char* kOp = "heed::attention";
constexpr int kRowThreads = plan::cuda::kRowThreads;

// A [B, H, L, E] tensor of any strides and type, copied to contiguous rows of `to`.
struct PackArgs {
  const void* src = nullptr;
  DType from = DType::Float32;
  Strides4 strides;
  std::int64_t heads = 0, length = 0, width = 0, count = 0;
  void* dst = nullptr;
  DType to = DType::Float32;
};

__global__ void pack_kernel(const PackArgs a) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < a.count;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t e = n % a.width, l = (n / a.width) % a.length, h = (n / (a.width * a.length)) % a.heads,
                       b = n / (a.width * a.length * a.heads);
    const float value = load_element(a.src, a.from, b * a.strides.s[0] + h * a.strides.s[1] +
                                                        l * a.strides.s[2] + e * a.strides.s[3]);
    store_element(a.dst, a.to, n, value);
  }
}

// One step of the composition: rows [row0, row0 + rows) of query head hkv·group + gi for the
// (batch, key head) pairs [pair0, pair0 + heads), pair b·Hkv + hkv.
struct Step {
  std::int64_t gi, pair0, heads, row0, rows;
};

__device__ float block_reduce(float value, bool is_max, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  float total = is_max ? -INFINITY : 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) total = is_max ? fmaxf(total, shared[w]) : total + shared[w];
  return total;
}

// Grid [rows, heads]: one score row (q·k × the transform's dot_scale, by the GEMM) becomes
// probabilities by the score header's rules: softcap, masks, max, exp, sum with the sink.
__global__ void __launch_bounds__(kRowThreads) softmax_kernel(const Call g, const score::Transform transform,
                                                              const Step step, float* scores) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t x = blockIdx.x, head_step = blockIdx.y, pair = step.pair0 + head_step;
  const std::int64_t b = pair / g.kv_heads, h = (pair % g.kv_heads) * g.group + step.gi, i = step.row0 + x;
  float* row = scores + (head_step * step.rows + x) * g.kv_len;
  const KeyRange range = keys_for_row(g, i);
  const auto exp2 = [](float t) { return exp2f(t); };
  float local_max = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < g.kv_len; j += kRowThreads) {
    float s = -INFINITY;
    if (j >= range.begin && j < range.end) {
      s = transform.finish(row[j], score::tanh_by_exp2(exp2));
      s = score::masked(s, mask_term(g.mask, b, h, i, j));
    }
    row[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float row_max = block_reduce(local_max, true, shared);
  const float offset = score::exp_offset(row_max);
  float local_sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < g.kv_len; j += kRowThreads) {
    const float p = expf(row[j] - offset);
    row[j] = p;
    local_sum += p;
  }
  const float sum = block_reduce(local_sum, false, shared);
  const bool sinks = g.sinks.data != nullptr;
  const float weight = score::finalize_weight(row_max, sum, sinks, sinks ? sink_logit(g.sinks, h) : 0.0f,
                                              [](float t) { return expf(t); });
  for (std::int64_t j = threadIdx.x; j < g.kv_len; j += kRowThreads) row[j] = score::finalize_value(row[j], weight);
}

// Grid [rows, heads]: output rows (float32) into the caller's out, any strides and type.
__global__ void __launch_bounds__(kRowThreads) store_kernel(const Call g, const Step step, const float* rows,
                                                            void* out, DType type, const Strides4 strides) {
  const std::int64_t x = blockIdx.x, head_step = blockIdx.y, pair = step.pair0 + head_step;
  const std::int64_t b = pair / g.kv_heads, h = (pair % g.kv_heads) * g.group + step.gi, i = step.row0 + x;
  const float* row = rows + (head_step * step.rows + x) * g.value_dim;
  const std::int64_t base = b * strides.s[0] + h * strides.s[1] + i * strides.s[2];
  for (std::int64_t d = threadIdx.x; d < g.value_dim; d += kRowThreads) {
    store_element(out, type, base + d * strides.s[3], row[d]);
  }
}

cudaDataType blas_type(DType type) {
  switch (type) {
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

std::size_t element_size(DType type) {
  return type == DType::Float32 ? 4 : type == DType::Bool ? 1 : 2;
}

int blas_int(std::int64_t value, const char* what) {
  if (value > std::numeric_limits<int>::max()) {
    throw Error(ErrorKind::Unsupported, format("[{}] {} ({}) exceeds cuBLAS's int range", kOp, what, value));
  }
  return static_cast<int>(std::max<std::int64_t>(value, 1));
}

// The leading dimension of rows of `width` elements `stride` apart (any value when one row).
std::int64_t leading(std::int64_t stride, std::int64_t width, std::int64_t count) {
  return count <= 1 ? std::max<std::int64_t>(width, 1) : stride;
}

Strides4 contiguous(std::int64_t heads, std::int64_t length, std::int64_t width) {
  return Strides4{{heads * length * width, length * width, width, 1}};
}

void pack(const void* src, DType from, const Strides4& strides, std::int64_t batch, std::int64_t heads,
          std::int64_t length, std::int64_t width, void* dst, DType to, const char* name, cudaStream_t stream) {
  PackArgs a{src, from, strides, heads, length, width, batch * heads * length * width, dst, to};
  if (a.count == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((a.count + 255) / 256, 65536));
  LaunchRecord record(name, blocks, 1, 1, stream);
  pack_kernel<<<blocks, 256, 0, stream>>>(a);
  check_launch(kOp, name);
}

}  // namespace

void run_composed(const ComposedArgs& a, const plan::CudaRoute& route, std::byte* scratch, int device,
                  cudaStream_t stream) {
  const Call& g = a;
  const score::Transform transform = score::transform(a, 1.0f);
  const plan::CudaComposedShape& c = route.composed;
  const std::string suffix = route.plan.kernel_name.substr(route.plan.kernel_name.rfind('_'));
  const std::string pack_name = "heed_cuda_pack" + suffix;
  const std::string store_name = "heed_cuda_store" + suffix;

  const void* q = a.q;
  const void* k = a.k;
  const void* v = a.v;
  Strides4 qs = a.q_strides, ks = a.k_strides, vs = a.v_strides;
  if (c.pack_qk) {
    void* qp = route.q_packed.at<void>(scratch);
    void* kp = route.k_packed.at<void>(scratch);
    pack(q, a.dtype, qs, g.batch, g.q_heads, g.q_len, g.head_dim, qp, a.dtype, pack_name.c_str(), stream);
    pack(k, a.dtype, ks, g.batch, g.kv_heads, g.kv_len, g.head_dim, kp, a.dtype, pack_name.c_str(), stream);
    q = qp;
    k = kp;
    qs = contiguous(g.q_heads, g.q_len, g.head_dim);
    ks = contiguous(g.kv_heads, g.kv_len, g.head_dim);
  }
  if (c.pack_v) {
    void* vp = route.v_packed.at<void>(scratch);
    pack(v, a.dtype, vs, g.batch, g.kv_heads, g.kv_len, g.value_dim, vp, DType::Float32, pack_name.c_str(),
         stream);
    v = vp;
    vs = contiguous(g.kv_heads, g.kv_len, g.value_dim);
  }
  float* scores = route.scores.at<float>(scratch);
  float* out_rows = route.out_rows.at<float>(scratch);
  const cublasHandle_t blas = blas_handle(device, stream, kOp);
  const cudaDataType in_type = blas_type(a.dtype);
  const std::size_t in_size = element_size(a.dtype);
  const std::size_t v_size = c.pack_v ? 4 : element_size(a.dtype);
  const float one = 1.0f, zero = 0.0f;
  const int lk = blas_int(g.kv_len, "Lk"), d = blas_int(g.head_dim, "D"), dv = blas_int(g.value_dim, "Dv");
  const int ld_k = blas_int(leading(ks.s[2], g.head_dim, g.kv_len), "k row stride");
  const int ld_v = blas_int(leading(vs.s[2], g.value_dim, g.kv_len), "v row stride");

  LaunchRecord record(route.plan.kernel_name.c_str(), c.row_blocks, g.q_heads, g.batch, stream);
  for (std::int64_t row0 = 0; row0 < g.q_len; row0 += c.rows) {
    const std::int64_t rows = std::min(c.rows, g.q_len - row0);
    const int ld_q = blas_int(leading(qs.s[2], g.head_dim, rows), "q row stride");
    for (std::int64_t gi = 0; gi < g.group; ++gi) {
      // Pairs b·Hkv + hkv in chunks of c.heads, within one batch unless batches fold (then one
      // head stride apart in q, k and v: the planner's batch_folds, or packed contiguous).
      const std::int64_t pairs = g.batch * g.kv_heads;
      for (std::int64_t pair0 = 0; pair0 < pairs;) {
        const std::int64_t b = pair0 / g.kv_heads, kv0 = pair0 % g.kv_heads;
        const std::int64_t heads = c.fold_batch ? std::min(c.heads, pairs - pair0)
                                                : std::min(c.heads, g.kv_heads - kv0);
        const Step step{gi, pair0, heads, row0, rows};
        pair0 += heads;
        const int batch = blas_int(step.heads, "heads per step");
        const auto* k_ptr = static_cast<const char*>(k) + (b * ks.s[0] + kv0 * ks.s[1]) * in_size;
        const auto* q_ptr = static_cast<const char*>(q) + (b * qs.s[0] + (kv0 * g.group + gi) * qs.s[1] +
                                                           row0 * qs.s[2]) * in_size;
        const auto* v_ptr = static_cast<const char*>(v) + (b * vs.s[0] + kv0 * vs.s[1]) * v_size;
        if (g.kv_len > 0) {
          if (g.head_dim > 0) {
            // Column-major: Sᵀ (Lk × rows) = K (D × Lk)ᵀ · Qᵀ (D × rows), alpha = dot_scale.
            check_blas(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, lk, static_cast<int>(rows), d,
                                                  &transform.dot_scale, k_ptr, in_type, ld_k, ks.s[1], q_ptr, in_type, ld_q,
                                                  g.group * qs.s[1], &zero, scores, CUDA_R_32F, lk, rows * g.kv_len,
                                                  batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       kOp, "cublasGemmStridedBatchedEx (Q K^T)");
          } else {
            check(cudaMemsetAsync(scores, 0, step.heads * rows * g.kv_len * sizeof(float), stream), kOp,
                  "cudaMemsetAsync");
          }
          const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(step.heads));
          {
            LaunchRecord softmax(route.softmax_kernel_name.c_str(), grid.x, grid.y, 1, stream);
            softmax_kernel<<<grid, kRowThreads, 0, stream>>>(g, transform, step, scores);
            check_launch(kOp, route.softmax_kernel_name.c_str());
          }
          // Oᵀ (Dv × rows) = Vᵀ (Dv × Lk) · Pᵀ (Lk × rows), all float32.
          check_blas(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, dv, static_cast<int>(rows), lk,
                                                &one, v_ptr, c.pack_v ? CUDA_R_32F : in_type, ld_v, vs.s[1],
                                                scores, CUDA_R_32F, lk, rows * g.kv_len, &zero, out_rows,
                                                CUDA_R_32F, dv, rows * g.value_dim, batch, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     kOp, "cublasGemmStridedBatchedEx (P V)");
        } else {
          check(cudaMemsetAsync(out_rows, 0, step.heads * rows * g.value_dim * sizeof(float), stream), kOp,
                "cudaMemsetAsync");
        }
        const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(step.heads));
        LaunchRecord store(store_name.c_str(), grid.x, grid.y, 1, stream);
        store_kernel<<<grid, kRowThreads, 0, stream>>>(g, step, out_rows, a.out, a.dtype, a.out_strides);
        check_launch(kOp, store_name.c_str());
      }
    }
  }
}

}  // namespace heed::cuda
