#include "device/cuda_device.hpp"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "heed/error.hpp"

namespace heed::device {
namespace {

constexpr int kMaxDevices = 64;

}  // namespace

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

const plan::CudaDeviceInfo& cuda_device_info(Device device, const char* op) {
  const int count = cuda_device_count();
  if (device.type != DeviceType::CUDA || device.index < 0 || device.index >= count || device.index >= kMaxDevices) {
    throw Error(ErrorKind::Unsupported,
                count == 0 ? format("[{}] device {}: no CUDA device is present", op, device.to_string())
                           : format("[{}] device {}: only {} CUDA device(s) present", op, device.to_string(), count));
  }
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<plan::CudaDeviceInfo, kMaxDevices> infos;
  const auto i = static_cast<std::size_t>(device.index);
  std::call_once(once[i], [&] {
    plan::CudaDeviceInfo info;
    info.index = device.index;
    cudaDeviceProp prop{};
    cuda::check(cudaGetDeviceProperties(&prop, device.index), op, "cudaGetDeviceProperties");
    info.sm_count = prop.multiProcessorCount;
    info.major = prop.major;
    info.minor = prop.minor;
    info.shared_per_block = prop.sharedMemPerBlockOptin;
    info.shared_per_sm = prop.sharedMemPerMultiprocessor;
    info.reserved_shared_per_block = prop.reservedSharedMemPerBlock;
    info.name = prop.name;
#if defined(HEED_CUDA_SM90A)
    info.wgmma_built = true;
#endif
    infos[i] = info;
  });
  return infos[i];
}

}  // namespace heed::device
