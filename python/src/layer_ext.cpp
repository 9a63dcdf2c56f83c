#include "layer_ext.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlpack_views.hpp"
#include "heed/heed.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace heed::python {
namespace {

constexpr const char* kOp = "heed.MultiHeadAttention";

// The data pointers, device and stream of this thread's last layer call, for the zero-copy tests.
struct LastLayerCall {
  std::uintptr_t hidden = 0, mask = 0, out = 0, stream = 0;
  std::string device;
};
thread_local LastLayerCall g_last_layer_call;

std::uintptr_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

// The C++ layer and the arrays its weight views point into (kept alive with it).
class Layer {
 public:
  Layer(std::int64_t hidden, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t head_dim,
        std::optional<double> scale, nb::handle q_weight, nb::handle k_weight, nb::handle v_weight,
        nb::handle out_weight, nb::handle q_bias, nb::handle k_bias, nb::handle v_bias, nb::handle out_bias) {
    MultiHeadAttentionWeights w;
    w.q_weight = keep(q_weight, "q_weight");
    w.k_weight = keep(k_weight, "k_weight");
    w.v_weight = keep(v_weight, "v_weight");
    w.out_weight = keep(out_weight, "out_weight");
    w.q_bias = keep_optional(q_bias, "q_bias");
    w.k_bias = keep_optional(k_bias, "k_bias");
    w.v_bias = keep_optional(v_bias, "v_bias");
    w.out_bias = keep_optional(out_bias, "out_bias");
    MultiHeadAttentionConfig config{hidden, q_heads, kv_heads, head_dim, std::nullopt};
    if (scale) config.scale = static_cast<float>(*scale);
    layer_.emplace(config, w);
  }

  const MultiHeadAttention& layer() const { return *layer_; }

  // out = the layer applied to hidden, on `stream` (a cudaStream_t as an integer, 0 = the
  // default stream; ignored on the CPU); the GIL is released while heed runs.
  void forward_into(nb::handle hidden, nb::handle mask, nb::handle out, std::uintptr_t stream) const {
    const ImportedArray x = import_array(hidden, {kOp, "hidden", false, false});
    const ImportedArray y = import_array(out, {kOp, "out", true, false});
    std::optional<ImportedArray> m;
    std::optional<TensorView> mask_view;
    if (!mask.is_none()) {
      m = import_array(mask, {kOp, "key_padding_mask", false, false});
      mask_view = m->view;
    }
    TensorView out_view = y.view;
    g_last_layer_call = {address(x.view.data), mask_view ? address(mask_view->data) : 0, address(out_view.data), stream,
                         x.view.device.to_string()};
    nb::gil_scoped_release release;
    layer_->forward(x.view, mask_view, out_view, nullptr, 0, Stream{reinterpret_cast<void*>(stream)});
  }

 private:
  TensorView keep(nb::handle array, const char* name) {
    arrays_.push_back(import_array(array, {kOp, name, false, false}));
    return arrays_.back().view;
  }
  std::optional<TensorView> keep_optional(nb::handle array, const char* name) {
    if (array.is_none()) return std::nullopt;
    return keep(array, name);
  }

  std::vector<ImportedArray> arrays_;
  std::optional<MultiHeadAttention> layer_;
};

}  // namespace

void bind_layer(nb::module_& m) {
  nb::class_<MultiHeadAttentionPlan>(m, "LayerPlan", "The plan of one encoder-layer call: its workspace and why")
      .def_ro("attention", &MultiHeadAttentionPlan::attention)
      .def_ro("workers", &MultiHeadAttentionPlan::workers)
      .def_ro("block_rows", &MultiHeadAttentionPlan::block_rows)
      .def_ro("workspace_bytes", &MultiHeadAttentionPlan::workspace_bytes)
      .def_prop_ro("buffers", [](const MultiHeadAttentionPlan& p) { return buffer_list(p.buffers); })
      .def_ro("reasons", &MultiHeadAttentionPlan::reasons)
      .def("explain", &MultiHeadAttentionPlan::explain)
      .def("__repr__", [](const MultiHeadAttentionPlan& p) {
        return "heed.LayerPlan(workspace_bytes=" + std::to_string(p.workspace_bytes) + ", attention='" +
               p.attention.kernel_name + "')";
      });

  nb::class_<Layer>(m, "MultiHeadAttention", "heed::MultiHeadAttention; use heed.MultiHeadAttention")
      .def(nb::init<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::optional<double>, nb::handle,
                    nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle>(),
           // None reaches the import for weights too, which names the argument (a TypeError).
           "hidden"_a, "q_heads"_a, "kv_heads"_a, "head_dim"_a, "scale"_a.none(), "q_weight"_a.none(),
           "k_weight"_a.none(), "v_weight"_a.none(), "out_weight"_a.none(), "q_bias"_a.none(), "k_bias"_a.none(),
           "v_bias"_a.none(), "out_bias"_a.none())
      .def_prop_ro("scale", [](const Layer& l) { return l.layer().scale(); })
      .def_prop_ro("device", [](const Layer& l) { return l.layer().device().to_string(); })
      .def_prop_ro("dtype", [](const Layer& l) { return std::string(to_string(l.layer().dtype())); })
      .def("plan", [](const Layer& l, std::int64_t batch, std::int64_t length, bool key_padding) {
             return l.layer().plan(batch, length, key_padding);
           }, "batch"_a, "length"_a, "key_padding"_a)
      .def("forward_into", &Layer::forward_into, "hidden"_a, "key_padding_mask"_a.none(), "out"_a, "stream"_a);

  m.def("last_layer_call", [] {
    const LastLayerCall& c = g_last_layer_call;
    nb::dict d;
    d["hidden"] = c.hidden;
    d["key_padding_mask"] = c.mask;
    d["out"] = c.out;
    d["stream"] = c.stream;
    d["device"] = c.device;
    return d;
  }, "The data pointers, device and stream heed saw in this thread's last layer call (for tests)");
}

}  // namespace heed::python
