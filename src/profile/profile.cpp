#include "heed/profile.hpp"

#include "profile/record.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace heed::profile {
namespace {

Mode mode_from_environment() {
  const char* value = std::getenv("HEED_PROFILE");
  if (value == nullptr) return Mode::Off;
  const std::string_view text(value);
  if (text == "shapes") return Mode::Shapes;
  if (text == "time") return Mode::Time;
  return Mode::Off;
}

struct Table {
  std::mutex mutex;
  std::vector<Record> entries;
  std::unordered_map<std::string, std::size_t> index;
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Table& table() {
  static Table instance;
  return instance;
}

std::atomic<Mode>& current_mode() {
  static std::atomic<Mode> instance{mode_from_environment()};
  return instance;
}

}  // namespace

Mode mode() { return current_mode().load(std::memory_order_relaxed); }

void set_mode(Mode new_mode) { current_mode().store(new_mode); }

void reset() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.entries.clear();
  t.index.clear();
}

std::vector<Record> records() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.entries;
}

std::vector<std::pair<std::string, std::int64_t>> entries() {
  std::vector<std::pair<std::string, std::int64_t>> list;
  for (Record& r : records()) list.emplace_back(std::move(r.key), r.count);
  return list;
}

std::string report() {
  std::string text;
  const bool timed = mode() == Mode::Time;
  for (const Record& r : records()) {
    text += r.key + " x" + std::to_string(r.count);
    if (timed) {
      char milliseconds[32];
      std::snprintf(milliseconds, sizeof milliseconds, " %.3f ms", r.seconds * 1e3);
      text += milliseconds;
    }
    text += "\n";
  }
  return text;
}

namespace detail {

std::int64_t record(const char* name, std::int64_t x, std::int64_t y, std::int64_t z) {
  if (mode() == Mode::Off) return -1;
  std::string key = std::string(name) + " [" + std::to_string(x) + ", " + std::to_string(y) +
                    ", " + std::to_string(z) + "]";
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto [it, inserted] = t.index.try_emplace(key, t.entries.size());
  if (inserted) t.entries.push_back({std::move(key), 0, 0.0});
  ++t.entries[it->second].count;
  return static_cast<std::int64_t>(it->second);
}

void add_seconds(std::int64_t entry, double seconds) {
  if (entry < 0) return;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  // reset() between recording and timing empties the table: drop the duration.
  if (static_cast<std::size_t>(entry) < t.entries.size()) t.entries[static_cast<std::size_t>(entry)].seconds += seconds;
}

}  // namespace detail

Dispatch::Dispatch(const char* name, std::int64_t x, std::int64_t y, std::int64_t z) {
  index_ = detail::record(name, x, y, z);
  if (index_ >= 0 && mode() == Mode::Time) start_ns_ = now_ns();
}

Dispatch::~Dispatch() {
  if (index_ < 0 || start_ns_ == 0) return;
  detail::add_seconds(index_, static_cast<double>(now_ns() - start_ns_) * 1e-9);
}

}  // namespace heed::profile
