#include "args.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace heed::cli {

namespace {

const FlagSpec* find_spec(const std::vector<FlagSpec>& specs, std::string_view name) {
  const auto found = std::find_if(specs.begin(), specs.end(),
                                  [&](const FlagSpec& spec) { return spec.name == name; });
  return found == specs.end() ? nullptr : &*found;
}

std::string join(const std::vector<std::string>& words, const char* separator) {
  std::string text;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) text += separator;
    text += words[i];
  }
  return text;
}

}  // namespace

void usage_error(const std::string& command, const std::string& message) {
  throw UsageError("heed: " + command + ": " + message);
}

Args Args::parse(const std::string& command, const std::vector<std::string>& tokens,
                 const std::vector<FlagSpec>& specs) {
  Args args;
  args.command_ = command;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (token == "--help" || token == "-h") {
      args.help_ = true;
      continue;
    }
    if (token.size() < 3 || token.compare(0, 2, "--") != 0) {
      usage_error(command, "unexpected argument '" + token + "' (flags start with --; see heed " +
                               command + " --help)");
    }
    const std::size_t equals = token.find('=');
    const std::string name =
        token.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const FlagSpec* spec = find_spec(specs, name);
    if (spec == nullptr) {
      usage_error(command, "unknown flag '--" + name + "' (see heed " + command + " --help)");
    }
    if (!spec->repeatable && args.has(name)) usage_error(command, "--" + name + " given twice");
    std::string value;
    if (!spec->takes_value) {
      if (equals != std::string::npos) usage_error(command, "--" + name + " takes no value");
    } else if (equals != std::string::npos) {
      value = token.substr(equals + 1);
    } else if (i + 1 < tokens.size() && tokens[i + 1].compare(0, 2, "--") != 0) {
      value = tokens[++i];
    } else {
      usage_error(command, "--" + name + " needs a value");
    }
    if (spec->takes_value && value.empty())
      usage_error(command, "--" + name + " has an empty value");
    args.given_.emplace_back(name, std::move(value));
  }
  return args;
}

bool Args::has(std::string_view name) const {
  return std::any_of(given_.begin(), given_.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

std::optional<std::string> Args::value(std::string_view name) const {
  for (const auto& [flag, value] : given_) {
    if (flag == name) return value;
  }
  return std::nullopt;
}

std::vector<std::string> Args::values(std::string_view name) const {
  std::vector<std::string> found;
  for (const auto& [flag, value] : given_) {
    if (flag == name) found.push_back(value);
  }
  return found;
}

std::int64_t parse_int(const std::string& command, const std::string& flag, std::string_view text,
                       std::int64_t min_value) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range) {
    usage_error(command, "--" + flag + " value '" + std::string(text) + "' is out of range");
  }
  if (error != std::errc() || stop != end || text.empty()) {
    usage_error(command, "--" + flag + " expects an integer, got '" + std::string(text) + "'");
  }
  if (value < min_value) {
    usage_error(command, "--" + flag + " must be at least " + std::to_string(min_value) + ", got " +
                             std::string(text));
  }
  return value;
}

double parse_double(const std::string& command, const std::string& flag, std::string_view text) {
  const std::string copy(text);
  char* stop = nullptr;
  const double value = std::strtod(copy.c_str(), &stop);
  if (copy.empty() || stop != copy.c_str() + copy.size() || !std::isfinite(value)) {
    usage_error(command, "--" + flag + " expects a finite number, got '" + copy + "'");
  }
  return value;
}

std::vector<std::int64_t> parse_int_list(const std::string& command, const std::string& flag,
                                         std::string_view text, std::size_t arity) {
  std::vector<std::int64_t> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    std::int64_t value = 0;
    const char* end = item.data() + item.size();
    const auto [stop, error] = std::from_chars(item.data(), end, value);
    if (error == std::errc::result_out_of_range) {
      usage_error(command, "--" + flag + " value '" + std::string(item) + "' is out of range");
    }
    if (item.empty() || error != std::errc() || stop != end || value < 0) {
      usage_error(command, "--" + flag + " expects comma-separated non-negative integers, got '" +
                               std::string(text) + "'");
    }
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (arity > 0 && values.size() != arity) {
    usage_error(command, "--" + flag + " expects " + std::to_string(arity) + " values, got " +
                             std::to_string(values.size()) + " ('" + std::string(text) + "')");
  }
  return values;
}

std::string parse_choice(const std::string& command, const std::string& flag, std::string_view text,
                         const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
    usage_error(command, "--" + flag + " must be one of " + join(choices, ", ") + ", got '" +
                             std::string(text) + "'");
  }
  return std::string(text);
}

}  // namespace heed::cli
