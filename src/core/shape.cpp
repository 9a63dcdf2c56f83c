#include "heed/shape.hpp"

#include <limits>
#include <string>

#include "core/format.hpp"
#include "heed/error.hpp"

namespace heed {

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* op, const char* what) {
  std::int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product)) {
    throw Error(ErrorKind::InvalidArgument,
                format("[{}] {} overflows ({} * {})", op, what, a, b));
  }
  return product;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* op, const char* what) {
  std::int64_t sum = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &sum)) {
    throw Error(ErrorKind::InvalidArgument,
                format("[{}] {} overflows ({} + {})", op, what, a, b));
  }
  return sum;
}

std::int64_t Shape::numel(const char* op) const {
  std::int64_t count = 1;
  for (std::int64_t dim : dims_) {
    if (dim < 0) {
      throw Error(ErrorKind::InvalidArgument,
                  format("[{}] shape {} has a negative size", op, to_string()));
    }
  }
  for (std::int64_t dim : dims_) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      throw Error(ErrorKind::InvalidArgument,
                  format("[{}] element count of shape {} overflows int64", op, to_string()));
    }
  }
  return count;
}

std::string Shape::to_string() const {
  std::string text = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(dims_[i]);
  }
  return text + "]";
}

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()));
  std::int64_t stride = 1;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    strides[static_cast<std::size_t>(axis)] = stride;
    // A product beyond int64 belongs to a shape without elements (e.g. [0, 8, 2^62, 64]) or one
    // whose count overflows, which validation rejects: it saturates, addressing nothing.
    if (__builtin_mul_overflow(stride, shape[axis] > 1 ? shape[axis] : 1, &stride)) {
      stride = std::numeric_limits<std::int64_t>::max();
    }
  }
  return strides;
}

}  // namespace heed
