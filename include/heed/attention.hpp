#pragma once
// Exact scaled-dot-product attention:
//   out[b,h,i,:] = softmax_j(scale * q[b,h,i,:]·k[b,h/g,j,:] + mask) · v[b,h/g,j,:],  g = Hq/Hkv.

#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/tensor.hpp"

namespace heed {

// Runs the plan of these views into `out` ([B, Hq, Lq, Dv], q's dtype, any strides).
// Invalid input throws before any work and leaves `out` untouched.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out,
               float scale, const AttentionOptions& options, Stream stream = {});

}  // namespace heed
