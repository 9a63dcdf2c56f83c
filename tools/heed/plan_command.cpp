// heed plan / heed explain: the plan of a call, from shapes alone.

#include <iostream>
#include <sstream>

#include "bench.hpp"
#include "commands.hpp"
#include "heed/plan.hpp"

namespace heed::cli {

namespace {

constexpr const char* kPlanUsage =
    "usage: heed %s --q B,Hq,Lq,D --k B,Hkv,Lk,D --v B,Hkv,Lk,Dv [options]\n"
    "\n"
    "  --dtype f32|f16|bf16         element type of q, k, v (default f32)\n"
    "  --mask-shape d0,d1[,d2,d3]   a mask of this shape, broadcast to [B, Hq, Lq, Lk]\n"
    "  --mask-dtype bool|f32        the mask's type: bool attends, f32 is added (default bool)\n"
    "  --sinks                      one sink logit per query head\n"
    "  --device cpu|cuda[:N]        the device to plan for (default: heed's default device)\n"
    "%s%s";

const std::vector<FlagSpec> kPlanFlags = with_common_options(
    {{"q"}, {"k"}, {"v"}, {"dtype"}, {"mask-shape"}, {"mask-dtype"}, {"sinks", false}, {"device"}, {"json", false}});

// The call being planned: shapes, dtype, options (masks and sinks as shape-only views).
struct PlanRequest {
  Shape q, k, v;
  DType dtype = DType::Float32;
  AttentionOptions options;
  Device device;
};

Shape required_shape(const Args& args, const char* flag) {
  const auto text = args.value(flag);
  if (!text)
    usage_error(args.command(), std::string("missing --") + flag + " (a shape like 1,8,128,64)");
  return Shape(parse_int_list(args.command(), flag, *text, 4));
}

DType parse_tensor_dtype(const std::string& command, const std::string& text) {
  const std::string name = parse_choice(command, "dtype", text,
                                        {"f32", "f16", "bf16", "float32", "float16", "bfloat16"});
  return *parse_dtype(name);
}

PlanRequest parse_request(const Args& args) {
  const std::string& command = args.command();
  PlanRequest request;
  request.q = required_shape(args, "q");
  request.k = required_shape(args, "k");
  request.v = required_shape(args, "v");
  if (const auto dtype = args.value("dtype")) request.dtype = parse_tensor_dtype(command, *dtype);
  apply_common_options(args, request.options);
  if (args.has("mask-dtype") && !args.has("mask-shape")) {
    usage_error(command, "--mask-dtype needs --mask-shape");
  }
  if (const auto mask_shape = args.value("mask-shape")) {
    std::vector<std::int64_t> dims = parse_int_list(command, "mask-shape", *mask_shape, 0);
    if (dims.size() != 2 && dims.size() != 4) {
      usage_error(command, "--mask-shape expects 2 or 4 values, got " +
                               std::to_string(dims.size()) + " ('" + *mask_shape + "')");
    }
    DType mask_dtype = DType::Bool;
    if (const auto text = args.value("mask-dtype")) {
      const std::string name =
          parse_choice(command, "mask-dtype", *text, {"bool", "f32", "float32"});
      mask_dtype = name == "bool" ? DType::Bool : DType::Float32;
    }
    request.options.mask = TensorView(nullptr, mask_dtype, Shape(std::move(dims)));
  }
  if (args.has("sinks"))
    request.options.sinks = TensorView(nullptr, DType::Float32, Shape{request.q[1]});
  request.device = args.value("device") ? parse_device(command, *args.value("device"))
                                        : Device::default_device();
  return request;
}

std::string describe_request(const PlanRequest& request) {
  std::ostringstream text;
  text << "q " << request.q.to_string() << ", k " << request.k.to_string() << ", v "
       << request.v.to_string() << ", " << to_string(request.dtype);
  const AttentionOptions& options = request.options;
  if (options.causal) text << ", causal";
  if (options.window) text << ", window " << *options.window;
  if (options.mask)
    text << ", " << to_string(options.mask->dtype) << " mask " << options.mask->shape.to_string();
  if (options.sinks) text << ", sinks";
  if (options.max_score_bytes) text << ", max_score_bytes " << *options.max_score_bytes;
  if (options.max_scratch_bytes) text << ", max_scratch_bytes " << *options.max_scratch_bytes;
  return text.str();
}

void print_plan(const AttentionPlan& plan) {
  std::cout << "kernel: " << bench::describe_kernel(plan.kernel) << "\n"
            << "kernel_name: " << plan.kernel_name << "\n"
            << "device: " << plan.device.to_string() << "\n"
            << "dtype: " << to_string(plan.dtype) << "\n"
            << "scratch_bytes: " << plan.scratch_bytes << " ("
            << human_bytes(static_cast<double>(plan.scratch_bytes)) << ")\n"
            << "max_intermediate_bytes: " << plan.max_intermediate_bytes << " ("
            << human_bytes(static_cast<double>(plan.max_intermediate_bytes)) << ")\n"
            << "capped: " << (plan.capped ? "yes" : "no") << "\n"
            << "workers: " << plan.workers << "\n"
            << "buffers:" << (plan.buffers.empty() ? " none" : "") << "\n";
  for (const ScratchBuffer& buffer : plan.buffers) {
    std::cout << "  " << buffer.name << ": offset " << buffer.offset << ", " << buffer.bytes
              << " bytes (" << human_bytes(static_cast<double>(buffer.bytes)) << ")\n";
  }
  std::cout << "explain:\n";
  std::istringstream reasons(plan.explain());
  for (std::string line; std::getline(reasons, line);) std::cout << "  " << line << "\n";
}

int plan_or_explain(const std::string& command, const std::vector<std::string>& tokens) {
  const Args args = Args::parse(command, tokens, kPlanFlags);
  if (args.help()) {
    const char* json_line =
        command == "plan" ? "  --json                       print plan.to_json()\n" : "";
    std::printf(kPlanUsage, command.c_str(), common_option_help(), json_line);
    return 0;
  }
  if (command == "explain" && args.has("json")) usage_error(command, "--json is for heed plan");
  const PlanRequest request = parse_request(args);
  const AttentionPlan plan = plan_attention(request.q, request.k, request.v, request.dtype,
                                            request.options, request.device);
  if (command == "explain") {
    std::cout << "heed plans " << bench::describe_kernel(plan.kernel) << " (" << plan.kernel_name
              << ") on " << plan.device.to_string() << " for " << describe_request(request)
              << ", because:\n"
              << plan.explain();
    if (!plan.explain().empty() && plan.explain().back() != '\n') std::cout << "\n";
  } else if (args.has("json")) {
    std::cout << plan.to_json() << "\n";
  } else {
    print_plan(plan);
  }
  return 0;
}

}  // namespace

int plan_command(const std::vector<std::string>& tokens) { return plan_or_explain("plan", tokens); }

int explain_command(const std::vector<std::string>& tokens) {
  return plan_or_explain("explain", tokens);
}

}  // namespace heed::cli
