#pragma once
// One recorded launch: "name [x, y, z]" in the profiler; with HEED_PROFILE=time its
// duration from CUDA events around it (waiting for the stop event at the end of the scope).

#include <cuda_runtime.h>

#include <cstdint>

namespace heed::cuda {

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
