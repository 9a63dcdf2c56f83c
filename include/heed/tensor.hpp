#pragma once
// A non-owning view of a caller's tensor: data, dtype, shape and strides in elements.

#include <cstdint>
#include <vector>

#include "heed/device.hpp"
#include "heed/dtype.hpp"
#include "heed/shape.hpp"

namespace heed {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<std::int64_t> strides;  // elements; same rank as shape
  Device device = Device::cpu();

  TensorView() = default;
  // A row-major contiguous view.
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::cpu());
  // A view with explicit strides (any sign, zero for broadcast inputs).
  TensorView(void* data, DType dtype, Shape shape, std::vector<std::int64_t> strides,
             Device device = Device::cpu());

  int rank() const { return shape.rank(); }
  bool is_contiguous() const;
  // True when the last dimension has stride 1 (or size <= 1).
  bool last_dim_contiguous() const;
};

}  // namespace heed
