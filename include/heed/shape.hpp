#pragma once
// Shapes with overflow-checked products.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace heed {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }

  // Product of the dimensions; throws InvalidArgument naming `op` on a negative size or on
  // overflow of int64.
  std::int64_t numel(const char* op = "heed::shape") const;
  std::string to_string() const;  // "[1, 4, 16, 32]"

  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::int64_t> dims_;
};

// Strides (in elements) of a row-major contiguous tensor of this shape.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

// a * b, throwing InvalidArgument "[op] <what> overflows (a * b)" on overflow or a negative factor.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* op, const char* what);
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* op, const char* what);

}  // namespace heed
