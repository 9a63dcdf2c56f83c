#pragma once
// The serving forms' bindings (heed/serving.hpp): ragged batches, paged KV caches, their plans
// and merge_states.

#include <nanobind/nanobind.h>

namespace heed::python {

// Needs heed._heed.Plan bound first (the plans return it).
void bind_serving(nanobind::module_& m);

}  // namespace heed::python
