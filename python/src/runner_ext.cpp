#include "runner_ext.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace heed::python {

void bind_runner(nb::module_& m) {
  nb::class_<BoundRunner>(m, "Runner", "A call planned once and run many times (heed/runner.hpp)")
      .def_prop_ro("plan", [](const BoundRunner& r) { return r.runner.plan(); })
      .def(
          "run",
          [](BoundRunner& r, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            r.runner.run(Stream{reinterpret_cast<void*>(stream)});
          },
          "stream"_a, "The planned launches on the bound arrays, on `stream` (a cudaStream_t; 0: the default)")
      .def(
          "update_metadata",
          [](BoundRunner& r, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            r.runner.update_metadata(Stream{reinterpret_cast<void*>(stream)});
          },
          "stream"_a, "Re-validates host metadata changed in place and, on CUDA, copies it to the device");
}

}  // namespace heed::python
