#include "cuda/allocator.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "device/cuda_device.hpp"
#include "heed/error.hpp"
#include "memory/cpu_allocator.hpp"

namespace heed::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct DevicePool {
  std::once_flag once;
  cudaMemPool_t pool = nullptr;
  std::atomic<std::size_t> active{0};
  std::atomic<std::size_t> peak{0};
};

std::array<DevicePool, kMaxDevices>& pools() {
  static std::array<DevicePool, kMaxDevices> instance;
  return instance;
}

DevicePool& pool_of(int device, const char* op) {
  (void)heed::device::cuda_device_info(Device::cuda(device), op);  // Unsupported without the device
  DevicePool& p = pools()[static_cast<std::size_t>(device)];
  std::call_once(p.once, [&] {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&p.pool, &props), op, "cudaMemPoolCreate");
    // Keep freed blocks cached up to the limit (none by default): beyond it the pool returns
    // memory to the device at the next synchronisation, and all of it when trimmed.
    std::uint64_t keep = memory::environment_cache_bytes().value_or(std::numeric_limits<std::uint64_t>::max());
    check(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep), op,
                "cudaMemPoolSetAttribute");
  });
  return p;
}

void raise_peak(DevicePool& p, std::size_t active) {
  std::size_t peak = p.peak.load(std::memory_order_relaxed);
  while (active > peak && !p.peak.compare_exchange_weak(peak, active, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::size_t rounded_size(std::size_t bytes) {
  return (bytes + kAllocationGranularity - 1) / kAllocationGranularity * kAllocationGranularity;
}

// The pool's reserved bytes beyond those in use (stream-ordered frees not yet reached count as
// in use).
std::size_t pool_free_bytes(const DevicePool& p, const char* op) {
  std::uint64_t reserved = 0, used = 0;
  check(cudaMemPoolGetAttribute(p.pool, cudaMemPoolAttrReservedMemCurrent, &reserved), op, "cudaMemPoolGetAttribute");
  check(cudaMemPoolGetAttribute(p.pool, cudaMemPoolAttrUsedMemCurrent, &used), op, "cudaMemPoolGetAttribute");
  return static_cast<std::size_t>(reserved > used ? reserved - used : 0);
}

MemoryStats pool_stats(int device) {
  DevicePool& p = pool_of(device, "heed::memory_stats");
  return {p.active.load(), p.peak.load(), pool_free_bytes(p, "heed::memory_stats")};
}

std::size_t release_pool_cache(int device) {
  constexpr const char* kOp = "heed::release_cached";
  DevicePool& p = pool_of(device, kOp);
  const std::size_t before = pool_free_bytes(p, kOp);
  // Trimming frees only blocks no stream still orders a use of: safe beside running calls.
  check(cudaMemPoolTrimTo(p.pool, 0), kOp, "cudaMemPoolTrimTo");
  const std::size_t after = pool_free_bytes(p, kOp);
  return before > after ? before - after : 0;
}

std::size_t pool_cache_limit(int device) {
  constexpr const char* kOp = "heed::cache_limit";
  DevicePool& p = pool_of(device, kOp);
  std::uint64_t keep = 0;
  check(cudaMemPoolGetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep), kOp, "cudaMemPoolGetAttribute");
  return static_cast<std::size_t>(std::min<std::uint64_t>(keep, std::numeric_limits<std::size_t>::max()));
}

void set_pool_cache_limit(int device, std::size_t bytes) {
  constexpr const char* kOp = "heed::set_cache_limit";
  DevicePool& p = pool_of(device, kOp);
  std::uint64_t keep = bytes;
  check(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep), kOp, "cudaMemPoolSetAttribute");
  // The threshold bounds what the pool reserves, blocks in use included: free blocks beyond it
  // go back now (blocks in use stay).
  check(cudaMemPoolTrimTo(p.pool, bytes), kOp, "cudaMemPoolTrimTo");
}

void reset_pool_peak(int device) {
  DevicePool& p = pool_of(device, "heed::reset_peak");
  p.peak.store(p.active.load());
}

Scratch::Scratch(int device, std::size_t bytes, void* workspace, void* stream, const char* op)
    : device_(device), bytes_(rounded_size(bytes)), stream_(stream) {
  if (bytes == 0) return;
  if (workspace != nullptr) {
    data_ = static_cast<std::byte*>(workspace);
    return;
  }
  DevicePool& p = pool_of(device, op);
  void* pointer = nullptr;
  cudaError_t status = cudaMallocFromPoolAsync(&pointer, bytes_, p.pool, static_cast<cudaStream_t>(stream));
  if (status == cudaErrorMemoryAllocation) {
    // Give cached blocks back to the device and try once more.
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    (void)cudaMemPoolTrimTo(p.pool, 0);
    status = cudaMallocFromPoolAsync(&pointer, bytes_, p.pool, static_cast<cudaStream_t>(stream));
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(status == cudaErrorMemoryAllocation ? ErrorKind::OutOfMemory : ErrorKind::Internal,
                format("[{}] could not allocate {} bytes of scratch on cuda:{} ({})", op, bytes_, device,
                       cudaGetErrorName(status)));
  }
  data_ = static_cast<std::byte*>(pointer);
  owned_ = true;
  raise_peak(p, p.active.fetch_add(bytes_) + bytes_);
}

Scratch::~Scratch() {
  if (!owned_) return;
  (void)cudaFreeAsync(data_, static_cast<cudaStream_t>(stream_));
  pools()[static_cast<std::size_t>(device_)].active.fetch_sub(bytes_);
}

}  // namespace heed::cuda
