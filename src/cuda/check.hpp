#pragma once
// Checked CUDA and cuBLAS calls: every failure becomes a heed::Error of the matching kind
// (out of memory is OutOfMemory, a missing device Unsupported, the rest Internal).

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace heed::cuda {

void check(cudaError_t status, const char* op, const char* what);
void check_blas(cublasStatus_t status, const char* op, const char* what);
// After a launch: the launch's own error, if any.
void check_launch(const char* op, const char* kernel);

// Makes `index` the current device for its lifetime, restoring the caller's.
class DeviceGuard {
 public:
  DeviceGuard(int index, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// This thread's cuBLAS handle for the current device (created on first use; FP32 compute
// without TF32), bound to `stream`.
cublasHandle_t blas_handle(int device, cudaStream_t stream, const char* op);

}  // namespace heed::cuda
