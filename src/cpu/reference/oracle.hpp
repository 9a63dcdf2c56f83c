#pragma once
// The float64 oracle, used only by tests and the benchmark's correctness check. Written
// independently of heed's kernels: the definition of attention, one row at a time.

#include <cstdint>
#include <vector>

#include "heed/options.hpp"
#include "heed/tensor.hpp"

namespace heed::reference {

// Element `offset` (in elements from view.data) of a view of any dtype, as a double.
double read_element(const TensorView& view, std::int64_t offset);

// out[b, h, i, :] in float64, contiguous [B, Hq, Lq, Dv]. Reads q, k, v, mask and sinks
// through their strides and dtypes; options.max_score_bytes and options.route are ignored.
std::vector<double> attention(const TensorView& q, const TensorView& k, const TensorView& v,
                              double scale, const AttentionOptions& options);

}  // namespace heed::reference
