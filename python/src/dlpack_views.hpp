#pragma once
// The conversion layer: arrays that speak DLPack (numpy, PyTorch, CuPy, JAX, ...) become
// heed::TensorViews over the same memory. Nothing is copied and nothing is converted.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "heed/device.hpp"
#include "heed/tensor.hpp"

namespace heed::python {

// One imported array: the nanobind handle (or, for a torch.Tensor read directly, the tensor)
// keeps the producer's memory alive while the view is used.
struct ImportedArray {
  nanobind::ndarray<nanobind::ro> array;
  nanobind::object owner;
  TensorView view;
};

// What the caller may pass for one argument.
struct ArraySpec {
  const char* op;        // "heed.attention", "heed.plan"
  const char* name;      // "q", "mask", ...
  bool writable = false;  // out: a read-only array is refused
  bool bfloat16_bits = false;  // a uint16 array holds bfloat16 bits (numpy + ml_dtypes)
  bool metadata = false;  // sequence metadata (cu_seqlens, block tables): int32 only
};

// Imports `object` through DLPack. Raises TypeError when it is no array, ValueError for an
// element type heed cannot read (naming the type; metadata is int32, the rest floating or bool), NotImplementedError for a device heed
// has no backend for.
ImportedArray import_array(nanobind::handle object, const ArraySpec& spec);

// A caller's writable memory of any element type (a workspace): its first byte, its size in
// bytes and its device. ValueError where it is read-only or not contiguous, TypeError where it
// is no array.
struct ImportedBuffer {
  nanobind::ndarray<> array;
  void* data = nullptr;
  std::size_t bytes = 0;
  Device device;
};
ImportedBuffer import_buffer(nanobind::handle object, const ArraySpec& spec);

// "cpu", "cuda", "cuda:1", "default" (Device::default_device()) -> Device; ValueError otherwise.
Device parse_device(const std::string& text, const char* op);

}  // namespace heed::python
