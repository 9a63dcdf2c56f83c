#pragma once
// Where tensors live and kernels run.

#include <string>

namespace heed {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // cuda:0 when heed was built with CUDA and a device is present, else the CPU.
  static Device default_device();

  std::string to_string() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

// An execution stream; on the CPU it is ignored. On CUDA it holds a cudaStream_t.
struct Stream {
  void* handle = nullptr;
};

}  // namespace heed
