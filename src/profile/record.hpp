#pragma once
// The profiler's recording calls for backends that time on their own clock (CUDA events).

#include <cstdint>

namespace heed::profile::detail {

// Records one dispatch "name [x, y, z]"; returns its entry, or -1 when profiling is off.
std::int64_t record(const char* name, std::int64_t x, std::int64_t y, std::int64_t z);
// Adds a measured duration to an entry returned by record (ignored for -1 or after reset).
void add_seconds(std::int64_t entry, double seconds);

}  // namespace heed::profile::detail
