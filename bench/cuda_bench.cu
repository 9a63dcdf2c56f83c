// heed_cuda_bench: the GPU benchmark of scripts/gpu-check. Measures the card's copy bandwidth
// (device-to-device, bytes read + written), its read bandwidth (a kernel that only reads) and
// bfloat16 matrix peak (a cuBLAS GEMM), then times heed on each case with CUDA events (median of
// the repetitions after a warm-up; long calls take fewer repetitions, within about a second per
// figure) and prints one JSON object per case: milliseconds, bytes (q + k + v read once, out
// written once) and FLOPs (decode: of the visible pairs; prefill: 4·B·Hq·Lq·Lk·D, halved for
// causal, as FlashAttention counts). "graph_ms" is the device time of one call without host work:
// the call as the user makes it, captured "graph_calls" times into a CUDA graph, the graph's
// replays timed, over the calls (graph_ms; -1 where capture fails); prefill cases also give the
// composed route's ("composed_graph_ms").
// After every case's line, the decode cases are timed again in variants of the planned vector
// route, one JSON object each with "variant_of" (the A/B table of torch_cuda_compare.py;
// --no-variants skips them):
// the plan itself, the plan before the TMA kernel, the other kernels, twice and half the
// partitions, half the ring, 1-4 blocks per SM (timed without heed::attention's checks, so
// "planned" against the case's own line is the cost of those checks in a single call).
// Prefill cases are timed again
// on each tiled kernel (mma.sync and, on a 9.0 device, wgmma: the HEED_CUDA_TILED switch). The
// variants are planned by the same planner (plan_cuda with the variant's PlanOverrides) and run
// through the backend's own entry, so only the one choice differs. --head-sizes times every
// head size against the compiled size it rounds up to instead (time_head_sizes).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "call/validate.hpp"
#include "cuda/runtime.hpp"
#include "cuda_timing.cuh"
#include "device/cuda_device.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"

const char* const heed::gpu_bench::kProgram = "heed_cuda_bench";

namespace {

using namespace heed::gpu_bench;

struct Case {
  const char* name;
  std::int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
  bool causal;
  bool decode;
};

// The decode targets (issue 4) and the prefill table of issue 5 (all bfloat16; Lq = Lk).
const Case kCases[] = {
    {"decode_b16_32x8_d128_8k", 16, 32, 8, 1, 8192, 128, false, true},
    {"decode_b64_32x8_d128_4k", 64, 32, 8, 1, 4096, 128, false, true},
    {"decode_b1_32x8_d128_32k", 1, 32, 8, 1, 32768, 128, false, true},
    {"decode_b1_16x2_d256_131k", 1, 16, 2, 1, 131072, 256, false, true},
    {"prefill_b4_32x8_d128_2k_causal", 4, 32, 8, 2048, 2048, 128, true, false},
    {"prefill_b8_12x12_d64_512", 8, 12, 12, 512, 512, 64, false, false},
    {"prefill_b1_32x8_d128_16k_causal", 1, 32, 8, 16384, 16384, 128, true, false},
    {"prefill_b1_32x8_d128_4k_causal", 1, 32, 8, 4096, 4096, 128, true, false},
    {"prefill_b2_16x16_d128_8k", 2, 16, 16, 8192, 8192, 128, false, false},
    {"prefill_b2_32x32_d64_8k", 2, 32, 32, 8192, 8192, 64, false, false},
    {"prefill_b1_16x2_d256_8k_causal", 1, 16, 2, 8192, 8192, 256, true, false},
    {"prefill_b32_12x12_d64_512", 32, 12, 12, 512, 512, 64, false, false},
    {"prefill_b1_8x8_d512_4k_causal", 1, 8, 8, 4096, 4096, 512, true, false},
};

// A case's bfloat16 tensors on cuda:0: q and out of `q_shape`, k and v of `kv_shape`, filled by
// random_bf16 (seeds 1 to 4, the same values every time), freed with the struct.
struct BenchTensors {
  heed::TensorView q, k, v, out;
  // kv_pitch > 0: K and V rows kv_pitch elements apart (a view of wider rows), else contiguous.
  BenchTensors(const heed::Shape& q_shape, const heed::Shape& kv_shape, std::int64_t kv_pitch = 0) {
    const heed::Device gpu = heed::Device::cuda(0);
    q = heed::TensorView(random_bf16(q_shape.numel(), 1), heed::DType::BFloat16, q_shape, gpu);
    if (kv_pitch > 0) {
      const std::int64_t rows = kv_shape.numel() / kv_shape[3];
      const std::vector<std::int64_t> strides{kv_shape[1] * kv_shape[2] * kv_pitch, kv_shape[2] * kv_pitch, kv_pitch, 1};
      k = heed::TensorView(random_bf16(rows * kv_pitch, 2), heed::DType::BFloat16, kv_shape, strides, gpu);
      v = heed::TensorView(random_bf16(rows * kv_pitch, 3), heed::DType::BFloat16, kv_shape, strides, gpu);
    } else {
      k = heed::TensorView(random_bf16(kv_shape.numel(), 2), heed::DType::BFloat16, kv_shape, gpu);
      v = heed::TensorView(random_bf16(kv_shape.numel(), 3), heed::DType::BFloat16, kv_shape, gpu);
    }
    out = heed::TensorView(random_bf16(q_shape.numel(), 4), heed::DType::BFloat16, q_shape, gpu);
  }
  ~BenchTensors() {
    for (const heed::TensorView* view : {&q, &k, &v, &out}) ok(cudaFree(view->data), "free");
  }
  BenchTensors(const BenchTensors&) = delete;
  BenchTensors& operator=(const BenchTensors&) = delete;
};

double visible_pairs(const Case& c) {
  double pairs = 0;
  for (std::int64_t i = 0; i < c.q_len; ++i) {
    const std::int64_t end = c.causal ? std::min(c.kv_len, i + c.kv_len - c.q_len + 1) : c.kv_len;
    pairs += static_cast<double>(std::max<std::int64_t>(end, 0));
  }
  return pairs * static_cast<double>(c.batch * c.q_heads);
}

using VectorKernel = heed::plan::CudaVectorKernel;
struct Variant {
  const char* name;
  VectorKernel kernel;  // Fma as HEED_CUDA_VECTOR=fma, Mma as =mma, CpAsync as before the TMA kernel
  double partitions;   // times the planned count (0: planned)
  double ring;         // times the planned ring items (0: planned)
  int blocks_per_sm;   // tensor-core kernels: the ring sized for this many blocks per SM (0: planned)
  int warps;           // TMA kernel: warps per block (0: planned)
};
constexpr Variant kVariants[] = {
    {"planned", VectorKernel::Auto, 0, 0, 0, 0},  // the plan itself, through the same entry as the others
    {"pre_tma", VectorKernel::CpAsync, 0, 0, 0, 0},
    {"cuda_cores", VectorKernel::Fma, 0, 0, 0, 0},
    {"mma_cp_async", VectorKernel::Mma, 0, 0, 0, 0},
    {"partitions_x2", VectorKernel::Auto, 2.0, 0, 0, 0},
    {"partitions_half", VectorKernel::Auto, 0.5, 0, 0, 0},
    {"ring_half", VectorKernel::Auto, 0, 0.5, 0, 0},
    {"blocks_1", VectorKernel::Auto, 0, 0, 1, 4},
    {"blocks_2", VectorKernel::Auto, 0, 0, 2, 4},
    {"blocks_3", VectorKernel::Auto, 0, 0, 3, 4},
    {"blocks_4", VectorKernel::Auto, 0, 0, 4, 4},
    {"warps_16", VectorKernel::Auto, 0, 0, 0, 16},
    {"warps_16_parts_x2", VectorKernel::Auto, 2.0, 0, 0, 16},
    {"warps_16_parts_half", VectorKernel::Auto, 0.5, 0, 0, 16},
};

// Whether two plans of the vector route launch the same thing.
bool same_launch(const heed::plan::CudaRoute& a, const heed::plan::CudaRoute& b) {
  return a.plan.kernel_name == b.plan.kernel_name && a.vector.partitions == b.vector.partitions &&
         a.vector.ring_items == b.vector.ring_items && a.vector.blocks_per_sm == b.vector.blocks_per_sm &&
         a.vector.warps == b.vector.warps;
}

// Times the decode case's variants of the planned vector route (single calls and back to back);
// a variant that plans what the plan already is (or another variant before it) is left out.
void time_variants(const char* name, const BenchTensors& t, float scale, const heed::AttentionOptions& options,
                   double bytes, int reps) {
  using namespace heed;
  const call::Call problem = call::validate_call(t.q, t.k, t.v, t.out, scale, options);
  const plan::CudaDeviceInfo& device = heed::device::cuda_device_info(t.q.device, "heed_cuda_bench");
  const plan::PlanOverrides& environment = plan::environment_overrides();
  const plan::CudaRoute planned = plan::plan_cuda(problem, device, environment);
  if (!std::holds_alternative<route::Vector>(planned.plan.kernel)) return;
  std::vector<plan::CudaRoute> timed;
  for (const Variant& variant : kVariants) {
    plan::PlanOverrides overrides = environment;
    overrides.cuda_vector = variant.kernel;
    plan::CudaVectorTuning& tuning = overrides.cuda_vector_tuning;
    tuning.warps = variant.warps;
    if (variant.partitions > 0) {
      // Times the partitions planned for this variant's kernel and warps.
      const std::int64_t base = plan::plan_cuda(problem, device, overrides).vector.partitions;
      tuning.partitions = std::max<std::int64_t>(1, std::llround(static_cast<double>(base) * variant.partitions));
    }
    if (variant.ring > 0) {
      if (!planned.vector.tensor_cores) continue;
      tuning.ring_items = std::max(2, static_cast<int>(planned.vector.ring_items * variant.ring));
    }
    tuning.blocks_per_sm = variant.blocks_per_sm;
    const plan::CudaRoute route = plan::plan_cuda(problem, device, overrides);
    if (!std::holds_alternative<route::Vector>(route.plan.kernel)) continue;
    bool repeated = false;
    for (const plan::CudaRoute& other : timed) repeated = repeated || same_launch(other, route);
    if (repeated) continue;
    timed.push_back(route);
    const auto call = [&] { cuda::run_attention(problem, options, route, nullptr); };
    const double ms = median_ms(call, 3, reps);
    constexpr int kBatch = 10;
    const double batched_ms = median_ms([&] {
      for (int i = 0; i < kBatch; ++i) call();
    }, 1, std::max(reps / 3, 3)) / kBatch;
    std::printf("{\"variant_of\": \"%s\", \"variant\": \"%s\", \"kernel\": \"%s\", \"partitions\": %lld, "
                "\"ring_items\": %d, \"blocks_per_sm\": %d, \"warps\": %d, \"ms\": %.5f, \"tbytes\": %.4f, \"batched_ms\": %.5f, "
                "\"batched_tbytes\": %.4f}\n",
                name, variant.name, route.plan.kernel_name.c_str(), static_cast<long long>(route.vector.partitions),
                route.vector.ring_items, route.vector.blocks_per_sm, route.vector.warps, ms, bytes / (ms * 1e-3) / 1e12, batched_ms,
                bytes / (batched_ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
}

// Times the prefill case on both tiled kernels, planned as with HEED_CUDA_TILED=mma and =wgmma
// (same planner, same entry point), one JSON object each with "variant_of" and "tflops".
void time_tiled_variants(const char* name, const BenchTensors& t, float scale, const heed::AttentionOptions& options,
                         double flops, int reps) {
  using namespace heed;
  using Kernel = plan::CudaTiledKernel;
  const call::Call problem = call::validate_call(t.q, t.k, t.v, t.out, scale, options);
  const plan::CudaDeviceInfo& device = heed::device::cuda_device_info(t.q.device, "heed_cuda_bench");
  // (name, kernel, pingpong flipped, kHopperConfigs entry or -1 for the plan's)
  struct TiledVariant {
    std::string name;
    Kernel kernel;
    bool flip_pingpong;
    int entry;
  };
  std::vector<TiledVariant> list = {{"mma", Kernel::Mma, false, -1}, {"wgmma", Kernel::Wgmma, false, -1},
                                    {"", Kernel::Wgmma, true, -1}};
  for (int i = 0; i < plan::cuda::kHopperConfigCount; ++i) {
    const plan::cuda::HopperConfig& c = plan::cuda::kHopperConfigs[i];
    if (c.head_dim == problem.head_dim && c.value_dim == problem.value_dim) {
      list.push_back({"wgmma_n" + std::to_string(c.block_n) + "x" + std::to_string(c.consumers), Kernel::Wgmma, false, i});
    }
  }
  for (const TiledVariant& variant : list) {
    plan::PlanOverrides overrides = plan::environment_overrides();
    overrides.cuda_tiled = variant.kernel;
    plan::CudaRoute route = plan::plan_cuda(problem, device, overrides);
    if (!std::holds_alternative<route::Tiled>(route.plan.kernel)) return;
    std::string label = variant.name;
    if (variant.flip_pingpong) {
      const plan::cuda::HopperConfig& planned = plan::cuda::kHopperConfigs[route.tiled.config];
      if (!route.tiled.wgmma || planned.consumers != 2 || planned.depth_split) continue;
      route.tiled.pingpong = !route.tiled.pingpong;
      label = route.tiled.pingpong ? "wgmma_pingpong" : "wgmma_no_pingpong";
    }
    if (variant.entry >= 0) {
      if (!route.tiled.wgmma || variant.entry == route.tiled.config) continue;
      const plan::cuda::HopperConfig& c = plan::cuda::kHopperConfigs[variant.entry];
      route.tiled.config = variant.entry;
      route.tiled.block_n = c.block_n;
      route.tiled.block_m = plan::cuda::hopper_block_m(c);
      route.tiled.row_blocks = (route.tiled.rows + route.tiled.block_m - 1) / route.tiled.block_m;
      route.tiled.pingpong = c.pingpong && c.consumers == 2;
    }
    const auto call = [&] { cuda::run_attention(problem, options, route, nullptr); };
    const double first_ms = median_ms(call, 1, 1);
    const double ms = median_ms(call, 2, reps_within(first_ms, 1000, reps));
    std::printf("{\"variant_of\": \"%s\", \"variant\": \"%s\", \"kernel\": \"%s\", \"prefill\": true, "
                "\"ms\": %.5f, \"tflops\": %.2f}\n",
                name, label.c_str(), route.plan.kernel_name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
}

// One bfloat16 call of the shape at head size D = Dv, timed as the cases are (median of single
// calls between events); the kernel and the compiled head size its plan rounds D up to.
struct HeadSizeTiming {
  double ms = 0;
  std::string kernel;
  std::int64_t compiled = 0;
  double cp_async_ms = -1;  // decode: the cp.async kernels' plan (the CpAsync override), where it differs
};
HeadSizeTiming time_head_size(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len,
                              std::int64_t kv_len, std::int64_t head_dim, bool causal, int reps) {
  using namespace heed;
  // HEED_BENCH_KV_PITCH=N: K and V rows N elements apart where N > D (the cost of rows' alignment).
  const char* pitch = std::getenv("HEED_BENCH_KV_PITCH");
  const std::int64_t kv_pitch = pitch != nullptr && std::atoll(pitch) > head_dim ? std::atoll(pitch) : 0;
  BenchTensors tensors(Shape{batch, q_heads, q_len, head_dim}, Shape{batch, kv_heads, kv_len, head_dim}, kv_pitch);
  const Device gpu = tensors.q.device;
  AttentionOptions options;
  options.causal = causal;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const call::Call problem = call::validate_call(tensors.q, tensors.k, tensors.v, tensors.out, scale, options);
  const plan::CudaRoute route = plan::plan_cuda(problem, heed::device::cuda_device_info(gpu, "heed_cuda_bench"),
                                                plan::environment_overrides());
  HeadSizeTiming t;
  t.kernel = route.plan.kernel_name;
  t.compiled = head_dim;
  if (std::holds_alternative<route::Tiled>(route.plan.kernel)) {
    t.compiled = route.tiled.wgmma ? plan::cuda::kHopperConfigs[route.tiled.config].head_dim
                                   : plan::cuda::kTiledConfigs[route.tiled.config].head_dim;
  } else if (std::holds_alternative<route::Vector>(route.plan.kernel) && route.vector.head_class > 0) {
    t.compiled = route.vector.head_class;
  }
  const auto call = [&] { attention(tensors.q, tensors.k, tensors.v, tensors.out, scale, options); };
  const double first_ms = median_ms(call, 1, 1);
  t.ms = median_ms(call, 2, reps_within(first_ms, 500, reps));
  if (route.vector.tma) {
    plan::PlanOverrides overrides = plan::environment_overrides();
    overrides.cuda_vector = plan::CudaVectorKernel::CpAsync;
    const plan::CudaRoute cp_async =
        plan::plan_cuda(problem, heed::device::cuda_device_info(gpu, "heed_cuda_bench"), overrides);
    t.cp_async_ms = median_ms([&] { cuda::run_attention(problem, options, cp_async, nullptr); }, 2,
                              reps_within(first_ms, 500, reps));
  }
  return t;
}

// --head-sizes: every head size a multiple of 8 up to 256, and 512, in bfloat16, as prefill
// (B 2, 16 heads, 2k keys, causal) and decode (B 16, 32 / 8 heads, 8k keys), each timed at its
// own size and at the compiled size its plan rounds it up to. "ratio" is the compiled size's time
// over this size's: the rate at the compiled size's work against that size's own (1: rounding up
// costs nothing beyond the padded columns).
// `only_sizes` (--head-size D, repeatable) and `mode` (--mode prefill|decode) narrow the sweep,
// for profiling one size.
void time_head_sizes(int reps, const std::vector<std::int64_t>& only_sizes, const std::string& mode) {
  std::vector<std::int64_t> sizes = only_sizes;
  if (sizes.empty()) {
    for (std::int64_t d = 8; d <= 256; d += 8) sizes.push_back(d);
    sizes.push_back(512);
  }
  for (const bool decode : {false, true}) {
    if (!mode.empty() && mode != (decode ? "decode" : "prefill")) continue;
    for (const std::int64_t d : sizes) {
      const auto timed = [&](std::int64_t head_dim) {
        return decode ? time_head_size(16, 32, 8, 1, 8192, head_dim, false, reps)
                      : time_head_size(2, 16, 16, 2048, 2048, head_dim, true, reps);
      };
      const HeadSizeTiming own = timed(d);
      const HeadSizeTiming compiled = own.compiled == d ? own : timed(own.compiled);
      const double pairs = decode ? 16.0 * 32 * 8192 : 2.0 * 16 * 2048 * 2048 / 2;
      const double flops = 4.0 * pairs * static_cast<double>(d);
      const double size = static_cast<double>(d);
      const double bytes = decode ? 2.0 * 16 * (2 * 32 * size + 2.0 * 8 * 8192 * size) : 2.0 * 2 * 16 * 2048 * 4 * size;
      std::printf("{\"head_size\": %lld, \"mode\": \"%s\", \"compiled\": %lld, \"kernel\": \"%s\", "
                  "\"compiled_kernel\": \"%s\", \"ms\": %.5f, \"compiled_ms\": %.5f, \"tflops\": %.2f, "
                  "\"tbytes\": %.4f, \"ratio\": %.3f, \"cp_async_ms\": %.5f}\n",
                  static_cast<long long>(d), decode ? "decode" : "prefill", static_cast<long long>(own.compiled),
                  own.kernel.c_str(), compiled.kernel.c_str(), own.ms, compiled.ms, flops / (own.ms * 1e-3) / 1e12,
                  bytes / (own.ms * 1e-3) / 1e12, compiled.ms / own.ms, own.cp_async_ms);
      std::fflush(stdout);
    }
  }
}

// One case's figures: one call between events (median), ten back to back, the call captured
// into a graph, and for prefill the composed route's one call and graph (-1 for decode).
struct CaseTimes {
  double ms = 0, batched_ms = 0, graph_ms = 0, composed_ms = -1, composed_graph_ms = -1;
  int graph_calls = 0;
};

CaseTimes time_case(bool decode, BenchTensors& tensors, float scale, const heed::AttentionOptions& options,
                    int reps) {
  using namespace heed;
  const TensorView &qv = tensors.q, &kv = tensors.k, &vv = tensors.v;
  TensorView& ov = tensors.out;
  const auto call = [&] { attention(qv, kv, vv, ov, scale, options); };
  CaseTimes t;
  constexpr double kBudgetMs = 1000;
  const double first_ms = median_ms(call, 1, 1);
  t.ms = median_ms(call, 2, reps_within(first_ms, kBudgetMs, reps));
  // Back to back: the launches of one call queue behind the last one's kernels, so host work
  // (planning, checks, allocation) overlaps the device's and the figure is the device's.
  constexpr int kBatch = 10;
  t.batched_ms = median_ms([&] {
    for (int i = 0; i < kBatch; ++i) call();
  }, 1, reps_within(t.ms * kBatch, kBudgetMs, std::max(reps / 3, 3))) / kBatch;
  // The call as the user makes it, on a stream, captured into a graph: the device's time alone.
  t.graph_calls = graph_calls(t.ms);
  t.graph_ms = graph_ms([&](cudaStream_t stream) { attention(qv, kv, vv, ov, scale, options, Stream{stream}); },
                        t.graph_calls, kBudgetMs, std::max(reps / 3, 3));
  if (!decode) {
    AttentionOptions composed = options;
    composed.route = RouteChoice::Composed;
    const auto composed_call = [&] { attention(qv, kv, vv, ov, scale, composed); };
    const double composed_first = median_ms(composed_call, 0, 1);
    t.composed_ms = median_ms(composed_call, 1, reps_within(composed_first, kBudgetMs, std::max(reps / 3, 3)));
    t.composed_graph_ms =
        graph_ms([&](cudaStream_t stream) { attention(qv, kv, vv, ov, scale, composed, Stream{stream}); },
                 graph_calls(t.composed_ms), kBudgetMs, std::max(reps / 3, 3));
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace heed;
  int reps = 30;
  bool variants = true;
  bool head_sizes = false;  // --head-sizes: the head-size sweep alone (time_head_sizes)
  std::vector<std::string> only;  // --case TEXT: cases whose name contains TEXT (repeatable)
  std::vector<std::int64_t> only_sizes;  // --head-size D (repeatable), with --head-sizes
  std::string mode;                      // --mode prefill|decode, with --head-sizes
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--no-variants") variants = false;
    if (std::string(argv[i]) == "--case" && i + 1 < argc) only.emplace_back(argv[++i]);
    if (std::string(argv[i]) == "--head-sizes") head_sizes = true;
    if (std::string(argv[i]) == "--head-size" && i + 1 < argc) only_sizes.push_back(std::atoll(argv[++i]));
    if (std::string(argv[i]) == "--mode" && i + 1 < argc) mode = argv[++i];
  }
  const auto selected = [&](const char* name) {
    if (only.empty()) return true;
    for (const std::string& text : only) {
      if (std::string(name).find(text) != std::string::npos) return true;
    }
    return false;
  };
  const double copy = copy_tbytes();
  const double read_only = read_tbytes();
  const double peak = gemm_tflops();
  std::printf("{\"copy_tbytes\": %.4f, \"read_tbytes\": %.4f, \"bf16_gemm_tflops\": %.1f}\n", copy, read_only, peak);
  if (head_sizes) {
    time_head_sizes(reps, only_sizes, mode);
    return 0;
  }
  // Every case's own line first, then every case's variants: a case's line is not timed right
  // after the previous case's variants (minutes of sustained load that lower the card's clocks).
  for (const bool variant_pass : {false, true}) {
    if (variant_pass && !variants) break;
    for (const Case& c : kCases) {
      if (!selected(c.name)) continue;
      const Shape q_shape{c.batch, c.q_heads, c.q_len, c.head_dim};
      const Shape k_shape{c.batch, c.kv_heads, c.kv_len, c.head_dim};
      const Shape out_shape = q_shape;
      BenchTensors tensors(q_shape, k_shape);  // freed at the end of the iteration
      AttentionOptions options;
      options.causal = c.causal;
      // HEED_BENCH_SOFTCAP=C runs every case with a logit softcap of C (its cost against the same run without).
      if (const char* cap = std::getenv("HEED_BENCH_SOFTCAP")) options.softcap = std::strtof(cap, nullptr);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const AttentionPlan plan = plan_attention(tensors.q, tensors.k, tensors.v, options);
      const double bytes = 2.0 * static_cast<double>(q_shape.numel() + 2 * k_shape.numel() + out_shape.numel());
      const double flops = c.decode ? visible_pairs(c) * 2.0 * static_cast<double>(2 * c.head_dim)
                                    : 4.0 * static_cast<double>(c.batch * c.q_heads) * static_cast<double>(c.q_len) *
                                          static_cast<double>(c.kv_len) * static_cast<double>(c.head_dim) *
                                          (c.causal ? 0.5 : 1.0);
      if (variant_pass) {
        if (c.decode) time_variants(c.name, tensors, scale, options, bytes, reps);
        if (!c.decode) time_tiled_variants(c.name, tensors, scale, options, flops, reps);
        continue;
      }
      const CaseTimes t = time_case(c.decode, tensors, scale, options, reps);
      const auto* vector = std::get_if<route::Vector>(&plan.kernel);
      std::printf("{\"name\": \"%s\", \"batch\": %lld, \"q_heads\": %lld, \"kv_heads\": %lld, \"q_len\": %lld, "
                  "\"kv_len\": %lld, \"head_dim\": %lld, \"causal\": %s, \"decode\": %s, \"kernel\": \"%s\", "
                  "\"partitions\": %lld, \"ms\": %.5f, \"bytes\": %.0f, \"flops\": %.0f, \"tbytes\": %.4f, "
                  "\"tflops\": %.2f, \"copy_tbytes\": %.4f, \"peak_tflops\": %.1f, \"composed_ms\": %.5f, \"batched_ms\": %.5f, "
                  "\"batched_tbytes\": %.4f, \"read_tbytes\": %.4f, \"graph_ms\": %.5f, \"graph_calls\": %d, "
                  "\"composed_graph_ms\": %.5f}\n",
                  c.name, static_cast<long long>(c.batch), static_cast<long long>(c.q_heads),
                  static_cast<long long>(c.kv_heads), static_cast<long long>(c.q_len), static_cast<long long>(c.kv_len),
                  static_cast<long long>(c.head_dim), c.causal ? "true" : "false", c.decode ? "true" : "false",
                  plan.kernel_name.c_str(), static_cast<long long>(vector ? vector->blocks : 0), t.ms, bytes, flops,
                  bytes / (t.ms * 1e-3) / 1e12, flops / (t.ms * 1e-3) / 1e12, copy, peak, t.composed_ms, t.batched_ms,
                  bytes / (t.batched_ms * 1e-3) / 1e12, read_only, t.graph_ms, t.graph_calls, t.composed_graph_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}
