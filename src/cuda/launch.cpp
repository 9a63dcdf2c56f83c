#include "cuda/launch.hpp"

#include "heed/profile.hpp"
#include "profile/record.hpp"

namespace heed::cuda {

LaunchRecord::LaunchRecord(const char* name, std::int64_t x, std::int64_t y, std::int64_t z, cudaStream_t stream)
    : entry_(profile::detail::record(name, x, y, z)), stream_(stream) {
  if (entry_ < 0 || profile::mode() != profile::Mode::Time) return;
  if (cudaEventCreate(&start_) != cudaSuccess || cudaEventCreate(&stop_) != cudaSuccess ||
      cudaEventRecord(start_, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    start_ = nullptr;
  }
}

LaunchRecord::~LaunchRecord() {
  if (start_ == nullptr) {
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
    return;
  }
  float milliseconds = 0;
  if (cudaEventRecord(stop_, stream_) == cudaSuccess && cudaEventSynchronize(stop_) == cudaSuccess &&
      cudaEventElapsedTime(&milliseconds, start_, stop_) == cudaSuccess) {
    profile::detail::add_seconds(entry_, milliseconds * 1e-3);
  } else {
    (void)cudaGetLastError();
  }
  (void)cudaEventDestroy(start_);
  (void)cudaEventDestroy(stop_);
}

}  // namespace heed::cuda
