#include "device_memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "heed/error.hpp"

#if HEED_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace heed::bench {
namespace {

#if !HEED_HAS_CUDA
[[noreturn]] void no_cuda(Device device) {
  throw Error(ErrorKind::Unsupported, "[heed::bench] device " + device.to_string() + ": this build of heed has no CUDA backend");
}
#endif

#if HEED_HAS_CUDA
void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  const ErrorKind kind = status == cudaErrorMemoryAllocation ? ErrorKind::OutOfMemory
                         : status == cudaErrorNoDevice || status == cudaErrorInvalidDevice || status == cudaErrorInsufficientDriver
                             ? ErrorKind::Unsupported
                             : ErrorKind::Internal;
  throw Error(kind, std::string("[heed::bench] ") + what + ": " + cudaGetErrorString(status));
}
#endif

}  // namespace

DeviceMemory::DeviceMemory(Device device, std::size_t bytes) : device_(device) {
  const std::size_t size = std::max<std::size_t>(bytes, 64);
  if (device.type == DeviceType::CPU) {
    data_ = std::malloc(size);
    if (data_ == nullptr) throw Error(ErrorKind::OutOfMemory, "[heed::bench] could not allocate host memory");
    return;
  }
#if HEED_HAS_CUDA
  check(cudaSetDevice(device.index), "cudaSetDevice");
  check(cudaMalloc(&data_, size), "cudaMalloc");
#else
  no_cuda(device);
#endif
}

DeviceMemory::~DeviceMemory() {
  if (device_.type == DeviceType::CPU) {
    std::free(data_);
    return;
  }
#if HEED_HAS_CUDA
  (void)cudaFree(data_);
#endif
}

void DeviceMemory::upload(const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (device_.type == DeviceType::CPU) {
    std::memcpy(data_, host, bytes);
    return;
  }
#if HEED_HAS_CUDA
  check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
#endif
}

void DeviceMemory::download(void* host, std::size_t bytes) const {
  if (bytes == 0) return;
  if (device_.type == DeviceType::CPU) {
    std::memcpy(host, data_, bytes);
    return;
  }
#if HEED_HAS_CUDA
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
#endif
}

void synchronize(Device device) {
  if (device.type == DeviceType::CPU) return;
#if HEED_HAS_CUDA
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  no_cuda(device);
#endif
}

double median_ms(Device device, int reps, const std::function<void()>& call) {
  call();
  synchronize(device);
  std::vector<double> times;
#if HEED_HAS_CUDA
  cudaEvent_t start = nullptr, stop = nullptr;
  if (device.type == DeviceType::CUDA) {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
#endif
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    if (device.type == DeviceType::CPU) {
      const auto begin = std::chrono::steady_clock::now();
      call();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      continue;
    }
#if HEED_HAS_CUDA
    check(cudaEventRecord(start), "cudaEventRecord");
    call();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float milliseconds = 0;
    check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
    times.push_back(milliseconds);
#endif
  }
#if HEED_HAS_CUDA
  if (start) (void)cudaEventDestroy(start);
  if (stop) (void)cudaEventDestroy(stop);
#endif
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double measure_device_copy_gbytes(Device device) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  DeviceMemory from(device, kBytes), to(device, kBytes);
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    check(cudaMemset(from.data(), 1, kBytes), "cudaMemset");
    const double ms = median_ms(device, 10, [&] {
      check(cudaMemcpyAsync(to.data(), from.data(), kBytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    });
    return 2.0 * static_cast<double>(kBytes) / (ms * 1e-3) / 1e9;
  }
#endif
  const double ms = median_ms(device, 3, [&] { std::memcpy(to.data(), from.data(), kBytes); });
  return 2.0 * static_cast<double>(kBytes) / (ms * 1e-3) / 1e9;
}

const char* device_name(Device device) {
  if (device.type == DeviceType::CPU) return "cpu";
#if HEED_HAS_CUDA
  static cudaDeviceProp prop{};
  static const bool read = cudaGetDeviceProperties(&prop, device.index) == cudaSuccess;
  return read ? prop.name : "cuda";
#else
  return "cuda";
#endif
}

}  // namespace heed::bench
