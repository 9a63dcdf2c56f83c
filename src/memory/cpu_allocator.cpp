#include "memory/cpu_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

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

MemoryStats cpu_memory_stats() { return {g_active.load(), g_peak.load(), cached_scratch_bytes()}; }

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

// Each thread's cached block sits in a slot of its own, which the registry lists so that
// cpu_release_cached (from any thread) can free it; a slot's mutex orders the owner's take and
// put against such a release. The registry outlives every thread's slot (never destroyed).
std::atomic<std::size_t> g_cached{0};

struct Slot {
  std::mutex mutex;
  void* data = nullptr;
  std::size_t size = 0;
  std::size_t free_locked() {
    const std::size_t freed = size;
    if (data != nullptr) {
      std::free(data);
      g_cached.fetch_sub(size);
    }
    data = nullptr;
    size = 0;
    return freed;
  }
};

struct Registry {
  std::mutex mutex;
  std::vector<Slot*> slots;
};
Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

struct ThreadSlot {
  Slot slot;
  ThreadSlot() {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.slots.push_back(&slot);
  }
  ~ThreadSlot() {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.slots.erase(std::find(r.slots.begin(), r.slots.end(), &slot));
    const std::lock_guard<std::mutex> own(slot.mutex);
    slot.free_locked();
  }
  ThreadSlot(const ThreadSlot&) = delete;
  ThreadSlot& operator=(const ThreadSlot&) = delete;
};
thread_local ThreadSlot t_slot;

std::atomic<std::size_t>& limit_bytes() {
  static std::atomic<std::size_t> limit{
      environment_cache_bytes().value_or(std::min(kScratchCacheTotalBytes, physical_bytes() / 8))};
  return limit;
}

}  // namespace

std::optional<std::size_t> environment_cache_bytes() {
  static const std::optional<std::size_t> bytes = []() -> std::optional<std::size_t> {
    const char* value = std::getenv("HEED_CACHE_BYTES");
    if (value == nullptr || *value == '\0') return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const unsigned long long parsed = std::strtoull(value, &end, 10);
    if (*end != '\0' || errno == ERANGE || value[0] == '-') return std::nullopt;
    return static_cast<std::size_t>(parsed);
  }();
  return bytes;
}

std::size_t cached_scratch_bytes() { return g_cached.load(); }

namespace {

// Frees the threads' cached blocks until they hold at most `keep` bytes; returns the bytes freed.
std::size_t free_cached_above(std::size_t keep) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::size_t freed = 0;
  for (Slot* slot : r.slots) {
    if (g_cached.load() <= keep) break;
    const std::lock_guard<std::mutex> own(slot->mutex);
    freed += slot->free_locked();
  }
  return freed;
}

}  // namespace

std::size_t cpu_release_cached() { return free_cached_above(0); }

std::size_t cpu_cache_limit() { return limit_bytes().load(); }

void cpu_set_cache_limit(std::size_t bytes) {
  limit_bytes().store(bytes);
  (void)free_cached_above(bytes);
}

Scratch::Scratch(std::size_t bytes, void* workspace, const char* op) : bytes_(bytes) {
  if (bytes == 0) return;
  if (workspace != nullptr) {
    data_ = static_cast<std::byte*>(workspace);
    return;
  }
  const std::size_t size = rounded_size(bytes);
  {
    Slot& slot = t_slot.slot;
    const std::lock_guard<std::mutex> own(slot.mutex);
    if (slot.data != nullptr && size >= bytes && slot.size >= size) {
      data_ = static_cast<std::byte*>(std::exchange(slot.data, nullptr));
      block_ = std::exchange(slot.size, 0);
      g_cached.fetch_sub(block_);
      raise_peak(g_active.fetch_add(size) + size);
    }
  }
  if (data_ == nullptr) {
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
  Slot& slot = t_slot.slot;
  const std::lock_guard<std::mutex> own(slot.mutex);
  if (g_cached.fetch_add(block_) + block_ - slot.size > limit_bytes().load()) {
    g_cached.fetch_sub(block_);
    std::free(data_);
    return;
  }
  slot.free_locked();
  slot.data = data_;
  slot.size = block_;
}

}  // namespace memory
}  // namespace heed
