// Shapes, overflow-checked products, tensor views and the error type.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "heed/error.hpp"
#include "heed/shape.hpp"
#include "heed/tensor.hpp"

namespace heed {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Runs body, expecting heed::Error of kind InvalidArgument; returns its message.
template <typename Body>
std::string invalid_argument_message(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(Shape, NumelAndRank) {
  EXPECT_EQ((Shape{2, 3, 4}).numel(), 24);
  EXPECT_EQ((Shape{2, 3, 4}).rank(), 3);
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ((Shape{0, 5}).numel(), 0);
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}).numel(), std::int64_t{1} << 62);
  EXPECT_EQ((Shape{kMax, 1}).numel(), kMax);
  EXPECT_EQ((Shape{1, 4, 16, 32}).to_string(), "[1, 4, 16, 32]");
  EXPECT_EQ(Shape{}.to_string(), "[]");
  EXPECT_EQ(Shape(std::vector<std::int64_t>{7, 9}), (Shape{7, 9}));
  EXPECT_NE((Shape{7, 9}), (Shape{9, 7}));
}

TEST(Shape, NumelRejectsOverflowWithTheOperation) {
  const std::string message = invalid_argument_message(
      [] { (void)(Shape{std::int64_t{1} << 62, 4}).numel("heed::attention"); });
  EXPECT_TRUE(starts_with(message, "[heed::attention]")) << message;
  EXPECT_NE(message.find("4611686018427387904"), std::string::npos) << message;
  const std::string three = invalid_argument_message(
      [] { (void)(Shape{std::int64_t{1} << 31, std::int64_t{1} << 31, 2}).numel("heed::test_op"); });
  EXPECT_TRUE(starts_with(three, "[heed::test_op]")) << three;
  invalid_argument_message([] { (void)(Shape{kMax, 2}).numel(); });
}

TEST(Shape, NumelRejectsNegativeSizes) {
  const std::string message = invalid_argument_message([] { (void)(Shape{2, -3, 4}).numel("heed::attention"); });
  EXPECT_TRUE(starts_with(message, "[heed::attention]")) << message;
  EXPECT_NE(message.find("-3"), std::string::npos) << message;
  // Even where the product would be zero or positive.
  invalid_argument_message([] { (void)(Shape{-1, -1}).numel(); });
  invalid_argument_message([] { (void)(Shape{0, -1}).numel(); });
}

TEST(CheckedArithmetic, MultipliesAndAdds) {
  EXPECT_EQ(checked_mul(3, 4, "op", "x"), 12);
  EXPECT_EQ(checked_mul(kMax, 1, "op", "x"), kMax);
  EXPECT_EQ(checked_mul(kMax, 0, "op", "x"), 0);
  EXPECT_EQ(checked_add(kMax - 1, 1, "op", "x"), kMax);
  EXPECT_EQ(checked_add(0, 0, "op", "x"), 0);
}

TEST(CheckedArithmetic, OverflowNamesOperationWhatAndValues) {
  const std::string mul = invalid_argument_message(
      [] { (void)checked_mul(std::int64_t{1} << 62, 2, "heed::attention", "q elements"); });
  EXPECT_TRUE(starts_with(mul, "[heed::attention] q elements overflows")) << mul;
  EXPECT_NE(mul.find("4611686018427387904"), std::string::npos) << mul;
  EXPECT_NE(mul.find("2"), std::string::npos) << mul;
  const std::string add =
      invalid_argument_message([] { (void)checked_add(kMax, 1, "heed::attention", "bytes"); });
  EXPECT_TRUE(starts_with(add, "[heed::attention] bytes overflows")) << add;
  EXPECT_NE(add.find("9223372036854775807"), std::string::npos) << add;
}

TEST(CheckedArithmetic, RejectsNegativeFactors) {
  const std::string mul = invalid_argument_message([] { (void)checked_mul(-2, 3, "heed::op", "size"); });
  EXPECT_TRUE(starts_with(mul, "[heed::op]")) << mul;
  invalid_argument_message([] { (void)checked_mul(3, -2, "heed::op", "size"); });
  invalid_argument_message([] { (void)checked_add(-1, 3, "heed::op", "size"); });
}

TEST(ContiguousStrides, RowMajor) {
  EXPECT_EQ(contiguous_strides(Shape{2, 3, 4}), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(contiguous_strides(Shape{5}), (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(contiguous_strides(Shape{}).empty());
}

// The strides of a shape whose element count overflows still fit; computing them must not
// overflow either (the validation then rejects the shape by name).
TEST(ContiguousStrides, ShapeWithOverflowingCountHasExactStrides) {
  const Shape huge{std::int64_t{1} << 31, std::int64_t{1} << 31, 4, 64};
  EXPECT_EQ(contiguous_strides(huge), (std::vector<std::int64_t>{std::int64_t{1} << 39, 256, 64, 1}));
  float data[1] = {};
  const TensorView view(data, DType::Float32, huge);
  EXPECT_EQ(view.strides[0], std::int64_t{1} << 39);
}

// An empty shape's products may pass int64 ([0, 8, 2^63 - 1, 64]): those strides saturate, and the
// view is still contiguous.
TEST(ContiguousStrides, EmptyShapeWithProductsBeyondInt64Saturates) {
  const Shape empty{0, 8, kMax, 64};
  EXPECT_EQ(contiguous_strides(empty), (std::vector<std::int64_t>{kMax, kMax, 64, 1}));
  const TensorView view(nullptr, DType::Float32, empty);
  EXPECT_EQ(view.strides, contiguous_strides(empty));
  EXPECT_TRUE(view.is_contiguous());
  EXPECT_EQ(contiguous_strides(Shape{kMax, kMax, 0}), (std::vector<std::int64_t>{kMax, 1, 1}));
  EXPECT_TRUE(TensorView(nullptr, DType::Float32, Shape{2, 0, 3}).is_contiguous());
  EXPECT_FALSE(TensorView(nullptr, DType::Float32, Shape{0, kMax, 2}, {0, 0, 0}).is_contiguous());
}

TEST(TensorViewTest, ContiguityQueries) {
  float data[64] = {};
  TensorView contiguous(data, DType::Float32, Shape{2, 3, 4});
  EXPECT_EQ(contiguous.strides, (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_TRUE(contiguous.is_contiguous());
  EXPECT_TRUE(contiguous.last_dim_contiguous());
  EXPECT_EQ(contiguous.rank(), 3);

  TensorView permuted(data, DType::Float32, Shape{2, 3, 4}, {12, 1, 3});
  EXPECT_FALSE(permuted.is_contiguous());
  EXPECT_FALSE(permuted.last_dim_contiguous());

  TensorView padded(data, DType::Float32, Shape{2, 3, 4}, {15, 5, 1});
  EXPECT_FALSE(padded.is_contiguous());
  EXPECT_TRUE(padded.last_dim_contiguous());

  TensorView single_column(data, DType::Float32, Shape{3, 1}, {1, 7});
  EXPECT_TRUE(single_column.last_dim_contiguous());
}

TEST(ErrorTest, KindsAndMessages) {
  EXPECT_STREQ(to_string(ErrorKind::InvalidArgument), "InvalidArgument");
  EXPECT_STREQ(to_string(ErrorKind::Unsupported), "Unsupported");
  EXPECT_STREQ(to_string(ErrorKind::OutOfMemory), "OutOfMemory");
  EXPECT_STREQ(to_string(ErrorKind::Internal), "Internal");
  const Error error(ErrorKind::Unsupported, "[heed::attention] no CUDA device");
  EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
  EXPECT_STREQ(error.what(), "[heed::attention] no CUDA device");
  // Catchable as std::runtime_error.
  try {
    throw Error(ErrorKind::OutOfMemory, "[heed::alloc] 12 bytes");
  } catch (const std::runtime_error& caught) {
    EXPECT_STREQ(caught.what(), "[heed::alloc] 12 bytes");
  }
}

}  // namespace
}  // namespace heed
