#include "heed/profile.hpp"

#include <atomic>
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
  std::vector<std::pair<std::string, std::int64_t>> entries;
  std::unordered_map<std::string, std::size_t> index;
};

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

std::vector<std::pair<std::string, std::int64_t>> entries() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.entries;
}

std::string report() {
  std::string text;
  for (const auto& [key, count] : entries()) {
    text += key + " x" + std::to_string(count) + "\n";
  }
  return text;
}

void record(const char* name, std::int64_t x, std::int64_t y, std::int64_t z) {
  if (mode() == Mode::Off) return;
  std::string key = std::string(name) + " [" + std::to_string(x) + ", " + std::to_string(y) +
                    ", " + std::to_string(z) + "]";
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto [it, inserted] = t.index.try_emplace(key, t.entries.size());
  if (inserted) {
    t.entries.emplace_back(std::move(key), 1);
  } else {
    ++t.entries[it->second].second;
  }
}

}  // namespace heed::profile
