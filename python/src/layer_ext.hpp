#pragma once
// heed._heed.MultiHeadAttention and its plan: the encoder layer's bindings.

#include <nanobind/nanobind.h>

#include <vector>

#include "heed/plan.hpp"

namespace heed::python {

// A plan's scratch layout as a list of dicts (name, offset, bytes, slices); in heed_ext.cpp.
nanobind::list buffer_list(const std::vector<ScratchBuffer>& buffers);

// Needs heed._heed.Plan bound first (a layer plan holds its attention's plan).
void bind_layer(nanobind::module_& m);

}  // namespace heed::python
