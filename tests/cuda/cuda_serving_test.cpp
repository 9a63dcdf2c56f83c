// The serving forms on the CUDA vector (decode) route (RouteChoice::Vector) against the float64
// serving oracle: paged decode at page sizes 1 to 256 with shared, shuffled, non-contiguous block
// tables; chunked prefill on a paged cache (cu_seqlens_q) and ragged decode-sized batches; empty
// and length-1 sequences, GQA and MQA, windows, sinks, softcap; float32, float16, bfloat16; lse
// checked; merge_states on the device (two halves of the keys reproduce the whole); and garbage
// device metadata, which must not fault (run it under compute-sanitizer memcheck) nor write
// outside out. Outputs poisoned before each run; metadata on the device; the pages no sequence
// reads and the unread tails of read pages hold NaN. On a 9.0 device 16-bit cases with pages of a
// multiple of 16 (any, under HEED_CUDA_VECTOR=tma-rows) and ragged ones must run the TMA kernel. Label `gpu`: skipped without a
// device. HEED_CUDA_VECTOR=fma / mma / tma-rows pick the kernel (tests/CMakeLists.txt runs each).

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference/serving_oracle.hpp"
#include "cuda/device_tensor.hpp"
#include "cuda/serving_run.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_tables.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

// Decode-sized cases: group x max Lq <= 16 rows per key head, so auto takes the vector route too.
// Long sequences beside short ones give several key partitions, most past the short ones' keys.
std::vector<ServingCase> shapes() {
  return {
      {.name = "decode_ps1_mqa", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {50, 1, 0}, .decode = true,
       .page_size = 1, .q_heads = 4, .kv_heads = 1, .empty_rows = true},
      {.name = "decode_ps16_gqa_shared_sinks", .paged = true, .q_lens = {1, 1, 1, 1}, .kv_lens = {40, 33, 0, 17},
       .decode = true, .q_heads = 8, .kv_heads = 2, .sinks = true, .shared_pages = 1, .table_pad = 2},
      {.name = "decode_ps16_long_partitions", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {3000, 5, 1},
       .decode = true, .q_heads = 8, .kv_heads = 1, .head_dim = 128, .value_dim = 128, .shared_pages = 1},
      {.name = "decode_ps64_window_head_major", .paged = true, .q_lens = {1, 1}, .kv_lens = {700, 64},
       .decode = true, .page_size = 64, .q_heads = 4, .kv_heads = 2, .head_dim = 128, .value_dim = 128,
       .causal = true, .window = 100, .head_major = true, .table_pad = 3},
      {.name = "decode_ps256_softcap_shared", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {600, 17, 300},
       .decode = true, .page_size = 256, .q_heads = 2, .kv_heads = 2, .softcap = 5.0f, .shared_pages = 1},
      {.name = "decode_ps8_head_major_shared", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {300, 9, 0},
       .decode = true, .page_size = 8, .q_heads = 8, .kv_heads = 2, .head_dim = 128, .value_dim = 128,
       .head_major = true, .shared_pages = 1, .table_pad = 1},
      {.name = "decode_ps3_d96_window", .paged = true, .q_lens = {1, 1}, .kv_lens = {1000, 40}, .decode = true,
       .page_size = 3, .q_heads = 4, .kv_heads = 1, .head_dim = 96, .value_dim = 96, .causal = true,
       .window = 200},
      {.name = "decode_ps7_d80_dv48", .paged = true, .q_lens = {1, 1}, .kv_lens = {90, 13}, .decode = true,
       .page_size = 7, .q_heads = 4, .kv_heads = 4, .head_dim = 80, .value_dim = 48},
      {.name = "chunked_prefill_ps16", .paged = true, .q_lens = {3, 1, 0, 4}, .kv_lens = {40, 33, 10, 4},
       .q_heads = 4, .kv_heads = 2, .causal = true, .sinks = true, .shared_pages = 1},
      {.name = "chunked_prefill_ps1_window", .paged = true, .q_lens = {2, 8}, .kv_lens = {2, 500}, .page_size = 1,
       .q_heads = 2, .kv_heads = 1, .causal = true, .window = 9},
      {.name = "chunked_prefill_lq_gt_lk", .paged = true, .q_lens = {6, 2}, .kv_lens = {3, 0}, .q_heads = 2,
       .kv_heads = 2, .causal = true, .empty_rows = true},
      {.name = "ragged_decode_mixed", .q_lens = {1, 2, 0, 1}, .kv_lens = {300, 17, 5, 0}, .q_heads = 8,
       .kv_heads = 2, .empty_rows = true},
      {.name = "ragged_decode_long_sinks_softcap", .q_lens = {1, 4, 1}, .kv_lens = {2500, 4, 1}, .q_heads = 4,
       .kv_heads = 1, .causal = true, .sinks = true, .softcap = 5.0f},
      {.name = "ragged_no_keys_sinks", .q_lens = {1, 3}, .kv_lens = {0, 0}, .sinks = true, .empty_rows = true},
      {.name = "ragged_single_1x1", .q_lens = {1}, .kv_lens = {1}, .q_heads = 1, .kv_heads = 1},
      // The TMA kernel's paged tiles: windows whose first key is no multiple of 16 (lead keys
      // masked), in one partition and across many; GQA 8 rows; shared, padded, head-major tables;
      // whole-row boxes (D 96) and class 256; tails of last pages left unread (NaN).
      {.name = "decode_ps16_window_lead_gqa", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {500, 37, 16},
       .decode = true, .q_heads = 16, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .window = 37, .table_pad = 1},
      {.name = "decode_ps16_window_partitions", .paged = true, .q_lens = {1}, .kv_lens = {5000}, .decode = true,
       .q_heads = 8, .kv_heads = 1, .head_dim = 128, .value_dim = 128, .causal = true, .window = 2999},
      {.name = "decode_ps64_shared_padded_gqa", .paged = true, .q_lens = {1, 1, 1, 1}, .kv_lens = {1000, 129, 17, 64},
       .decode = true, .page_size = 64, .q_heads = 16, .kv_heads = 2, .head_dim = 128, .value_dim = 128,
       .sinks = true, .shared_pages = 2, .table_pad = 3},
      {.name = "decode_ps32_d96_head_major", .paged = true, .q_lens = {1, 1}, .kv_lens = {333, 31}, .decode = true,
       .page_size = 32, .q_heads = 8, .kv_heads = 1, .head_dim = 96, .value_dim = 96, .head_major = true},
      {.name = "decode_ps256_d256_mqa", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {700, 256, 1}, .decode = true,
       .page_size = 256, .q_heads = 8, .kv_heads = 1, .head_dim = 256, .value_dim = 256, .softcap = 5.0f},
      {.name = "chunked_prefill_ps64_window_lead", .paged = true, .q_lens = {4, 2}, .kv_lens = {300, 70},
       .page_size = 64, .q_heads = 4, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .window = 50, .shared_pages = 1},
      {.name = "ragged_decode_d128_window", .q_lens = {1, 1, 2}, .kv_lens = {900, 40, 77}, .q_heads = 8,
       .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true, .window = 45},
  };
}

// Whether the plan must name the TMA kernel: a 9.0 device and a build with sm_90a code, 16-bit,
// a TMA head class that holds D / Dv, ragged rows or pages of a multiple of 16 (any pages under
// HEED_CUDA_VECTOR=tma-rows), no HEED_CUDA_VECTOR=fma / mma.
bool expects_tma(const ServingCase& c, const AttentionPlan& plan) {
#if defined(HEED_CUDA_SM90A)
  const std::string explained = plan.explain();
  const bool overridden = explained.find("HEED_CUDA_VECTOR=fma") != std::string::npos ||
                          explained.find("HEED_CUDA_VECTOR=mma") != std::string::npos;
  const char* asked = std::getenv("HEED_CUDA_VECTOR");
  const bool rows = asked != nullptr && std::string(asked) == "tma-rows";
  return on_hopper() && !overridden && c.dtype != DType::Float32 &&
         plan::cuda::vector_tma_head_class(c.head_dim, c.value_dim) != 0 &&
         (!c.paged || c.page_size % 16 == 0 || rows);
#else
  (void)c;
  (void)plan;
  return false;
#endif
}

std::vector<ServingCase> cases() { return in_dtypes(shapes(), {std::begin(kDtypes), std::end(kDtypes)}); }

// A device result read back: bytes and host views of out and lse.
struct Readback {
  std::vector<unsigned char> out_bytes, lse_bytes;
  TensorView out, lse;
  Readback(const DeviceTensor& out_device, const DeviceTensor& lse_device, const CallOutputs& o) {
    out_bytes = out_device.download();
    lse_bytes = lse_device.download();
    out_bytes.resize(o.out_before.size());
    lse_bytes.resize(o.lse_before.size());
    out = out_device.host_view(out_bytes);
    lse = lse_device.host_view(lse_bytes);
  }
};

class CudaServingVector : public ::testing::TestWithParam<ServingCase> {};

TEST_P(CudaServingVector, MatchesOracle) {
  REQUIRE_GPU();
  const ServingCase& c = GetParam();
  ASSERT_EQ(c.q_lens.size(), c.kv_lens.size());
  ServingRun run(c, RouteChoice::Vector);
  for (double value : run.ref.out) ASSERT_FALSE(std::isnan(value)) << "the oracle read an unread page";

  for (const RouteChoice route : {RouteChoice::Vector, RouteChoice::Auto}) {
    for (const bool with_lse : {false, true}) {
      SCOPED_TRACE(std::string(route == RouteChoice::Auto ? "auto" : "vector") + (with_lse ? ", lse" : ""));
      CallOutputs o(Shape{run.rows, c.q_heads, c.value_dim}, Shape{run.rows, c.q_heads}, c.dtype, Layout::Contiguous);
      DeviceTensor out(o.out), lse(o.lse);
      AttentionOptions options = run.device_options();
      options.route = route;
      if (with_lse) options.lse = lse.view();
      const AttentionPlan plan = run.plan(options);
      SCOPED_TRACE(plan.explain());
      ASSERT_TRUE(std::holds_alternative<route::Vector>(plan.kernel));
      EXPECT_NE(plan.explain().find("serving: " + std::to_string(c.kv_lens.size()) + " sequences"),
                std::string::npos);
      EXPECT_EQ(plan.kernel_name.find("vector_tma") != std::string::npos, expects_tma(c, plan)) << plan.kernel_name;
      run.run(out.view(), options);

      const Readback got(out, lse, o);
      EXPECT_TRUE(gaps_equal(got.out, o.out_before, got.out_bytes));
      EXPECT_TRUE(matches_reference(as_rank4(got.out), run.ref.out));
      const Comparison comparison = compare(as_rank4(got.out), run.ref.out);
      if (c.empty_rows) EXPECT_GT(comparison.zero_rows, 0) << "the case was meant to have rows that see no key";
      if (with_lse) {
        EXPECT_TRUE(lse_matches(got.lse, run.ref.lse, c.dtype));
      } else {
        EXPECT_EQ(got.lse_bytes, o.lse_before) << "lse written without being asked for";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vector, CudaServingVector, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The same paged decode over the first pages of each sequence and over the rest (sinks with the
// first part only), merged on the device, reproduces the whole, in place too.
class CudaServingMerge : public ::testing::TestWithParam<DType> {};

TEST_P(CudaServingMerge, HalvesReproduceTheWhole) {
  REQUIRE_GPU();
  ServingCase c{.name = std::string("merge_halves_") + short_name(GetParam()), .paged = true,
                .q_lens = {1, 1, 1, 1}, .kv_lens = {640, 48, 16, 0}, .decode = true, .q_heads = 8, .kv_heads = 2,
                .sinks = true, .dtype = GetParam()};
  ServingRun run(c, RouteChoice::Vector);
  const auto batch = static_cast<std::int64_t>(c.kv_lens.size());
  // Part a: each sequence's first half of its pages; part b: the rest.
  std::vector<std::int64_t> table_a(run.pages.table.size(), -1), table_b(run.pages.table.size(), -1);
  std::vector<std::int64_t> lens_a, lens_b;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = c.kv_lens[static_cast<std::size_t>(b)];
    const std::int64_t pages = (length + c.page_size - 1) / c.page_size, first = pages / 2;
    lens_a.push_back(std::min(length, first * c.page_size));
    lens_b.push_back(length - lens_a.back());
    for (std::int64_t p = 0; p < pages; ++p) {
      const std::int64_t page = run.pages.table[static_cast<std::size_t>(b * run.pages.max_pages + p)];
      (p < first ? table_a[static_cast<std::size_t>(b * run.pages.max_pages + p)]
                 : table_b[static_cast<std::size_t>(b * run.pages.max_pages + p - first)]) = page;
    }
  }
  const Shape table_shape{batch, run.pages.max_pages};
  IntTensor table_a_host(table_shape, table_a), table_b_host(table_shape, table_b);
  IntTensor lens_a_host(Shape{batch}, lens_a), lens_b_host(Shape{batch}, lens_b);
  DeviceTensor table_a_dev(table_a_host.view()), table_b_dev(table_b_host.view());
  DeviceTensor lens_a_dev(lens_a_host.view()), lens_b_dev(lens_b_host.view());

  const Shape out_shape{run.rows, c.q_heads, c.value_dim}, lse_shape{run.rows, c.q_heads};
  CallOutputs part_a(out_shape, lse_shape, c.dtype, Layout::Contiguous), part_b(out_shape, lse_shape, c.dtype,
                                                                                Layout::Contiguous);
  CallOutputs merged(out_shape, lse_shape, c.dtype, Layout::Contiguous);
  DeviceTensor out_a(part_a.out), lse_a(part_a.lse), out_b(part_b.out), lse_b(part_b.lse);
  DeviceTensor out_m(merged.out), lse_m(merged.lse);
  const auto part = [&](DeviceTensor& table, DeviceTensor& lens, DeviceTensor& out, DeviceTensor& lse, bool sinks) {
    AttentionOptions options = run.device_options();
    if (!sinks) options.sinks.reset();
    options.lse = lse.view();
    const PagedKv kv{table.view(), lens.view(), std::nullopt, 1, run.longest(c.kv_lens)};
    attention_paged(run.q->view(), run.k->view(), run.v->view(), kv, out.view(), run.scale, options);
  };
  part(table_a_dev, lens_a_dev, out_a, lse_a, true);
  part(table_b_dev, lens_b_dev, out_b, lse_b, false);
  merge_states(out_a.view(), lse_a.view(), out_b.view(), lse_b.view(), out_m.view(), lse_m.view());
  const Readback got(out_m, lse_m, merged);
  EXPECT_TRUE(matches_reference(as_rank4(got.out), run.ref.out));
  EXPECT_TRUE(lse_matches(got.lse, run.ref.lse, c.dtype));

  // In place: into out_a and lse_a.
  merge_states(out_a.view(), lse_a.view(), out_b.view(), lse_b.view(), out_a.view(), lse_a.view());
  const Readback in_place(out_a, lse_a, part_a);
  EXPECT_TRUE(matches_reference(as_rank4(in_place.out), run.ref.out));
  EXPECT_TRUE(lse_matches(in_place.lse, run.ref.lse, c.dtype));
}

INSTANTIATE_TEST_SUITE_P(Merge, CudaServingMerge, ::testing::ValuesIn(kDtypes),
                         [](const auto& info) { return std::string(short_name(info.param)); });

// merge_states' edge rows on the device, as cpu/merge.cpp: both parts -inf give zeros and -inf, a
// NaN lse gives NaN, a -inf part adds nothing even where its values are NaN.
TEST(CudaServingMerge, EdgeRows) {
  REQUIRE_GPU();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor out_a(Shape{4, 3}, DType::Float32), out_b(Shape{4, 3}, DType::Float32), out(Shape{4, 3}, DType::Float32);
  Tensor lse_a(Shape{4}, DType::Float32), lse_b(Shape{4}, DType::Float32), lse(Shape{4}, DType::Float32);
  const float la[4] = {-kInf, nan, 1.0f, -kInf}, lb[4] = {-kInf, 0.0f, -kInf, 2.0f};
  for (int row = 0; row < 4; ++row) {
    lse_a.set(row, la[row]);
    lse_b.set(row, lb[row]);
    for (int d = 0; d < 3; ++d) {
      out_a.set(row * 3 + d, row == 3 ? nan : 1.0 + d);
      out_b.set(row * 3 + d, row == 2 ? nan : 10.0 + d);
    }
  }
  out.poison();
  lse.poison();
  DeviceTensor da(out_a), db(out_b), dout(out), dla(lse_a), dlb(lse_b), dlse(lse);
  merge_states(da.view(), dla.view(), db.view(), dlb.view(), dout.view(), dlse.view());
  std::vector<unsigned char> out_bytes = dout.download(), lse_bytes = dlse.download();
  std::vector<float> values(12), lses(4);
  std::memcpy(values.data(), out_bytes.data(), sizeof(float) * 12);
  std::memcpy(lses.data(), lse_bytes.data(), sizeof(float) * 4);
  EXPECT_EQ(lses[0], -kInf);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(values[static_cast<std::size_t>(d)], 0.0f);
  EXPECT_TRUE(std::isnan(lses[1]));
  for (int d = 0; d < 3; ++d) EXPECT_TRUE(std::isnan(values[static_cast<std::size_t>(3 + d)]));
  EXPECT_FLOAT_EQ(lses[2], 1.0f);
  for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(values[static_cast<std::size_t>(6 + d)], 1.0f + d);
  EXPECT_FLOAT_EQ(lses[3], 2.0f);
  for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(values[static_cast<std::size_t>(9 + d)], 10.0f + d);
}

// Garbage device metadata (negative, huge, decreasing) is clamped where the kernels read it: no
// fault (compute-sanitizer memcheck) and nothing written outside out and lse, whose canary
// regions stay as they were.
class CudaServingFuzz : public ::testing::TestWithParam<DType> {};

constexpr std::int64_t kCanary = 4096;  // elements each side of out and lse

// A device buffer with `count` elements in the middle of canary regions, all poisoned.
struct Guarded {
  Tensor host;
  std::unique_ptr<DeviceTensor> device;
  std::vector<unsigned char> before;
  TensorView view;
  Guarded(const Shape& shape, DType dtype) : host(Shape{shape.numel("test") + 2 * kCanary}, dtype) {
    host.poison();
    before = host.storage();
    device = std::make_unique<DeviceTensor>(host);
    const auto size = static_cast<std::int64_t>(size_of(dtype));
    std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
    for (int axis = shape.rank() - 2; axis >= 0; --axis) {
      strides[static_cast<std::size_t>(axis)] = strides[static_cast<std::size_t>(axis + 1)] * shape[axis + 1];
    }
    view = TensorView(static_cast<unsigned char*>(device->view().data) + kCanary * size, dtype, shape, strides,
                      device->view().device);
  }
  ::testing::AssertionResult canaries_intact() const {
    const std::vector<unsigned char> after = device->download();
    const std::size_t size = size_of(view.dtype), guard = static_cast<std::size_t>(kCanary) * size;
    const std::size_t end = before.size() - guard;
    for (std::size_t byte = 0; byte < before.size(); ++byte) {
      if ((byte < guard || byte >= end) && after[byte] != before[byte]) {
        return ::testing::AssertionFailure() << "canary byte " << byte << " written";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

constexpr std::int32_t kBig = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kSmall = std::numeric_limits<std::int32_t>::min();

// `count` entries drawn from values that break every invariant of the metadata.
std::vector<std::int64_t> garbage(std::size_t count, std::mt19937_64& rng) {
  static const std::vector<std::int64_t> values = {-1, kBig, kSmall, 3, -7, 1 << 30, 7, 0, 8, -100000, 2, 5, 33, 64};
  std::uniform_int_distribution<std::size_t> pick(0, values.size() - 1);
  std::vector<std::int64_t> out(count);
  for (auto& entry : out) entry = values[pick(rng)];
  return out;
}

// Paged decode and chunked prefill on a garbage block table, seqlens_k and cu_seqlens_q. On
// Hopper pages 1 and 7 take the wgmma kernel's row copies (and, under HEED_CUDA_VECTOR=tma-rows,
// the TMA vector kernel's), page 16 their TMA boxes (cuda_tables.hpp).
void fuzz_paged(DType dtype, std::int64_t page_size, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << "page size " << page_size);
  const std::int64_t batch = 6, q_heads = 4, kv_heads = 2, head_dim = 64, num_pages = 8, max_pages = 5;
  std::vector<std::int64_t> lens = garbage(static_cast<std::size_t>(batch), rng);
  lens[0] = kBig;  // past the table's capacity and the bound
  IntTensor table_host(Shape{batch, max_pages}, garbage(static_cast<std::size_t>(batch * max_pages), rng));
  IntTensor lens_host(Shape{batch}, lens);
  DeviceTensor table_dev(table_host.view()), lens_dev(lens_host.view());
  const Tensor kh = filled(Shape{num_pages, page_size, kv_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
  const Tensor vh = filled(Shape{num_pages, page_size, kv_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
  DeviceTensor k(kh), v(vh);
  for (const bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "paged, garbage cu_seqlens_q" : "paged decode");
    const std::int64_t rows = chunked ? 40 : batch, max_q = chunked ? 24 : 1;
    const Tensor qh = filled(Shape{rows, q_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
    DeviceTensor q(qh);
    IntTensor cu_host(Shape{batch + 1}, garbage(static_cast<std::size_t>(batch + 1), rng));
    DeviceTensor cu_dev(cu_host.view());
    Guarded out(Shape{rows, q_heads, head_dim}, dtype), lse(Shape{rows, q_heads}, DType::Float32);
    // Chunked and tiled, with lse the mma.sync kernel; without it the wgmma kernel on Hopper (its
    // rows or boxes from the block table), asserted so that a fallback cannot leave it unfuzzed.
    for (const RouteChoice route : {RouteChoice::Vector, RouteChoice::Tiled, RouteChoice::Auto}) {
      for (const bool with_lse : {true, false}) {
        if (route == RouteChoice::Tiled && (dtype == DType::Float32 || !chunked)) continue;  // tiled: 16-bit prefill
        AttentionOptions options;
        options.route = route;
        options.causal = true;
        if (with_lse) options.lse = lse.view;
        PagedKv kv{table_dev.view(), lens_dev.view(), std::nullopt, max_q, max_pages * page_size};
        if (chunked) kv.cu_seqlens_q = cu_dev.view();
#if defined(HEED_CUDA_SM90A)
        if (route == RouteChoice::Tiled && !with_lse && on_hopper()) {
          const AttentionPlan plan = plan_attention_paged(q.view(), k.view(), v.view(), kv, options);
          if (plan.explain().find("HEED_CUDA_TILED=mma") == std::string::npos) {
            EXPECT_EQ(plan.kernel_name, std::string("heed_cuda_tiled_wgmma_") + short_name(dtype)) << plan.explain();
          }
        }
#endif
        attention_paged(q.view(), k.view(), v.view(), kv, out.view, 0.125f, options);
        cuda_ok(cudaDeviceSynchronize(), "paged call on garbage metadata");
        EXPECT_TRUE(out.canaries_intact());
        EXPECT_TRUE(lse.canaries_intact());
      }
    }
  }
}

// A ragged batch on garbage cu_seqlens_q and cu_seqlens_k.
void fuzz_ragged(DType dtype, std::mt19937_64& rng) {
  SCOPED_TRACE("ragged, garbage cu_seqlens");
  const std::int64_t batch = 6, q_heads = 4, kv_heads = 2, head_dim = 64, total_q = 40, total_k = 72;
  const Tensor qh = filled(Shape{total_q, q_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
  const Tensor kr = filled(Shape{total_k, kv_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
  const Tensor vr = filled(Shape{total_k, kv_heads, head_dim}, dtype, Layout::Contiguous, false, rng, 1.0);
  DeviceTensor q(qh), kd(kr), vd(vr);
  IntTensor cu_q_host(Shape{batch + 1}, garbage(static_cast<std::size_t>(batch + 1), rng));
  IntTensor cu_k_host(Shape{batch + 1}, garbage(static_cast<std::size_t>(batch + 1), rng));
  DeviceTensor cu_q_dev(cu_q_host.view()), cu_k_dev(cu_k_host.view());
  Guarded out(Shape{total_q, q_heads, head_dim}, dtype), lse(Shape{total_q, q_heads}, DType::Float32);
  // Without lse the tiled route is the wgmma kernel on Hopper (its tensor maps over the
  // [total, H, E] tensors), with it the mma.sync kernel.
  for (const RouteChoice route : {RouteChoice::Vector, RouteChoice::Tiled, RouteChoice::Auto}) {
    for (const bool with_lse : {true, false}) {
      if (route == RouteChoice::Tiled && dtype == DType::Float32) continue;
      AttentionOptions options;
      options.route = route;
      options.causal = route != RouteChoice::Vector;
      if (with_lse) options.lse = lse.view;
      attention_varlen(q.view(), kd.view(), vd.view(), RaggedBatch{cu_q_dev.view(), cu_k_dev.view(), 24, total_k},
                       out.view, 0.125f, options);
      cuda_ok(cudaDeviceSynchronize(), "ragged call on garbage metadata");
      EXPECT_TRUE(out.canaries_intact());
      EXPECT_TRUE(lse.canaries_intact());
    }
  }
}

// Rounds of fresh garbage on every serving form and route; run under compute-sanitizer memcheck
// to see that no access leaves the caller's buffers.
TEST_P(CudaServingFuzz, GarbageMetadataDoesNotFault) {
  REQUIRE_GPU();
  const DType dtype = GetParam();
  std::mt19937_64 rng(seed_of(std::string("fuzz_") + short_name(dtype)));
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (const std::int64_t page_size : {1, 7, 16}) fuzz_paged(dtype, page_size, rng);
    fuzz_ragged(dtype, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Fuzz, CudaServingFuzz, ::testing::ValuesIn(kDtypes),
                         [](const auto& info) { return std::string(short_name(info.param)); });

}  // namespace
}  // namespace heed::test
