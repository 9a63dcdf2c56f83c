// The serving forms on the CUDA tiled route (RouteChoice::Tiled, whatever auto would pick) against
// the float64 serving oracle: ragged batches with empty and length-1 sequences, Lq > Lk under
// causal, windows, sinks, softcap, GQA and MQA; paged chunked prefill at page sizes 1 to 256 with
// shared, shuffled block tables and non-contiguous table rows, token- and head-major caches; every
// call with and without an lse output, the outputs poisoned before each run. The pages no
// sequence reads and the unread tails of read pages hold NaN. On a 9.0 device with sm_90a code,
// the cases marked `wgmma` must run the wgmma kernel without lse (paged_wgmma_* cover its paged
// copies, by rows and by boxes: partial last boxes, boxes past the sequence, each entry's tile and
// box size). Metadata lives on the device, as an engine's does. Label `gpu`: skipped without a
// device.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {
namespace {

// Oracle cost: each case below ~3e7 double multiply-adds. Sequences longer than one 128-row
// block (with the group packed) put several row blocks in a sequence, and the grid's bounds
// leave blocks past the short sequences' rows.
std::vector<ServingCase> shapes() {
  return {
      {.name = "ragged_mixed_lengths", .q_lens = {1, 37, 0, 5, 130}, .kv_lens = {200, 37, 9, 0, 140},
       .empty_rows = true},
      {.name = "ragged_causal_lq_gt_lk_mqa", .q_lens = {20, 1, 7, 33}, .kv_lens = {8, 1, 0, 40}, .q_heads = 3,
       .kv_heads = 1, .causal = true, .empty_rows = true},
      {.name = "ragged_gqa_window", .q_lens = {17, 64, 1}, .kv_lens = {129, 64, 300}, .q_heads = 8, .kv_heads = 2,
       .causal = true, .window = 32},
      {.name = "ragged_window_lq_gt_lk", .q_lens = {40, 3}, .kv_lens = {30, 50}, .q_heads = 2, .kv_heads = 2,
       .causal = true, .window = 5, .empty_rows = true},
      {.name = "ragged_sinks_softcap", .q_lens = {9, 0, 31, 12}, .kv_lens = {50, 0, 17, 0}, .q_heads = 4,
       .kv_heads = 4, .causal = true, .sinks = true, .softcap = 5.0f, .empty_rows = true},
      {.name = "ragged_long_rows_d128", .q_lens = {300, 5, 129}, .kv_lens = {300, 700, 129}, .q_heads = 4,
       .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true, .wgmma = true},
      {.name = "ragged_d80_dv48_head_major", .q_lens = {12, 40}, .kv_lens = {12, 77}, .q_heads = 4,
       .kv_heads = 1, .head_dim = 80, .value_dim = 48, .head_major = true},
      {.name = "ragged_d256", .q_lens = {33, 2}, .kv_lens = {70, 90}, .q_heads = 2, .kv_heads = 1, .head_dim = 256,
       .value_dim = 256, .causal = true, .sinks = true},
      {.name = "ragged_single_1x1", .q_lens = {1}, .kv_lens = {1}, .q_heads = 1, .kv_heads = 1},
      {.name = "ragged_no_keys_sinks", .q_lens = {3, 4}, .kv_lens = {0, 0}, .sinks = true, .empty_rows = true},

      {.name = "paged_ps1_mqa", .paged = true, .q_lens = {6, 13, 1}, .kv_lens = {50, 13, 70}, .page_size = 1,
       .q_heads = 4, .kv_heads = 1, .causal = true, .wgmma = true},
      {.name = "paged_ps16_shared_sinks", .paged = true, .q_lens = {5, 1, 0, 17}, .kv_lens = {40, 33, 10, 17},
       .causal = true, .sinks = true, .shared_pages = 1, .table_pad = 2, .wgmma = true},
      {.name = "paged_ps16_lq_gt_lk", .paged = true, .q_lens = {10, 3, 20}, .kv_lens = {4, 0, 20}, .causal = true,
       .empty_rows = true, .wgmma = true},
      {.name = "paged_ps16_gqa_long", .paged = true, .q_lens = {64, 65}, .kv_lens = {1000, 65}, .q_heads = 8,
       .kv_heads = 1, .shared_pages = 3, .wgmma = true},
      {.name = "paged_ps64_head_major_window", .paged = true, .q_lens = {30, 2}, .kv_lens = {130, 64},
       .page_size = 64, .q_heads = 6, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .window = 40, .head_major = true, .table_pad = 3, .wgmma = true},
      {.name = "paged_ps256_shared_softcap", .paged = true, .q_lens = {200, 17, 100}, .kv_lens = {300, 17, 600},
       .page_size = 256, .causal = true, .softcap = 5.0f, .shared_pages = 1, .wgmma = true},
      {.name = "paged_ps7", .paged = true, .q_lens = {6, 13}, .kv_lens = {50, 13}, .page_size = 7, .causal = true,
       .wgmma = true},
      {.name = "paged_ps8", .paged = true, .q_lens = {9, 2}, .kv_lens = {70, 3}, .page_size = 8,
       .head_dim = 128, .value_dim = 128, .causal = true, .wgmma = true},
      {.name = "paged_decode_ps16", .paged = true, .q_lens = {1, 1, 1}, .kv_lens = {100, 1, 0}, .decode = true,
       .q_heads = 8, .kv_heads = 2, .sinks = true, .wgmma = true},

      // The wgmma kernel's paged copies (cuda_tables.hpp, hopper_paging). Row copies by cp.async at
      // pages 1 and 3 (and 1, 7 and 8 above); TMA boxes of 16 keys at page 16 under 128-key tiles
      // (D 128 causal) and 176-key tiles (D 128, not causal), of 64 keys at page 64, whole 128-key
      // tiles at page 256, 32-key boxes at page 32 (D 256 at its 64-key tiles), 16 at page 16
      // under the depth split (D 512).
      // Lengths of no multiple of 16 (a partial last box, whose V rows past the sequence are NaN in
      // the cache until cleared), 0 and 1, Lq > Lk rows (zeros), sequences sharing their first
      // pages, padded table rows.
      {.name = "paged_wgmma_ps1_d128_gqa", .paged = true, .q_lens = {24, 1, 0, 7, 100}, .kv_lens = {300, 1, 0, 9, 103},
       .page_size = 1, .q_heads = 8, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .shared_pages = 5, .table_pad = 1, .wgmma = true},
      {.name = "paged_wgmma_ps3_d128_full_sinks", .paged = true, .q_lens = {40, 3, 9}, .kv_lens = {200, 35, 9},
       .page_size = 3, .q_heads = 4, .kv_heads = 1, .head_dim = 128, .value_dim = 128, .sinks = true,
       .head_major = true, .wgmma = true},
      {.name = "paged_wgmma_ps16_d128_gqa", .paged = true, .q_lens = {24, 1, 0, 7, 20, 5},
       .kv_lens = {400, 1, 0, 7, 21, 129}, .q_heads = 8, .kv_heads = 2, .head_dim = 128, .value_dim = 128,
       .causal = true, .shared_pages = 2, .table_pad = 1, .wgmma = true},
      {.name = "paged_wgmma_ps16_d128_full_head_major", .paged = true, .q_lens = {40, 3, 9}, .kv_lens = {390, 33, 176},
       .q_heads = 4, .kv_heads = 1, .head_dim = 128, .value_dim = 128, .head_major = true, .wgmma = true},
      {.name = "paged_wgmma_ps16_lq_gt_lk_sinks", .paged = true, .q_lens = {30, 4, 17}, .kv_lens = {9, 0, 17},
       .q_heads = 4, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true, .sinks = true,
       .empty_rows = true, .wgmma = true},
      {.name = "paged_wgmma_ps64_window_softcap", .paged = true, .q_lens = {33, 2, 1}, .kv_lens = {333, 64, 65},
       .page_size = 64, .q_heads = 4, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .window = 70, .softcap = 5.0f, .shared_pages = 1, .table_pad = 2, .wgmma = true},
      {.name = "paged_wgmma_ps256_head_major_sinks", .paged = true, .q_lens = {20, 1, 16}, .kv_lens = {700, 255, 16},
       .page_size = 256, .q_heads = 8, .kv_heads = 2, .head_dim = 128, .value_dim = 128, .causal = true,
       .sinks = true, .head_major = true, .shared_pages = 1, .wgmma = true},
      {.name = "paged_wgmma_ps32_d256", .paged = true, .q_lens = {20, 3}, .kv_lens = {150, 31}, .page_size = 32,
       .q_heads = 2, .kv_heads = 1, .head_dim = 256, .value_dim = 256, .causal = true, .wgmma = true},
      {.name = "paged_wgmma_ps16_d96", .paged = true, .q_lens = {17, 6}, .kv_lens = {90, 6}, .q_heads = 4,
       .kv_heads = 2, .head_dim = 96, .value_dim = 96, .causal = true, .table_pad = 1, .wgmma = true},
      {.name = "paged_wgmma_ps16_d512", .paged = true, .q_lens = {9, 2}, .kv_lens = {77, 2}, .q_heads = 2,
       .kv_heads = 1, .head_dim = 512, .value_dim = 512, .causal = true, .wgmma = true},
      {.name = "paged_wgmma_ps16_d64_long", .paged = true, .q_lens = {40, 2}, .kv_lens = {2100, 50}, .q_heads = 2,
       .kv_heads = 1, .softcap = 5.0f, .wgmma = true},
  };
}

std::vector<ServingCase> cases() { return in_dtypes(shapes(), {DType::Float16, DType::BFloat16}); }

// Whether the plan must name the wgmma kernel: a case marked for it, without lse, on a 9.0 device
// with a build holding sm_90a code, unless HEED_CUDA_TILED=mma asks for the other kernel (as
// ctest's heed_cuda_tests_tiled_mma runs this grid).
bool expects_wgmma(const ServingCase& c, bool with_lse, const AttentionPlan& plan) {
#if defined(HEED_CUDA_SM90A)
  const bool mma_asked = plan.explain().find("HEED_CUDA_TILED=mma") != std::string::npos;
  return c.wgmma && !with_lse && on_hopper() && !mma_asked;
#else
  (void)c;
  (void)with_lse;
  (void)plan;
  return false;
#endif
}

class TiledServing : public ::testing::TestWithParam<ServingCase> {};

TEST_P(TiledServing, MatchesOracle) {
  REQUIRE_GPU();
  const ServingCase& c = GetParam();
  ASSERT_EQ(c.q_lens.size(), c.kv_lens.size());
  ServingRun run(c, RouteChoice::Tiled);
  for (double value : run.ref.out) ASSERT_FALSE(std::isnan(value)) << "the oracle read an unread page";

  for (const bool with_lse : {false, true}) {
    SCOPED_TRACE(with_lse ? "with lse" : "without lse");
    CallOutputs o(Shape{run.rows, c.q_heads, c.value_dim}, Shape{run.rows, c.q_heads}, c.dtype, Layout::Contiguous);
    DeviceTensor out(o.out), lse(o.lse);
    AttentionOptions options = run.device_options();
    if (with_lse) options.lse = lse.view();
    const AttentionPlan plan = run.plan(options);
    SCOPED_TRACE(plan.explain());
    ASSERT_TRUE(std::holds_alternative<route::Tiled>(plan.kernel));
    // A silent fallback to the mma.sync kernel fails here.
    if (expects_wgmma(c, with_lse, plan)) {
      EXPECT_EQ(plan.kernel_name, std::string("heed_cuda_tiled_wgmma_") + short_name(c.dtype));
    } else if (c.paged && c.page_size % 16 != 0) {
      EXPECT_EQ(plan.kernel_name, std::string("heed_cuda_tiled_") + short_name(c.dtype));
    }
    EXPECT_NE(plan.explain().find("serving: " + std::to_string(c.kv_lens.size()) + " sequences"), std::string::npos);
    run.run(out.view(), options);

    std::vector<unsigned char> out_bytes = out.download(), lse_bytes = lse.download();
    out_bytes.resize(o.out_before.size());
    lse_bytes.resize(o.lse_before.size());
    const TensorView out_host = out.host_view(out_bytes), lse_host = lse.host_view(lse_bytes);
    EXPECT_TRUE(gaps_equal(out_host, o.out_before, out_bytes));
    EXPECT_TRUE(matches_reference(as_rank4(out_host), run.ref.out));
    const Comparison comparison = compare(as_rank4(out_host), run.ref.out);
    if (c.empty_rows) EXPECT_GT(comparison.zero_rows, 0) << "the case was meant to have rows that see no key";
    if (with_lse) {
      EXPECT_TRUE(lse_matches(lse_host, run.ref.lse, c.dtype));
    } else {
      EXPECT_EQ(lse_bytes, o.lse_before) << "lse written without being asked for";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiled, TiledServing, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Float32 serving calls are not the tiled kernel's: forced, they fail with the planner's reason.
TEST(TiledServingRefusal, Float32IsUnsupportedWithTheReason) {
  REQUIRE_GPU();
  ServingCase c{.name = "ragged_f32", .q_lens = {5, 9}, .kv_lens = {7, 9}, .dtype = DType::Float32};
  ServingRun run(c, RouteChoice::Tiled);
  try {
    (void)run.plan(run.device_options());
    ADD_FAILURE() << "a float32 ragged call was planned on the tiled route";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("float16 and bfloat16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace heed::test
