// heed._heed: the nanobind module under the `heed` package. It converts arrays to
// TensorViews (dlpack_views.cpp) and calls the C++ API; the Python package allocates outputs
// with the caller's own array library.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "call_args.hpp"
#include "dlpack_views.hpp"
#include "heed/heed.hpp"
#include "layer_ext.hpp"
#include "runner_ext.hpp"
#include "serving_ext.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace heed::python {
namespace {

struct Inputs {
  ImportedArray q, k, v;
  std::optional<ImportedArray> mask, sinks;
  AttentionOptions options;
};

Inputs import_inputs(const char* op, nb::handle q, nb::handle k, nb::handle v, nb::handle mask,
                     nb::handle sinks, bool causal, std::optional<std::int64_t> window,
                     std::optional<double> softcap, std::optional<std::int64_t> max_score_bytes, unsigned bf16,
                     const std::string& route, std::optional<std::int64_t> max_scratch_bytes) {
  Inputs in{import_array(q, {op, "q", false, (bf16 & kQ) != 0}),
            import_array(k, {op, "k", false, (bf16 & kK) != 0}),
            import_array(v, {op, "v", false, (bf16 & kV) != 0}),
            std::nullopt,
            std::nullopt,
            {}};
  if (!mask.is_none()) in.mask = import_array(mask, {op, "mask", false, (bf16 & kMask) != 0});
  in.options = import_options(op, sinks, in.sinks, causal, window, softcap, route, max_scratch_bytes, bf16);
  if (in.mask) in.options.mask = in.mask->view;
  in.options.max_score_bytes = max_score_bytes;
  return in;
}

// A dense call's out and lse (where asked) and workspace, imported into its options; neither output
// may share memory with an input or the other.
struct DenseOutputs {
  ImportedArray out;
  std::optional<ImportedArray> lse;
  std::optional<ImportedBuffer> scratch;
};

DenseOutputs import_dense_outputs(const char* op, Inputs& in, nb::handle out, nb::handle lse, nb::handle workspace,
                                  unsigned bf16) {
  DenseOutputs o{import_array(out, {op, "out", true, (bf16 & kOut) != 0}), std::nullopt, std::nullopt};
  attach_lse(lse, o.lse, in.options, op);
  attach_workspace(workspace, o.scratch, in.q.view.device, in.options, op);
  if (o.out.view.rank() == 4) {  // heed rejects other ranks, naming them
    auto check_output = [&](const TensorView& written, const char* name) {
      check_no_overlap(written, name, in.q.view, "q", op);
      check_no_overlap(written, name, in.k.view, "k", op);
      check_no_overlap(written, name, in.v.view, "v", op);
      if (in.mask) check_no_overlap(written, name, in.mask->view, "mask", op);
      if (in.sinks) check_no_overlap(written, name, in.sinks->view, "sinks", op);
    };
    check_output(o.out.view, "out");
    if (o.lse) {
      check_output(o.lse->view, "lse");
      check_no_overlap(o.lse->view, "lse", o.out.view, "out", op);
    }
  }
  return o;
}

float dense_scale(std::optional<double> scale, const TensorView& q) {
  return scale_value(scale, q.rank() == 4 ? q.shape[3] : -1);
}

// out = attention(q, k, v) into the caller's `out` (and each row's log-sum-exp into `lse`, where
// given); the GIL is released while heed runs.
void attention_into(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle mask, nb::handle sinks,
                    std::optional<double> scale, bool causal, std::optional<std::int64_t> window,
                    std::optional<double> softcap, std::optional<std::int64_t> max_score_bytes, std::uintptr_t stream,
                    unsigned bf16, const std::string& route, nb::handle workspace,
                    std::optional<std::int64_t> max_scratch_bytes, nb::handle lse) {
  constexpr const char* op = "heed.attention";
  Inputs in = import_inputs(op, q, k, v, mask, sinks, causal, window, softcap, max_score_bytes, bf16, route,
                            max_scratch_bytes);
  DenseOutputs o = import_dense_outputs(op, in, out, lse, workspace, bf16);
  const float scale_used = dense_scale(scale, in.q.view);
  last_call() = {address(in.q.view.data),
                 address(in.k.view.data),
                 address(in.v.view.data),
                 address(o.out.view.data),
                 in.mask ? address(in.mask->view.data) : 0,
                 in.sinks ? address(in.sinks->view.data) : 0,
                 o.lse ? address(o.lse->view.data) : 0,
                 stream,
                 in.q.view.device.to_string()};
  nb::gil_scoped_release release;
  heed::attention(in.q.view, in.k.view, in.v.view, o.out.view, scale_used, in.options,
                  Stream{reinterpret_cast<void*>(stream)});
}

// attention_into's call as a Runner: validated, planned and given its scratch once.
BoundRunner runner_dense(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle mask, nb::handle sinks,
                         std::optional<double> scale, bool causal, std::optional<std::int64_t> window,
                         std::optional<double> softcap, std::optional<std::int64_t> max_score_bytes,
                         std::uintptr_t stream, unsigned bf16, const std::string& route, nb::handle workspace,
                         std::optional<std::int64_t> max_scratch_bytes, nb::handle lse) {
  constexpr const char* op = "heed.runner";
  Inputs in = import_inputs(op, q, k, v, mask, sinks, causal, window, softcap, max_score_bytes, bf16, route,
                            max_scratch_bytes);
  DenseOutputs o = import_dense_outputs(op, in, out, lse, workspace, bf16);
  Runner runner = [&] {
    nb::gil_scoped_release release;
    return Runner::dense(in.q.view, in.k.view, in.v.view, o.out.view, dense_scale(scale, in.q.view), in.options,
                         Stream{reinterpret_cast<void*>(stream)});
  }();
  return BoundRunner::make(std::pair{std::move(in), std::move(o)}, std::move(runner));
}

AttentionPlan plan_views(nb::handle q, nb::handle k, nb::handle v, nb::handle mask, nb::handle sinks, bool causal,
                         std::optional<std::int64_t> window, std::optional<double> softcap,
                         std::optional<std::int64_t> max_score_bytes, unsigned bf16, const std::string& route,
                         std::optional<std::int64_t> max_scratch_bytes) {
  Inputs in = import_inputs("heed.plan", q, k, v, mask, sinks, causal, window, softcap, max_score_bytes, bf16, route,
                            max_scratch_bytes);
  return plan_attention(in.q.view, in.k.view, in.v.view, in.options);
}

DType parse_dtype_name(const std::string& name) {
  if (auto dtype = parse_dtype(name); dtype && is_floating(*dtype)) return *dtype;
  throw nb::value_error(("[heed.plan] dtype must be float32, float16 or bfloat16, got '" + name + "'").c_str());
}

AttentionPlan plan_shapes(std::vector<std::int64_t> q, std::vector<std::int64_t> k, std::vector<std::int64_t> v,
                          const std::string& dtype, const std::string& device, nb::handle mask, nb::handle sinks,
                          bool causal, std::optional<std::int64_t> window, std::optional<double> softcap,
                          std::optional<std::int64_t> max_score_bytes, unsigned bf16, const std::string& route,
                          std::optional<std::int64_t> max_scratch_bytes) {
  constexpr const char* op = "heed.plan";
  AttentionOptions options;
  options.route = parse_route(route, op);
  options.max_scratch_bytes = max_scratch_bytes;
  std::optional<ImportedArray> mask_array, sinks_array;
  if (!mask.is_none()) {
    mask_array = import_array(mask, {op, "mask", false, (bf16 & kMask) != 0});
    options.mask = mask_array->view;
  }
  if (!sinks.is_none()) {
    sinks_array = import_array(sinks, {op, "sinks", false, (bf16 & kSinks) != 0});
    options.sinks = sinks_array->view;
  }
  options.causal = causal;
  options.window = window;
  options.softcap = float_option(softcap);
  options.max_score_bytes = max_score_bytes;
  return plan_attention(Shape(std::move(q)), Shape(std::move(k)), Shape(std::move(v)), parse_dtype_name(dtype),
                        options, parse_device(device, op));
}

nb::dict kernel_dict(const Kernel& kernel) {
  nb::dict fields;
  fields["route"] = route_name(kernel);
  for (const auto& [name, value] : kernel_fields(kernel)) fields[name] = value;
  return fields;
}

profile::Mode parse_mode(const std::string& name) {
  if (name == "off") return profile::Mode::Off;
  if (name == "shapes") return profile::Mode::Shapes;
  if (name == "time") return profile::Mode::Time;
  throw nb::value_error(("[heed.profile] mode must be 'off', 'shapes' or 'time', got '" + name + "'").c_str());
}

const char* mode_name(profile::Mode mode) {
  switch (mode) {
    case profile::Mode::Off: return "off";
    case profile::Mode::Shapes: return "shapes";
    case profile::Mode::Time: return "time";
  }
  return "off";
}

void translate_errors() {
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.kind()) {
        case ErrorKind::InvalidArgument: type = PyExc_ValueError; break;
        case ErrorKind::OutOfMemory: type = PyExc_MemoryError; break;
        case ErrorKind::Unsupported: type = PyExc_NotImplementedError; break;
        case ErrorKind::Internal: type = PyExc_RuntimeError; break;
      }
      PyErr_SetString(type, e.what());
    }
  });
}

void bind_profile(nb::module_& m) {
  nb::module_ p = m.def_submodule("profile", "heed's kernel-dispatch profiler (HEED_PROFILE)");
  p.def("mode", [] { return mode_name(profile::mode()); });
  p.def("set_mode", [](const std::string& name) { profile::set_mode(parse_mode(name)); }, "mode"_a);
  p.def("reset", &profile::reset);
  p.def("entries", &profile::entries);
  p.def("records", [] {
    nb::list list;
    for (const profile::Record& record : profile::records()) {
      list.append(nb::make_tuple(record.key, record.count, record.seconds));
    }
    return list;
  });
  p.def("report", &profile::report);
}

}  // namespace

nb::list buffer_list(const std::vector<ScratchBuffer>& buffers) {
  nb::list list;
  for (const ScratchBuffer& buffer : buffers) {
    nb::dict entry;
    entry["name"] = buffer.name;
    entry["offset"] = buffer.offset;
    entry["bytes"] = buffer.bytes;
    entry["slices"] = buffer.slices;
    list.append(entry);
  }
  return list;
}

}  // namespace heed::python

NB_MODULE(_heed, m) {
  using namespace heed;
  using namespace heed::python;
  m.doc() = "heed's C++ API; use the `heed` package, which wraps it";
  translate_errors();

  nb::class_<AttentionPlan>(m, "Plan", "The plan of one attention call: the kernel, its scratch and why")
      .def_prop_ro("device", [](const AttentionPlan& p) { return p.device.to_string(); })
      .def_prop_ro("dtype", [](const AttentionPlan& p) { return std::string(to_string(p.dtype)); })
      .def_prop_ro("route", [](const AttentionPlan& p) { return std::string(route_name(p.kernel)); })
      .def_prop_ro("kernel", [](const AttentionPlan& p) { return kernel_dict(p.kernel); })
      .def_ro("kernel_name", &AttentionPlan::kernel_name)
      .def_ro("workers", &AttentionPlan::workers)
      .def_ro("scratch_bytes", &AttentionPlan::scratch_bytes)
      .def_ro("max_intermediate_bytes", &AttentionPlan::max_intermediate_bytes)
      .def_ro("capped", &AttentionPlan::capped)
      .def_prop_ro("buffers", [](const AttentionPlan& p) { return buffer_list(p.buffers); })
      .def_ro("reasons", &AttentionPlan::reasons)
      .def("explain", &AttentionPlan::explain)
      .def("to_json", &AttentionPlan::to_json)
      .def("__eq__", [](const AttentionPlan& a, const AttentionPlan& b) { return a == b; })
      .def("__repr__", [](const AttentionPlan& p) {
        return "heed.Plan(kernel_name='" + p.kernel_name + "', route='" + route_name(p.kernel) +
               "', scratch_bytes=" + std::to_string(p.scratch_bytes) + ")";
      });

  nb::class_<MemoryStats>(m, "MemoryStats", "Bytes heed itself holds on a device")
      .def_ro("active", &MemoryStats::active)
      .def_ro("peak", &MemoryStats::peak)
      .def_ro("cached", &MemoryStats::cached)
      .def("__repr__", [](const MemoryStats& s) {
        return "heed.MemoryStats(active=" + std::to_string(s.active) + ", peak=" + std::to_string(s.peak) +
               ", cached=" + std::to_string(s.cached) + ")";
      });

  m.def("attention_into", &attention_into, "q"_a, "k"_a, "v"_a, "out"_a, "mask"_a.none(), "sinks"_a.none(),
        "scale"_a.none(), "causal"_a, "window"_a.none(), "softcap"_a.none(), "max_score_bytes"_a.none(), "stream"_a,
        "bf16"_a, "route"_a = "auto", "workspace"_a.none() = nb::none(), "max_scratch_bytes"_a.none() = nb::none(),
        "lse"_a.none() = nb::none());
  m.def("runner_dense", &runner_dense, "q"_a, "k"_a, "v"_a, "out"_a, "mask"_a.none(), "sinks"_a.none(),
        "scale"_a.none(), "causal"_a, "window"_a.none(), "softcap"_a.none(), "max_score_bytes"_a.none(), "stream"_a,
        "bf16"_a, "route"_a = "auto", "workspace"_a.none() = nb::none(), "max_scratch_bytes"_a.none() = nb::none(),
        "lse"_a.none() = nb::none());
  m.def("plan_views", &plan_views, "q"_a, "k"_a, "v"_a, "mask"_a.none(), "sinks"_a.none(), "causal"_a,
        "window"_a.none(), "softcap"_a.none(), "max_score_bytes"_a.none(), "bf16"_a, "route"_a = "auto",
        "max_scratch_bytes"_a.none() = nb::none());
  m.def("plan_shapes", &plan_shapes, "q"_a, "k"_a, "v"_a, "dtype"_a, "device"_a, "mask"_a.none(),
        "sinks"_a.none(), "causal"_a, "window"_a.none(), "softcap"_a.none(), "max_score_bytes"_a.none(), "bf16"_a,
        "route"_a = "auto", "max_scratch_bytes"_a.none() = nb::none());
  m.def("memory_stats", [](const std::string& device) { return memory_stats(parse_device(device, "heed.memory_stats")); },
        "device"_a);
  m.def("reset_peak", [](const std::string& device) { reset_peak(parse_device(device, "heed.reset_peak")); },
        "device"_a);
  m.def("empty_cache", [](const std::string& device) { return release_cached(parse_device(device, "heed.empty_cache")); },
        "device"_a);
  m.def("cache_limit", [](const std::string& device) { return cache_limit(parse_device(device, "heed.cache_limit")); },
        "device"_a);
  m.def("set_cache_limit", [](std::size_t bytes, const std::string& device) {
    set_cache_limit(parse_device(device, "heed.set_cache_limit"), bytes);
  }, "bytes"_a, "device"_a);
  m.def("last_call", [] {
    const LastCall& c = last_call();
    nb::dict d;
    d["q"] = c.q;
    d["k"] = c.k;
    d["v"] = c.v;
    d["out"] = c.out;
    d["mask"] = c.mask;
    d["sinks"] = c.sinks;
    d["lse"] = c.lse;
    d["stream"] = c.stream;
    d["device"] = c.device;
    return d;
  }, "The data pointers, device and stream heed saw in this thread's last attention call (for tests)");
  bind_runner(m);
  bind_serving(m);
  bind_layer(m);
  bind_profile(m);
}
