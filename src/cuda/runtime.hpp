#pragma once
// The CUDA backend's entry points as the host code sees them, without CUDA types (the devices
// and their facts are device/cuda_device.hpp's).

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/tensor.hpp"
#include "call/call.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

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
