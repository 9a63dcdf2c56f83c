#include "heed/tensor.hpp"

#include "core/format.hpp"
#include "heed/error.hpp"

namespace heed {

TensorView::TensorView(void* data_, DType dtype_, Shape shape_, Device device_)
    : data(data_), dtype(dtype_), shape(std::move(shape_)), device(device_) {
  strides = contiguous_strides(shape);
}

TensorView::TensorView(void* data_, DType dtype_, Shape shape_, std::vector<std::int64_t> strides_,
                       Device device_)
    : data(data_), dtype(dtype_), shape(std::move(shape_)), strides(std::move(strides_)),
      device(device_) {}

bool TensorView::is_contiguous() const {
  if (strides.size() != static_cast<std::size_t>(shape.rank())) return false;
  const std::vector<std::int64_t> expected = contiguous_strides(shape);  // overflow-free
  for (std::size_t axis = 0; axis < strides.size(); ++axis) {
    if (shape[static_cast<int>(axis)] != 1 && strides[axis] != expected[axis]) return false;
  }
  return true;
}

bool TensorView::last_dim_contiguous() const {
  if (shape.rank() == 0) return true;
  return shape[shape.rank() - 1] <= 1 || strides.back() == 1;
}

}  // namespace heed
