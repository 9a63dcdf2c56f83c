#pragma once
// heed's CPU allocator: aligned blocks, counted in active and peak bytes.

#include <cstddef>
#include <optional>

#include "heed/memory.hpp"

namespace heed::memory {

// memory_stats, reset_peak, release_cached and the cache limit of the CPU (src/devices.cpp
// wires them).
MemoryStats cpu_memory_stats();
void cpu_reset_peak();
std::size_t cpu_release_cached();
std::size_t cpu_cache_limit();
void cpu_set_cache_limit(std::size_t bytes);

// HEED_CACHE_BYTES as a byte count (a whole number), read once; nullopt where unset or not one.
std::optional<std::size_t> environment_cache_bytes();

// Rounds up to kAllocationAlignment; the counted size of an allocation of `bytes`.
std::size_t rounded_size(std::size_t bytes);

// Throws OutOfMemory "[op] could not allocate N bytes for <what>".
void* cpu_allocate(std::size_t bytes, const char* op, const char* what);
void cpu_free(void* pointer, std::size_t bytes);

// Blocks up to this size are kept by the thread that freed them, for its next call (see
// Scratch): fresh pages cost a fault each (about 1.5 µs per 4 KiB page on the development VM:
// 10 ms for the 26 MiB of MiniLM's layer at 128 tokens, a quarter of the call).
inline constexpr std::size_t kScratchCacheBytes = std::size_t{256} << 20;
// The cached blocks of all threads together stay within this by default (or an eighth of the
// machine's memory, if less; cpu_cache_limit): a server calling heed from many threads keeps at
// most this much idle.
inline constexpr std::size_t kScratchCacheTotalBytes = std::size_t{1} << 30;
// Bytes held in the threads' cached blocks now (memory_stats' cached).
std::size_t cached_scratch_bytes();

// Scratch for one call: the caller's workspace, or one counted allocation of `bytes`, taken
// from this thread's cached block when that is large enough. On release, a block of at most
// kScratchCacheBytes replaces the thread's cached one (freed at thread exit, by
// cpu_release_cached, or where the threads' blocks would pass the cache limit); active and
// peak count the bytes a call uses, cached the blocks held between calls.
class Scratch {
 public:
  Scratch(std::size_t bytes, void* workspace, const char* op);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t block_ = 0;  // the owned block's size (at least rounded_size(bytes_))
  bool owned_ = false;
};

}  // namespace heed::memory
