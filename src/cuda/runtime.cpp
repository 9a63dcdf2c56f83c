#include "cuda/runtime.hpp"

#include <array>
#include <utility>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "heed/error.hpp"

namespace heed::cuda {
namespace {

constexpr int kMaxDevices = 64;

ErrorKind kind_of(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation: return ErrorKind::OutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return ErrorKind::Unsupported;
    default: return ErrorKind::Internal;
  }
}

}  // namespace

void check(cudaError_t status, const char* op, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(kind_of(status), format("[{}] {}: {} ({})", op, what, cudaGetErrorString(status),
                                      cudaGetErrorName(status)));
}

void check_blas(cublasStatus_t status, const char* op, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const ErrorKind kind = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::OutOfMemory : ErrorKind::Internal;
  throw Error(kind, format("[{}] {}: cuBLAS status {} ({})", op, what, static_cast<int>(status),
                           cublasGetStatusString(status)));
}

void check_launch(const char* op, const char* kernel) { check(cudaGetLastError(), op, kernel); }

void check_device_pointer(const void* data, Device device, const char* name, const char* op) {
  if (data == nullptr) return;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
  if (status != cudaSuccess) (void)cudaGetLastError();
  const bool on_device = status == cudaSuccess &&
                         (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) &&
                         attributes.device == device.index;
  if (!on_device) {
    throw Error(ErrorKind::InvalidArgument,
                format("[{}] {} data is not memory of {}", op, name, device.to_string()));
  }
}

void check_device_pointers(const call::Call& c, Device device) {
  const std::int64_t q_rows = c.batch * c.q_heads * c.q_len, kv_rows = c.batch * c.kv_heads * c.kv_len;
  const std::pair<const void*, std::int64_t> tensors[] = {
      {c.q, q_rows * c.head_dim}, {c.k, kv_rows * c.head_dim}, {c.v, kv_rows * c.value_dim},
      {c.out, q_rows * c.value_dim}, {c.mask.data, q_rows}, {c.sinks.data, c.q_heads}};
  const char* names[] = {"q", "k", "v", "out", "mask", "sinks"};
  for (int i = 0; i < 6; ++i) {
    if (tensors[i].second > 0) check_device_pointer(tensors[i].first, device, names[i]);
  }
}

DeviceGuard::DeviceGuard(int index, const char* op) {
  check(cudaGetDevice(&previous_), op, "cudaGetDevice");
  if (previous_ != index) {
    check(cudaSetDevice(index), op, "cudaSetDevice");
  } else {
    previous_ = -1;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

cublasHandle_t blas_handle(int device, cudaStream_t stream, const char* op) {
  // One handle per thread and device: a handle bound to one stream must not be shared
  // between threads. Handles live until the process ends.
  thread_local std::array<cublasHandle_t, kMaxDevices> handles{};
  cublasHandle_t& handle = handles[static_cast<std::size_t>(device)];
  if (handle == nullptr) {
    check_blas(cublasCreate(&handle), op, "cublasCreate");
    check_blas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), op, "cublasSetMathMode");
  }
  check_blas(cublasSetStream(handle, stream), op, "cublasSetStream");
  return handle;
}

}  // namespace heed::cuda
