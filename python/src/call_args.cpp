#include "call_args.hpp"

#include <cmath>
#include <limits>

namespace nb = nanobind;

namespace heed::python {
namespace {

// The bytes [first, last) a view can touch; empty for an empty view.
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const TensorView& view) {
  std::int64_t low = 0, high = 0;
  for (int axis = 0; axis < view.rank(); ++axis) {
    const std::int64_t size = view.shape[axis];
    if (size == 0) return {0, 0};
    const std::int64_t reach = (size - 1) * view.strides[static_cast<std::size_t>(axis)];
    (reach < 0 ? low : high) += reach;
  }
  const auto item = static_cast<std::int64_t>(size_of(view.dtype));
  const auto base = static_cast<std::int64_t>(address(view.data));
  return {static_cast<std::uintptr_t>(base + low * item), static_cast<std::uintptr_t>(base + (high + 1) * item)};
}

}  // namespace

LastCall& last_call() {
  thread_local LastCall call;
  return call;
}

RouteChoice parse_route(const std::string& name, const char* op) {
  if (name == "auto") return RouteChoice::Auto;
  if (name == "vector") return RouteChoice::Vector;
  if (name == "tiled") return RouteChoice::Tiled;
  if (name == "composed") return RouteChoice::Composed;
  throw nb::value_error(
      (std::string("[") + op + "] route must be 'auto', 'vector', 'tiled' or 'composed', got '" + name + "'").c_str());
}

std::optional<float> float_option(std::optional<double> value) {
  if (!value) return std::nullopt;
  const bool in_range = std::isnan(*value) || std::abs(*value) <= std::numeric_limits<float>::max();
  return in_range ? static_cast<float>(*value) : std::copysign(std::numeric_limits<float>::infinity(), *value);
}

float scale_value(std::optional<double> scale, std::int64_t head_dim) {
  if (scale) {
    // Out of float's range the conversion is undefined: heed rejects infinity, naming it.
    const bool in_range = std::isnan(*scale) || std::abs(*scale) <= std::numeric_limits<float>::max();
    return in_range ? static_cast<float>(*scale) : std::numeric_limits<float>::infinity();
  }
  return head_dim > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : 1.0f;
}

AttentionOptions import_options(const char* op, nb::handle sinks, std::optional<ImportedArray>& sinks_array,
                                bool causal, std::optional<std::int64_t> window, std::optional<double> softcap,
                                const std::string& route, std::optional<std::int64_t> max_scratch_bytes,
                                unsigned bf16) {
  AttentionOptions options;
  if (!sinks.is_none()) {
    sinks_array = import_array(sinks, {op, "sinks", false, (bf16 & kSinks) != 0});
    options.sinks = sinks_array->view;
  }
  options.causal = causal;
  options.window = window;
  options.softcap = float_option(softcap);
  options.route = parse_route(route, op);
  options.max_scratch_bytes = max_scratch_bytes;
  return options;
}

void attach_workspace(nb::handle workspace, std::optional<ImportedBuffer>& scratch, const Device& device,
                      AttentionOptions& options, const char* op) {
  if (workspace.is_none()) return;
  scratch = import_buffer(workspace, {op, "workspace", true, false});
  if (!(scratch->device == device)) {
    throw nb::value_error((std::string("[") + op + "] workspace is on " + scratch->device.to_string() +
                           ", the call on " + device.to_string())
                              .c_str());
  }
  options.workspace = scratch->data;
  options.workspace_bytes = scratch->bytes;
}

void attach_lse(nb::handle lse, std::optional<ImportedArray>& array, AttentionOptions& options, const char* op) {
  if (lse.is_none()) return;
  array = import_array(lse, {op, "lse", true, false});
  options.lse = array->view;
}

void check_no_overlap(const TensorView& out, const char* out_name, const TensorView& input, const char* name,
                      const char* op) {
  if (!(out.device == input.device)) return;
  const auto [out_first, out_last] = byte_range(out);
  const auto [first, last] = byte_range(input);
  if (out_first < out_last && first < last && out_first < last && first < out_last) {
    throw nb::value_error((std::string("[") + op + "] " + out_name + " overlaps " + name +
                           " in memory; heed reads the inputs while it writes " + out_name)
                              .c_str());
  }
}

}  // namespace heed::python
