#pragma once
// The arguments every attention binding shares (heed_ext.cpp's dense call, serving_ext.cpp's
// ragged, paged and merge calls): options, scale, workspace, the overlap check, the last call.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "dlpack_views.hpp"
#include "heed/options.hpp"
#include "heed/tensor.hpp"

namespace heed::python {

// Which arrays hold bfloat16 bits in a uint16 array (numpy has no native bfloat16; the
// package passes ml_dtypes.bfloat16 arrays as their uint16 view). k and v stand for the caches
// of a paged call; out_a and out_b are merge_states' parts.
enum Bfloat16Bits : unsigned { kQ = 1, kK = 2, kV = 4, kOut = 8, kMask = 16, kSinks = 32, kOutA = 64, kOutB = 128 };

// The data pointers of the last attention call on this thread, for the zero-copy tests.
struct LastCall {
  std::uintptr_t q = 0, k = 0, v = 0, out = 0, mask = 0, sinks = 0, lse = 0, stream = 0;
  std::string device;
};
LastCall& last_call();

inline std::uintptr_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

// "auto", "vector", "tiled", "composed" -> RouteChoice; ValueError otherwise.
RouteChoice parse_route(const std::string& name, const char* op);

// A Python float as a float option; beyond float's range infinity, which heed rejects by name.
std::optional<float> float_option(std::optional<double> value);

// The caller's scale, else 1/sqrt(head_dim) (1 where head_dim is 0 or unknown, -1).
float scale_value(std::optional<double> scale, std::int64_t head_dim);

// The options of every form (sinks, causal, window, softcap, route, budget); `sinks` receives the
// imported array, which must outlive the options.
AttentionOptions import_options(const char* op, nanobind::handle sinks, std::optional<ImportedArray>& sinks_array,
                                bool causal, std::optional<std::int64_t> window, std::optional<double> softcap,
                                const std::string& route, std::optional<std::int64_t> max_scratch_bytes,
                                unsigned bf16);

// A caller's workspace on the call's device into options; `scratch` keeps it alive.
void attach_workspace(nanobind::handle workspace, std::optional<ImportedBuffer>& scratch, const Device& device,
                      AttentionOptions& options, const char* op);

// An optional writable float32 output (lse): imported into `array` and set as options.lse.
void attach_lse(nanobind::handle lse, std::optional<ImportedArray>& array, AttentionOptions& options, const char* op);

// heed reads every input while it writes out (and lse), so an output must not share memory
// with one: ValueError naming both.
void check_no_overlap(const TensorView& out, const char* out_name, const TensorView& input, const char* name,
                      const char* op);

}  // namespace heed::python
