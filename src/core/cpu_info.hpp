#pragma once
// Immutable properties of this machine's CPU, read once per process.

#include <cstddef>

namespace heed {

struct CpuInfo {
  int threads = 1;              // HEED_NUM_THREADS, else the cores this process may run on
  std::size_t l1d_bytes = 0;    // per core
  std::size_t l2_bytes = 0;     // per core
};

const CpuInfo& cpu_info();

}  // namespace heed
