#pragma once
// The profiler: with HEED_PROFILE=shapes every kernel dispatch is recorded as
// "name [x, y, z]" (its grid) with a count; HEED_PROFILE=time adds each dispatch's duration
// (wall clock on the CPU). Off, it costs one branch per dispatch.

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
struct Record {
  std::string key;  // "name [x, y, z]"
  std::int64_t count = 0;
  double seconds = 0;  // summed durations; 0 unless the mode is Time
};
std::vector<Record> records();
// One line per entry: "name [x, y, z] xCOUNT", with the summed milliseconds in Time mode.
std::string report();

// Records one dispatch from construction to destruction (used by the backends).
class Dispatch {
 public:
  Dispatch(const char* name, std::int64_t x, std::int64_t y, std::int64_t z);
  ~Dispatch();
  Dispatch(const Dispatch&) = delete;
  Dispatch& operator=(const Dispatch&) = delete;

 private:
  std::int64_t index_ = -1;  // the entry, or -1 when off
  std::int64_t start_ns_ = 0;
};

}  // namespace heed::profile
