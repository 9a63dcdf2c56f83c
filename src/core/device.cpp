#include "heed/device.hpp"

namespace heed {

std::string Device::to_string() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace heed
