#pragma once
// A small "{}" formatter (g++ 12 has no <format>): each "{}" takes the next argument,
// written with operator<<.

#include <sstream>
#include <string>
#include <string_view>

namespace heed {

namespace detail {
inline void format_into(std::ostringstream& out, std::string_view pattern) { out << pattern; }

template <typename T, typename... Rest>
void format_into(std::ostringstream& out, std::string_view pattern, const T& value,
                 const Rest&... rest) {
  const std::size_t slot = pattern.find("{}");
  if (slot == std::string_view::npos) {
    out << pattern;
    return;
  }
  out << pattern.substr(0, slot) << value;
  format_into(out, pattern.substr(slot + 2), rest...);
}
}  // namespace detail

template <typename... Args>
std::string format(std::string_view pattern, const Args&... args) {
  std::ostringstream out;
  detail::format_into(out, pattern, args...);
  return out.str();
}

}  // namespace heed
