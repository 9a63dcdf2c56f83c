#pragma once
// One recorded launch: "name [x, y, z]" in the profiler; with HEED_PROFILE=time its
// duration from CUDA events around it (waiting for the stop event at the end of the scope).

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "cuda/check.hpp"

namespace heed::cuda {

// Whether a kernel asks for all of the SM's shared memory as its carveout (so that the plan's
// blocks per SM are resident beside little L1), or leaves the split to the driver.
enum class Carveout { Driver, MaxShared };

// Lets kKernel take `bytes` of dynamic shared memory on the current device (above 48 KiB that
// must be allowed per kernel and device), with the carveout asked for: once per kernel, device
// and larger size.
template <auto kKernel, Carveout kCarveout = Carveout::MaxShared>
void allow_shared_bytes(std::int64_t bytes) {
  static std::array<std::atomic<std::int64_t>, 64> allowed{};
  int device = 0;
  check(cudaGetDevice(&device), "heed::attention", "cudaGetDevice");
  std::atomic<std::int64_t>& allowed_bytes = allowed.at(static_cast<std::size_t>(device));
  if (allowed_bytes.load(std::memory_order_acquire) >= bytes) return;
  check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "heed::attention", "cudaFuncSetAttribute");
  if constexpr (kCarveout == Carveout::MaxShared) {
    check(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
          "heed::attention", "cudaFuncSetAttribute");
  }
  allowed_bytes.store(bytes, std::memory_order_release);
}

class LaunchRecord {
 public:
  LaunchRecord(const char* name, std::int64_t x, std::int64_t y, std::int64_t z, cudaStream_t stream);
  ~LaunchRecord();
  LaunchRecord(const LaunchRecord&) = delete;
  LaunchRecord& operator=(const LaunchRecord&) = delete;

 private:
  std::int64_t entry_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace heed::cuda
