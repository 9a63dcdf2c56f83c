#include "plan/scratch_layout.hpp"

#include "heed/memory.hpp"
#include "memory/cpu_allocator.hpp"

namespace heed::plan {

Region ScratchLayout::add(std::string name, std::size_t bytes, std::size_t slices) {
  if (bytes == 0 || slices == 0) return {};
  const std::size_t slice_bytes = memory::rounded_size(bytes);
  Region region{total_, slice_bytes};
  buffers_.push_back({std::move(name), total_, slice_bytes * slices, slices});
  total_ += slice_bytes * slices;
  return region;
}

}  // namespace heed::plan
