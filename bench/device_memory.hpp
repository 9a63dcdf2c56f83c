#pragma once
// Device memory for the tool and the benchmark, without CUDA types: a buffer on a device
// (host memory for the CPU), copies in and out, and device-side timing.

#include <cstddef>
#include <functional>

#include "heed/device.hpp"

namespace heed::bench {

// `bytes` on `device`; on the CPU plain host memory. Throws Unsupported where this build or
// machine has no such device, OutOfMemory where the device is full.
class DeviceMemory {
 public:
  DeviceMemory(Device device, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  Device device_;
  void* data_ = nullptr;
};

// Waits for the device's work (nothing on the CPU).
void synchronize(Device device);
// Median milliseconds of `reps` calls after one warm-up: CUDA events on the default stream
// for a CUDA device, the wall clock on the CPU.
double median_ms(Device device, int reps, const std::function<void()>& call);
// Device-to-device copy of 1 GiB, bytes read + written per second / 1e9 (CUDA only).
double measure_device_copy_gbytes(Device device);
// "NVIDIA H200" (CUDA) or "cpu".
const char* device_name(Device device);

}  // namespace heed::bench
