#pragma once
// The profiler: with HEED_PROFILE=shapes every kernel dispatch is recorded as
// "name [x, y, z]" (its grid) with a count. Off, it costs one branch per dispatch.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heed::profile {

enum class Mode { Off, Shapes, Time };

Mode mode();               // from HEED_PROFILE at first use, or set_mode
void set_mode(Mode mode);  // overrides the environment
void reset();
// Dispatches in first-seen order: ("name [x, y, z]", count).
std::vector<std::pair<std::string, std::int64_t>> entries();
// One line per entry: "name [x, y, z] xCOUNT".
std::string report();

// Records one dispatch (called by the backends).
void record(const char* name, std::int64_t x, std::int64_t y, std::int64_t z);

}  // namespace heed::profile
