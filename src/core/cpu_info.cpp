#include "core/cpu_info.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace heed {
namespace {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? static_cast<int>(hardware) : 1;
}

int thread_count() {
  if (const char* value = std::getenv("HEED_NUM_THREADS")) {
    char* end = nullptr;
    const long requested = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && requested >= 1 && requested <= 4096) {
      return static_cast<int>(requested);
    }
  }
  return available_cores();
}

// Size in bytes of cache `index` of cpu0 from sysfs ("48K"), or 0.
std::size_t sysfs_cache_bytes(int index) {
  std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string text;
  if (!(file >> text) || text.empty()) return 0;
  std::size_t value = std::strtoull(text.c_str(), nullptr, 10);
  if (text.back() == 'K') value <<= 10;
  if (text.back() == 'M') value <<= 20;
  return value;
}

std::size_t cache_bytes(int level, std::size_t fallback) {
  // sysfs: index0 L1d, index1 L1i, index2 L2.
  std::size_t bytes = sysfs_cache_bytes(level == 1 ? 0 : 2);
  if (bytes == 0) {
    const long reported = sysconf(level == 1 ? _SC_LEVEL1_DCACHE_SIZE : _SC_LEVEL2_CACHE_SIZE);
    bytes = reported > 0 ? static_cast<std::size_t>(reported) : fallback;
  }
  return bytes;
}

// AMX-TILE and AMX-BF16 (with AVX512-BF16 for the conversions) in cpuid, their state
// enabled in XCR0, and Linux's permission to use it granted to this process (arch_prctl
// ARCH_REQ_XCOMP_PERM, once, process-wide).
bool amx_usable() {
#if defined(HEED_AMX_EMULATION)
  // A test build: the tiles are modelled in C++ (src/cpu/amx_tiles.hpp); the kernel's own
  // conversions still need AVX512-BF16.
  return __builtin_cpu_supports("avx512bf16");
#elif defined(__x86_64__) && defined(SYS_arch_prctl)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0 || !((a >> 5) & 1u)) return false;  // AVX512-BF16
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
  if (!amx_bf16 || !amx_tile || !((c >> 27) & 1u) /* OSXSAVE */) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if (((xcr0_low >> 17) & 3u) != 3u) return false;  // XTILECFG and XTILEDATA
  constexpr long kRequestPermission = 0x1023;         // ARCH_REQ_XCOMP_PERM
  constexpr long kTileData = 18;                      // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
  return false;
#endif
}

CpuIsa best_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    if (amx_usable()) return CpuIsa::Amx;
    return __builtin_cpu_supports("avx512bf16") ? CpuIsa::Avx512Bf16 : CpuIsa::Avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::Avx2;
#endif
  return CpuIsa::Generic;
}

CpuIsa chosen_isa() {
  const CpuIsa best = best_isa();
  const char* value = std::getenv("HEED_CPU_ISA");
  if (value == nullptr) return best;
  for (CpuIsa isa : {CpuIsa::Generic, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Bf16, CpuIsa::Amx}) {
    if (std::string(value) == to_string(isa)) return isa < best ? isa : best;
  }
  return best;
}

}  // namespace

const char* to_string(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic: return "generic";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx512Bf16: return "avx512bf16";
    case CpuIsa::Amx: return "amx";
  }
  return "unknown";
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo result;
    result.threads = thread_count();
    result.isa = chosen_isa();
    result.l1d_bytes = cache_bytes(1, std::size_t{32} << 10);
    result.l2_bytes = cache_bytes(2, std::size_t{1} << 20);
    return result;
  }();
  return info;
}

}  // namespace heed
