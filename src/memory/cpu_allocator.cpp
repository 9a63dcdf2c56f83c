#include "memory/cpu_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <utility>

#include <unistd.h>

#include "core/format.hpp"
#include "heed/error.hpp"
#include "heed/memory.hpp"

namespace heed {
namespace {

std::atomic<std::size_t> g_active{0};
// Physical memory, read once. A request above it is refused before malloc: under Linux's
// overcommit a terabyte malloc may succeed, and the first touch then stalls or kills the
// process instead of raising OutOfMemory.
std::size_t physical_bytes() {
  static const std::size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return static_cast<std::size_t>(-1);
    return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  }();
  return bytes;
}

std::atomic<std::size_t> g_peak{0};

void raise_peak(std::size_t active) {
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (active > peak && !g_peak.compare_exchange_weak(peak, active, std::memory_order_relaxed)) {
  }
}

}  // namespace

namespace memory {

MemoryStats cpu_memory_stats() { return {g_active.load(), g_peak.load()}; }

void cpu_reset_peak() { g_peak.store(g_active.load()); }

std::size_t rounded_size(std::size_t bytes) {
  return (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
}

void* cpu_allocate(std::size_t bytes, const char* op, const char* what) {
  if (bytes == 0) return nullptr;
  const std::size_t size = rounded_size(bytes);
  if (size < bytes) {
    throw Error(ErrorKind::OutOfMemory, format("[{}] could not allocate {} bytes for {}", op, bytes, what));
  }
  if (size > physical_bytes()) {
    throw Error(ErrorKind::OutOfMemory, format("[{}] could not allocate {} bytes for {}: more than the machine's {} "
                                               "bytes of memory",
                                               op, size, what, physical_bytes()));
  }
  void* pointer = std::aligned_alloc(kAllocationAlignment, size);
  if (pointer == nullptr) {
    throw Error(ErrorKind::OutOfMemory, format("[{}] could not allocate {} bytes for {}", op, size, what));
  }
  raise_peak(g_active.fetch_add(size) + size);
  return pointer;
}

void cpu_free(void* pointer, std::size_t bytes) {
  if (pointer == nullptr) return;
  std::free(pointer);
  g_active.fetch_sub(rounded_size(bytes));
}

namespace {

// The last owned scratch block this thread released, kept for its next call.
std::atomic<std::size_t> g_cached{0};

struct CachedBlock {
  void* data = nullptr;
  std::size_t size = 0;
  CachedBlock() = default;
  CachedBlock(const CachedBlock&) = delete;
  CachedBlock& operator=(const CachedBlock&) = delete;
  ~CachedBlock() { release(); }
  void release() {
    if (data == nullptr) return;
    std::free(data);
    g_cached.fetch_sub(size);
    data = nullptr;
    size = 0;
  }
};
thread_local CachedBlock t_cached;

std::size_t cache_limit() {
  static const std::size_t limit = std::min(kScratchCacheTotalBytes, physical_bytes() / 8);
  return limit;
}

}  // namespace

std::size_t cached_scratch_bytes() { return g_cached.load(); }

Scratch::Scratch(std::size_t bytes, void* workspace, const char* op) : bytes_(bytes) {
  if (bytes == 0) return;
  if (workspace != nullptr) {
    data_ = static_cast<std::byte*>(workspace);
    return;
  }
  const std::size_t size = rounded_size(bytes);
  if (t_cached.data != nullptr && size >= bytes && t_cached.size >= size) {
    data_ = static_cast<std::byte*>(std::exchange(t_cached.data, nullptr));
    block_ = std::exchange(t_cached.size, 0);
    g_cached.fetch_sub(block_);
    raise_peak(g_active.fetch_add(size) + size);
  } else {
    data_ = static_cast<std::byte*>(cpu_allocate(bytes, op, "scratch"));
    block_ = size;
  }
  owned_ = true;
}

Scratch::~Scratch() {
  if (!owned_) return;
  g_active.fetch_sub(rounded_size(bytes_));
  // The most recent block replaces this thread's cached one, if the threads' total allows it.
  if (block_ > kScratchCacheBytes) {
    std::free(data_);
    return;
  }
  if (g_cached.fetch_add(block_) + block_ - t_cached.size > cache_limit()) {
    g_cached.fetch_sub(block_);
    std::free(data_);
    return;
  }
  t_cached.release();
  t_cached.data = data_;
  t_cached.size = block_;
}

}  // namespace memory
}  // namespace heed
