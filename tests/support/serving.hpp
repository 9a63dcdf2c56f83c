#pragma once
// Test support for the serving forms: int32 host metadata, permuted views, filled inputs, poisoned
// outputs, and the comparison of out and lse with the serving oracle's.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference/serving_oracle.hpp"
#include "support/support.hpp"

namespace heed::test {

// An int32 host tensor of rank 1 or 2 that owns its storage. With row_pad > 0 the rows of a
// rank-2 tensor sit row_pad elements apart beyond their length (a non-contiguous table).
class IntTensor {
 public:
  IntTensor(Shape shape, const std::vector<std::int64_t>& values, std::int64_t row_pad = 0);
  IntTensor(IntTensor&&) = default;
  IntTensor& operator=(IntTensor&&) = default;
  IntTensor(const IntTensor&) = delete;
  IntTensor& operator=(const IntTensor&) = delete;

  TensorView& view() { return view_; }
  const TensorView& view() const { return view_; }

 private:
  std::vector<std::int32_t> storage_;
  TensorView view_;
};

// [0, l0, l0 + l1, ...]: the cu_seqlens of these lengths.
std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths);

// A view of the same elements with its axes reordered: axis a of the result is axis order[a] of
// the input (head-major pages viewed token-major, and the like).
TensorView permuted(const TensorView& view, const std::vector<int>& order);

// A [rows, H, E] view as [1, rows, H, E], so that compare() and matches_reference() treat each
// (row, head) as one output row of E values; a rank-4 view as it is.
TensorView as_rank4(const TensorView& view);

// |got - ref| <= atol + rtol * |ref| for a row's log-sum-exp, by the dtype of the attention's
// inputs: float32 rounding for float32 inputs; 16-bit inputs reach the scores through their own
// rounding of q and k, which moves a logit by up to ~1e-2.
Tolerance lse_tolerance(DType input_dtype);

// `lse` (float32, any strides and rank) against the oracle's contiguous values: within
// lse_tolerance, -inf exactly where the oracle's is -inf and nowhere else, NaN likewise.
::testing::AssertionResult lse_matches(const TensorView& lse, const std::vector<double>& reference,
                                       DType input_dtype);

struct NamedRoute {
  RouteChoice route;
  const char* name;
};
// The routes every serving form takes (ragged batches take Composed too).
inline constexpr NamedRoute kFusedRoutes[] = {
    {RouteChoice::Auto, "auto"}, {RouteChoice::Vector, "vector"}, {RouteChoice::Tiled, "tiled"}};
inline constexpr DType kDtypes[] = {DType::Float32, DType::Float16, DType::BFloat16};

// A case's random seed, from its name (FNV-1a).
std::uint64_t seed_of(const std::string& name);
std::int64_t sum(const std::vector<std::int64_t>& values);

// A filled tensor of `shape` (normal(0, stddev) values); head_major stores axes 0 and 1 of a
// [T, H, E] tensor swapped, or axes 1 and 2 of a [P, S, H, E] cache (pages of [H, S, E]), and
// views them in `shape`'s order. Tensor::get and set keep the stored order.
Tensor filled(const Shape& shape, DType dtype, Layout layout, bool head_major, std::mt19937_64& rng, double stddev);

// Sink logits near log(typical_keys), so that exp(sink) weighs as much as the keys do.
Tensor sink_logits(std::int64_t q_heads, std::int64_t typical_keys, std::mt19937_64& rng);

// The out and lse tensors of one call, poisoned (NaN), with their bytes before the call.
struct CallOutputs {
  Tensor out, lse;
  std::vector<unsigned char> out_before, lse_before;
  CallOutputs(const Shape& out_shape, const Shape& lse_shape, DType dtype, Layout layout);
  void poison();
};

// Everything a serving case checks after its call: out within the dtype's tolerance, its gaps
// untouched; with `with_lse` the lse likewise, else lse not written at all; with `empty_rows` that
// the case has rows that see no key (zeros).
void expect_matches(const CallOutputs& o, const reference::AttentionResult& ref, DType dtype, bool with_lse,
                    bool empty_rows);

// A forced route is the route the plan takes.
void expect_route(const AttentionPlan& plan, RouteChoice route);

// Pages in random order: each sequence's own pages drawn from a shuffled pool, its first
// shared_pages those of sequence 0 (prefix sharing), unused table entries -1, one column of
// padding, and a few pages no sequence reads.
struct PageAssignment {
  std::vector<std::int64_t> table;  // [B, max_pages]
  std::int64_t max_pages = 0;
  std::int64_t num_pages = 0;
  std::vector<std::int64_t> unread;  // pages of the cache no table entry names
};
PageAssignment assign_pages(const std::vector<std::int64_t>& kv_lens, std::int64_t page_size,
                            std::int64_t shared_pages, std::mt19937_64& rng);

// NaN in every element of the pages no sequence reads, so that a read of one shows in the
// output. The first and last pages stay finite: an out-of-range entry is clamped there.
void poison_unread_pages(Tensor& cache, const PageAssignment& a);

// NaN in the rows of each read page that no sequence reads (the tail of a sequence's last page),
// so that a kernel loading whole tiles shows a missing mask or V-row clear in the output.
void poison_page_tails(Tensor& cache, const PageAssignment& a, const std::vector<std::int64_t>& kv_lens);

// Bytes of `after` outside the elements of `view` (a view into `after`'s storage) equal `before`'s.
::testing::AssertionResult gaps_equal(const TensorView& view, const std::vector<unsigned char>& before,
                                      const std::vector<unsigned char>& after);

}  // namespace heed::test
