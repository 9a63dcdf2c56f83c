#pragma once
// The descriptor of merge_states (serving.hpp): two partial results of the same rows and where
// their merge goes. Rows are out's leading dimensions; each row has `width` values.

#include <cstdint>
#include <vector>

#include "heed/dtype.hpp"
#include "heed/serving.hpp"

namespace heed::call {

inline constexpr const char* kMergeOp = "heed::merge_states";

struct Merge {
  DType dtype = DType::Float32;
  std::vector<std::int64_t> rows;  // out's shape without its last dimension
  std::int64_t width = 0;          // Dv
  const void* out_a = nullptr;
  const void* out_b = nullptr;
  void* out = nullptr;
  std::vector<std::int64_t> out_a_strides, out_b_strides, out_strides;  // rank rows + 1
  const float* lse_a = nullptr;
  const float* lse_b = nullptr;
  float* lse = nullptr;
  std::vector<std::int64_t> lse_a_strides, lse_b_strides, lse_strides;  // rank rows
};

Merge validate_merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                     const TensorView& lse_b, const TensorView& out, const TensorView& lse);

}  // namespace heed::call
