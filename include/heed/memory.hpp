#pragma once
// Bytes heed itself holds on a device (scratch, pools), counted by its allocator.

#include <cstddef>

#include "heed/device.hpp"

namespace heed {

struct MemoryStats {
  std::size_t active = 0;  // bytes in use by calls now
  std::size_t peak = 0;    // most bytes in use since the last reset_peak
  std::size_t cached = 0;  // bytes held for reuse by later calls (not in active)
};

MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak(Device device = Device::cpu());

// Returns what the device's caches hold to the system (the CPU's per-thread scratch blocks,
// the CUDA pool's free blocks); safe while other threads run calls, whose blocks in use stay
// theirs. Returns the bytes released.
std::size_t release_cached(Device device = Device::cpu());

// The most bytes the device's caches may hold; blocks freed beyond it go back to the system.
// On the CPU it bounds the threads' cached blocks; on CUDA the pool's reserve, blocks in use
// included (free blocks beyond it go back at the next synchronisation). Defaults:
// HEED_CACHE_BYTES where set (bytes, read once), else on the CPU 1 GiB or an eighth of physical
// memory if less, on CUDA no limit (the pool keeps what it reserved, as PyTorch's caching
// allocator does). Setting a lower limit releases what is above it now.
std::size_t cache_limit(Device device = Device::cpu());
void set_cache_limit(Device device, std::size_t bytes);

// Every allocation is rounded up to this many bytes (and aligned to it).
inline constexpr std::size_t kAllocationAlignment = 64;

}  // namespace heed
