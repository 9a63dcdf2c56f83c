#pragma once
// PyTorch tensors read without DLPack: torch.Tensor.__dlpack__ is Python code that costs several
// microseconds a tensor, more than the rest of a decode call's host work. An exact torch.Tensor
// (no subclass, which may have no storage) of a strided layout and a dtype heed reads is viewed
// from its own data_ptr, shape, strides and device; anything else returns nullopt and goes
// through DLPack, whose errors name what is wrong.

#include <nanobind/nanobind.h>

#include <optional>

#include "heed/tensor.hpp"

namespace heed::python {

struct ArraySpec;

// The view of `object` where it is a torch.Tensor heed can read directly. torch is never
// imported here: without it in sys.modules no object is a torch.Tensor.
std::optional<TensorView> torch_view(nanobind::handle object, const ArraySpec& spec);

}  // namespace heed::python
