#include "cuda/device_tensor.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace heed::test {

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

DeviceTensor::DeviceTensor(const Tensor& tensor, int device) {
  const std::vector<unsigned char>& storage = tensor.storage();
  upload(storage.data(), storage.size(), tensor.view(), storage.data(), device);
}

DeviceTensor::DeviceTensor(const TensorView& view, int device) {
  const std::int64_t element = static_cast<std::int64_t>(size_of(view.dtype));
  std::int64_t lo = 0, hi = 0;
  bool any = false;
  for (std::int64_t offset : element_offsets(view.shape, view.strides)) {
    lo = any ? std::min(lo, offset) : offset;
    hi = any ? std::max(hi, offset) : offset;
    any = true;
  }
  const auto* base = static_cast<const unsigned char*>(view.data);
  const unsigned char* first = base + lo * element;
  upload(first, static_cast<std::size_t>(any ? (hi - lo + 1) * element : element), view, first, device);
}

void DeviceTensor::upload(const unsigned char* first, std::size_t bytes, const TensorView& view,
                          const unsigned char* origin, int device) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  bytes_ = std::max<std::size_t>(bytes, 16);
  void* pointer = nullptr;
  cuda_ok(cudaMalloc(&pointer, bytes_), "cudaMalloc");
  storage_ = static_cast<unsigned char*>(pointer);
  cuda_ok(cudaMemcpy(storage_, first, bytes, cudaMemcpyHostToDevice), "cudaMemcpy up");
  view_ = view;
  view_offset_ = static_cast<const unsigned char*>(view.data) - origin;
  view_.data = storage_ + view_offset_;
  view_.device = Device::cuda(device);
}

DeviceTensor::~DeviceTensor() { (void)cudaFree(storage_); }

std::vector<unsigned char> DeviceTensor::download() const {
  std::vector<unsigned char> bytes(bytes_);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuda_ok(cudaMemcpy(bytes.data(), storage_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy down");
  return bytes;
}

TensorView DeviceTensor::host_view(std::vector<unsigned char>& bytes) const {
  TensorView view = view_;
  view.data = bytes.data() + view_offset_;
  view.device = Device::cpu();
  return view;
}

}  // namespace heed::test
