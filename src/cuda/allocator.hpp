#pragma once
// heed's CUDA allocator: one caching pool per device (a CUDA memory pool that keeps freed
// blocks for reuse, stream-ordered), counted in active and peak bytes for memory_stats.
// No CUDA types here: streams are cudaStream_t passed as void*.

#include <cstddef>

#include "heed/device.hpp"
#include "heed/memory.hpp"

namespace heed::cuda {

// Allocations are counted in multiples of this (the pool's own rounding is finer or equal).
inline constexpr std::size_t kAllocationGranularity = 512;
std::size_t rounded_size(std::size_t bytes);

// memory_stats, reset_peak, release_cached and the cache limit of a CUDA device (src/devices.cpp
// wires them). cached is what the pool reserved beyond the blocks in use (its free blocks).
MemoryStats pool_stats(int device);
void reset_pool_peak(int device);
std::size_t release_pool_cache(int device);
std::size_t pool_cache_limit(int device);
void set_pool_cache_limit(int device, std::size_t bytes);

// Scratch for one call on `stream`: the caller's workspace, or one counted allocation from
// the device's pool (freed stream-ordered when the call's work is enqueued). Throws
// OutOfMemory "[op] could not allocate N bytes of scratch on cuda:I" before any work.
class Scratch {
 public:
  Scratch(int device, std::size_t bytes, void* workspace, void* stream, const char* op);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const { return data_; }
  // Where the destructor frees an owned allocation (stream-ordered after the work queued there).
  void release_on(void* stream) { stream_ = stream; }

 private:
  int device_ = 0;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  void* stream_ = nullptr;
  bool owned_ = false;
};

}  // namespace heed::cuda
