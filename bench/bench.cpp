#include "bench.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <variant>

#include "device_memory.hpp"
#include "heed/attention.hpp"
#include "heed/error.hpp"

namespace heed::bench {

namespace {

constexpr std::uint64_t kInputSeed = 0x5eed'0000'1234'5678ULL;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// splitmix64: fast, reproducible across platforms (unlike std distributions).
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [low, high).
  float uniform(float low, float high) {
    constexpr double kTwoTo53 = 9007199254740992.0;
    const double unit = static_cast<double>(next() >> 11) / kTwoTo53;
    return low + static_cast<float>(unit) * (high - low);
  }

 private:
  std::uint64_t state_;
};

// One tensor's storage and its contiguous view.
struct Buffer {
  std::vector<std::byte> bytes;
  TensorView view;  // points into `bytes`, so a Buffer moves but never copies

  Buffer() = default;
  Buffer(Buffer&&) = default;
  Buffer& operator=(Buffer&&) = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

Buffer allocate(DType dtype, Shape shape) {
  Buffer buffer;
  const auto numel = static_cast<std::size_t>(shape.numel("heed::bench"));
  buffer.bytes.resize(numel * size_of(dtype));
  buffer.view = TensorView(buffer.bytes.data(), dtype, std::move(shape));
  return buffer;
}

Buffer random_tensor(DType dtype, Shape shape, Random& random, float low, float high) {
  Buffer buffer = allocate(dtype, std::move(shape));
  const std::size_t count = buffer.bytes.size() / size_of(dtype);
  std::byte* data = buffer.bytes.data();
  for (std::size_t i = 0; i < count; ++i) {
    const float value = random.uniform(low, high);
    switch (dtype) {
      case DType::Float32:
        std::memcpy(data + i * 4, &value, 4);
        break;
      case DType::Float16: {
        const std::uint16_t bits = float_to_half_bits(value);
        std::memcpy(data + i * 2, &bits, 2);
        break;
      }
      case DType::BFloat16: {
        const std::uint16_t bits = float_to_bfloat16_bits(value);
        std::memcpy(data + i * 2, &bits, 2);
        break;
      }
      case DType::Bool:
        data[i] = value >= 0.0f ? std::byte{1} : std::byte{0};
        break;
      case DType::Int32:
        break;
    }
  }
  return buffer;
}

std::vector<float> to_float(const Buffer& buffer) {
  const DType dtype = buffer.view.dtype;
  const std::size_t count = buffer.bytes.size() / size_of(dtype);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::byte* element = buffer.bytes.data() + i * size_of(dtype);
    std::uint16_t bits = 0;
    switch (dtype) {
      case DType::Float32:
        std::memcpy(&values[i], element, 4);
        break;
      case DType::Float16:
        std::memcpy(&bits, element, 2);
        values[i] = half_bits_to_float(bits);
        break;
      case DType::BFloat16:
        std::memcpy(&bits, element, 2);
        values[i] = bfloat16_bits_to_float(bits);
        break;
      case DType::Bool:
        values[i] = std::to_integer<int>(*element) != 0 ? 1.0f : 0.0f;
        break;
      case DType::Int32:
        break;
    }
  }
  return values;
}

// The inputs of one case, built once and shared by both routes.
struct CaseInputs {
  Buffer q, k, v, mask, sinks;
  AttentionOptions options;
  float scale = 1.0f;
};

// A quarter of the batch entries pad away their last keys, 1/8 of Lk per step.
Buffer key_padding_mask(const cases::Case& c) {
  Buffer mask = allocate(DType::Bool, Shape{c.batch, 1, 1, c.kv_len});
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t padded = (b % 4) * c.kv_len / 8;
    for (std::int64_t j = 0; j < c.kv_len; ++j) {
      mask.bytes[static_cast<std::size_t>(b * c.kv_len + j)] =
          j < c.kv_len - padded ? std::byte{1} : std::byte{0};
    }
  }
  return mask;
}

CaseInputs build_inputs(const cases::Case& c) {
  Random random(kInputSeed);
  CaseInputs inputs;
  inputs.q = random_tensor(c.dtype, Shape{c.batch, c.q_heads, c.q_len, c.head_dim}, random, -1, 1);
  inputs.k =
      random_tensor(c.dtype, Shape{c.batch, c.kv_heads, c.kv_len, c.head_dim}, random, -1, 1);
  inputs.v =
      random_tensor(c.dtype, Shape{c.batch, c.kv_heads, c.kv_len, c.value_dim}, random, -1, 1);
  inputs.scale = c.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(c.head_dim)) : 1.0f;
  switch (c.mask) {
    case cases::MaskKind::None:
      break;
    case cases::MaskKind::Bool:  // about 1 key in 8 masked
      inputs.mask = random_tensor(DType::Bool, Shape{c.q_len, c.kv_len}, random, -0.125f, 0.875f);
      break;
    case cases::MaskKind::Additive:
      inputs.mask = random_tensor(DType::Float32, Shape{c.q_len, c.kv_len}, random, -2.0f, 0.0f);
      break;
    case cases::MaskKind::KeyPadding:
      inputs.mask = key_padding_mask(c);
      break;
  }
  if (c.mask != cases::MaskKind::None) inputs.options.mask = inputs.mask.view;
  if (c.sinks) {
    inputs.sinks = random_tensor(DType::Float32, Shape{c.q_heads}, random, -1, 1);
    inputs.options.sinks = inputs.sinks.view;
  }
  inputs.options.causal = c.causal;
  inputs.options.window = c.window;
  inputs.options.max_score_bytes = c.max_score_bytes;
  return inputs;
}

// A host buffer's copy on `device` (the buffer itself on the CPU), kept alive by `keep`.
TensorView on_device(const Buffer& host, Device device, std::vector<std::unique_ptr<DeviceMemory>>& keep) {
  if (device.type == DeviceType::CPU) return host.view;
  auto memory = std::make_unique<DeviceMemory>(device, host.bytes.size());
  memory->upload(host.bytes.data(), host.bytes.size());
  TensorView view = host.view;
  view.data = memory->data();
  view.device = device;
  keep.push_back(std::move(memory));
  return view;
}

// The inputs of one case on the benchmark's device.
struct DeviceInputs {
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  TensorView q, k, v;
  AttentionOptions options;
};

DeviceInputs place(const CaseInputs& inputs, Device device) {
  DeviceInputs placed;
  placed.options = inputs.options;
  placed.q = on_device(inputs.q, device, placed.memory);
  placed.k = on_device(inputs.k, device, placed.memory);
  placed.v = on_device(inputs.v, device, placed.memory);
  if (inputs.options.mask) placed.options.mask = on_device(inputs.mask, device, placed.memory);
  if (inputs.options.sinks) placed.options.sinks = on_device(inputs.sinks, device, placed.memory);
  return placed;
}

// An output on `device`, read back into `host` by fetch().
struct DeviceOutput {
  DeviceOutput(Buffer& host_buffer, Device device) : host(host_buffer), view(host_buffer.view) {
    if (device.type == DeviceType::CPU) return;
    memory = std::make_unique<DeviceMemory>(device, host.bytes.size());
    view.data = memory->data();
    view.device = device;
  }
  void fetch() {
    if (memory) memory->download(host.bytes.data(), host.bytes.size());
  }
  Buffer& host;
  TensorView view;
  std::unique_ptr<DeviceMemory> memory;
};

double max_abs_diff(const Buffer& a, const Buffer& b) {
  const std::vector<float> first = to_float(a);
  const std::vector<float> second = to_float(b);
  double largest = 0.0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(first[i]) - static_cast<double>(second[i]));
    if (std::isnan(diff)) return std::numeric_limits<double>::quiet_NaN();
    largest = std::max(largest, diff);
  }
  return largest;
}

void compare_with_composed(const CaseInputs& inputs, const DeviceInputs& placed, const Buffer& heed_out,
                           const Options& options, Result& result) {
  AttentionOptions composed_options = placed.options;
  composed_options.route = RouteChoice::Composed;
  AttentionPlan plan;
  try {
    plan = plan_attention(placed.q, placed.k, placed.v, composed_options);
  } catch (const Error& error) {
    result.composed_note = std::string("composed route refused: ") + error.what();
    return;
  }
  if (plan.scratch_bytes > options.composed_scratch_limit) {
    char note[160];
    std::snprintf(note, sizeof(note), "composed route needs %.2f GiB of scratch (limit %.2f GiB)",
                  static_cast<double>(plan.scratch_bytes) / kGiB,
                  static_cast<double>(options.composed_scratch_limit) / kGiB);
    result.composed_note = note;
    return;
  }
  Buffer composed_out = allocate(heed_out.view.dtype, heed_out.view.shape);
  DeviceOutput composed(composed_out, options.device);
  result.composed_ms = median_ms(options.device, options.reps, [&] {
    attention(placed.q, placed.k, placed.v, composed.view, inputs.scale, composed_options);
  });
  composed.fetch();
  result.speedup = *result.composed_ms / result.median_ms;
  result.max_abs_diff = max_abs_diff(heed_out, composed_out);
  if (std::isnan(*result.max_abs_diff)) result.composed_note = "an output holds NaN";
}

// Fails with heed's own error where the device cannot run (no CUDA build, no device).
void check_device(const cases::Case& c, const Options& options) {
  if (options.device.type == DeviceType::CPU) return;
  const Shape q{c.batch, c.q_heads, c.q_len, c.head_dim};
  const Shape k{c.batch, c.kv_heads, c.kv_len, c.head_dim};
  const Shape v{c.batch, c.kv_heads, c.kv_len, c.value_dim};
  plan_attention(q, k, v, c.dtype, AttentionOptions{}, options.device);
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return "null";
  return format("%.6g", *value);
}

const char* mask_name(cases::MaskKind kind) {
  switch (kind) {
    case cases::MaskKind::None:
      return "none";
    case cases::MaskKind::Bool:
      return "bool";
    case cases::MaskKind::Additive:
      return "additive";
    case cases::MaskKind::KeyPadding:
      return "key_padding";
  }
  return "?";
}

}  // namespace

std::string describe_kernel(const Kernel& kernel) {
  std::ostringstream text;
  text << route_name(kernel);
  const auto fields = kernel_fields(kernel);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    text << (i == 0 ? "(" : ", ") << fields[i].first << "=" << fields[i].second << (i + 1 == fields.size() ? ")" : "");
  }
  return text.str();
}

std::string describe_shape(const cases::Case& c) {
  std::ostringstream text;
  text << "B " << c.batch << ", H " << c.q_heads << "/" << c.kv_heads << ", L " << c.q_len << "/"
       << c.kv_len << ", D " << c.head_dim << "/" << c.value_dim << ", " << short_name(c.dtype);
  if (c.causal) text << ", causal";
  if (c.window) text << ", window " << *c.window;
  if (c.sinks) text << ", sinks";
  if (c.mask != cases::MaskKind::None) text << ", mask " << mask_name(c.mask);
  if (c.max_score_bytes) text << ", cap " << *c.max_score_bytes;
  return text.str();
}

Result run_case(const cases::Case& c, const Options& options) {
  check_device(c, options);
  const CaseInputs inputs = build_inputs(c);
  const DeviceInputs placed = place(inputs, options.device);
  const AttentionPlan plan = plan_attention(placed.q, placed.k, placed.v, placed.options);
  Result result;
  result.c = c;
  result.route = describe_kernel(plan.kernel);
  result.kernel_name = plan.kernel_name;
  result.workers = plan.workers;
  result.scratch_bytes = plan.scratch_bytes;
  const auto says = [&](const char* prefix) {
    return std::any_of(plan.reasons.begin(), plan.reasons.end(),
                       [&](const std::string& reason) { return reason.rfind(prefix, 0) == 0; });
  };
  result.on_amx = says("AMX tiles");
  result.on_dot_bf16 = says("AVX512-BF16 dot products");
  Buffer heed_out = allocate(c.dtype, Shape{c.batch, c.q_heads, c.q_len, c.value_dim});
  DeviceOutput out(heed_out, options.device);
  result.median_ms = median_ms(options.device, options.reps, [&] {
    attention(placed.q, placed.k, placed.v, out.view, inputs.scale, placed.options);
  });
  out.fetch();
  const double seconds = result.median_ms / 1e3;
  result.gflops = seconds > 0 ? c.flops() / seconds / 1e9 : 0.0;
  result.gbytes = seconds > 0 ? c.bytes() / seconds / 1e9 : 0.0;
  if (options.composed) {
    compare_with_composed(inputs, placed, heed_out, options, result);
  } else {
    result.composed_note = "composed route not timed (--no-composed)";
  }
  return result;
}

std::string describe_ceilings(const CpuCeilings& c) {
  return "ceilings: " + std::to_string(c.threads) + " threads, " + c.isa +
         format(" kernels, float32 FMA peak %.1f GFLOP/s, ", c.fma_gflops) +
         (c.dot_bf16_gflops > 0 ? format("bfloat16 dot-product peak %.1f GFLOP/s, ", c.dot_bf16_gflops)
                                : std::string()) +
         (c.amx_gflops > 0 ? format("bfloat16 AMX peak %.1f GFLOP/s, ", c.amx_gflops) : std::string()) +
         format("copy %.1f GB/s (read + write), ", c.copy_gbytes) + format("read %.1f GB/s", c.read_gbytes);
}

std::string table_header() {
  char line[256];
  std::snprintf(line, sizeof(line), "%-24s %-66s %-42s %10s %15s %8s %12s %8s %9s", "case", "shape",
                "route", "heed ms", "rate", "of peak", "composed ms", "speedup", "max diff");
  return line;
}

std::string table_row(const Result& r) {
  const std::string rate =
      r.c.memory_bound() ? format("%.1f GB/s", r.gbytes) : format("%.1f GFLOP/s", r.gflops);
  const std::string composed = r.composed_ms ? format("%.2f", *r.composed_ms) : "n/a";
  const std::string speedup = r.speedup ? format("%.2fx", *r.speedup) : "n/a";
  const std::string diff = r.max_abs_diff ? format("%.2e", *r.max_abs_diff) : "n/a";
  const std::string roofline = r.roofline ? format("%.0f%%", *r.roofline * 100) : "n/a";
  char line[512];
  std::snprintf(line, sizeof(line), "%-24s %-66s %-42s %10.2f %15s %8s %12s %8s %9s", r.c.name.c_str(),
                describe_shape(r.c).c_str(), r.route.c_str(), r.median_ms, rate.c_str(), roofline.c_str(),
                composed.c_str(), speedup.c_str(), diff.c_str());
  std::string row = line;
  if (!r.composed_note.empty()) row += "\n    n/a: " + r.composed_note;
  return row;
}

std::string to_json(const Result& r) {
  const cases::Case& c = r.c;
  std::ostringstream json;
  json << "{\"name\": " << json_string(c.name) << ", \"batch\": " << c.batch
       << ", \"q_heads\": " << c.q_heads << ", \"kv_heads\": " << c.kv_heads
       << ", \"q_len\": " << c.q_len << ", \"kv_len\": " << c.kv_len
       << ", \"head_dim\": " << c.head_dim << ", \"value_dim\": " << c.value_dim
       << ", \"dtype\": " << json_string(short_name(c.dtype))
       << ", \"causal\": " << (c.causal ? "true" : "false")
       << ", \"window\": " << (c.window ? std::to_string(*c.window) : "null")
       << ", \"sinks\": " << (c.sinks ? "true" : "false")
       << ", \"mask\": " << json_string(mask_name(c.mask))
       << ", \"route\": " << json_string(r.route)
       << ", \"kernel_name\": " << json_string(r.kernel_name) << ", \"workers\": " << r.workers
       << ", \"scratch_bytes\": " << r.scratch_bytes
       << ", \"memory_bound\": " << (c.memory_bound() ? "true" : "false")
       << ", \"flops\": " << json_number(c.flops()) << ", \"bytes\": " << json_number(c.bytes())
       << ", \"median_ms\": " << json_number(r.median_ms)
       << ", \"gflops\": " << json_number(r.gflops)
       << ", \"gbytes_per_s\": " << json_number(r.gbytes)
       << ", \"composed_ms\": " << json_number(r.composed_ms)
       << ", \"speedup\": " << json_number(r.speedup)
       << ", \"max_abs_diff\": " << json_number(r.max_abs_diff)
       << ", \"composed_note\": " << json_string(r.composed_note)
       << ", \"peak_gflops\": " << json_number(r.ceilings ? std::optional(r.ceilings->fma_gflops) : std::nullopt)
       << ", \"copy_gbytes_per_s\": "
       << json_number(r.ceilings ? std::optional(r.ceilings->copy_gbytes) : std::nullopt)
       << ", \"read_gbytes_per_s\": "
       << json_number(r.ceilings && r.ceilings->read_gbytes > 0 ? std::optional(r.ceilings->read_gbytes) : std::nullopt)
       << ", \"amx_peak_gflops\": "
       << json_number(r.ceilings && r.ceilings->amx_gflops > 0 ? std::optional(r.ceilings->amx_gflops) : std::nullopt)
       << ", \"dot_bf16_peak_gflops\": "
       << json_number(r.ceilings && r.ceilings->dot_bf16_gflops > 0 ? std::optional(r.ceilings->dot_bf16_gflops)
                                                                   : std::nullopt)
       << ", \"on_amx\": " << (r.on_amx ? "true" : "false")
       << ", \"on_dot_bf16\": " << (r.on_dot_bf16 ? "true" : "false")
       << ", \"roofline_fraction\": " << json_number(r.roofline) << "}";
  return json.str();
}

void run_suite(const std::vector<cases::Case>& suite, const Options& options, bool json,
               std::ostream& out) {
  if (!suite.empty()) check_device(suite.front(), options);  // before any output
  // On a GPU the copy bandwidth of the card is the ceiling of the memory-bound cases.
  CpuCeilings ceilings;
  if (options.device.type == DeviceType::CPU) {
    ceilings = measure_cpu_ceilings();
    if (!json) out << describe_ceilings(ceilings) << std::endl;
  } else {
    ceilings.threads = 0;
    ceilings.isa = "cuda";
    ceilings.copy_gbytes = measure_device_copy_gbytes(options.device);
    if (!json) {
      out << "ceilings: " << options.device.to_string() << " " << device_name(options.device)
          << format(", copy %.1f GB/s (read + write)", ceilings.copy_gbytes) << std::endl;
    }
  }
  out << (json ? "[" : table_header()) << std::endl;
  std::vector<std::string> records;  // for options.records_path
  std::size_t failed = 0;
  std::string first_error;
  ErrorKind first_kind = ErrorKind::Internal;
  for (std::size_t i = 0; i < suite.size(); ++i) {
    const char* separator = i + 1 < suite.size() ? "," : "";
    try {
      Result result = run_case(suite[i], options);
      result.ceilings = ceilings;
      // Matrix work on the AMX tiles or AVX512-BF16 dot products is measured against their own
      // bfloat16 rate (a float16 product takes three tile products), the rest against the FMA
      // peak; on a GPU only the memory-bound cases have a ceiling (the card's copy bandwidth).
      if (result.c.memory_bound()) {
        result.roofline = result.gbytes / ceilings.copy_gbytes;
      } else if (result.on_amx && ceilings.amx_gflops > 0) {
        result.roofline = result.gflops / ceilings.amx_gflops;
      } else if (result.on_dot_bf16 && ceilings.dot_bf16_gflops > 0) {
        result.roofline = result.gflops / ceilings.dot_bf16_gflops;
      } else if (ceilings.fma_gflops > 0) {
        result.roofline = result.gflops / ceilings.fma_gflops;
      }
      out << (json ? to_json(result) + separator : table_row(result)) << std::endl;
      if (!options.records_path.empty()) records.push_back(to_json(result));
    } catch (const Error& error) {
      // One failing case must not hide the others, nor leave the JSON array open.
      ++failed;
      if (first_error.empty()) {
        first_error = error.what();
        first_kind = error.kind();
      }
      if (json) {
        out << "{\"name\": " << json_string(suite[i].name)
            << ", \"error\": " << json_string(error.what()) << "}" << separator << std::endl;
      } else {
        out << suite[i].name << ": " << error.what() << std::endl;
      }
    }
  }
  if (json) out << "]" << std::endl;
  if (!options.records_path.empty()) {
    std::ofstream file(options.records_path);
    file << "[";
    for (std::size_t i = 0; i < records.size(); ++i) file << (i > 0 ? ",\n" : "\n") << records[i];
    file << "\n]\n";
  }
  if (failed > 0) {
    throw Error(first_kind, "[heed::bench] " + std::to_string(failed) + " of " +
                                std::to_string(suite.size()) +
                                " cases failed; the first: " + first_error);
  }
}

}  // namespace heed::bench
