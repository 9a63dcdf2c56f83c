#pragma once
// Command-line flags: "--name value", "--name=value" or a bare "--name" switch. Every
// misuse throws UsageError with a one-line message; main prints it and exits with 2.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace heed::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value = true;
  bool repeatable = false;
  bool hidden = false;  // accepted but left out of --help
};

class Args {
 public:
  // Parses `tokens` (the words after the command). "--help"/"-h" is always accepted.
  static Args parse(const std::string& command, const std::vector<std::string>& tokens,
                    const std::vector<FlagSpec>& specs);

  bool help() const { return help_; }
  bool has(std::string_view name) const;
  std::optional<std::string> value(std::string_view name) const;
  std::vector<std::string> values(std::string_view name) const;
  const std::string& command() const { return command_; }

 private:
  std::string command_;
  bool help_ = false;
  std::vector<std::pair<std::string, std::string>> given_;  // (name, value), in order
};

// "heed: <command>: " + message, the prefix every usage error carries.
[[noreturn]] void usage_error(const std::string& command, const std::string& message);

// Strict number parsing: the whole text must be the number.
std::int64_t parse_int(const std::string& command, const std::string& flag, std::string_view text,
                       std::int64_t min_value);
double parse_double(const std::string& command, const std::string& flag, std::string_view text);
// "B,H,L,D": comma-separated non-negative integers, exactly `arity` of them when arity > 0.
std::vector<std::int64_t> parse_int_list(const std::string& command, const std::string& flag,
                                         std::string_view text, std::size_t arity);
// The value of `flag` when it is one of `choices`.
std::string parse_choice(const std::string& command, const std::string& flag, std::string_view text,
                         const std::vector<std::string>& choices);

}  // namespace heed::cli
