#include "heed/device.hpp"

#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#endif

namespace heed {

Device Device::default_device() {
#if HEED_HAS_CUDA
  if (cuda::device_count() > 0) return Device::cuda(0);
#endif
  return Device::cpu();
}

std::string Device::to_string() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace heed
