#pragma once
// Lays out named scratch buffers in one arena. The planner sizes with it and the kernels
// read their regions from the same layout, so the promise and the use cannot drift apart.

#include <cstddef>
#include <string>
#include <vector>

#include "heed/plan.hpp"

namespace heed::plan {

// One buffer of `slices` equal parts (one per worker for per-thread buffers).
struct Region {
  std::size_t offset = 0;
  std::size_t slice_bytes = 0;  // aligned

  template <typename T>
  T* at(std::byte* base, std::size_t slice = 0) const {
    return slice_bytes == 0 ? nullptr : reinterpret_cast<T*>(base + offset + slice * slice_bytes);
  }
};

class ScratchLayout {
 public:
  // Adds `slices` parts of `bytes` each; names the buffer in the plan.
  Region add(std::string name, std::size_t bytes, std::size_t slices = 1);
  std::size_t total_bytes() const { return total_; }
  const std::vector<ScratchBuffer>& buffers() const { return buffers_; }

 private:
  std::size_t total_ = 0;
  std::vector<ScratchBuffer> buffers_;
};

}  // namespace heed::plan
