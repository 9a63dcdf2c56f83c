// The top of the call: every entry point validates into one descriptor, then takes the steps of
// prepared.hpp (plan, checks, launches).

#include "heed/attention.hpp"

#include "call/merge.hpp"
#include "call/validate.hpp"
#include "cpu/merge.hpp"
#include "heed/error.hpp"
#include "heed/plan.hpp"
#include "heed/serving.hpp"
#include "plan/planner.hpp"
#include "prepared.hpp"
#if HEED_HAS_CUDA
#include "cuda/merge.hpp"
#endif

namespace heed {
namespace {

using detail::plan_on;

// Validated call of any form, checked, planned and run on q's device.
void run_call(const call::Call& c, Device device, const AttentionOptions& options, Stream stream) {
  detail::run_once(detail::prepare(c, device, options, detail::Planning::Memoized), options, stream);
}

}  // namespace

AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options, Device device) {
  return plan_on(call::validate_problem(q, k, v, dtype, dtype, dtype, options), device);
}

AttentionPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options) {
  return plan_on(call::validate_views(q, k, v, options), q.device);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView& out, float scale,
               const AttentionOptions& options, Stream stream) {
  run_call(call::validate_call(q, k, v, out, scale, options), q.device, options, stream);
}

AttentionPlan plan_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const RaggedBatch& batch, const AttentionOptions& options) {
  return plan_on(call::validate_ragged(q, k, v, batch, nullptr, 1.0f, options), q.device);
}

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                      TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  run_call(call::validate_ragged(q, k, v, batch, &out, scale, options), q.device, options, stream);
}

AttentionPlan plan_attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                   const PagedKv& pages, const AttentionOptions& options) {
  return plan_on(call::validate_paged(q, k_cache, v_cache, pages, nullptr, 1.0f, options), q.device);
}

void attention_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache, const PagedKv& pages,
                     TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  run_call(call::validate_paged(q, k_cache, v_cache, pages, &out, scale, options), q.device, options, stream);
}

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b, const TensorView& lse_b,
                  TensorView& out, TensorView& lse, Stream stream) {
  const call::Merge m = call::validate_merge(out_a, lse_a, out_b, lse_b, out, lse);
  (void)stream;
  if (out.device.type == DeviceType::CUDA) {
#if HEED_HAS_CUDA
    cuda::merge_states(m, out.device, stream.handle);
    return;
#else
    throw Error(ErrorKind::Unsupported, "[heed::merge_states] this build has no CUDA backend");
#endif
  }
  plan::require_backend(out.device, "heed::merge_states");
  cpu::merge_states(m);
}

}  // namespace heed
