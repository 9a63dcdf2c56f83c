#include "cuda/layer_kernels.hpp"

#include <algorithm>
#include <string>

#include "cuda/check.hpp"
#include "cuda/common.cuh"
#include "cuda/launch.hpp"
#include "heed/error.hpp"

namespace heed::cuda {
namespace {

constexpr const char* kOp = "heed::MultiHeadAttention";
constexpr int kRowThreads = 128;
// Blocks of one launch: rows beyond it are taken by a grid-stride loop.
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;

__device__ __forceinline__ std::int64_t row_offset(const LayerRows& rows, std::int64_t row) {
  const std::int64_t b = row / rows.rows_per_batch, i = row % rows.rows_per_batch;
  return b * rows.batch_stride + i * rows.row_stride;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) fill_bias_kernel(const LayerRows rows, const T* bias,
                                                                std::int64_t bias_stride) {
  T* data = static_cast<T*>(rows.data);
  const std::int64_t count = rows.batches * rows.rows_per_batch;
  for (std::int64_t row = blockIdx.x; row < count; row += gridDim.x) {
    T* dst = data + row_offset(rows, row);
    for (std::int64_t j = threadIdx.x; j < rows.width; j += kRowThreads) {
      dst[j] = bias != nullptr ? bias[j * bias_stride] : from_float<T>(0.0f);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) zero_masked_kernel(const LayerRows rows, const unsigned char* mask,
                                                                  std::int64_t mask_batch_stride,
                                                                  std::int64_t mask_position_stride) {
  T* data = static_cast<T*>(rows.data);
  const std::int64_t count = rows.batches * rows.rows_per_batch;
  for (std::int64_t row = blockIdx.x; row < count; row += gridDim.x) {
    const std::int64_t b = row / rows.rows_per_batch, i = row % rows.rows_per_batch;
    if (mask[b * mask_batch_stride + i * mask_position_stride] != 0) continue;
    T* dst = data + row_offset(rows, row);
    for (std::int64_t j = threadIdx.x; j < rows.width; j += kRowThreads) dst[j] = from_float<T>(0.0f);
  }
}

unsigned blocks_for(const LayerRows& rows) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(rows.batches * rows.rows_per_batch, 1, kMaxBlocks));
}

template <typename Launch>
void dispatch_type(DType type, Launch&& launch) {
  switch (type) {
    case DType::Float32: return launch(float{});
    case DType::Float16: return launch(__half{});
    case DType::BFloat16: return launch(__nv_bfloat16{});
    case DType::Bool:
    case DType::Int32: break;
  }
  throw Error(ErrorKind::Internal, std::string("[") + kOp + "] the layer's rows have no floating type");
}

}  // namespace

void fill_rows_with_bias(const LayerRows& rows, const void* bias, std::int64_t bias_stride, const char* name,
                         cudaStream_t stream) {
  if (rows.batches * rows.rows_per_batch == 0 || rows.width == 0) return;
  const unsigned blocks = blocks_for(rows);
  LaunchRecord record(name, blocks, 1, 1, stream);
  dispatch_type(rows.type, [&](auto zero) {
    using T = decltype(zero);
    fill_bias_kernel<T><<<blocks, kRowThreads, 0, stream>>>(rows, static_cast<const T*>(bias), bias_stride);
  });
  check_launch(kOp, name);
}

void zero_masked_rows(const LayerRows& rows, const void* mask, const std::int64_t mask_strides[2], const char* name,
                      cudaStream_t stream) {
  if (rows.batches * rows.rows_per_batch == 0 || rows.width == 0) return;
  const unsigned blocks = blocks_for(rows);
  LaunchRecord record(name, blocks, 1, 1, stream);
  dispatch_type(rows.type, [&](auto zero) {
    using T = decltype(zero);
    zero_masked_kernel<T><<<blocks, kRowThreads, 0, stream>>>(rows, static_cast<const unsigned char*>(mask),
                                                              mask_strides[0], mask_strides[1]);
  });
  check_launch(kOp, name);
}

}  // namespace heed::cuda
