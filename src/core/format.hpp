#pragma once
// A small "{}" formatter (g++ 12 has no <format>): each "{}" takes the next argument.
// Integers through std::to_chars, floating point as printf's %g (what an ostream writes by
// default), strings as they are. No iostreams: an error message must not depend on the
// locale machinery of whichever C++ runtime the process loaded (a Python module built on the
// H200 machine crashed inside ostream's number formatting, before any error could be raised).

#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace heed {

namespace detail {

template <typename T>
void append_value(std::string& out, const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    out += value ? '1' : '0';
  } else if constexpr (std::is_same_v<T, char>) {
    out += value;
  } else if constexpr (std::is_integral_v<T>) {
    char digits[24];
    const auto result = std::to_chars(digits, digits + sizeof digits, value);
    out.append(digits, result.ptr);
  } else if constexpr (std::is_floating_point_v<T>) {
    char digits[48];
    const int count = std::snprintf(digits, sizeof digits, "%g", static_cast<double>(value));
    if (count > 0) out.append(digits, static_cast<std::size_t>(count) < sizeof digits ? count : sizeof digits - 1);
  } else if constexpr (std::is_pointer_v<T> && !std::is_convertible_v<T, std::string_view>) {
    char digits[32];
    const int count = std::snprintf(digits, sizeof digits, "%p", static_cast<const void*>(value));
    if (count > 0) out.append(digits, static_cast<std::size_t>(count));
  } else {
    out.append(std::string_view(value));
  }
}

inline void format_into(std::string& out, std::string_view pattern) { out.append(pattern); }

template <typename T, typename... Rest>
void format_into(std::string& out, std::string_view pattern, const T& value, const Rest&... rest) {
  const std::size_t slot = pattern.find("{}");
  if (slot == std::string_view::npos) {
    out.append(pattern);
    return;
  }
  out.append(pattern.substr(0, slot));
  append_value(out, value);
  format_into(out, pattern.substr(slot + 2), rest...);
}

}  // namespace detail

template <typename... Args>
std::string format(std::string_view pattern, const Args&... args) {
  std::string out;
  detail::format_into(out, pattern, args...);
  return out;
}

}  // namespace heed
