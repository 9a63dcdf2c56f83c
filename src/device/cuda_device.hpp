#pragma once
// CUDA device discovery: which devices exist and their facts, read once per device. The only
// place that asks the CUDA runtime for them; the top layer (src/attention.cpp, src/devices.cpp)
// hands the facts down to the planner. No CUDA types here.

#include "heed/device.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::device {

// Devices visible to this process; 0 when there is no driver or no device.
int cuda_device_count();
// Throws Unsupported "[op] device cuda:N: ..." when the device is absent.
const plan::CudaDeviceInfo& cuda_device_info(Device device, const char* op);

}  // namespace heed::device
