// heed run: attention over .npy files, written atomically to --out.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "device_memory.hpp"
#include "heed/attention.hpp"
#include "heed/error.hpp"
#include "npy.hpp"

namespace heed::cli {

namespace {

constexpr const char* kRunUsage =
    "usage: heed run --q q.npy --k k.npy --v v.npy --out out.npy [options]\n"
    "\n"
    "Reads float32 or float16 arrays q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv]\n"
    "and writes out [B, Hq, Lq, Dv] as float32. The output appears only when the call succeeds.\n"
    "\n"
    "  --dtype f32|f16|bf16         compute type (default: the inputs' type)\n"
    "  --scale S                    multiplies q.k (default 1/sqrt(D))\n"
    "  --mask m.npy                 bool/uint8 (true attends) or float32 (added), broadcast to\n"
    "                               [B, Hq, Lq, Lk]\n"
    "  --sinks s.npy                float32 [Hq] sink logits\n"
    "  --device cpu|cuda[:N]        where to run (default cpu); CUDA copies the inputs to the device\n";

const std::vector<FlagSpec> kRunFlags = with_common_options(
    {{"q"}, {"k"}, {"v"}, {"out"}, {"dtype"}, {"scale"}, {"mask"}, {"sinks"}, {"device"}});

[[noreturn]] void run_error(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, "[heed run] " + message);
}

// An input converted to heed's types, with its view.
struct Tensor {
  std::vector<std::byte> bytes;
  TensorView view;  // points into `bytes`, so a Tensor moves but never copies

  Tensor() = default;
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
};

Tensor convert(const npy::Array& array, DType dtype) {
  const std::vector<float> values = npy::to_float32(array);
  Tensor tensor;
  tensor.bytes.resize(values.size() * size_of(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* element = tensor.bytes.data() + i * size_of(dtype);
    if (dtype == DType::Float32) {
      std::memcpy(element, &values[i], sizeof(float));
    } else {
      const std::uint16_t bits = dtype == DType::Float16 ? float_to_half_bits(values[i])
                                                         : float_to_bfloat16_bits(values[i]);
      std::memcpy(element, &bits, sizeof(bits));
    }
  }
  tensor.view = TensorView(tensor.bytes.data(), dtype, Shape(array.shape));
  return tensor;
}

npy::Array read_input(const std::string& path, const char* role, std::size_t rank) {
  npy::Array array = npy::read(path);
  if (array.type != npy::ElementType::Float32 && array.type != npy::ElementType::Float16) {
    run_error(std::string(role) + " " + path + " is " + npy::name_of(array.type) +
              "; expected float32 or float16");
  }
  if (rank > 0 && array.shape.size() != rank) {
    run_error(std::string(role) + " " + path + " has shape " + array.shape_string() +
              "; expected rank " + std::to_string(rank));
  }
  return array;
}

DType compute_dtype(const Args& args, const npy::Array& q, const npy::Array& k,
                    const npy::Array& v) {
  if (const auto text = args.value("dtype")) {
    return *parse_dtype(parse_choice("run", "dtype", *text,
                                     {"f32", "f16", "bf16", "float32", "float16", "bfloat16"}));
  }
  if (q.type != k.type || q.type != v.type) {
    run_error(std::string("q, k, v are ") + npy::name_of(q.type) + ", " + npy::name_of(k.type) +
              ", " + npy::name_of(v.type) + "; pass --dtype to choose the compute type");
  }
  return q.type == npy::ElementType::Float16 ? DType::Float16 : DType::Float32;
}

Tensor read_mask(const std::string& path) {
  const npy::Array array = npy::read(path);
  if (array.type == npy::ElementType::Bool || array.type == npy::ElementType::UInt8) {
    Tensor mask;  // heed reads a non-zero byte as "attend"
    mask.bytes = array.data;
    mask.view = TensorView(mask.bytes.data(), DType::Bool, Shape(array.shape));
    return mask;
  }
  return convert(array, DType::Float32);  // additive
}

// Writes `array` to a temporary file beside `path`, then renames it over `path`.
void write_atomically(const std::string& path, const npy::Array& array) {
  const std::vector<std::byte> bytes = npy::serialize(array);
  const std::filesystem::path target(path);
  const std::filesystem::path directory = target.has_parent_path() ? target.parent_path() : ".";
  std::string hidden_name = target.filename().string();  // built in place: GCC 12 -Wrestrict
  hidden_name.insert(hidden_name.begin(), '.');
  hidden_name += ".heed-XXXXXX";
  std::string temporary = (directory / hidden_name).string();
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0)
    run_error("cannot write " + path + ": no temporary file in " + directory.string() + ": " +
              std::strerror(errno));
  const mode_t umask_bits = ::umask(0);
  ::umask(umask_bits);
  ::fchmod(fd, 0666 & ~umask_bits);  // as an ordinary new file, not mkstemp's 0600
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t step = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (step < 0 && errno == EINTR) continue;
    if (step <= 0) break;
    written += static_cast<std::size_t>(step);
  }
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (written != bytes.size() || !closed) {
    ::unlink(temporary.c_str());
    run_error("cannot write " + path + ": " + std::strerror(write_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    ::unlink(temporary.c_str());
    run_error("cannot rename the output to " + path + ": " + std::strerror(rename_errno));
  }
}

npy::Array widen_to_float32(const std::vector<std::byte>& bytes, DType dtype, const Shape& shape) {
  std::vector<float> values(bytes.size() / size_of(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::byte* element = bytes.data() + i * size_of(dtype);
    std::uint16_t bits = 0;
    if (dtype == DType::Float32) {
      std::memcpy(&values[i], element, sizeof(float));
    } else {
      std::memcpy(&bits, element, sizeof(bits));
      values[i] = dtype == DType::Float16 ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
    }
  }
  return npy::from_float32(shape.dims(), values);
}

std::string required_path(const Args& args, const char* flag) {
  const auto path = args.value(flag);
  if (!path) usage_error("run", std::string("missing --") + flag + " (a .npy file)");
  return *path;
}

}  // namespace

int run_command(const std::vector<std::string>& tokens) {
  const Args args = Args::parse("run", tokens, kRunFlags);
  if (args.help()) {
    std::cout << kRunUsage << common_option_help();
    return 0;
  }
  const std::string q_path = required_path(args, "q"), k_path = required_path(args, "k");
  const std::string v_path = required_path(args, "v"), out_path = required_path(args, "out");
  AttentionOptions options;
  apply_common_options(args, options);
  const Device device =
      args.value("device") ? parse_device("run", *args.value("device")) : Device::cpu();
  std::optional<float> scale;
  if (const auto text = args.value("scale"))
    scale = static_cast<float>(parse_double("run", "scale", *text));

  const npy::Array q_array = read_input(q_path, "q", 4), k_array = read_input(k_path, "k", 4);
  const npy::Array v_array = read_input(v_path, "v", 4);
  const DType dtype = compute_dtype(args, q_array, k_array, v_array);
  const Tensor q = convert(q_array, dtype), k = convert(k_array, dtype),
               v = convert(v_array, dtype);
  Tensor mask, sinks;
  if (const auto path = args.value("mask")) {
    mask = read_mask(*path);
    options.mask = mask.view;
  }
  if (const auto path = args.value("sinks")) {
    sinks = convert(read_input(*path, "sinks", 1), DType::Float32);
    options.sinks = sinks.view;
  }
  // Rejects bad input (and a device this build or machine lacks) before allocating anything.
  plan_attention(q.view.shape, k.view.shape, v.view.shape, dtype, options, device);
  plan_attention(q.view, k.view, v.view, options);
  const std::int64_t head_dim = q.view.shape[3];
  const float scale_value =
      scale.value_or(head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(head_dim)) : 1.0f);
  const Shape out_shape{q.view.shape[0], q.view.shape[1], q.view.shape[2], v.view.shape[3]};
  std::vector<std::byte> out_bytes(static_cast<std::size_t>(out_shape.numel("heed run")) *
                                   size_of(dtype));
  TensorView out(out_bytes.data(), dtype, out_shape);
  if (device.type == DeviceType::CPU) {
    attention(q.view, k.view, v.view, out, scale_value, options);
  } else {
    // Copies of the inputs on the device, the output read back after the call.
    std::vector<std::unique_ptr<bench::DeviceMemory>> keep;
    const auto upload = [&](const Tensor& tensor) {
      keep.push_back(std::make_unique<bench::DeviceMemory>(device, tensor.bytes.size()));
      keep.back()->upload(tensor.bytes.data(), tensor.bytes.size());
      TensorView view = tensor.view;
      view.data = keep.back()->data();
      view.device = device;
      return view;
    };
    const TensorView q_device = upload(q), k_device = upload(k), v_device = upload(v);
    AttentionOptions device_options = options;
    if (options.mask) device_options.mask = upload(mask);
    if (options.sinks) device_options.sinks = upload(sinks);
    bench::DeviceMemory out_device(device, out_bytes.size());
    TensorView out_view = out;
    out_view.data = out_device.data();
    out_view.device = device;
    attention(q_device, k_device, v_device, out_view, scale_value, device_options);
    out_device.download(out_bytes.data(), out_bytes.size());
  }

  const npy::Array out_array = widen_to_float32(out_bytes, dtype, out_shape);
  write_atomically(out_path, out_array);
  return 0;
}

}  // namespace heed::cli
