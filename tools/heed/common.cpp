#include <cmath>
#include <cstdio>
#include <limits>

#include "commands.hpp"

namespace heed::cli {

Device parse_device(const std::string& command, const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const auto index = parse_int(command, "device", std::string_view(text).substr(5), 0);
    if (index > 1'000'000)
      usage_error(command, "--device index " + text.substr(5) + " is too large");
    return Device::cuda(static_cast<int>(index));
  }
  usage_error(command, "--device must be cpu, cuda or cuda:N, got '" + text + "'");
}

RouteChoice parse_route(const std::string& command, const std::string& text) {
  const std::string route =
      parse_choice(command, "route", text, {"auto", "vector", "tiled", "composed"});
  if (route == "vector") return RouteChoice::Vector;
  if (route == "tiled") return RouteChoice::Tiled;
  if (route == "composed") return RouteChoice::Composed;
  return RouteChoice::Auto;
}

const std::vector<FlagSpec>& common_option_flags() {
  static const std::vector<FlagSpec> flags = {{"causal", false}, {"window"}, {"softcap"}, {"max-score-bytes"},
                                              {"max-scratch-bytes"}, {"route"}};
  return flags;
}

const char* common_option_help() {
  return "  --causal                     bottom-right aligned causal mask\n"
         "  --window W                   sliding window of W keys (with --causal)\n"
         "  --softcap C                  logit softcap: scores become C·tanh(s / C)\n"
         "  --max-score-bytes N          cap on any score-sized intermediate\n"
         "  --max-scratch-bytes N        budget on all of a call's scratch\n"
         "  --route auto|vector|tiled|composed   force a route (default auto)\n";
}

std::vector<FlagSpec> with_common_options(std::vector<FlagSpec> flags) {
  flags.insert(flags.end(), common_option_flags().begin(), common_option_flags().end());
  return flags;
}

void apply_common_options(const Args& args, AttentionOptions& options) {
  const std::string& command = args.command();
  options.causal = args.has("causal");
  if (const auto window = args.value("window"))
    options.window = parse_int(command, "window", *window, 1);
  // heed itself rejects a softcap that is not finite and positive, naming the value.
  if (const auto softcap = args.value("softcap")) {
    const double cap = parse_double(command, "softcap", *softcap);
    options.softcap = std::fabs(cap) <= std::numeric_limits<float>::max() ? static_cast<float>(cap)
                                                                            : std::numeric_limits<float>::infinity();
  }
  if (const auto cap = args.value("max-score-bytes")) {
    options.max_score_bytes = parse_int(command, "max-score-bytes", *cap, 1);
  }
  if (const auto budget = args.value("max-scratch-bytes")) {
    options.max_scratch_bytes = parse_int(command, "max-scratch-bytes", *budget, 1);
  }
  if (const auto route = args.value("route")) options.route = parse_route(command, *route);
}

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (bytes >= 1024.0 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return text;
}

}  // namespace heed::cli
