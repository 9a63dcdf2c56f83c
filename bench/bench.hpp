#pragma once
// The benchmark runner: each case of the table runs on heed's own route (RouteChoice::Auto) and
// on the composed route with the same inputs; it prints the median times, the rate (GFLOP/s,
// or GB/s where memory bound), their ratio and the largest difference between the two outputs.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "cases.hpp"
#include "heed/device.hpp"
#include "heed/machine.hpp"
#include "heed/plan.hpp"

namespace heed::bench {

struct Options {
  Device device = Device::cpu();
  int reps = 3;  // timed runs after one warm-up; the median is reported
  // The composed comparison is skipped ("n/a") when its plan needs more scratch than this.
  std::size_t composed_scratch_limit = std::size_t{2} << 30;
  bool composed = true;  // false: the composed route is not timed (`heed bench --no-composed`)
  // When set, run_suite also writes the cases' JSON array (as --json prints it) to this file,
  // for the PyTorch comparison that follows the table.
  std::string records_path;
};

struct Result {
  cases::Case c;
  std::string route;  // route name and blocking, e.g. "tiled(block_q=64, block_k=64)"
  std::string kernel_name;
  int workers = 1;
  std::size_t scratch_bytes = 0;
  double median_ms = 0.0;
  double gflops = 0.0;  // FLOPs of the visible pairs per second / 1e9
  double gbytes = 0.0;  // bytes of q, k, v and out per second / 1e9
  std::optional<double> composed_ms;
  std::optional<double> speedup;       // composed_ms / median_ms
  std::optional<double> max_abs_diff;  // auto route vs composed route
  std::string composed_note;           // why the comparison is missing, when it is
  // The machine's ceilings measured in the same run, and the figure's fraction of its own:
  // GFLOP/s over the FMA peak (the bfloat16 peak of the AMX tiles or dot products where the
  // plan runs on them), or
  // GB/s over the copy bandwidth where memory bound.
  std::optional<CpuCeilings> ceilings;
  std::optional<double> roofline;
  bool on_amx = false;       // the plan runs its matrix work on the AMX tiles
  bool on_dot_bf16 = false;  // ... or on AVX512-BF16 dot products
};

// "tiled(block_q=64, block_k=128)", "vector(passes=2, blocks=16, dispatches=2)", "composed".
std::string describe_kernel(const Kernel& kernel);
// "B 32, H 12/12, L 512/512, D 64/64, f32, causal, window 128, sinks, mask bool, cap 1048576".
std::string describe_shape(const cases::Case& c);

Result run_case(const cases::Case& c, const Options& options);

// Runs the cases in order, printing one line (or one JSON object) per case as it finishes.
void run_suite(const std::vector<cases::Case>& suite, const Options& options, bool json,
               std::ostream& out);

// "ceilings: 2 threads, avx512 kernels, float32 FMA peak 233.3 GFLOP/s, copy 28.3 GB/s".
std::string describe_ceilings(const CpuCeilings& ceilings);
std::string table_header();
std::string table_row(const Result& result);
std::string to_json(const Result& result);

}  // namespace heed::bench
