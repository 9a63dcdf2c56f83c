#include "dlpack_views.hpp"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "heed/error.hpp"
#include "torch_views.hpp"

namespace nb = nanobind;

namespace heed::python {
namespace {

// DLPack's device types (dlpack.h, DLDeviceType).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;  // pinned host memory: the CPU reads it directly
constexpr int kDLCUDAManaged = 13;

std::string dtype_name(nb::dlpack::dtype dtype) {
  using Code = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<Code>(dtype.code)) {
    case Code::Int: base = "int"; break;
    case Code::UInt: base = "uint"; break;
    case Code::Float: base = "float"; break;
    case Code::Bfloat: base = "bfloat"; break;
    case Code::Complex: base = "complex"; break;
    case Code::Bool: return "bool";
    default: base = "dlpack_code" + std::to_string(dtype.code) + "_"; break;
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

const char* device_type_name(int device_type) {
  switch (device_type) {
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    case 17: return "maia";
  }
  return "unknown";
}

// "numpy.ndarray", "builtins.list"
std::string python_type_name(nb::handle object) {
  nb::handle type = object.type();
  return std::string(nb::str(type.attr("__module__")).c_str()) + "." + nb::str(type.attr("__qualname__")).c_str();
}

std::string prefix(const ArraySpec& spec) { return std::string("[") + spec.op + "] " + spec.name + " "; }

DType to_dtype(nb::dlpack::dtype dtype, const ArraySpec& spec) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dtype.code);
  if (spec.metadata) {
    if (code == Code::Int && dtype.bits == 32 && dtype.lanes == 1) return DType::Int32;
    throw nb::value_error((prefix(spec) + "has dtype " + dtype_name(dtype) + "; heed takes int32 for it").c_str());
  }
  if (dtype.lanes == 1) {
    if (code == Code::Float && dtype.bits == 32) return DType::Float32;
    if (code == Code::Float && dtype.bits == 16) return DType::Float16;
    if (code == Code::Bfloat && dtype.bits == 16) return DType::BFloat16;
    if (code == Code::UInt && dtype.bits == 16 && spec.bfloat16_bits) return DType::BFloat16;
    if (code == Code::Bool && dtype.bits == 8) return DType::Bool;
  }
  throw nb::value_error((prefix(spec) + "has dtype " + dtype_name(dtype) +
                         "; heed takes float32, float16 or bfloat16 (and bool for a mask)")
                            .c_str());
}

Device to_device(int device_type, int device_id, const ArraySpec& spec) {
  switch (device_type) {
    case kDLCPU:
    case kDLCUDAHost: return Device::cpu();
    case kDLCUDA:
    case kDLCUDAManaged: return Device::cuda(device_id);
  }
  throw Error(ErrorKind::Unsupported, prefix(spec) + "is on device type " + device_type_name(device_type) +
                                          " (DLPack " + std::to_string(device_type) +
                                          "); heed runs on cpu and cuda");
}

// The message of a Python exception, without the traceback that python_error::what() adds.
std::string message_of(const nb::python_error& error) { return nb::str(error.value()).c_str(); }

// An object nanobind could not import: a TypeError when it is no array; NotImplementedError when
// it is on a device heed has no backend for (one DLPack cannot name either, as PyTorch's meta);
// else a ValueError with the producer's own reason (numpy's strides that are not whole elements,
// PyTorch's sparse layouts).
[[noreturn]] void not_importable(nb::handle object, const ArraySpec& spec) {
  if (!nb::hasattr(object, "__dlpack__")) {
    throw nb::type_error((prefix(spec) + "must be an array that supports DLPack, got " + python_type_name(object)).c_str());
  }
  if (nb::hasattr(object, "__dlpack_device__")) {
    int device_type = kDLCPU, device_id = 0;
    try {
      const nb::tuple device = nb::cast<nb::tuple>(object.attr("__dlpack_device__")());
      device_type = nb::cast<int>(device[0]);
      device_id = nb::cast<int>(device[1]);
    } catch (const nb::python_error& error) {
      throw Error(ErrorKind::Unsupported, prefix(spec) + "(" + python_type_name(object) +
                                              ") is on a device DLPack cannot name (" + message_of(error) +
                                              "); heed runs on cpu and cuda");
    } catch (const nb::cast_error&) {
      // An odd __dlpack_device__: the export's own error below says more.
    }
    (void)to_device(device_type, device_id, spec);
  }
  std::string reason = "its DLPack export is not one heed can read";
  try {
    object.attr("__dlpack__")();
  } catch (const nb::python_error& error) {
    reason = message_of(error);
  }
  throw nb::value_error(
      (prefix(spec) + "(" + python_type_name(object) + ") cannot be read through DLPack: " + reason).c_str());
}

}  // namespace

ImportedArray import_array(nb::handle object, const ArraySpec& spec) {
  ImportedArray imported;
  if (std::optional<TensorView> view = torch_view(object, spec)) {
    imported.owner = nb::borrow(object);
    imported.view = std::move(*view);
    return imported;
  }
  if (spec.writable) {
    nb::ndarray<> writable;
    if (!nb::try_cast(object, writable, false)) {
      if (nb::try_cast(object, imported.array, false)) {
        throw nb::value_error((prefix(spec) + "is read-only; heed writes the result into it").c_str());
      }
      not_importable(object, spec);
    }
    imported.array = nb::ndarray<nb::ro>(writable);
  } else if (!nb::try_cast(object, imported.array, false)) {
    not_importable(object, spec);
  }

  const nb::ndarray<nb::ro>& array = imported.array;
  const DType dtype = to_dtype(array.dtype(), spec);
  const Device device = to_device(array.device_type(), array.device_id(), spec);
  const int rank = static_cast<int>(array.ndim());
  std::vector<std::int64_t> dims(array.shape_ptr(), array.shape_ptr() + rank);
  std::vector<std::int64_t> strides(array.stride_ptr(), array.stride_ptr() + rank);
  // const_cast: heed's views are mutable by type; inputs are only read.
  imported.view = TensorView(const_cast<void*>(static_cast<const void*>(array.data())), dtype,
                             Shape(std::move(dims)), std::move(strides), device);
  return imported;
}

ImportedBuffer import_buffer(nb::handle object, const ArraySpec& spec) {
  ImportedBuffer buffer;
  if (!nb::try_cast(object, buffer.array, false)) {
    nb::ndarray<nb::ro> read_only;
    if (nb::try_cast(object, read_only, false)) {
      throw nb::value_error((prefix(spec) + "is read-only; heed writes its scratch there").c_str());
    }
    not_importable(object, spec);
  }
  const nb::ndarray<>& array = buffer.array;
  buffer.device = to_device(array.device_type(), array.device_id(), spec);
  const auto item = static_cast<std::int64_t>((array.dtype().bits * array.dtype().lanes + 7) / 8);
  std::int64_t elements = 1, expected = 1;
  bool contiguous = true;
  for (int axis = static_cast<int>(array.ndim()) - 1; axis >= 0; --axis) {
    const auto size = static_cast<std::int64_t>(array.shape(static_cast<std::size_t>(axis)));
    if (size != 1 && array.stride(static_cast<std::size_t>(axis)) != expected) contiguous = false;
    expected *= size;
    elements *= size;
  }
  if (!contiguous) throw nb::value_error((prefix(spec) + "must be contiguous").c_str());
  buffer.data = array.data();
  buffer.bytes = static_cast<std::size_t>(elements * item);
  return buffer;
}

Device parse_device(const std::string& text, const char* op) {
  if (text == "default") return Device::default_device();
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  const std::string cuda_prefix = "cuda:";
  if (text.rfind(cuda_prefix, 0) == 0 && text.size() > cuda_prefix.size() && text.size() < cuda_prefix.size() + 6) {
    int index = 0;
    for (char c : text.substr(cuda_prefix.size())) {
      if (c < '0' || c > '9') index = -1;
      if (index >= 0) index = index * 10 + (c - '0');
    }
    if (index >= 0) return Device::cuda(index);
  }
  throw nb::value_error((std::string("[") + op + "] device must be 'cpu', 'cuda' or 'cuda:N', got '" + text + "'").c_str());
}

}  // namespace heed::python
