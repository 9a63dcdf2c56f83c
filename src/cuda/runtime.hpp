#pragma once
// The CUDA backend's entry points as the host code sees them, without CUDA types (the devices
// and their facts are device/cuda_device.hpp's).

#include <cstddef>
#include <memory>

#include "cuda/allocator.hpp"
#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/tensor.hpp"
#include "call/call.hpp"
#include "plan/cuda_plan.hpp"

namespace heed::cuda {

// Runs a validated call on the caller's stream (a cudaStream_t, null = the default stream) with
// scratch of its own (the caller's workspace where given), host-resident metadata copied in first.
void run_attention(const call::Call& call, const AttentionOptions& options, const plan::CudaRoute& route,
                   void* stream);

// The route's launches alone, on scratch of at least its scratch_bytes that the caller holds and
// metadata on the device: no allocation, no copy, nothing but the launches (a Runner's run).
void launch_attention(const call::Call& call, const plan::CudaRoute& route, std::byte* scratch, void* stream);

// Copies the call's host-resident metadata into the route's "metadata" buffer of `scratch`, on
// `stream` (from pageable memory: the host arrays may change once this returns), and returns the
// call reading the copy.
call::Call upload_metadata(const call::Call& call, const plan::CudaRoute& route, std::byte* scratch, void* stream);

// Scratch held across calls (a Runner's): `bytes` from the device's pool, or `workspace`, ordered
// on `stream`. Freed on the stream last given to Scratch::release_on.
std::unique_ptr<Scratch> hold_scratch(int device, std::size_t bytes, void* workspace, void* stream, const char* op);

// Waits for the work queued on `stream` of `device`.
void synchronize(int device, void* stream, const char* op);

// Throws InvalidArgument "[op] <name> data is not memory of cuda:N" when `data` is not memory
// of this CUDA device (e.g. host memory).
void check_device_pointer(const void* data, Device device, const char* name, const char* op = "heed::attention");
// The same for every non-empty tensor of a validated call (the sizes are products validation
// checked).
void check_device_pointers(const call::Call& call, Device device);

}  // namespace heed::cuda
