#include "heed/plan.hpp"

#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <variant>

#include "core/format.hpp"
#include "heed/error.hpp"
#include "plan/planner.hpp"

namespace heed {

const char* route_name(const Kernel& kernel) {
  return std::visit([](const auto& route) { return std::decay_t<decltype(route)>::kName; }, kernel);
}

std::vector<std::pair<const char*, std::int64_t>> kernel_fields(const Kernel& kernel) {
  return std::visit(
      [](const auto& route) -> std::vector<std::pair<const char*, std::int64_t>> {
        using Route = std::decay_t<decltype(route)>;
        if constexpr (std::is_same_v<Route, route::Vector>) {
          return {{"passes", route.passes}, {"blocks", route.blocks}, {"dispatches", route.dispatches}};
        } else if constexpr (std::is_same_v<Route, route::Tiled>) {
          return {{"block_q", route.block_q}, {"block_k", route.block_k}};
        } else if constexpr (std::is_same_v<Route, route::ComposedBlocks>) {
          return {{"rows", route.rows}};
        } else {
          return {};
        }
      },
      kernel);
}

std::string AttentionPlan::explain() const {
  std::string text;
  for (const std::string& line : reasons) text += line + "\n";
  return text;
}

namespace {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string kernel_json(const Kernel& kernel) {
  std::string fields;
  for (const auto& [name, value] : kernel_fields(kernel)) fields += format(", \"{}\": {}", name, value);
  return format("{\"route\": \"{}\"{}}", route_name(kernel), fields);
}

}  // namespace

std::string AttentionPlan::to_json() const {
  std::string out = format("{\"device\": {}, \"dtype\": \"{}\", \"kernel\": {}, \"kernel_name\": {}, \"workers\": {}, "
                           "\"scratch_bytes\": {}, \"max_intermediate_bytes\": {}, \"capped\": {}, \"buffers\": [",
                           json_string(device.to_string()), to_string(dtype), kernel_json(kernel),
                           json_string(kernel_name), workers, scratch_bytes, max_intermediate_bytes,
                           capped ? "true" : "false");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const ScratchBuffer& b = buffers[i];
    out += format("{}{\"name\": {}, \"offset\": {}, \"bytes\": {}, \"slices\": {}}", i ? ", " : "",
                  json_string(b.name), b.offset, b.bytes, b.slices);
  }
  out += "], \"explanation\": [";
  for (std::size_t i = 0; i < reasons.size(); ++i) out += format("{}{}", i ? ", " : "", json_string(reasons[i]));
  out += "]}";
  return out;
}

namespace plan {

void refuse_scratch_budget(const Problem& p, const AttentionPlan& plan) {
  throw Error(ErrorKind::InvalidArgument,
              format("[{}] max_scratch_bytes ({}) is below what the {} route needs; the smallest budget that fits "
                     "is {} bytes",
                     op_of(p), *p.max_scratch_bytes, route_name(plan.kernel), plan.scratch_bytes));
}

void plan_empty_output(AttentionPlan& plan, const Problem& p, const std::string& workers) {
  if (p.route == RouteChoice::Vector) {
    plan.kernel = route::Vector{};
  } else if (p.route == RouteChoice::Tiled) {
    plan.kernel = route::Tiled{};
  } else {
    plan.kernel = route::Composed{};
  }
  plan.workers = 0;
  plan.reasons.push_back(format("route {}: {}", route_name(plan.kernel),
                                p.route == RouteChoice::Auto ? "any route serves an empty output"
                                                             : "asked for by the caller"));
  plan.reasons.push_back("empty output: nothing runs and no scratch is held");
  plan.reasons.push_back(workers);
  plan.reasons.push_back("scratch: 0 bytes in 0 buffers; largest score intermediate 0 bytes");
}

void require_backend(Device device, const char* op) {
  if (device.type != DeviceType::CPU) {
    throw Error(ErrorKind::Unsupported,
                format("[{}] device {}: this build of heed has no CUDA backend", op, device.to_string()));
  }
}

}  // namespace plan
}  // namespace heed
