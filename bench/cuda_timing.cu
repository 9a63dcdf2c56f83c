// The GPU benchmarks' ceilings and inputs (cuda_timing.cuh).

#include <cublas_v2.h>

#include <cstdlib>

#include "cuda_timing.cuh"

namespace heed::gpu_bench {

void ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", kProgram, what, cudaGetErrorString(status));
    std::exit(1);
  }
}

int reps_within(double call_ms, double budget_ms, int reps) {
  return static_cast<int>(std::clamp(budget_ms / std::max(call_ms, 1e-3), 3.0, static_cast<double>(reps)));
}

int graph_calls(double call_ms) { return static_cast<int>(std::clamp(50.0 / std::max(call_ms, 1e-3), 2.0, 20.0)); }

namespace {

__global__ void fill_kernel(__nv_bfloat16* data, std::int64_t count, std::uint32_t seed) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < count;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(n) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    data[n] = __float2bfloat16((static_cast<float>(x & 0xffff) / 65535.0f - 0.5f) * 3.0f);
  }
}

// Sums 16-byte words (four to a thread per step, in flight together) and stores one word per
// block: the loads cannot be dropped, and the stores are a few KiB against the GiB read.
__global__ void read_kernel(const uint4* __restrict__ data, std::int64_t count, unsigned* __restrict__ sums) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  unsigned sum = 0;
  for (; n + 3 * stride < count; n += 4 * stride) {
    const uint4 a = data[n], b = data[n + stride], c = data[n + 2 * stride], d = data[n + 3 * stride];
    sum += (a.x ^ a.y ^ a.z ^ a.w) + (b.x ^ b.y ^ b.z ^ b.w) + (c.x ^ c.y ^ c.z ^ c.w) + (d.x ^ d.y ^ d.z ^ d.w);
  }
  for (; n < count; n += stride) {
    const uint4 a = data[n];
    sum += a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ unsigned warp_sums[32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warp_sums[w];
    sums[blockIdx.x] = total;
  }
}

}  // namespace

__nv_bfloat16* random_bf16(std::int64_t count, std::uint32_t seed) {
  void* pointer = nullptr;
  ok(cudaMalloc(&pointer, static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * 2), "cudaMalloc");
  auto* data = static_cast<__nv_bfloat16*>(pointer);
  fill_kernel<<<1024, 256>>>(data, count, seed);
  ok(cudaGetLastError(), "fill");
  return data;
}

double copy_tbytes() {
  const std::size_t bytes = std::size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  ok(cudaMalloc(&a, bytes), "cudaMalloc");
  ok(cudaMalloc(&b, bytes), "cudaMalloc");
  ok(cudaMemset(a, 1, bytes), "memset");
  const double ms = median_ms([&] { ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy"); }, 3, 20);
  ok(cudaFree(a), "free");
  ok(cudaFree(b), "free");
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e12;
}

// Eight blocks of 256 threads per SM.
double read_tbytes() {
  const std::size_t bytes = std::size_t{1} << 30;
  int sms = 0;
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  const int blocks = std::max(sms, 1) * 8;
  void *data = nullptr, *sums = nullptr;
  ok(cudaMalloc(&data, bytes), "cudaMalloc");
  ok(cudaMalloc(&sums, static_cast<std::size_t>(blocks) * sizeof(unsigned)), "cudaMalloc");
  ok(cudaMemset(data, 1, bytes), "memset");
  const auto read_all = [&] {
    read_kernel<<<blocks, 256>>>(static_cast<const uint4*>(data), static_cast<std::int64_t>(bytes / sizeof(uint4)),
                                 static_cast<unsigned*>(sums));
    ok(cudaGetLastError(), "read");
  };
  const double ms = median_ms(read_all, 3, 20);
  ok(cudaFree(data), "free");
  ok(cudaFree(sums), "free");
  return static_cast<double>(bytes) / (ms * 1e-3) / 1e12;
}

double gemm_tflops() {
  constexpr int n = 8192;
  const std::int64_t count = std::int64_t{n} * n;
  __nv_bfloat16* a = random_bf16(count, 11);
  __nv_bfloat16* b = random_bf16(count, 12);
  __nv_bfloat16* c = random_bf16(count, 13);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cublasCreate failed\n", kProgram);
    std::exit(1);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const auto gemm = [&] {
    if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "%s: cublasGemmEx failed\n", kProgram);
      std::exit(1);
    }
  };
  const double ms = median_ms(gemm, 3, 20);
  cublasDestroy(handle);
  ok(cudaFree(a), "free");
  ok(cudaFree(b), "free");
  ok(cudaFree(c), "free");
  return 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e12;
}

}  // namespace heed::gpu_bench
