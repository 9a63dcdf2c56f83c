#include "support/support.hpp"

#include "cpu/reference/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace heed::test {

Tolerance tolerance(DType dtype) {
  // The one table (relative plus absolute, atol = rtol).
  switch (dtype) {
    case DType::Float32: return {1e-4, 1e-4};
    case DType::Float16: return {2e-3, 2e-3};
    case DType::BFloat16: return {1.6e-2, 1.6e-2};
    case DType::Bool:
    case DType::Int32: break;
  }
  ADD_FAILURE() << "no tolerance for dtype " << heed::to_string(dtype);
  return {0, 0};
}

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Padded: return "padded";
    case Layout::BLHD: return "blhd";
    case Layout::StridedLast: return "strided_last";
    case Layout::ReversedL: return "reversed_l";
    case Layout::PaddedWide: return "padded_wide";
  }
  return "unknown";
}

bool long_tier() {
  const char* value = std::getenv("HEED_TEST_LONG");
  return value != nullptr && std::string(value) == "1";
}

std::vector<std::int64_t> element_offsets(const Shape& shape,
                                          const std::vector<std::int64_t>& strides) {
  const std::int64_t count = shape.numel("heed::test");
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(count));
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()), 0);
  for (std::int64_t n = 0; n < count; ++n) {
    std::int64_t offset = 0;
    for (std::size_t axis = 0; axis < index.size(); ++axis) offset += index[axis] * strides[axis];
    offsets.push_back(offset);
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      auto& i = index[static_cast<std::size_t>(axis)];
      if (++i < shape[axis]) break;
      i = 0;
    }
  }
  return offsets;
}

namespace {

struct Placement {
  std::vector<std::int64_t> strides;
  std::int64_t storage_elements = 0;
  std::int64_t data_offset = 0;  // elements from the start of the storage
};

std::vector<std::int64_t> row_major(const std::vector<std::int64_t>& physical) {
  std::vector<std::int64_t> strides(physical.size());
  std::int64_t stride = 1;
  for (std::size_t axis = physical.size(); axis-- > 0;) {
    strides[axis] = stride;
    stride *= std::max<std::int64_t>(physical[axis], 1);
  }
  return strides;
}

std::int64_t product(const std::vector<std::int64_t>& dims) {
  std::int64_t count = 1;
  for (auto d : dims) count *= std::max<std::int64_t>(d, 1);
  return count;
}

Placement place(const Shape& shape, Layout layout) {
  const std::vector<std::int64_t>& dims = shape.dims();
  const std::size_t rank = dims.size();
  if (rank != 4 && (layout == Layout::BLHD || layout == Layout::ReversedL)) layout = Layout::Contiguous;
  Placement placement;
  switch (layout) {
    case Layout::Contiguous:
      placement.strides = row_major(dims);
      placement.storage_elements = product(dims);
      break;
    case Layout::Padded:
    case Layout::PaddedWide: {
      const std::int64_t last_pad = layout == Layout::Padded ? 3 : 8;
      std::vector<std::int64_t> physical = dims;
      for (std::size_t axis = 0; axis < rank; ++axis) physical[axis] += axis + 1 == rank ? last_pad : 1;
      placement.strides = row_major(physical);
      placement.storage_elements = product(physical);
      break;
    }
    case Layout::BLHD: {
      const std::vector<std::int64_t> physical = {dims[0], dims[2], dims[1], dims[3]};
      const auto physical_strides = row_major(physical);
      placement.strides = {physical_strides[0], physical_strides[2], physical_strides[1],
                           physical_strides[3]};
      placement.storage_elements = product(physical);
      break;
    }
    case Layout::StridedLast: {
      std::vector<std::int64_t> physical = dims;
      if (rank > 0) physical[rank - 1] *= 2;
      placement.strides = row_major(physical);
      if (rank > 0) placement.strides[rank - 1] = 2;  // every other element of the doubled rows
      placement.storage_elements = product(physical);
      break;
    }
    case Layout::ReversedL:
      placement.strides = row_major(dims);
      placement.storage_elements = product(dims);
      if (dims[2] > 0) placement.data_offset = (dims[2] - 1) * placement.strides[2];
      placement.strides[2] = -placement.strides[2];
      break;
  }
  return placement;
}

void store(DType dtype, unsigned char* at, double value) {
  switch (dtype) {
    case DType::Float32: {
      const auto single = static_cast<float>(value);
      std::memcpy(at, &single, sizeof single);
      return;
    }
    case DType::Float16: {
      const std::uint16_t bits = float_to_half_bits(static_cast<float>(value));
      std::memcpy(at, &bits, sizeof bits);
      return;
    }
    case DType::BFloat16: {
      const std::uint16_t bits = float_to_bfloat16_bits(static_cast<float>(value));
      std::memcpy(at, &bits, sizeof bits);
      return;
    }
    case DType::Bool:
      *at = value != 0.0 ? 1 : 0;
      return;
    case DType::Int32: {
      const auto integer = static_cast<std::int32_t>(value);
      std::memcpy(at, &integer, sizeof integer);
      return;
    }
  }
}

}  // namespace

double read_element(const TensorView& view, std::int64_t offset) { return reference::read_element(view, offset); }

Tensor::Tensor(Shape shape, DType dtype, Layout layout) {
  const Placement placement = place(shape, layout);
  const auto element_bytes = static_cast<std::int64_t>(size_of(dtype));
  // Never empty, so that an empty view still has storage whose bytes can be watched.
  storage_.assign(static_cast<std::size_t>(std::max<std::int64_t>(placement.storage_elements * element_bytes, 64)), 0);
  view_ = TensorView(storage_.data() + placement.data_offset * element_bytes, dtype, std::move(shape),
                     placement.strides);
  offsets_ = element_offsets(view_.shape, view_.strides);
}

double Tensor::get(std::int64_t linear_index) const {
  return read_element(view_, offsets_[static_cast<std::size_t>(linear_index)]);
}

void Tensor::set(std::int64_t linear_index, double value) {
  auto* at = static_cast<unsigned char*>(view_.data) +
             offsets_[static_cast<std::size_t>(linear_index)] * static_cast<std::int64_t>(size_of(view_.dtype));
  store(view_.dtype, at, value);
}

void Tensor::fill_random(std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::bernoulli_distribution attend(0.7);
  for (std::int64_t n = 0; n < numel(); ++n) {
    set(n, view_.dtype == DType::Bool ? (attend(rng) ? 1.0 : 0.0) : normal(rng));
  }
}

void Tensor::poison() {
  const DType dtype = view_.dtype;
  const std::size_t element_bytes = size_of(dtype);
  unsigned char pattern[4] = {0xA5, 0xA5, 0xA5, 0xA5};
  store(dtype, pattern, std::numeric_limits<double>::quiet_NaN());
  if (dtype == DType::Bool) pattern[0] = 0xA5;
  for (std::size_t byte = 0; byte + element_bytes <= storage_.size(); byte += element_bytes) {
    std::memcpy(&storage_[byte], pattern, element_bytes);
  }
}

Comparison compare(const TensorView& out, const std::vector<double>& reference) {
  Comparison result;
  const Tolerance tol = tolerance(out.dtype);
  const std::vector<std::int64_t> offsets = element_offsets(out.shape, out.strides);
  if (offsets.size() != reference.size()) {
    ADD_FAILURE() << "output has " << offsets.size() << " elements, oracle " << reference.size();
    result.nan_count = 1;
    return result;
  }
  const std::int64_t row_length = out.rank() == 4 ? out.shape[3] : 1;
  double error_sum = 0;
  for (std::size_t row_start = 0; row_start < reference.size();
       row_start += static_cast<std::size_t>(std::max<std::int64_t>(row_length, 1))) {
    const std::size_t row_end = std::min(reference.size(), row_start + static_cast<std::size_t>(row_length));
    const bool zero_row = std::all_of(reference.begin() + static_cast<std::ptrdiff_t>(row_start),
                                      reference.begin() + static_cast<std::ptrdiff_t>(row_end),
                                      [](double r) { return r == 0.0; });
    if (zero_row) ++result.zero_rows;
    for (std::size_t n = row_start; n < row_end; ++n) {
      const double got = read_element(out, offsets[n]);
      const double ref = reference[n];
      ++result.count;
      double error;
      if (std::isnan(ref) && std::isnan(got)) {
        ++result.expected_nan;  // NaN inputs give NaN outputs
        error = 0.0;
      } else if (std::isnan(got) || std::isnan(ref)) {
        ++result.nan_count;
        error = std::numeric_limits<double>::infinity();
      } else {
        error = std::abs(got - ref) / (tol.atol + tol.rtol * std::abs(ref));
        if (std::isnan(error)) error = std::numeric_limits<double>::infinity();  // inf - inf
      }
      if (zero_row && got != 0.0) ++result.nonzero_in_zero_rows;
      error_sum += error;
      if (result.worst_index < 0 || error > result.max_error) {
        result.max_error = error;
        result.worst_index = static_cast<std::int64_t>(n);
        result.worst_got = got;
        result.worst_ref = ref;
      }
    }
  }
  result.mean_error = result.count > 0 ? error_sum / static_cast<double>(result.count) : 0.0;
  return result;
}

::testing::AssertionResult matches_reference(const TensorView& out,
                                             const std::vector<double>& reference) {
  const Comparison c = compare(out, reference);
  const bool ok = c.nan_count == 0 && c.max_error <= 1.0 && c.mean_error <= kMeanErrorFraction &&
                  c.nonzero_in_zero_rows == 0;
  auto result = ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  result << "dtype " << heed::to_string(out.dtype) << ": " << c.count << " elements, " << c.nan_count
         << " NaN, max normalised error " << c.max_error << " (limit 1), mean " << c.mean_error
         << " (limit " << kMeanErrorFraction << "), worst at " << c.worst_index << " got "
         << c.worst_got << " want " << c.worst_ref << ", " << c.zero_rows
         << " fully masked rows with " << c.nonzero_in_zero_rows << " non-zero elements";
  return result;
}

::testing::AssertionResult gaps_untouched(const Tensor& tensor,
                                          const std::vector<unsigned char>& before) {
  const std::vector<unsigned char>& after = tensor.storage();
  if (after.size() != before.size()) return ::testing::AssertionFailure() << "storage resized";
  std::vector<bool> inside(after.size(), false);
  const TensorView& view = tensor.view();
  const auto element_bytes = static_cast<std::int64_t>(size_of(view.dtype));
  const std::int64_t base = static_cast<const unsigned char*>(view.data) - after.data();
  for (std::int64_t offset : element_offsets(view.shape, view.strides)) {
    for (std::int64_t byte = 0; byte < element_bytes; ++byte) {
      inside[static_cast<std::size_t>(base + offset * element_bytes + byte)] = true;
    }
  }
  std::int64_t changed = 0, first = -1;
  for (std::size_t byte = 0; byte < after.size(); ++byte) {
    if (!inside[byte] && after[byte] != before[byte]) {
      if (first < 0) first = static_cast<std::int64_t>(byte);
      ++changed;
    }
  }
  if (changed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << changed << " bytes outside the view were written, first at byte "
                                       << first;
}

}  // namespace heed::test
