#include "heed/device.hpp"

namespace heed {

Device Device::default_device() { return Device::cpu(); }

std::string Device::to_string() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace heed
