#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/cpu_info.hpp"
#include "cpu/kernels.hpp"
#include "cpu/parallel.hpp"
#include "heed/machine.hpp"
#include "memory/cpu_allocator.hpp"

namespace heed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kFmaSeconds = 0.1;
constexpr int kFmaRepeats = 3;  // the best window: a shared machine lowers some of them
constexpr std::size_t kCopyBytes = std::size_t{256} << 20;
constexpr int kCopyRepeats = 3;

// Every thread runs `chains` until a common deadline; FLOPs over the window.
double measure_rate(int threads, double (*chains)(std::int64_t)) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(kFmaSeconds);
  std::mutex mutex;
  double flops = 0;
  cpu::parallel_for(threads, threads, [&](std::int64_t, int) {
    double done = 0;
    while (Clock::now() < deadline) done += chains(1 << 16);
    std::lock_guard lock(mutex);
    flops += done;
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return flops / seconds * 1e-9;
}

struct Streams {
  double copy = 0;
  double read = 0;
};

// The threads' share of `words`, folded so that every word is read.
std::uint64_t fold_words(const std::uint64_t* words, std::size_t count) {
  std::uint64_t lanes[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int lane = 0; lane < 8; ++lane) lanes[lane] ^= words[i + static_cast<std::size_t>(lane)];
  }
  for (; i < count; ++i) lanes[0] ^= words[i];
  std::uint64_t folded = 0;
  for (const std::uint64_t lane : lanes) folded ^= lane;
  return folded;
}

Streams measure_streams(int threads) {
  auto* source = static_cast<std::byte*>(memory::cpu_allocate(kCopyBytes, "heed::measure_cpu_ceilings", "copy source"));
  auto* target = static_cast<std::byte*>(memory::cpu_allocate(kCopyBytes, "heed::measure_cpu_ceilings", "copy target"));
  std::memset(source, 1, kCopyBytes);
  std::memset(target, 0, kCopyBytes);
  const std::size_t chunk = kCopyBytes / static_cast<std::size_t>(threads);
  Streams best;
  for (int repeat = 0; repeat < kCopyRepeats; ++repeat) {
    const auto start = Clock::now();
    cpu::parallel_for(threads, threads, [&](std::int64_t task, int) {
      const std::size_t offset = static_cast<std::size_t>(task) * chunk;
      std::memcpy(target + offset, source + offset, task == threads - 1 ? kCopyBytes - offset : chunk);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best.copy = std::max(best.copy, 2.0 * static_cast<double>(kCopyBytes) / seconds * 1e-9);
  }
  std::atomic<std::uint64_t> sink{0};  // the folds' destination, so that the reads are done
  const std::size_t words = kCopyBytes / sizeof(std::uint64_t), share = words / static_cast<std::size_t>(threads);
  for (int repeat = 0; repeat < kCopyRepeats; ++repeat) {
    const auto start = Clock::now();
    cpu::parallel_for(threads, threads, [&](std::int64_t task, int) {
      const std::size_t first = static_cast<std::size_t>(task) * share;
      sink ^= fold_words(reinterpret_cast<const std::uint64_t*>(source) + first, task == threads - 1 ? words - first : share);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best.read = std::max(best.read, static_cast<double>(kCopyBytes) / seconds * 1e-9);
  }
  memory::cpu_free(source, kCopyBytes);
  memory::cpu_free(target, kCopyBytes);
  return best;
}

}  // namespace

CpuCeilings measure_cpu_ceilings() {
  const CpuInfo& cpu = cpu_info();
  CpuCeilings ceilings;
  ceilings.threads = cpu.threads;
  ceilings.isa = to_string(cpu.isa);
  for (int repeat = 0; repeat < kFmaRepeats; ++repeat) {
    ceilings.fma_gflops = std::max(ceilings.fma_gflops, measure_rate(cpu.threads, cpu::run_fma_chains));
  }
  for (int repeat = 0; repeat < kFmaRepeats && cpu.isa >= CpuIsa::Avx512Bf16; ++repeat) {
    ceilings.dot_bf16_gflops = std::max(ceilings.dot_bf16_gflops, measure_rate(cpu.threads, cpu::run_dot_bf16_chains));
  }
  for (int repeat = 0; repeat < kFmaRepeats && cpu.isa == CpuIsa::Amx; ++repeat) {
    ceilings.amx_gflops = std::max(ceilings.amx_gflops, measure_rate(cpu.threads, cpu::run_amx_chains));
  }
  const Streams streams = measure_streams(cpu.threads);
  ceilings.copy_gbytes = streams.copy;
  ceilings.read_gbytes = streams.read;
  return ceilings;
}

}  // namespace heed
