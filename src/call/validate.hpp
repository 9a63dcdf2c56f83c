#pragma once
// Validation: the one place where an attention call's inputs are checked, for plan_attention
// and attention alike, and where its descriptor is built. Every check throws InvalidArgument
// with "[heed::attention] ..." and the values, before any work.

#include <cstddef>
#include <string>

#include "call/call.hpp"
#include "heed/options.hpp"
#include "heed/serving.hpp"
#include "heed/shape.hpp"
#include "heed/tensor.hpp"

namespace heed::call {

// The checks on shapes, dtypes and options (design.md's contract); the layout facts are those
// of contiguous, aligned inputs.
Problem validate_problem(const Shape& q, const Shape& k, const Shape& v, DType q_dtype, DType k_dtype,
                         DType v_dtype, const AttentionOptions& options);

// The checks on three views (strides, devices) besides validate_problem's; the descriptor has
// no output yet.
Call validate_views(const TensorView& q, const TensorView& k, const TensorView& v,
                    const AttentionOptions& options);

// Everything attention checks before planning: the views, the output, the scale, data pointers,
// the devices of mask and sinks, the workspace's alignment.
Call validate_call(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                   float scale, const AttentionOptions& options);

// The serving forms (serving.hpp): their views, metadata (validated fully where it is on the
// host) and out, into one descriptor of Form Ragged or Paged.
Call validate_ragged(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                     const TensorView* out, float scale, const AttentionOptions& options);
Call validate_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache, const PagedKv& pages,
                    const TensorView* out, float scale, const AttentionOptions& options);

// A caller's workspace must hold the plan's scratch.
void check_workspace(const Problem& p, const AttentionOptions& options, std::size_t scratch_bytes);

// The first line of every plan's explanation: "shape: B .., Hq .. / Hkv .. (group ..), ..",
// the dtype, then `device` (e.g. " on cuda:0 (NVIDIA H200, 132 SMs)"; empty on the CPU), then
// the options.
std::string describe(const Problem& p, const std::string& device = "");

}  // namespace heed::call
