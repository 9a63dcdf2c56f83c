#pragma once
// heed._heed.MultiHeadAttention and its plan: the encoder layer's bindings.

#include <nanobind/nanobind.h>

namespace heed::python {

// Needs heed._heed.Plan bound first (a layer plan holds its attention's plan).
void bind_layer(nanobind::module_& m);

}  // namespace heed::python
