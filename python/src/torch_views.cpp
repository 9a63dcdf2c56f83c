#include "torch_views.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_views.hpp"

namespace nb = nanobind;

namespace heed::python {
namespace {

// torch's objects that a view is compared with, looked up once torch is imported. They are held
// for the life of the process, as torch itself is.
struct Torch {
  PyObject* tensor_type = nullptr;
  PyObject* strided = nullptr;
  PyObject* float32 = nullptr;
  PyObject* float16 = nullptr;
  PyObject* bfloat16 = nullptr;
  PyObject* boolean = nullptr;
  PyObject* int32 = nullptr;
};

PyObject* attribute(PyObject* object, const char* name) {
  PyObject* value = PyObject_GetAttrString(object, name);
  if (value == nullptr) PyErr_Clear();
  return value;
}

// torch's objects, or nullptr while torch is not (or not fully) imported.
const Torch* torch_objects() {
  static Torch torch;
  if (torch.tensor_type != nullptr) return &torch;
  PyObject* module = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (module == nullptr) return nullptr;
  Torch found;
  PyObject** fields[] = {&found.tensor_type, &found.strided, &found.float32, &found.float16,
                         &found.bfloat16,    &found.boolean, &found.int32};
  const char* names[] = {"Tensor", "strided", "float32", "float16", "bfloat16", "bool", "int32"};
  for (std::size_t i = 0; i < std::size(names); ++i) {
    *fields[i] = attribute(module, names[i]);
    if (*fields[i] == nullptr) {
      for (std::size_t j = 0; j < i; ++j) Py_DECREF(*fields[j]);
      return nullptr;  // torch is still importing: DLPack serves this call
    }
  }
  torch = found;
  return &torch;
}

// Interned attribute names, made once.
struct Names {
  nb::str layout{"layout"}, dtype{"dtype"}, is_cuda{"is_cuda"}, is_cpu{"is_cpu"}, is_neg{"is_neg"},
      get_device{"get_device"}, data_ptr{"data_ptr"}, shape{"shape"}, stride{"stride"};
};
const Names& names() {
  static const Names* made = new Names();  // never destroyed: Python may be gone at exit
  return *made;
}

std::optional<DType> dtype_of(nb::handle dtype, const Torch& torch, const ArraySpec& spec) {
  const PyObject* d = dtype.ptr();
  if (spec.metadata) return d == torch.int32 ? std::optional(DType::Int32) : std::nullopt;
  if (d == torch.float32) return DType::Float32;
  if (d == torch.float16) return DType::Float16;
  if (d == torch.bfloat16) return DType::BFloat16;
  if (d == torch.boolean) return DType::Bool;
  return std::nullopt;
}

std::vector<std::int64_t> integers(nb::handle sequence) {
  std::vector<std::int64_t> values;
  values.reserve(nb::len(sequence));
  for (nb::handle item : sequence) values.push_back(nb::cast<std::int64_t>(item));
  return values;
}

}  // namespace

std::optional<TensorView> torch_view(nb::handle object, const ArraySpec& spec) {
  const Torch* torch = torch_objects();
  if (torch == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())) != torch->tensor_type) return std::nullopt;
  const Names& n = names();
  if (!object.attr(n.layout).is(nb::handle(torch->strided))) return std::nullopt;
  const std::optional<DType> dtype = dtype_of(object.attr(n.dtype), *torch, spec);
  if (!dtype) return std::nullopt;
  Device device;
  if (nb::cast<bool>(object.attr(n.is_cuda))) {
    device = Device::cuda(nb::cast<int>(object.attr(n.get_device)()));
  } else if (!nb::cast<bool>(object.attr(n.is_cpu))) {
    return std::nullopt;  // meta, mps, xpu, ...: DLPack's import names the device
  }
  // A negative view's memory holds the values before negation, and PyTorch's DLPack export hands
  // that memory out as it is: heed refuses it rather than read the wrong sign.
  if (nb::cast<bool>(object.attr(n.is_neg)())) {
    throw nb::value_error((std::string("[") + spec.op + "] " + spec.name +
                           " is a negative view (its memory holds the values negated); pass "
                           "tensor.resolve_neg()")
                              .c_str());
  }
  auto* data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(object.attr(n.data_ptr)()));
  return TensorView(data, *dtype, Shape(integers(object.attr(n.shape))), integers(object.attr(n.stride)()), device);
}

}  // namespace heed::python
