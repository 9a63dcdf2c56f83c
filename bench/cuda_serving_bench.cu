// heed_cuda_serving_bench: the serving forms on the GPU against heed's dense call doing the same
// work, measured side by side in one run (bfloat16, Hq 32 / Hkv 8, D 128), after the device's
// ceilings (cuda_timing.cuh):
//   - varlen prefill (attention_varlen, Lq = Lk per sequence) against one dense call per
//     sequence on views of the same rows (and, where the lengths are equal, one dense call over
//     the batch); FLOPs 4·Hq·D per visible query-key pair;
//   - paged decode (attention_paged, q [B, Hq, D]) against dense decode (k, v [B, Hkv, L, D]),
//     the cache [num_pages, page_size, Hkv, D] with its pages shuffled; bytes of K and V read;
//   - chunked prefill on a paged cache (the last 2048 queries of each sequence, causal; pages of
//     1, 16, 64 and 256 keys) against the dense causal call with Lq 2048, Lk 16384;
//   - the host time of one C++ call (case "host"): attention, attention_paged and Runner::run.
// Paged cases also time the dense call over K and V laid out as the caches are, [B, Lk, Hkv, D]
// ("blhd_ratio"), so that the layout's cost is told apart from the paging's; --variants times
// paged decode's vector route with its kernel, ring and partitions varied.
// Metadata lives on the device with max_seqlen_q / max_seqlen_k given, as an engine's does. Each
// form's output is checked against the dense one's first (the run fails past kTolerance). Each
// form is timed three ways: its calls captured into a CUDA graph with a caller's workspace and
// replayed (the device's time without host work; "ratio" is the dense form's graph ms over the
// serving form's), one call between events (median) and graph_calls calls back to back between
// events (per call). Each case prints readable lines and one JSON object (also to --json FILE);
// the ratios' summary comes last. Exit status 1 where an output is wrong or a case threw.
//
//   heed_cuda_serving_bench [--reps N] [--case TEXT]... [--json FILE] [--variants]

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "call/validate.hpp"
#include "cuda/runtime.hpp"
#include "cuda_timing.cuh"
#include "device/cuda_device.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/overrides.hpp"
#include "plan/planner.hpp"

const char* const heed::gpu_bench::kProgram = "heed_cuda_serving_bench";

namespace {

using namespace heed::gpu_bench;
using heed::AttentionOptions;
using heed::DType;
using heed::Shape;
using heed::TensorView;

constexpr std::int64_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr double kBudgetMs = 500;    // device time per figure, about
constexpr double kTolerance = 2e-2;  // bfloat16 outputs of two summation orders
const float kScale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
const heed::Device kGpu = heed::Device::cuda(0);

struct CudaFree {
  void operator()(void* pointer) const { (void)cudaFree(pointer); }
};
using DeviceBuffer = std::unique_ptr<void, CudaFree>;

DeviceBuffer device_bytes(std::size_t bytes) {
  void* pointer = nullptr;
  ok(cudaMalloc(&pointer, std::max<std::size_t>(bytes, heed::kWorkspaceAlignment)), "cudaMalloc");
  return DeviceBuffer(pointer);
}

DeviceBuffer random_rows(std::int64_t count, std::uint32_t seed) { return DeviceBuffer(random_bf16(count, seed)); }

DeviceBuffer upload(const std::vector<std::int32_t>& values) {
  DeviceBuffer buffer = device_bytes(values.size() * sizeof(std::int32_t));
  ok(cudaMemcpy(buffer.get(), values.data(), values.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice), "upload");
  return buffer;
}

TensorView bf16(const DeviceBuffer& buffer, const Shape& shape) {
  return TensorView(buffer.get(), DType::BFloat16, shape, kGpu);
}
TensorView int32(const DeviceBuffer& buffer, const Shape& shape) {
  return TensorView(buffer.get(), DType::Int32, shape, kGpu);
}

// Rows `first`.. of a [total, heads, D] tensor as a dense [batch, heads, length, D] view (each of
// the batch's sequences `length` rows after the last): FlashAttention's [B, L, H, D] layout.
TensorView rows_as_dense(const DeviceBuffer& buffer, std::int64_t first, std::int64_t batch, std::int64_t heads,
                         std::int64_t length) {
  auto* data = static_cast<__nv_bfloat16*>(buffer.get()) + first * heads * kHeadDim;
  return TensorView(data, DType::BFloat16, Shape{batch, heads, length, kHeadDim},
                    {length * heads * kHeadDim, kHeadDim, heads * kHeadDim, 1}, kGpu);
}

// The largest |a - b| over `count` bfloat16 pairs into *result (float bits; non-negative floats
// order as their bits), NaN or infinity counted as infinity so that it never passes.
__global__ void max_abs_diff_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, std::int64_t count,
                                    unsigned* result) {
  float largest = 0;
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < count;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const float diff = fabsf(__bfloat162float(a[n]) - __bfloat162float(b[n]));
    largest = diff <= 3.4e38f ? fmaxf(largest, diff) : INFINITY;
  }
  atomicMax(result, __float_as_uint(largest));
}

double max_abs_diff(const DeviceBuffer& a, const DeviceBuffer& b, std::int64_t count) {
  DeviceBuffer result = device_bytes(sizeof(unsigned));
  ok(cudaMemset(result.get(), 0, sizeof(unsigned)), "memset");
  max_abs_diff_kernel<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(a.get()),
                                     static_cast<const __nv_bfloat16*>(b.get()), count,
                                     static_cast<unsigned*>(result.get()));
  ok(cudaGetLastError(), "max_abs_diff");
  unsigned bits = 0;
  ok(cudaMemcpy(&bits, result.get(), sizeof(bits), cudaMemcpyDeviceToHost), "max_abs_diff");
  float diff = 0;
  std::memcpy(&diff, &bits, sizeof(diff));
  return diff;
}

// Copies dense keys [B, Hkv, L, D] into pages [num_pages, page_size, Hkv, D]: key j of sequence b
// to row j % page_size of page table[b, j / page_size]. One 16-byte word per thread and step.
__global__ void scatter_pages_kernel(const uint4* dense, uint4* cache, const std::int32_t* table, std::int64_t batch,
                                     std::int64_t keys, std::int64_t pages_per_sequence, std::int64_t page_size) {
  constexpr std::int64_t kWords = kHeadDim * 2 / 16;
  const std::int64_t count = batch * kKvHeads * keys * kWords;
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < count;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t word = n % kWords, row = n / kWords;
    const std::int64_t key = row % keys, head = row / keys % kKvHeads, b = row / (keys * kKvHeads);
    const std::int64_t page = table[b * pages_per_sequence + key / page_size];
    cache[((page * page_size + key % page_size) * kKvHeads + head) * kWords + word] = dense[n];
  }
}

// A paged copy of dense K and V [B, Hkv, keys, D]: the pages of every sequence shuffled over
// the cache (fixed seed), as an engine's allocator leaves them after a while; or in order, so
// that with one page per sequence the cache is dense [B, keys, Hkv, D].
struct PagedCache {
  DeviceBuffer k, v, table, lengths;
  heed::PagedKv pages;
  TensorView k_view, v_view;
  PagedCache(const DeviceBuffer& dense_k, const DeviceBuffer& dense_v, std::int64_t batch, std::int64_t keys,
             std::int64_t page_size, bool shuffled = true) {
    const std::int64_t pages_per_sequence = keys / page_size, count = batch * pages_per_sequence;
    std::vector<std::int32_t> order(static_cast<std::size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(static_cast<std::uint32_t>(11 + page_size));
    if (shuffled) std::shuffle(order.begin(), order.end(), rng);
    table = upload(order);
    lengths = upload(std::vector<std::int32_t>(static_cast<std::size_t>(batch), static_cast<std::int32_t>(keys)));
    const std::size_t bytes = static_cast<std::size_t>(batch * kKvHeads * keys * kHeadDim) * 2;
    k = device_bytes(bytes);
    v = device_bytes(bytes);
    for (const auto& [from, to] : {std::pair{&dense_k, &k}, std::pair{&dense_v, &v}}) {
      scatter_pages_kernel<<<1024, 256>>>(static_cast<const uint4*>(from->get()), static_cast<uint4*>(to->get()),
                                          static_cast<const std::int32_t*>(table.get()), batch, keys,
                                          pages_per_sequence, page_size);
      ok(cudaGetLastError(), "scatter_pages");
    }
    pages.block_table = int32(table, Shape{batch, pages_per_sequence});
    pages.seqlens_k = int32(lengths, Shape{batch});
    pages.max_seqlen_q = 1;
    pages.max_seqlen_k = keys;
    k_view = bf16(k, Shape{count, page_size, kKvHeads, kHeadDim});
    v_view = bf16(v, Shape{count, page_size, kKvHeads, kHeadDim});
  }
};

// One form of a case's work: `run(options, stream)` makes its call (or calls) on `stream`.
using Run = std::function<void(const AttentionOptions&, cudaStream_t)>;

struct Form {
  Run run;
  std::size_t scratch_bytes = 0;  // the plan's, the largest of its calls'
  std::string kernel;
};

struct FormTimes {
  double graph_ms = -1, call_ms = 0, loop_ms = 0;  // graph_ms -1: the capture failed
  int graph_calls = 0;
};

// A form timed as the header says; the graph's calls get a caller's workspace of the plan's
// scratch_bytes, so that nothing is allocated inside the capture.
FormTimes time_form(const Form& form, const AttentionOptions& options, int reps) {
  FormTimes t;
  const auto call = [&] { form.run(options, nullptr); };
  const double first_ms = median_ms(call, 1, 1);
  t.call_ms = median_ms(call, 1, reps_within(first_ms, kBudgetMs, reps));
  t.graph_calls = graph_calls(t.call_ms);
  const int loop_reps = reps_within(t.call_ms * t.graph_calls, kBudgetMs, std::max(reps / 3, 3));
  t.loop_ms = median_ms(
                  [&] {
                    for (int i = 0; i < t.graph_calls; ++i) call();
                  },
                  1, loop_reps) /
              t.graph_calls;
  const DeviceBuffer workspace = device_bytes(form.scratch_bytes);
  AttentionOptions captured = options;
  captured.workspace = workspace.get();
  captured.workspace_bytes = std::max<std::size_t>(form.scratch_bytes, heed::kWorkspaceAlignment);
  t.graph_ms = graph_ms([&](cudaStream_t stream) { form.run(captured, stream); }, t.graph_calls, kBudgetMs,
                        std::max(reps / 3, 3));
  return t;
}

struct Ceilings {
  double copy = 0, read = 0, gemm = 0;
};

// A serving form against the dense form doing the same work, as measured.
struct Comparison {
  std::string name, form, shape;
  bool causal = false;
  std::int64_t page_size = 0;  // 0: not paged
  bool in_bytes = false;       // the rate in TB/s of K and V read, else TFLOP/s
  double work = 0;             // bytes or FLOPs per call
  double target = 0;           // the graph ratio aimed at
  double max_diff = 0;
  std::string kernel, dense_kernel;
  FormTimes serving, dense;
  FormTimes dense_batch;  // one dense call over the whole batch, where the lengths are equal
  bool has_dense_batch = false;
  // Paged: the dense call over keys laid out as the cache's pages are, [B, Lk, Hkv, D] (its key
  // heads interleaved), so that the layout's cost and the paging's are told apart.
  FormTimes dense_token_major;
  bool has_dense_token_major = false;
};

double rate(const Comparison& c, double ms) { return ms > 0 ? c.work / (ms * 1e-3) / 1e12 : -1; }
double ratio(double dense_ms, double serving_ms) { return dense_ms > 0 && serving_ms > 0 ? dense_ms / serving_ms : -1; }

// `"key": value` pairs of one JSON object, in order.
class JsonLine {
 public:
  JsonLine& add(const char* key, const std::string& value) { return raw(key, "\"" + value + "\""); }
  JsonLine& add(const char* key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
  JsonLine& add(const char* key, std::int64_t value) { return raw(key, std::to_string(value)); }
  JsonLine& add(const char* key, int value) { return raw(key, std::to_string(value)); }
  JsonLine& add(const char* key, double value, const char* format = "%.5f") {
    char text[64];
    std::snprintf(text, sizeof(text), format, value);
    return raw(key, text);
  }
  std::string str() const { return text_ + "}"; }

 private:
  JsonLine& raw(const char* key, const std::string& value) {
    text_ += (text_.size() > 1 ? ", \"" : "\"") + std::string(key) + "\": " + value;
    return *this;
  }
  std::string text_ = "{";
};

std::string json_of(const Comparison& c, const Ceilings& ceilings) {
  JsonLine line;
  line.add("name", c.name).add("serving", c.form).add("shape", c.shape).add("causal", c.causal);
  line.add("page_size", c.page_size).add("kernel", c.kernel).add("dense_kernel", c.dense_kernel);
  line.add("unit", c.in_bytes ? "TB/s" : "TFLOP/s").add(c.in_bytes ? "bytes" : "flops", c.work, "%.0f");
  line.add("graph_ms", c.serving.graph_ms).add("graph_calls", c.serving.graph_calls);
  line.add("ms", c.serving.call_ms).add("loop_ms", c.serving.loop_ms);
  line.add("dense_graph_ms", c.dense.graph_ms).add("dense_ms", c.dense.call_ms).add("dense_loop_ms", c.dense.loop_ms);
  if (c.has_dense_batch)
    line.add("dense_batch_graph_ms", c.dense_batch.graph_ms).add("dense_batch_ms", c.dense_batch.call_ms);
  if (c.has_dense_token_major)
    line.add("dense_blhd_graph_ms", c.dense_token_major.graph_ms)
        .add("blhd_ratio", ratio(c.dense_token_major.graph_ms, c.serving.graph_ms), "%.4f");
  line.add("graph_rate", rate(c, c.serving.graph_ms), "%.4f")
      .add("dense_graph_rate", rate(c, c.dense.graph_ms), "%.4f");
  line.add("ratio", ratio(c.dense.graph_ms, c.serving.graph_ms), "%.4f");
  line.add("call_ratio", ratio(c.dense.call_ms, c.serving.call_ms), "%.4f");
  line.add("loop_ratio", ratio(c.dense.loop_ms, c.serving.loop_ms), "%.4f");
  line.add("target", c.target, "%.2f").add("max_diff", c.max_diff, "%.3e");
  line.add("copy_tbytes", ceilings.copy, "%.4f").add("read_tbytes", ceilings.read, "%.4f");
  line.add("peak_tflops", ceilings.gemm, "%.1f");
  return line.str();
}

// The run's options, its ceilings, and what it has measured so far.
struct Report {
  int reps = 30;
  std::vector<std::string> only;  // --case TEXT: cases whose name contains TEXT
  std::FILE* json = nullptr;      // --json FILE
  Ceilings ceilings;
  std::vector<std::string> summary;  // one line per case, printed last
  int failures = 0;                  // cases whose outputs differ from the dense ones, or that threw
  bool variants = false;             // --variants: paged decode's vector-route variants too

  bool wants(const std::string& name) const {
    if (only.empty()) return true;
    return std::any_of(only.begin(), only.end(),
                       [&](const std::string& text) { return name.find(text) != std::string::npos; });
  }
};

void print_times(const char* label, const Comparison& c, const FormTimes& t) {
  char graph[64] = "graph capture failed";
  if (t.graph_ms > 0) std::snprintf(graph, sizeof(graph), "graph %9.4f ms %8.3f", t.graph_ms, rate(c, t.graph_ms));
  std::printf("  %-24s %-30s %-7s | call %9.4f ms %8.3f | loop %9.4f ms %8.3f\n", label, graph,
              c.in_bytes ? "TB/s" : "TFLOP/s", t.call_ms, rate(c, t.call_ms), t.loop_ms, rate(c, t.loop_ms));
}

// Prints the comparison, its JSON line (stdout and --json), and keeps its summary line: the
// graph replays' ratio against the target, or the back-to-back loop's where capture failed.
void report(Report& r, const Comparison& c) {
  std::printf("%s: %s\n  serving kernel %s, dense kernel %s\n", c.name.c_str(), c.shape.c_str(), c.kernel.c_str(),
              c.dense_kernel.c_str());
  print_times("dense", c, c.dense);
  if (c.has_dense_batch) print_times("dense, one batched call", c, c.dense_batch);
  if (c.has_dense_token_major) print_times("dense [B, Lk, Hkv, D]", c, c.dense_token_major);
  print_times(c.form.c_str(), c, c.serving);
  const double graph_ratio = ratio(c.dense.graph_ms, c.serving.graph_ms);
  const double loop_ratio = ratio(c.dense.loop_ms, c.serving.loop_ms);
  const double headline = graph_ratio > 0 ? graph_ratio : loop_ratio;
  const bool correct = c.max_diff <= kTolerance;
  char line[320];
  std::snprintf(line, sizeof(line), "%-48s %s / dense %6.3f%s (target %.2f%s), call %.3f, loop %.3f, max diff %.2e%s",
                c.name.c_str(), c.form.c_str(), headline, graph_ratio > 0 ? "" : " (loop: no graph)", c.target,
                headline >= c.target ? "" : ", below", ratio(c.dense.call_ms, c.serving.call_ms), loop_ratio,
                c.max_diff, correct ? "" : " WRONG");
  std::printf("  %s\n", line);
  r.summary.emplace_back(line);
  if (!correct) {
    std::fprintf(stderr, "%s: %s: max |serving - dense| %.3e exceeds the bfloat16 tolerance %.1e\n", kProgram,
                 c.name.c_str(), c.max_diff, kTolerance);
    ++r.failures;
  }
  const std::string json = json_of(c, r.ceilings);
  std::printf("%s\n", json.c_str());
  if (r.json != nullptr) std::fprintf(r.json, "%s\n", json.c_str());
  std::fflush(stdout);
}

// Visible key counts summed over the queries of one sequence: the last `queries` of `keys`,
// causal bottom-right (query i sees keys j <= i + keys - queries).
double visible_pairs(std::int64_t queries, std::int64_t keys, bool causal) {
  if (!causal) return static_cast<double>(queries) * static_cast<double>(keys);
  const double q = static_cast<double>(queries);
  return q * static_cast<double>(keys - queries) + q * (q + 1) / 2;
}

// Two GEMMs (QK^T and PV) of 2 FLOPs per multiply-add, over every query head.
double pair_flops(double pairs) { return 4.0 * kQHeads * kHeadDim * pairs; }

std::string kilo(std::int64_t n) { return n % 1024 == 0 ? std::to_string(n / 1024) + "k" : std::to_string(n); }

// The dense per-sequence form of a ragged batch: one call per sequence on views of its rows.
Form dense_per_sequence(const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v, const DeviceBuffer& out,
                        const std::vector<std::int32_t>& cu, const AttentionOptions& options) {
  struct Views {
    TensorView q, k, v, out;
  };
  std::vector<Views> calls;
  Form form;
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    const std::int64_t first = cu[b], length = cu[b + 1] - cu[b];
    calls.push_back({rows_as_dense(q, first, 1, kQHeads, length), rows_as_dense(k, first, 1, kKvHeads, length),
                     rows_as_dense(v, first, 1, kKvHeads, length), rows_as_dense(out, first, 1, kQHeads, length)});
    const heed::AttentionPlan plan = heed::plan_attention(calls.back().q, calls.back().k, calls.back().v, options);
    form.scratch_bytes = std::max(form.scratch_bytes, plan.scratch_bytes);
    if (form.kernel.empty()) form.kernel = plan.kernel_name;
  }
  form.run = [calls](const AttentionOptions& o, cudaStream_t stream) mutable {
    for (Views& call : calls) heed::attention(call.q, call.k, call.v, call.out, kScale, o, heed::Stream{stream});
  };
  return form;
}

// Where every sequence has the same length: the whole batch as one dense call on views of its rows.
Form dense_batched(const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v, const DeviceBuffer& out,
                   std::int64_t batch, std::int64_t length, const AttentionOptions& options) {
  const TensorView qv = rows_as_dense(q, 0, batch, kQHeads, length), kv = rows_as_dense(k, 0, batch, kKvHeads, length);
  const TensorView vv = rows_as_dense(v, 0, batch, kKvHeads, length);
  TensorView ov = rows_as_dense(out, 0, batch, kQHeads, length);
  const heed::AttentionPlan plan = heed::plan_attention(qv, kv, vv, options);
  return {[=](const AttentionOptions& o, cudaStream_t stream) mutable {
            heed::attention(qv, kv, vv, ov, kScale, o, heed::Stream{stream});
          },
          plan.scratch_bytes, plan.kernel_name};
}

// A case's bfloat16 tensors: q and out of `q_count` elements, k and v of `kv_count`, and the
// dense form's out; random (the outputs too, so that a row left unwritten fails the check).
struct Buffers {
  DeviceBuffer q, k, v, out, dense_out;
  std::int64_t out_count;
  Buffers(std::int64_t q_count, std::int64_t kv_count)
      : q(random_rows(q_count, 1)),
        k(random_rows(kv_count, 2)),
        v(random_rows(kv_count, 3)),
        out(random_rows(q_count, 4)),
        dense_out(random_rows(q_count, 5)),
        out_count(q_count) {}
};

Form dense_form(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                const AttentionOptions& options) {
  const heed::AttentionPlan plan = heed::plan_attention(q, k, v, options);
  return {[=](const AttentionOptions& o, cudaStream_t stream) mutable {
            heed::attention(q, k, v, out, kScale, o, heed::Stream{stream});
          },
          plan.scratch_bytes, plan.kernel_name};
}

Form paged_form(const TensorView& q, const PagedCache& cache, TensorView out, const AttentionOptions& options) {
  const heed::AttentionPlan plan = heed::plan_attention_paged(q, cache.k_view, cache.v_view, cache.pages, options);
  return {[=, k = cache.k_view, v = cache.v_view, pages = cache.pages](const AttentionOptions& o,
                                                                       cudaStream_t stream) mutable {
            heed::attention_paged(q, k, v, pages, out, kScale, o, heed::Stream{stream});
          },
          plan.scratch_bytes, plan.kernel_name};
}

// The dense call over `buffers`' K and V copied as [B, keys, Hkv, D], the layout of the paged
// caches here with one page per sequence. It keeps the copy it reads.
Form token_major_form(const Buffers& buffers, const TensorView& q, TensorView out, std::int64_t batch,
                      std::int64_t keys, const AttentionOptions& options) {
  const auto cache = std::make_shared<PagedCache>(buffers.k, buffers.v, batch, keys, keys, false);
  Form form = dense_form(q, rows_as_dense(cache->k, 0, batch, kKvHeads, keys),
                         rows_as_dense(cache->v, 0, batch, kKvHeads, keys), out, options);
  form.run = [run = form.run, cache](const AttentionOptions& o, cudaStream_t stream) { run(o, stream); };
  return form;
}

// Runs both forms once and compares their outputs, then times them: the dense form first,
// unless its times are given (a dense call shared by several serving cases).
void measure(Report& r, Comparison& c, const Form& serving, const Form& dense, const AttentionOptions& options,
             const Buffers& buffers, const FormTimes* dense_times = nullptr) {
  c.kernel = serving.kernel;
  if (c.dense_kernel.empty()) c.dense_kernel = dense.kernel;
  serving.run(options, nullptr);
  dense.run(options, nullptr);
  c.max_diff = max_abs_diff(buffers.out, buffers.dense_out, buffers.out_count);
  c.dense = dense_times != nullptr ? *dense_times : time_form(dense, options, r.reps);
  c.serving = time_form(serving, options, r.reps);
}

Comparison comparison(const std::string& name, const char* form, const std::string& shape) {
  Comparison c;
  c.name = name;
  c.form = form;
  c.shape = shape + ", Hq 32 / Hkv 8, D 128, bf16";
  return c;
}

// Ragged prefill of sequences of these lengths (Lq = Lk each) against the dense per-sequence form.
void varlen_prefill(Report& r, const std::string& name, const std::vector<std::int64_t>& lengths, bool causal) {
  std::vector<std::int32_t> cu{0};
  double pairs = 0;
  for (const std::int64_t l : lengths) {
    cu.push_back(cu.back() + static_cast<std::int32_t>(l));
    pairs += visible_pairs(l, l, causal);
  }
  const std::int64_t total = cu.back(), sequences = static_cast<std::int64_t>(lengths.size());
  const auto [shortest, longest] = std::minmax_element(lengths.begin(), lengths.end());
  const Buffers b(total * kQHeads * kHeadDim, total * kKvHeads * kHeadDim);
  const DeviceBuffer cu_device = upload(cu);
  AttentionOptions options;
  options.causal = causal;
  heed::RaggedBatch batch;
  batch.cu_seqlens_q = batch.cu_seqlens_k = int32(cu_device, Shape{sequences + 1});
  batch.max_seqlen_q = batch.max_seqlen_k = *longest;
  const TensorView q = bf16(b.q, Shape{total, kQHeads, kHeadDim}), k = bf16(b.k, Shape{total, kKvHeads, kHeadDim});
  const TensorView v = bf16(b.v, Shape{total, kKvHeads, kHeadDim});
  TensorView out = bf16(b.out, Shape{total, kQHeads, kHeadDim});
  const heed::AttentionPlan plan = heed::plan_attention_varlen(q, k, v, batch, options);
  const Form serving{[&](const AttentionOptions& o, cudaStream_t stream) {
                       heed::attention_varlen(q, k, v, batch, out, kScale, o, heed::Stream{stream});
                     },
                     plan.scratch_bytes, plan.kernel_name};
  const Form dense = dense_per_sequence(b.q, b.k, b.v, b.dense_out, cu, options);
  Comparison c = comparison(name, "varlen",
                            std::to_string(sequences) + " sequences of " + kilo(*shortest) + "-" + kilo(*longest) +
                                " (" + std::to_string(total) + " rows), Lq = Lk" + (causal ? ", causal" : ""));
  c.causal = causal;
  c.work = pair_flops(pairs);
  c.target = 0.95;
  c.dense_kernel = dense.kernel + " x " + std::to_string(sequences);
  measure(r, c, serving, dense, options, b);
  if (*shortest == *longest) {
    c.has_dense_batch = true;
    c.dense_batch = time_form(dense_batched(b.q, b.k, b.v, b.dense_out, sequences, *longest, options), options, r.reps);
  }
  report(r, c);
}

// Paged decode's vector route with its launch choices varied (--variants): the kernel, the ring
// and the partitions, each planned by the same planner and timed by graph replay of its launches
// alone, one JSON object each ("variant_of"). A variant that plans what an earlier one did is left out.
void time_paged_variants(const Report& r, const std::string& name, const TensorView& q, const PagedCache& cache,
                         const TensorView& out, double bytes) {
  using namespace heed;
  using Kernel = plan::CudaVectorKernel;
  struct Variant {
    const char* name;
    Kernel kernel;
    double partitions, ring;  // times the planned count (0: planned)
    int blocks_per_sm;        // the ring sized for this many blocks per SM (0: planned)
  };
  constexpr Variant kVariants[] = {
      {"planned", Kernel::Auto, 0, 0, 0},       {"mma_cp_async", Kernel::Mma, 0, 0, 0},
      {"partitions_x2", Kernel::Auto, 2, 0, 0}, {"partitions_half", Kernel::Auto, 0.5, 0, 0},
      {"ring_half", Kernel::Auto, 0, 0.5, 0},   {"ring_x2", Kernel::Auto, 0, 2, 0},
      {"ring_x4", Kernel::Auto, 0, 4, 0},       {"blocks_1", Kernel::Auto, 0, 0, 1},
      {"blocks_2", Kernel::Auto, 0, 0, 2},      {"blocks_3", Kernel::Auto, 0, 0, 3},
      {"blocks_2_parts_x2", Kernel::Auto, 2, 0, 2},   {"tma_row_copies", Kernel::TmaRows, 0, 0, 0},
  };
  const call::Call problem = call::validate_paged(q, cache.k_view, cache.v_view, cache.pages, &out, kScale, {});
  const plan::CudaDeviceInfo& device = heed::device::cuda_device_info(q.device, kProgram);
  const plan::PlanOverrides& environment = plan::environment_overrides();
  std::vector<plan::CudaRoute> timed;
  for (const Variant& variant : kVariants) {
    plan::PlanOverrides overrides = environment;
    overrides.cuda_vector = variant.kernel;
    const plan::CudaRoute base = plan::plan_cuda(problem, device, overrides);
    plan::CudaVectorTuning& tuning = overrides.cuda_vector_tuning;
    if (variant.partitions > 0) {
      tuning.partitions = std::max<std::int64_t>(1, std::llround(static_cast<double>(base.vector.partitions) *
                                                                 variant.partitions));
    }
    if (variant.ring > 0) tuning.ring_items = std::max(2, static_cast<int>(base.vector.ring_items * variant.ring));
    tuning.blocks_per_sm = variant.blocks_per_sm;
    const plan::CudaRoute route = plan::plan_cuda(problem, device, overrides);
    if (!std::holds_alternative<route::Vector>(route.plan.kernel)) continue;
    const auto same = [&](const plan::CudaRoute& other) {
      return other.plan.kernel_name == route.plan.kernel_name && other.vector.partitions == route.vector.partitions &&
             other.vector.ring_items == route.vector.ring_items &&
             other.vector.blocks_per_sm == route.vector.blocks_per_sm && other.vector.warps == route.vector.warps;
    };
    if (std::any_of(timed.begin(), timed.end(), same)) continue;
    timed.push_back(route);
    const DeviceBuffer scratch = device_bytes(std::max<std::size_t>(route.plan.scratch_bytes, 256));
    const auto launch = [&](cudaStream_t stream) {
      cuda::launch_attention(problem, route, static_cast<std::byte*>(scratch.get()), stream);
    };
    const double ms = graph_ms(launch, 20, kBudgetMs, std::max(r.reps / 3, 3));
    std::printf("{\"variant_of\": \"%s\", \"variant\": \"%s\", \"kernel\": \"%s\", \"partitions\": %lld, "
                "\"ring_items\": %d, \"blocks_per_sm\": %d, \"warps\": %d, \"graph_ms\": %.5f, \"tbytes\": %.4f}\n",
                name.c_str(), variant.name, route.plan.kernel_name.c_str(),
                static_cast<long long>(route.vector.partitions), route.vector.ring_items, route.vector.blocks_per_sm,
                route.vector.warps, ms, ms > 0 ? bytes / (ms * 1e-3) / 1e12 : -1.0);
    std::fflush(stdout);
  }
}

// The paged decode ratio aimed at per page size: a page of one key reads the block table per key.
double paged_decode_target(std::int64_t page_size) { return page_size == 1 ? 0.85 : page_size >= 128 ? 0.98 : 0.95; }

// One query per sequence against `keys` keys each: dense decode timed once, then the same keys
// paged at each page size.
void paged_decode(Report& r, std::int64_t batch, std::int64_t keys) {
  const std::string stem = "paged_decode_b" + std::to_string(batch) + "_32x8_d128_" + kilo(keys) + "_p";
  const std::vector<std::int64_t> page_sizes{1, 16, 128, 256};
  const auto wanted = [&](std::int64_t page_size) { return r.wants(stem + std::to_string(page_size)); };
  if (std::none_of(page_sizes.begin(), page_sizes.end(), wanted)) return;
  const Buffers b(batch * kQHeads * kHeadDim, batch * kKvHeads * keys * kHeadDim);
  const AttentionOptions options;
  const Form dense =
      dense_form(bf16(b.q, Shape{batch, kQHeads, 1, kHeadDim}), bf16(b.k, Shape{batch, kKvHeads, keys, kHeadDim}),
                 bf16(b.v, Shape{batch, kKvHeads, keys, kHeadDim}),
                 bf16(b.dense_out, Shape{batch, kQHeads, 1, kHeadDim}), options);
  const FormTimes dense_times = time_form(dense, options, r.reps);
  const FormTimes token_major_times =
      time_form(token_major_form(b, bf16(b.q, Shape{batch, kQHeads, 1, kHeadDim}),
                                 bf16(b.dense_out, Shape{batch, kQHeads, 1, kHeadDim}), batch, keys, options),
                options, r.reps);
  for (const std::int64_t page_size : page_sizes) {
    if (!wanted(page_size)) continue;
    const PagedCache cache(b.k, b.v, batch, keys, page_size);
    const Form serving = paged_form(bf16(b.q, Shape{batch, kQHeads, kHeadDim}), cache,
                                    bf16(b.out, Shape{batch, kQHeads, kHeadDim}), options);
    const std::string size = std::to_string(page_size);
    Comparison c = comparison(stem + size, "paged_decode",
                              "B " + std::to_string(batch) + " x " + kilo(keys) + " keys, one query each, page " +
                                  size + " (shuffled; cache [pages, " + size + ", 8, 128])");
    c.page_size = page_size;
    c.in_bytes = true;
    c.work = 2.0 * 2.0 * static_cast<double>(batch * kKvHeads * keys * kHeadDim);  // K and V, 2 bytes each
    c.target = paged_decode_target(page_size);
    c.has_dense_token_major = true;
    c.dense_token_major = token_major_times;
    measure(r, c, serving, dense, options, b, &dense_times);
    report(r, c);
    if (r.variants) {
      time_paged_variants(r, c.name, bf16(b.q, Shape{batch, kQHeads, kHeadDim}), cache,
                          bf16(b.out, Shape{batch, kQHeads, kHeadDim}), c.work);
    }
  }
}

// The host time of one C++ call, as a decode loop spends it: `calls` calls issued with the GPU
// idle at the start (far below the launch queue's depth), the issuing time per call; the fastest
// and the median of `reps` rounds. The plan is cached from the warm-up calls.
template <typename F>
std::pair<double, double> issue_us(F&& call, int calls, int reps) {
  for (int i = 0; i < 20; ++i) call();
  std::vector<double> rounds;
  for (int rep = 0; rep < reps; ++rep) {
    ok(cudaDeviceSynchronize(), "sync");
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    const std::chrono::duration<double, std::micro> issued = std::chrono::steady_clock::now() - start;
    rounds.push_back(issued.count() / calls);
  }
  ok(cudaDeviceSynchronize(), "sync");
  std::sort(rounds.begin(), rounds.end());
  return {rounds.front(), rounds[rounds.size() / 2]};
}

// heed::attention, heed::attention_paged and Runner::run on decode B1 x 4096 keys (the shape of
// bench/host_time.py), their host time per call.
void host_time(Report& r) {
  if (!r.wants("host")) return;
  constexpr std::int64_t keys = 4096, page_size = 16;
  const Buffers b(kQHeads * kHeadDim, kKvHeads * keys * kHeadDim);
  const AttentionOptions options;
  const TensorView q = bf16(b.q, Shape{1, kQHeads, 1, kHeadDim}), k = bf16(b.k, Shape{1, kKvHeads, keys, kHeadDim});
  const TensorView v = bf16(b.v, Shape{1, kKvHeads, keys, kHeadDim});
  TensorView out = bf16(b.out, Shape{1, kQHeads, 1, kHeadDim});
  const PagedCache cache(b.k, b.v, 1, keys, page_size);
  const TensorView q_rows = bf16(b.q, Shape{1, kQHeads, kHeadDim});
  TensorView out_rows = bf16(b.out, Shape{1, kQHeads, kHeadDim});
  heed::Runner runner = heed::Runner::paged(q_rows, cache.k_view, cache.v_view, cache.pages, out_rows, kScale, options);
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"heed::attention", [&] { heed::attention(q, k, v, out, kScale, options); }},
      {"heed::attention_paged page 16",
       [&] { heed::attention_paged(q_rows, cache.k_view, cache.v_view, cache.pages, out_rows, kScale, options); }},
      {"heed::Runner::paged(...).run()", [&] { runner.run(); }}};
  std::printf("host time per call (C++, decode B1 x 4k keys, Hq 32 / Hkv 8, D 128, bf16; 200 calls issued)\n");
  for (const auto& [name, call] : calls) {
    const auto [fastest, median] = issue_us(call, 200, std::max(r.reps / 6, 5));
    std::printf("  %-34s host %7.2f us (median %7.2f)\n", name, fastest, median);
    const std::string json =
        JsonLine().add("host_call", name).add("host_us", fastest, "%.3f").add("host_us_median", median, "%.3f").str();
    std::printf("%s\n", json.c_str());
    if (r.json != nullptr) std::fprintf(r.json, "%s\n", json.c_str());
  }
}

// Chunked prefill: each sequence's last `queries` of `keys` keys (causal) read from a paged
// cache, against the dense causal call with Lq = queries, Lk = keys.
void paged_chunked_prefill(Report& r, std::int64_t batch, std::int64_t queries, std::int64_t keys,
                           std::int64_t page_size) {
  const std::string name = "paged_chunked_b" + std::to_string(batch) + "_32x8_d128_" + kilo(queries) + "_of_" +
                           kilo(keys) + "_p" + std::to_string(page_size) + "_causal";
  if (!r.wants(name)) return;
  const std::int64_t rows = batch * queries;
  const Buffers b(rows * kQHeads * kHeadDim, batch * kKvHeads * keys * kHeadDim);
  AttentionOptions options;
  options.causal = true;
  const Form dense =
      dense_form(rows_as_dense(b.q, 0, batch, kQHeads, queries), bf16(b.k, Shape{batch, kKvHeads, keys, kHeadDim}),
                 bf16(b.v, Shape{batch, kKvHeads, keys, kHeadDim}),
                 rows_as_dense(b.dense_out, 0, batch, kQHeads, queries), options);
  PagedCache cache(b.k, b.v, batch, keys, page_size);
  std::vector<std::int32_t> cu(static_cast<std::size_t>(batch) + 1);
  for (std::size_t s = 0; s < cu.size(); ++s) cu[s] = static_cast<std::int32_t>(static_cast<std::int64_t>(s) * queries);
  const DeviceBuffer cu_device = upload(cu);
  cache.pages.cu_seqlens_q = int32(cu_device, Shape{batch + 1});
  cache.pages.max_seqlen_q = queries;
  const Form serving = paged_form(bf16(b.q, Shape{rows, kQHeads, kHeadDim}), cache,
                                  bf16(b.out, Shape{rows, kQHeads, kHeadDim}), options);
  Comparison c = comparison(name, "paged_chunked",
                            "B " + std::to_string(batch) + ", the last " + kilo(queries) + " of " + kilo(keys) +
                                " keys (causal), page " + std::to_string(page_size) + " (shuffled)");
  c.causal = true;
  c.page_size = page_size;
  c.work = pair_flops(visible_pairs(queries, keys, true) * static_cast<double>(batch));
  c.target = 0.90;
  c.has_dense_token_major = true;
  c.dense_token_major = time_form(token_major_form(b, rows_as_dense(b.q, 0, batch, kQHeads, queries),
                                                   rows_as_dense(b.dense_out, 0, batch, kQHeads, queries), batch,
                                                   keys, options),
                                  options, r.reps);
  measure(r, c, serving, dense, options, b);
  report(r, c);
}

// 32 lengths uniform in [128, 4096], the same every run.
std::vector<std::int64_t> mixed_lengths() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> length(128, 4096);
  std::vector<std::int64_t> lengths(32);
  for (std::int64_t& l : lengths) l = length(rng);
  return lengths;
}

// Runs `bench`, counting an exception as a failed case so that the others still run.
void guarded(Report& r, const char* what, const std::function<void()>& bench) {
  try {
    bench();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s: %s\n", kProgram, what, error.what());
    r.summary.push_back(std::string(what) + ": FAILED: " + error.what());
    ++r.failures;
  }
}

void run_cases(Report& r) {
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> ragged{
      {"varlen_b32_32x8_d128_128-4k", mixed_lengths()},
      {"varlen_b4_32x8_d128_16k", std::vector<std::int64_t>(4, 16384)}};
  for (const bool causal : {false, true}) {
    for (const auto& sequences : ragged) {
      const std::string name = sequences.first + (causal ? "_causal" : "");
      if (r.wants(name)) guarded(r, name.c_str(), [&] { varlen_prefill(r, name, sequences.second, causal); });
    }
  }
  for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{16, 8192}, {64, 4096}, {1, 32768}}) {
    const std::string what = "paged decode B " + std::to_string(shape.first);
    guarded(r, what.c_str(), [&] { paged_decode(r, shape.first, shape.second); });
  }
  // Page 1: the wgmma kernel's row copies; 16, 64 and 256: its 16- and 64-key boxes and whole tiles.
  for (const std::int64_t page_size : {1, 16, 64, 256}) {
    for (const std::int64_t batch : {1, 4}) {
      guarded(r, "paged chunked prefill", [&] { paged_chunked_prefill(r, batch, 2048, 16384, page_size); });
    }
  }
  guarded(r, "host time", [&] { host_time(r); });
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      r.reps = std::max(3, std::atoi(argv[++i]));
    } else if (arg == "--variants") {
      r.variants = true;
    } else if (arg == "--case" && i + 1 < argc) {
      r.only.emplace_back(argv[++i]);
    } else if (arg == "--json" && i + 1 < argc) {
      r.json = std::fopen(argv[++i], "w");
      if (r.json == nullptr) {
        std::fprintf(stderr, "%s: cannot write %s\n", kProgram, argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--case TEXT]... [--json FILE] [--variants]\n", kProgram);
      return 2;
    }
  }
  r.ceilings = {copy_tbytes(), read_tbytes(), gemm_tflops()};
  std::printf("device ceilings: bf16 GEMM %.1f TFLOP/s, copy %.3f TB/s (read + write), read-only %.3f TB/s\n",
              r.ceilings.gemm, r.ceilings.copy, r.ceilings.read);
  const std::string ceilings = JsonLine()
                                   .add("copy_tbytes", r.ceilings.copy, "%.4f")
                                   .add("read_tbytes", r.ceilings.read, "%.4f")
                                   .add("bf16_gemm_tflops", r.ceilings.gemm, "%.1f")
                                   .str();
  std::printf("%s\n", ceilings.c_str());
  if (r.json != nullptr) std::fprintf(r.json, "%s\n", ceilings.c_str());
  run_cases(r);
  std::printf("== serving / dense (graph replays; call: one call between events; loop: back to back)\n");
  for (const std::string& line : r.summary) std::printf("%s\n", line.c_str());
  if (r.json != nullptr) std::fclose(r.json);
  if (r.failures > 0) std::printf("%s: %d case(s) FAILED\n", kProgram, r.failures);
  return r.failures > 0 ? 1 : 0;
}
