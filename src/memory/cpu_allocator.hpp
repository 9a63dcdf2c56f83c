#pragma once
// heed's CPU allocator: aligned blocks, counted in active and peak bytes.

#include <cstddef>

namespace heed::memory {

// Rounds up to kAllocationAlignment; the counted size of an allocation of `bytes`.
std::size_t rounded_size(std::size_t bytes);

// Throws OutOfMemory "[op] could not allocate N bytes for <what>".
void* cpu_allocate(std::size_t bytes, const char* op, const char* what);
void cpu_free(void* pointer, std::size_t bytes);

// Scratch for one call: the caller's workspace, or one counted allocation of `bytes`.
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
  bool owned_ = false;
};

}  // namespace heed::memory
