#pragma once
// Copies of the test support's host tensors on a CUDA device: the whole storage (gaps
// included) goes up, so strided layouts and poisoned gaps keep their meaning on the device.

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "heed/heed.hpp"
#include "support/problem.hpp"
#include "support/support.hpp"

namespace heed::test {

class DeviceTensor {
 public:
  // The storage of `tensor` (all of it) on cuda:device; view() is the same view on the device.
  DeviceTensor(const Tensor& tensor, int device = 0);
  // Only the elements of `view` (any strides, e.g. a broadcast mask) on cuda:device.
  DeviceTensor(const TensorView& view, int device = 0);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView& view() { return view_; }
  // The device storage, read back: bytes and a host view over them.
  std::vector<unsigned char> download() const;
  TensorView host_view(std::vector<unsigned char>& bytes) const;

 private:
  void upload(const unsigned char* first, std::size_t bytes, const TensorView& view, const unsigned char* origin,
              int device);
  unsigned char* storage_ = nullptr;
  std::size_t bytes_ = 0;
  std::ptrdiff_t view_offset_ = 0;  // bytes from storage_ to view_.data
  TensorView view_;
};

// A host problem's tensors on the device; the output poisoned first.
struct DeviceProblem {
  explicit DeviceProblem(Problem& host) : problem(host) {
    host.out().poison();
    out_before = host.out().storage();
    q = std::make_unique<DeviceTensor>(host.q());
    k = std::make_unique<DeviceTensor>(host.k());
    v = std::make_unique<DeviceTensor>(host.v());
    out = std::make_unique<DeviceTensor>(host.out());
    options = host.options();
    if (options.mask) {
      mask = std::make_unique<DeviceTensor>(*options.mask);
      options.mask = mask->view();
    }
    if (options.sinks) {
      sinks = std::make_unique<DeviceTensor>(*options.sinks);
      options.sinks = sinks->view();
    }
  }
  AttentionPlan plan() const { return plan_attention(q->view(), k->view(), v->view(), options); }
  void run(Stream stream = {}) { attention(q->view(), k->view(), v->view(), out->view(), problem.scale(), options, stream); }

  Problem& problem;
  std::vector<unsigned char> out_before;
  std::unique_ptr<DeviceTensor> q, k, v, out, mask, sinks;
  AttentionOptions options;
};

// Fails the test on a CUDA error.
void cuda_ok(cudaError_t status, const char* what);

}  // namespace heed::test
