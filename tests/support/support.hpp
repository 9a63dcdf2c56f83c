#pragma once
// Shared test support: owned tensors of each dtype and layout, random data, poisoning, and
// the one tolerance table for comparing heed against the float64 oracle.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "heed/heed.hpp"

namespace heed::test {

// |got - ref| <= atol + rtol * |ref| on every element (max error), and the mean of the
// normalised error |got - ref| / (atol + rtol * |ref|) at most kMeanErrorFraction.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
Tolerance tolerance(DType dtype);
inline constexpr double kMeanErrorFraction = 0.25;

// How a tensor's elements sit in its storage.
enum class Layout {
  Contiguous,
  Padded,       // every dimension padded: gaps between rows, heads and batches
  BLHD,         // rank 4 [B, H, L, D] stored as [B, L, H, D] (FlashAttention's layout)
  StridedLast,  // last dimension with stride 2
  ReversedL,    // rank 4: dimension 2 with a negative stride
  PaddedWide,   // every dimension padded, the last by 8 elements: gaps, yet rows of 2-byte
                // types whose size is a multiple of 16 bytes stay 16-byte aligned
};
const char* to_string(Layout layout);

// The elements of a rank-n shape in row-major order of their logical indices.
std::vector<std::int64_t> element_offsets(const Shape& shape, const std::vector<std::int64_t>& strides);

// A tensor that owns its storage; view() describes the elements inside it. Not copyable
// (views point into the storage); movable.
class Tensor {
 public:
  Tensor(Shape shape, DType dtype, Layout layout = Layout::Contiguous);
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  TensorView& view() { return view_; }
  const TensorView& view() const { return view_; }
  const std::vector<unsigned char>& storage() const { return storage_; }

  // Element at a logical row-major index, through the view's strides and dtype.
  double get(std::int64_t linear_index) const;
  void set(std::int64_t linear_index, double value);  // rounded to the dtype
  std::int64_t numel() const { return static_cast<std::int64_t>(offsets_.size()); }

  // Normal(0, stddev) values rounded to the dtype (Bool: true with probability 0.7).
  void fill_random(std::mt19937_64& rng, double stddev = 1.0);
  // Every byte of the storage, gaps included: NaN for floating dtypes, 0xA5 for Bool.
  void poison();

 private:
  std::vector<unsigned char> storage_;
  TensorView view_;
  std::vector<std::int64_t> offsets_;  // element offsets from view_.data, logical order
};

// Reads element `offset` (in elements from view.data) as double.
double read_element(const TensorView& view, std::int64_t offset);

struct Comparison {
  std::int64_t count = 0;
  std::int64_t nan_count = 0;     // NaN where the oracle is not, or the other way round
  std::int64_t expected_nan = 0;  // NaN where the oracle is NaN too
  double max_error = 0;   // max normalised error
  double mean_error = 0;  // mean normalised error
  std::int64_t worst_index = -1;
  double worst_got = 0, worst_ref = 0;
  std::int64_t zero_rows = 0;           // rows where the oracle is exactly zero
  std::int64_t nonzero_in_zero_rows = 0;  // elements of those rows that are not exactly 0
};

// Compares `out` (any strides, [B, Hq, Lq, Dv]) with the oracle's contiguous result.
Comparison compare(const TensorView& out, const std::vector<double>& reference);
// Passes when no NaN, max and mean within tolerance(dtype), and oracle-zero rows exactly 0.
::testing::AssertionResult matches_reference(const TensorView& out,
                                             const std::vector<double>& reference);

// Every byte of `after` equals `before` outside the elements of `view` (which lives in it).
::testing::AssertionResult gaps_untouched(const Tensor& tensor,
                                          const std::vector<unsigned char>& before);

// The environment flag of the long tier.
bool long_tier();

}  // namespace heed::test
