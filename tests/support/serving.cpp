#include "support/serving.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <variant>

namespace heed::test {

IntTensor::IntTensor(Shape shape, const std::vector<std::int64_t>& values, std::int64_t row_pad) {
  const std::int64_t rows = shape.rank() == 2 ? shape[0] : 1;
  const std::int64_t columns = shape.rank() >= 1 ? shape[shape.rank() - 1] : 1;
  const std::int64_t row_stride = columns + row_pad;
  // A sentinel fills the padding, so that a read of a gap shows up as a wild page or length.
  constexpr std::int32_t kGap = -77777;
  storage_.assign(static_cast<std::size_t>(std::max<std::int64_t>(rows * row_stride, 1)), kGap);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < columns; ++c) {
      const auto at = static_cast<std::size_t>(r * columns + c);
      if (at < values.size()) storage_[static_cast<std::size_t>(r * row_stride + c)] = static_cast<std::int32_t>(values[at]);
    }
  }
  std::vector<std::int64_t> strides;
  if (shape.rank() == 2) strides = {row_stride, 1};
  if (shape.rank() == 1) strides = {1};
  view_ = TensorView(storage_.data(), DType::Int32, std::move(shape), std::move(strides));
}

std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu{0};
  for (std::int64_t length : lengths) cu.push_back(cu.back() + length);
  return cu;
}

TensorView permuted(const TensorView& view, const std::vector<int>& order) {
  std::vector<std::int64_t> dims, strides;
  for (int axis : order) {
    dims.push_back(view.shape[axis]);
    strides.push_back(view.strides[static_cast<std::size_t>(axis)]);
  }
  return TensorView(view.data, view.dtype, Shape(dims), strides, view.device);
}

TensorView as_rank4(const TensorView& view) {
  if (view.rank() == 4) return view;
  return TensorView(view.data, view.dtype, Shape{1, view.shape[0], view.shape[1], view.shape[2]},
                    {0, view.strides[0], view.strides[1], view.strides[2]}, view.device);
}

Tolerance lse_tolerance(DType input_dtype) {
  if (input_dtype == DType::Float32) return {1e-4, 1e-4};
  return {2e-2, 0.0};
}

::testing::AssertionResult lse_matches(const TensorView& lse, const std::vector<double>& reference,
                                       DType input_dtype) {
  if (lse.dtype != DType::Float32) return ::testing::AssertionFailure() << "lse must be float32";
  const std::vector<std::int64_t> offsets = element_offsets(lse.shape, lse.strides);
  if (offsets.size() != reference.size()) {
    return ::testing::AssertionFailure() << "lse has " << offsets.size() << " elements, oracle " << reference.size();
  }
  const Tolerance tol = lse_tolerance(input_dtype);
  std::int64_t failures = 0, first = -1, infinite = 0;
  double first_got = 0, first_ref = 0, worst = 0;
  for (std::size_t n = 0; n < offsets.size(); ++n) {
    const double got = read_element(lse, offsets[n]);
    const double ref = reference[n];
    bool ok;
    if (std::isnan(ref) || std::isnan(got)) {
      ok = std::isnan(ref) && std::isnan(got);
    } else if (std::isinf(ref) || std::isinf(got)) {
      ok = got == ref;
      infinite += std::isinf(ref) ? 1 : 0;
    } else {
      const double error = std::abs(got - ref) / (tol.atol + tol.rtol * std::abs(ref));
      worst = std::max(worst, error);
      ok = error <= 1.0;
    }
    if (!ok && failures++ == 0) {
      first = static_cast<std::int64_t>(n);
      first_got = got;
      first_ref = ref;
    }
  }
  auto result = failures == 0 ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  result << "lse of " << heed::to_string(input_dtype) << " inputs: " << offsets.size() << " rows (" << infinite
         << " -inf in the oracle), " << failures << " outside tolerance, max normalised error " << worst;
  if (failures > 0) result << ", first at " << first << " got " << first_got << " want " << first_ref;
  return result;
}

std::uint64_t seed_of(const std::string& name) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::int64_t sum(const std::vector<std::int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), std::int64_t{0});
}

Tensor filled(const Shape& shape, DType dtype, Layout layout, bool head_major, std::mt19937_64& rng, double stddev) {
  if (!head_major) {
    Tensor tensor(shape, dtype, layout);
    tensor.fill_random(rng, stddev);
    return tensor;
  }
  const std::vector<int> swap = shape.rank() == 3 ? std::vector<int>{1, 0, 2} : std::vector<int>{0, 2, 1, 3};
  std::vector<std::int64_t> stored;
  for (int axis : swap) stored.push_back(shape[axis]);
  Tensor tensor(Shape(stored), dtype, Layout::Contiguous);
  tensor.fill_random(rng, stddev);
  tensor.view() = permuted(tensor.view(), swap);
  return tensor;
}

Tensor sink_logits(std::int64_t q_heads, std::int64_t typical_keys, std::mt19937_64& rng) {
  Tensor sinks(Shape{q_heads}, DType::Float32);
  std::normal_distribution<double> logit(std::log(static_cast<double>(std::max<std::int64_t>(typical_keys, 1))), 1.5);
  for (std::int64_t h = 0; h < q_heads; ++h) sinks.set(h, logit(rng));
  return sinks;
}

CallOutputs::CallOutputs(const Shape& out_shape, const Shape& lse_shape, DType dtype, Layout layout)
    : out(out_shape, dtype, layout), lse(lse_shape, DType::Float32, layout) {
  poison();
}

void CallOutputs::poison() {
  out.poison();
  lse.poison();
  out_before = out.storage();
  lse_before = lse.storage();
}

void expect_matches(const CallOutputs& o, const reference::AttentionResult& ref, DType dtype, bool with_lse,
                    bool empty_rows) {
  EXPECT_TRUE(gaps_untouched(o.out, o.out_before));
  EXPECT_TRUE(matches_reference(as_rank4(o.out.view()), ref.out));
  const Comparison comparison = compare(as_rank4(o.out.view()), ref.out);
  if (empty_rows) EXPECT_GT(comparison.zero_rows, 0) << "the case was meant to have rows that see no key";
  if (with_lse) {
    EXPECT_TRUE(gaps_untouched(o.lse, o.lse_before));
    EXPECT_TRUE(lse_matches(o.lse.view(), ref.lse, dtype));
  } else {
    EXPECT_EQ(o.lse.storage(), o.lse_before) << "lse written without options.lse";
  }
}

void expect_route(const AttentionPlan& plan, RouteChoice route) {
  if (route == RouteChoice::Vector) EXPECT_TRUE(std::holds_alternative<route::Vector>(plan.kernel));
  if (route == RouteChoice::Tiled) EXPECT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel));
  if (route == RouteChoice::Composed) {
    EXPECT_TRUE(std::holds_alternative<route::Composed>(plan.kernel) ||
                std::holds_alternative<route::ComposedBlocks>(plan.kernel));
  }
}

PageAssignment assign_pages(const std::vector<std::int64_t>& kv_lens, std::int64_t page_size,
                            std::int64_t shared_pages, std::mt19937_64& rng) {
  const auto batch = static_cast<std::int64_t>(kv_lens.size());
  std::vector<std::int64_t> pages_of, shared;
  std::int64_t fresh = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    pages_of.push_back((kv_lens[static_cast<std::size_t>(b)] + page_size - 1) / page_size);
    shared.push_back(b == 0 ? 0 : std::min({shared_pages, pages_of.back(), pages_of.front()}));
    fresh += pages_of.back() - shared.back();
  }
  constexpr std::int64_t kUnreadPages = 3;
  PageAssignment a;
  a.num_pages = fresh + kUnreadPages;
  a.max_pages = *std::max_element(pages_of.begin(), pages_of.end()) + 1;
  std::vector<std::int64_t> pool(static_cast<std::size_t>(a.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  a.table.assign(static_cast<std::size_t>(batch * a.max_pages), -1);
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t p = 0; p < pages_of[static_cast<std::size_t>(b)]; ++p) {
      a.table[static_cast<std::size_t>(b * a.max_pages + p)] =
          p < shared[static_cast<std::size_t>(b)] ? a.table[static_cast<std::size_t>(p)] : pool[next++];
    }
  }
  a.unread.assign(pool.begin() + static_cast<std::ptrdiff_t>(next), pool.end());
  return a;
}

void poison_unread_pages(Tensor& cache, const PageAssignment& a) {
  const std::int64_t per_page = cache.numel() / std::max<std::int64_t>(a.num_pages, 1);
  for (std::int64_t page : a.unread) {
    if (page == 0 || page == a.num_pages - 1) continue;
    for (std::int64_t n = page * per_page; n < (page + 1) * per_page; ++n) {
      cache.set(n, std::numeric_limits<double>::quiet_NaN());
    }
  }
}

void poison_page_tails(Tensor& cache, const PageAssignment& a, const std::vector<std::int64_t>& kv_lens) {
  const TensorView& view = cache.view();
  const std::int64_t page_size = view.shape[1];
  std::vector<std::int64_t> read(static_cast<std::size_t>(a.num_pages), -1);  // rows some sequence reads
  for (std::size_t b = 0; b < kv_lens.size(); ++b) {
    for (std::int64_t p = 0; p * page_size < kv_lens[b]; ++p) {
      const std::int64_t page = a.table[b * static_cast<std::size_t>(a.max_pages) + static_cast<std::size_t>(p)];
      auto& rows = read[static_cast<std::size_t>(page)];
      rows = std::max(rows, std::min(page_size, kv_lens[b] - p * page_size));
    }
  }
  // The cache's storage is contiguous in its stored order (head-major or not): an element's
  // storage index is its offset through the view's strides.
  for (std::int64_t page = 0; page < a.num_pages; ++page) {
    for (std::int64_t row = std::max<std::int64_t>(read[static_cast<std::size_t>(page)], 0);
         read[static_cast<std::size_t>(page)] >= 0 && row < page_size; ++row) {
      for (std::int64_t h = 0; h < view.shape[2]; ++h) {
        for (std::int64_t e = 0; e < view.shape[3]; ++e) {
          cache.set(page * view.strides[0] + row * view.strides[1] + h * view.strides[2] + e * view.strides[3],
                    std::numeric_limits<double>::quiet_NaN());
        }
      }
    }
  }
}

::testing::AssertionResult gaps_equal(const TensorView& view, const std::vector<unsigned char>& before,
                                      const std::vector<unsigned char>& after) {
  std::vector<bool> element(before.size(), false);
  const std::size_t size = size_of(view.dtype);
  const auto start = static_cast<const unsigned char*>(view.data) - after.data();
  for (std::int64_t offset : element_offsets(view.shape, view.strides)) {
    for (std::size_t byte = 0; byte < size; ++byte) {
      element[static_cast<std::size_t>(start + offset * static_cast<std::int64_t>(size)) + byte] = true;
    }
  }
  for (std::size_t byte = 0; byte < before.size(); ++byte) {
    if (!element[byte] && before[byte] != after[byte]) {
      return ::testing::AssertionFailure() << "byte " << byte << " outside the output was written";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace heed::test
