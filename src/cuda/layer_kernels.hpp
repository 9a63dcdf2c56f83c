#pragma once
// The encoder layer's two small kernels on CUDA (around its cuBLAS projections): rows filled
// with a bias before a GEMM adds x·Wᵀ to them, and padded positions' rows set to zero after.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/params.hpp"

namespace heed::cuda {

// Rows (b, i) of [batches, rows_per_batch, width] at b·batch_stride + i·row_stride (elements).
struct LayerRows {
  void* data = nullptr;
  DType type = DType::Float32;
  std::int64_t batches = 0, rows_per_batch = 0, width = 0;
  std::int64_t batch_stride = 0, row_stride = 0;
};

// Every row = bias (`width` elements of the rows' type, `bias_stride` apart), or zeros
// without a bias. Recorded as `name [blocks, 1, 1]`, a block per row (up to 2^20 blocks).
void fill_rows_with_bias(const LayerRows& rows, const void* bias, std::int64_t bias_stride, const char* name,
                         cudaStream_t stream);

// Rows whose mask element (Bool, mask[b·mask_strides[0] + i·mask_strides[1]]) is false = zeros.
void zero_masked_rows(const LayerRows& rows, const void* mask, const std::int64_t mask_strides[2], const char* name,
                      cudaStream_t stream);

}  // namespace heed::cuda
