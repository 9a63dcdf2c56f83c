#include "serving_ext.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "call_args.hpp"
#include "dlpack_views.hpp"
#include "heed/heed.hpp"
#include "runner_ext.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace heed::python {
namespace {

constexpr const char* kVarlen = "heed.attention_varlen";
constexpr const char* kPaged = "heed.attention_paged";
constexpr const char* kPlanVarlen = "heed.plan_varlen";
constexpr const char* kPlanPaged = "heed.plan_paged";
constexpr const char* kMerge = "heed.merge_states";
constexpr const char* kRunnerVarlen = "heed.runner_varlen";
constexpr const char* kRunnerPaged = "heed.runner_paged";

using Named = std::pair<const TensorView*, const char*>;

struct RaggedInputs {
  ImportedArray q, k, v, cu_q, cu_k;
  std::optional<ImportedArray> sinks;
  AttentionOptions options;
  RaggedBatch batch;

  std::vector<Named> inputs() const {
    std::vector<Named> named{{&q.view, "q"}, {&k.view, "k"}, {&v.view, "v"}, {&cu_q.view, "cu_seqlens_q"},
                             {&cu_k.view, "cu_seqlens_k"}};
    if (sinks) named.emplace_back(&sinks->view, "sinks");
    return named;
  }
};

struct PagedInputs {
  ImportedArray q, k_cache, v_cache, block_table, seqlens_k;
  std::optional<ImportedArray> cu_q, sinks;
  AttentionOptions options;
  PagedKv pages;

  std::vector<Named> inputs() const {
    std::vector<Named> named{{&q.view, "q"}, {&k_cache.view, "k_cache"}, {&v_cache.view, "v_cache"},
                             {&block_table.view, "block_table"}, {&seqlens_k.view, "seqlens_k"}};
    if (cu_q) named.emplace_back(&cu_q->view, "cu_seqlens_q");
    if (sinks) named.emplace_back(&sinks->view, "sinks");
    return named;
  }
};

ImportedArray import_metadata(nb::handle object, const char* op, const char* name) {
  return import_array(object, {op, name, false, false, true});
}

RaggedInputs import_ragged(const char* op, nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q,
                           nb::handle cu_seqlens_k, nb::handle sinks, bool causal, std::optional<std::int64_t> window,
                           std::optional<double> softcap, std::optional<std::int64_t> max_seqlen_q,
                           std::optional<std::int64_t> max_seqlen_k, unsigned bf16, const std::string& route,
                           std::optional<std::int64_t> max_scratch_bytes) {
  RaggedInputs in{import_array(q, {op, "q", false, (bf16 & kQ) != 0}),
                  import_array(k, {op, "k", false, (bf16 & kK) != 0}),
                  import_array(v, {op, "v", false, (bf16 & kV) != 0}),
                  import_metadata(cu_seqlens_q, op, "cu_seqlens_q"),
                  import_metadata(cu_seqlens_k, op, "cu_seqlens_k"),
                  std::nullopt,
                  {},
                  {}};
  in.options = import_options(op, sinks, in.sinks, causal, window, softcap, route, max_scratch_bytes, bf16);
  in.batch.cu_seqlens_q = in.cu_q.view;
  in.batch.cu_seqlens_k = in.cu_k.view;
  in.batch.max_seqlen_q = max_seqlen_q;
  in.batch.max_seqlen_k = max_seqlen_k;
  return in;
}

PagedInputs import_paged(const char* op, nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table,
                         nb::handle seqlens_k, nb::handle cu_seqlens_q, nb::handle sinks, bool causal,
                         std::optional<std::int64_t> window, std::optional<double> softcap,
                         std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                         unsigned bf16, const std::string& route, std::optional<std::int64_t> max_scratch_bytes) {
  PagedInputs in{import_array(q, {op, "q", false, (bf16 & kQ) != 0}),
                 import_array(k_cache, {op, "k_cache", false, (bf16 & kK) != 0}),
                 import_array(v_cache, {op, "v_cache", false, (bf16 & kV) != 0}),
                 import_metadata(block_table, op, "block_table"),
                 import_metadata(seqlens_k, op, "seqlens_k"),
                 std::nullopt,
                 std::nullopt,
                 {},
                 {}};
  if (!cu_seqlens_q.is_none()) in.cu_q = import_metadata(cu_seqlens_q, op, "cu_seqlens_q");
  in.options = import_options(op, sinks, in.sinks, causal, window, softcap, route, max_scratch_bytes, bf16);
  in.pages.block_table = in.block_table.view;
  in.pages.seqlens_k = in.seqlens_k.view;
  if (in.cu_q) in.pages.cu_seqlens_q = in.cu_q->view;
  in.pages.max_seqlen_q = max_seqlen_q;
  in.pages.max_seqlen_k = max_seqlen_k;
  return in;
}

// A call's out, lse (where asked) and workspace, imported into its options; neither output may
// share memory with an input or the other.
struct Outputs {
  ImportedArray out;
  std::optional<ImportedArray> lse;
  std::optional<ImportedBuffer> scratch;
};

Outputs import_outputs(const char* op, nb::handle out, nb::handle lse, nb::handle workspace, unsigned bf16,
                       const TensorView& q, const std::vector<Named>& inputs, AttentionOptions& options) {
  Outputs o{import_array(out, {op, "out", true, (bf16 & kOut) != 0}), std::nullopt, std::nullopt};
  attach_lse(lse, o.lse, options, op);
  attach_workspace(workspace, o.scratch, q.device, options, op);
  if (o.out.view.rank() == 3) {  // heed rejects other ranks, naming them
    for (const auto& [view, name] : inputs) {
      check_no_overlap(o.out.view, "out", *view, name, op);
      if (o.lse) check_no_overlap(o.lse->view, "lse", *view, name, op);
    }
    if (o.lse) check_no_overlap(o.lse->view, "lse", o.out.view, "out", op);
  }
  return o;
}

void record(const TensorView& q, const TensorView& k, const TensorView& v, const Outputs& o,
            const std::optional<ImportedArray>& sinks, std::uintptr_t stream) {
  last_call() = {address(q.data),
                 address(k.data),
                 address(v.data),
                 address(o.out.view.data),
                 0,
                 sinks ? address(sinks->view.data) : 0,
                 o.lse ? address(o.lse->view.data) : 0,
                 stream,
                 q.device.to_string()};
}

std::int64_t head_dim_of(const TensorView& q) { return q.rank() == 3 ? q.shape[2] : -1; }

void attention_varlen_into(nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                           nb::handle out, nb::handle lse, nb::handle sinks, std::optional<double> scale, bool causal,
                           std::optional<std::int64_t> window, std::optional<double> softcap,
                           std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                           std::uintptr_t stream, unsigned bf16, const std::string& route, nb::handle workspace,
                           std::optional<std::int64_t> max_scratch_bytes) {
  RaggedInputs in = import_ragged(kVarlen, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, causal, window, softcap,
                                  max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  Outputs o = import_outputs(kVarlen, out, lse, workspace, bf16, in.q.view, in.inputs(), in.options);
  const float scale_used = scale_value(scale, head_dim_of(in.q.view));
  record(in.q.view, in.k.view, in.v.view, o, in.sinks, stream);
  nb::gil_scoped_release release;
  heed::attention_varlen(in.q.view, in.k.view, in.v.view, in.batch, o.out.view, scale_used, in.options,
                         Stream{reinterpret_cast<void*>(stream)});
}

void attention_paged_into(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table,
                          nb::handle seqlens_k, nb::handle cu_seqlens_q, nb::handle out, nb::handle lse,
                          nb::handle sinks, std::optional<double> scale, bool causal,
                          std::optional<std::int64_t> window, std::optional<double> softcap,
                          std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                          std::uintptr_t stream, unsigned bf16, const std::string& route, nb::handle workspace,
                          std::optional<std::int64_t> max_scratch_bytes) {
  PagedInputs in = import_paged(kPaged, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, sinks, causal,
                                window, softcap, max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  Outputs o = import_outputs(kPaged, out, lse, workspace, bf16, in.q.view, in.inputs(), in.options);
  const float scale_used = scale_value(scale, head_dim_of(in.q.view));
  record(in.q.view, in.k_cache.view, in.v_cache.view, o, in.sinks, stream);
  nb::gil_scoped_release release;
  heed::attention_paged(in.q.view, in.k_cache.view, in.v_cache.view, in.pages, o.out.view, scale_used, in.options,
                        Stream{reinterpret_cast<void*>(stream)});
}

// The ragged and paged calls as Runners: validated, planned and given their scratch once.
BoundRunner runner_varlen(nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                          nb::handle out, nb::handle lse, nb::handle sinks, std::optional<double> scale, bool causal,
                          std::optional<std::int64_t> window, std::optional<double> softcap,
                          std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                          std::uintptr_t stream, unsigned bf16, const std::string& route, nb::handle workspace,
                          std::optional<std::int64_t> max_scratch_bytes) {
  RaggedInputs in = import_ragged(kRunnerVarlen, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, causal, window, softcap,
                                  max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  Outputs o = import_outputs(kRunnerVarlen, out, lse, workspace, bf16, in.q.view, in.inputs(), in.options);
  Runner runner = [&] {
    nb::gil_scoped_release release;
    return Runner::varlen(in.q.view, in.k.view, in.v.view, in.batch, o.out.view,
                          scale_value(scale, head_dim_of(in.q.view)), in.options, Stream{reinterpret_cast<void*>(stream)});
  }();
  return BoundRunner::make(std::pair{std::move(in), std::move(o)}, std::move(runner));
}

BoundRunner runner_paged(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table,
                         nb::handle seqlens_k, nb::handle cu_seqlens_q, nb::handle out, nb::handle lse,
                         nb::handle sinks, std::optional<double> scale, bool causal,
                         std::optional<std::int64_t> window, std::optional<double> softcap,
                         std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                         std::uintptr_t stream, unsigned bf16, const std::string& route, nb::handle workspace,
                         std::optional<std::int64_t> max_scratch_bytes) {
  PagedInputs in = import_paged(kRunnerPaged, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, sinks,
                                causal, window, softcap, max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  Outputs o = import_outputs(kRunnerPaged, out, lse, workspace, bf16, in.q.view, in.inputs(), in.options);
  Runner runner = [&] {
    nb::gil_scoped_release release;
    return Runner::paged(in.q.view, in.k_cache.view, in.v_cache.view, in.pages, o.out.view,
                         scale_value(scale, head_dim_of(in.q.view)), in.options,
                         Stream{reinterpret_cast<void*>(stream)});
  }();
  return BoundRunner::make(std::pair{std::move(in), std::move(o)}, std::move(runner));
}

AttentionPlan plan_varlen(nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                          nb::handle sinks, bool causal, std::optional<std::int64_t> window,
                          std::optional<double> softcap, std::optional<std::int64_t> max_seqlen_q,
                          std::optional<std::int64_t> max_seqlen_k, unsigned bf16, const std::string& route,
                          std::optional<std::int64_t> max_scratch_bytes) {
  RaggedInputs in = import_ragged(kPlanVarlen, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, causal, window, softcap,
                                  max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  return plan_attention_varlen(in.q.view, in.k.view, in.v.view, in.batch, in.options);
}

AttentionPlan plan_paged(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table,
                         nb::handle seqlens_k, nb::handle cu_seqlens_q, nb::handle sinks, bool causal,
                         std::optional<std::int64_t> window, std::optional<double> softcap,
                         std::optional<std::int64_t> max_seqlen_q, std::optional<std::int64_t> max_seqlen_k,
                         unsigned bf16, const std::string& route, std::optional<std::int64_t> max_scratch_bytes) {
  PagedInputs in = import_paged(kPlanPaged, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, sinks, causal,
                                window, softcap, max_seqlen_q, max_seqlen_k, bf16, route, max_scratch_bytes);
  return plan_attention_paged(in.q.view, in.k_cache.view, in.v_cache.view, in.pages, in.options);
}

bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.shape == b.shape && a.strides == b.strides && a.device == b.device;
}

// out, lse = merge(out_a, lse_a, out_b, lse_b). An output may be one of its inputs (in place,
// row by row), but may not overlap an input otherwise.
void merge_states_into(nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b, nb::handle out,
                       nb::handle lse, std::uintptr_t stream, unsigned bf16) {
  const char* op = kMerge;
  const ImportedArray a = import_array(out_a, {op, "out_a", false, (bf16 & kOutA) != 0});
  const ImportedArray la = import_array(lse_a, {op, "lse_a", false, false});
  const ImportedArray b = import_array(out_b, {op, "out_b", false, (bf16 & kOutB) != 0});
  const ImportedArray lb = import_array(lse_b, {op, "lse_b", false, false});
  ImportedArray result = import_array(out, {op, "out", true, (bf16 & kOut) != 0});
  ImportedArray result_lse = import_array(lse, {op, "lse", true, false});
  const std::vector<Named> inputs{{&a.view, "out_a"}, {&la.view, "lse_a"}, {&b.view, "out_b"}, {&lb.view, "lse_b"}};
  for (const auto& [view, name] : inputs) {
    if (!same_view(result.view, *view)) check_no_overlap(result.view, "out", *view, name, op);
    if (!same_view(result_lse.view, *view)) check_no_overlap(result_lse.view, "lse", *view, name, op);
  }
  check_no_overlap(result_lse.view, "lse", result.view, "out", op);
  nb::gil_scoped_release release;
  heed::merge_states(a.view, la.view, b.view, lb.view, result.view, result_lse.view,
                     Stream{reinterpret_cast<void*>(stream)});
}

}  // namespace

void bind_serving(nb::module_& m) {
  m.def("attention_varlen_into", &attention_varlen_into, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a,
        "out"_a, "lse"_a.none(), "sinks"_a.none(), "scale"_a.none(), "causal"_a, "window"_a.none(),
        "softcap"_a.none(), "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "stream"_a, "bf16"_a,
        "route"_a = "auto", "workspace"_a.none() = nb::none(), "max_scratch_bytes"_a.none() = nb::none());
  m.def("attention_paged_into", &attention_paged_into, "q"_a, "k_cache"_a, "v_cache"_a, "block_table"_a,
        "seqlens_k"_a, "cu_seqlens_q"_a.none(), "out"_a, "lse"_a.none(), "sinks"_a.none(), "scale"_a.none(),
        "causal"_a, "window"_a.none(), "softcap"_a.none(), "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(),
        "stream"_a, "bf16"_a, "route"_a = "auto", "workspace"_a.none() = nb::none(),
        "max_scratch_bytes"_a.none() = nb::none());
  m.def("runner_varlen", &runner_varlen, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "out"_a,
        "lse"_a.none(), "sinks"_a.none(), "scale"_a.none(), "causal"_a, "window"_a.none(), "softcap"_a.none(),
        "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "stream"_a, "bf16"_a, "route"_a = "auto",
        "workspace"_a.none() = nb::none(), "max_scratch_bytes"_a.none() = nb::none());
  m.def("runner_paged", &runner_paged, "q"_a, "k_cache"_a, "v_cache"_a, "block_table"_a, "seqlens_k"_a,
        "cu_seqlens_q"_a.none(), "out"_a, "lse"_a.none(), "sinks"_a.none(), "scale"_a.none(), "causal"_a,
        "window"_a.none(), "softcap"_a.none(), "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "stream"_a, "bf16"_a,
        "route"_a = "auto", "workspace"_a.none() = nb::none(), "max_scratch_bytes"_a.none() = nb::none());
  m.def("plan_varlen", &plan_varlen, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "sinks"_a.none(),
        "causal"_a, "window"_a.none(), "softcap"_a.none(), "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "bf16"_a,
        "route"_a = "auto", "max_scratch_bytes"_a.none() = nb::none());
  m.def("plan_paged", &plan_paged, "q"_a, "k_cache"_a, "v_cache"_a, "block_table"_a, "seqlens_k"_a,
        "cu_seqlens_q"_a.none(), "sinks"_a.none(), "causal"_a, "window"_a.none(), "softcap"_a.none(),
        "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "bf16"_a, "route"_a = "auto",
        "max_scratch_bytes"_a.none() = nb::none());
  m.def("merge_states_into", &merge_states_into, "out_a"_a, "lse_a"_a, "out_b"_a, "lse_b"_a, "out"_a, "lse"_a,
        "stream"_a, "bf16"_a);
}

}  // namespace heed::python
