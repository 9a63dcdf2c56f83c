#pragma once
// Bytes heed itself holds on a device (scratch, pools), counted by its allocator.

#include <cstddef>

#include "heed/device.hpp"

namespace heed {

struct MemoryStats {
  std::size_t active = 0;  // bytes held now
  std::size_t peak = 0;    // most bytes held since the last reset_peak
};

MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak(Device device = Device::cpu());

// Every allocation is rounded up to this many bytes (and aligned to it).
inline constexpr std::size_t kAllocationAlignment = 64;

}  // namespace heed
