#pragma once
// Plan once, run many. A Runner is made once per batch layout from a complete call (tensors,
// metadata, scale, options): construction validates, plans, checks the device pointers and takes
// its scratch, once; run() launches the planned kernels on the bound buffers and does nothing
// else (no validation, planning, allocation or pointer query), so that it can be captured in a
// CUDA graph and replayed.
//
// Between runs the caller may change in place the data of every bound tensor and the
// device-resident metadata (cu_seqlens, seqlens_k, block_table). The grid is the plan's: B and
// the max_seqlen_* bounds of construction; a smaller real batch gives its unused sequences
// length 0. The kernels clamp what they read to those bounds and to the tensors, so no value can
// make them read or write outside the caller's buffers; values outside the contract (a length
// above its bound, a page outside the cache) give unspecified results.
//
// Host-resident metadata: the CPU reads it in place at each run. On CUDA the Runner copies it to
// a device buffer of its own (the plan's "metadata" scratch) at construction and again at each
// update_metadata(), which re-validates it first; run() reads only that copy.

#include <memory>

#include "heed/device.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/serving.hpp"
#include "heed/tensor.hpp"

namespace heed {

class Runner {
 public:
  // The call attention(q, k, v, out, scale, options) would make. `stream` orders the scratch's
  // allocation and the metadata's copy; construction waits for it before returning.
  static Runner dense(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                      float scale, const AttentionOptions& options, Stream stream = {});
  // attention_varlen's call.
  static Runner varlen(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                       const TensorView& out, float scale, const AttentionOptions& options, Stream stream = {});
  // attention_paged's call.
  static Runner paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                      const PagedKv& pages, const TensorView& out, float scale, const AttentionOptions& options,
                      Stream stream = {});

  Runner(Runner&&) noexcept;
  Runner& operator=(Runner&&) noexcept;
  // Frees the scratch on the stream of the last run: destroy a Runner only after the work that
  // reads it (graph replays included) is queued or done, and not while that stream captures.
  ~Runner();

  // The plan made at construction (the same as plan_attention* of the call).
  const AttentionPlan& plan() const;

  // The planned launches on `stream` over the bound buffers' current contents.
  void run(Stream stream = {});

  // Re-validates host-resident metadata changed in place against the plan (its lengths within
  // the bounds of construction) and, on CUDA, copies it to the Runner's device copy on `stream`
  // (ordered before the runs that follow on it). Nothing to do for a dense call.
  void update_metadata(Stream stream = {});

 private:
  struct State;
  explicit Runner(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace heed
