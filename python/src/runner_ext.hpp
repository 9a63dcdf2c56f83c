#pragma once
// heed._heed.Runner: a heed::Runner (heed/runner.hpp) with the imported arrays it is bound to.
// The factories live beside the calls they mirror (heed_ext.cpp's dense one, serving_ext.cpp's
// ragged and paged ones) and share their argument parsing.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "heed/runner.hpp"

namespace heed::python {

struct BoundRunner {
  // The imported inputs, outputs and workspace: their handles keep the memory alive while the
  // runner may read or write it. Declared first, so destroyed after the runner.
  std::shared_ptr<void> arrays;
  Runner runner;

  template <typename Arrays>
  static BoundRunner make(Arrays&& held, Runner&& runner) {
    return BoundRunner{std::make_shared<std::decay_t<Arrays>>(std::forward<Arrays>(held)), std::move(runner)};
  }
};

// Binds the Runner class (after heed._heed.Plan).
void bind_runner(nanobind::module_& m);

}  // namespace heed::python
