// The public entry points that depend on which devices this build and machine have: wired here,
// at the top, to each backend, so that core/ and memory/ include none of them.

#include "core/format.hpp"
#include "heed/device.hpp"
#include "heed/error.hpp"
#include "heed/memory.hpp"
#include "memory/cpu_allocator.hpp"
#if HEED_HAS_CUDA
#include "cuda/allocator.hpp"
#include "device/cuda_device.hpp"
#endif

namespace heed {
namespace {

void require_allocator(Device device, const char* op) {
  if (device.type != DeviceType::CPU) {
    throw Error(ErrorKind::Unsupported,
                format("[{}] no allocator for device {} in this build", op, device.to_string()));
  }
}

}  // namespace

Device Device::default_device() {
#if HEED_HAS_CUDA
  if (device::cuda_device_count() > 0) return Device::cuda(0);
#endif
  return Device::cpu();
}

MemoryStats memory_stats(Device device) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return cuda::pool_stats(device.index);
#endif
  require_allocator(device, "heed::memory_stats");
  return memory::cpu_memory_stats();
}

void reset_peak(Device device) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return cuda::reset_pool_peak(device.index);
#endif
  require_allocator(device, "heed::reset_peak");
  memory::cpu_reset_peak();
}

std::size_t release_cached(Device device) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return cuda::release_pool_cache(device.index);
#endif
  require_allocator(device, "heed::release_cached");
  return memory::cpu_release_cached();
}

std::size_t cache_limit(Device device) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return cuda::pool_cache_limit(device.index);
#endif
  require_allocator(device, "heed::cache_limit");
  return memory::cpu_cache_limit();
}

void set_cache_limit(Device device, std::size_t bytes) {
#if HEED_HAS_CUDA
  if (device.type == DeviceType::CUDA) return cuda::set_pool_cache_limit(device.index, bytes);
#endif
  require_allocator(device, "heed::set_cache_limit");
  memory::cpu_set_cache_limit(bytes);
}

}  // namespace heed
