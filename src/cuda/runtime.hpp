#pragma once
// The CUDA runtime as the host code sees it, without CUDA types: devices, their immutable
// properties (read once per device) and the entry points of the CUDA backend.

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/tensor.hpp"
#include "call/call.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

// Devices visible to this process; 0 when there is no driver or no device.
int device_count();
// Throws Unsupported "[op] device cuda:N: ..." when the device is absent.
const plan::CudaDeviceInfo& device_info(Device device, const char* op);

// Runs a validated call on the caller's stream (a cudaStream_t, null = the default stream).
void run_attention(const call::Call& call, const AttentionOptions& options, const plan::CudaRoute& route,
                   void* stream);

// Throws InvalidArgument "[op] <name> data is not memory of cuda:N" when `data` is not memory
// of this CUDA device (e.g. host memory).
void check_device_pointer(const void* data, Device device, const char* name, const char* op = "heed::attention");
// The same for every non-empty tensor of a validated call (the sizes are products validation
// checked).
void check_device_pointers(const call::Call& call, Device device);

}  // namespace heed::cuda
