// heed bench: the default suite (or named cases) against the composed route.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "bench.hpp"
#include "cases.hpp"
#include "commands.hpp"
#include "core/cpu_info.hpp"

namespace heed::cli {

namespace {

constexpr const char* kBenchUsage =
    "usage: heed bench [--case NAME]... [--reps N] [--device cpu|cuda[:N]] [--json] [--no-torch] [--no-composed]\n"
    "\n"
    "Times heed's route and the composed route on the same inputs (median of N runs after one\n"
    "warm-up, default 3) and prints the speedup and the largest difference between them. On\n"
    "the CPU, where python3 can import torch, it then times PyTorch's\n"
    "scaled_dot_product_attention on the same shapes and threads and prints the ratios\n"
    "(bench/torch_compare.py).\n"
    "\n"
    "  --case NAME    run this case of the suite (repeatable; default: all)\n"
    "  --reps N       timed runs per route (at least 1)\n"
    "  --json         a JSON array, one object per case (no PyTorch comparison)\n"
    "  --no-torch     skip the PyTorch comparison\n"
    "  --no-composed  skip the composed route (no speedup column; the PyTorch comparison's\n"
    "                 rounds use it)\n";

const std::vector<FlagSpec> kBenchFlags = {
    {"case", true, true},
    {"reps"},
    {"device"},
    {"json", false},
    {"no-torch", false},
    {"no-composed", false},
    // Limits Lq and Lk of every case (Case::scaled), for quick runs in tests.
    {"max-len", true, false, true}};

std::string suite_names() {
  std::string names;
  for (const cases::Case& c : cases::default_suite()) names += (names.empty() ? "" : ", ") + c.name;
  return names;
}

std::vector<cases::Case> selected_cases(const Args& args) {
  const std::vector<std::string> names = args.values("case");
  if (names.empty()) return cases::default_suite();
  std::vector<cases::Case> chosen;
  for (const std::string& name : names) {
    const cases::Case* found = cases::find_case(name);
    if (found == nullptr)
      usage_error("bench", "unknown case '" + name + "' (valid: " + suite_names() + ")");
    chosen.push_back(*found);
  }
  return chosen;
}

// PyTorch's SDPA on the same shapes, through bench/torch_compare.py reading heed's records.
void compare_with_torch(const std::string& records, const bench::Options& options) {
  const std::string script = HEED_TORCH_COMPARE;
  if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::cout << "\nPyTorch: python3 cannot import torch here; no side-by-side comparison\n";
    return;
  }
  if (!std::filesystem::exists(script)) {
    std::cout << "\nPyTorch: " << script << " is not where this build found it; no comparison\n";
    return;
  }
  std::cout << "\nPyTorch's scaled_dot_product_attention on the same shapes and threads:" << std::endl;
  const std::string command = "python3 '" + script + "' --records '" + records + "' --threads " +
                              std::to_string(cpu_info().threads) + " --reps " + std::to_string(options.reps);
  if (std::system(command.c_str()) != 0) std::cout << "PyTorch: the comparison failed (" << command << ")\n";
}

}  // namespace

int bench_command(const std::vector<std::string>& tokens) {
  const Args args = Args::parse("bench", tokens, kBenchFlags);
  if (args.help()) {
    std::cout << kBenchUsage << "\ncases: " << suite_names() << "\n";
    return 0;
  }
  bench::Options options;
  if (const auto reps = args.value("reps")) {
    constexpr std::int64_t kMaxReps = 1000;
    const std::int64_t count = parse_int("bench", "reps", *reps, 1);
    if (count > kMaxReps) usage_error("bench", "--reps must be at most 1000, got " + *reps);
    options.reps = static_cast<int>(count);
  }
  if (const auto device = args.value("device")) options.device = parse_device("bench", *device);
  options.composed = !args.has("no-composed");
  std::vector<cases::Case> suite = selected_cases(args);
  if (const auto max_len = args.value("max-len")) {
    const std::int64_t limit = parse_int("bench", "max-len", *max_len, 1);
    for (cases::Case& c : suite) c = c.scaled(limit);
  }
  const bool torch = !args.has("json") && !args.has("no-torch") && options.device.type == DeviceType::CPU;
  if (torch) {
    options.records_path =
        (std::filesystem::temp_directory_path() / ("heed-bench-" + std::to_string(getpid()) + ".json")).string();
  }
  bench::run_suite(suite, options, args.has("json"), std::cout);
  if (torch) {
    compare_with_torch(options.records_path, options);
    std::filesystem::remove(options.records_path);
  }
  return 0;
}

}  // namespace heed::cli
