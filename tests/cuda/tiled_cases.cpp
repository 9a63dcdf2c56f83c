#include "cuda/tiled_cases.hpp"

#include <string>
#include <utility>
#include <vector>

#include "plan/cuda_tables.hpp"
#include "support/case_builder.hpp"

namespace heed::test {
namespace {

constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;
using MK = MaskKind;
using L = Layout;
constexpr RouteChoice kTiled = RouteChoice::Tiled;

std::string dims_name(std::int64_t head_dim, std::int64_t value_dim) {
  return head_dim == value_dim ? "d" + std::to_string(head_dim)
                               : "d" + std::to_string(head_dim) + "_dv" + std::to_string(value_dim);
}

// Every head size up to 256 that is a multiple of 8, and 512, in both dtypes: GQA 2:1 with
// lengths off the tiles (150 x 200), on the compiled sizes and on those that round up to them
// (loads past D and Dv read zeros, stores past Dv are skipped). Every compiled (D, Dv) of either
// kernel again as a causal square of 257 (the diagonal crosses a tile inside a row block), and
// D != Dv rounded up apart. Large head sizes with one batch to keep the oracle quick.
void append_head_sizes(std::vector<CaseSpec>& cases) {
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes, causal;
  for (std::int64_t d = 8; d <= 256; d += 8) sizes.emplace_back(d, d);
  sizes.emplace_back(512, 512);
  sizes.emplace_back(136, 72);
  sizes.emplace_back(200, 64);
  const auto add_causal = [&](std::int64_t d, std::int64_t dv) {
    for (const auto& size : causal) {
      if (size == std::pair{d, dv}) return;
    }
    causal.emplace_back(d, dv);
  };
  for (const auto& c : plan::cuda::kTiledConfigs) add_causal(c.head_dim, plan::cuda::served_value_dim(c));
  for (const auto& c : plan::cuda::kHopperConfigs) add_causal(c.head_dim, c.value_dim);
  add_causal(72, 72);
  add_causal(200, 200);
  for (DType dtype : {f16, bf16}) {
    for (const auto& [d, dv] : sizes) {
      const std::string name = std::string("tiled_") + short_name(dtype) + "_" + dims_name(d, dv);
      cases.push_back(Make(name, d >= 192 ? 1 : 2, 4, 2, 150, 200, d, dv, dtype));
    }
    for (const auto& [d, dv] : causal) {
      const std::string name = std::string("tiled_") + short_name(dtype) + "_" + dims_name(d, dv) + "_causal";
      cases.push_back(Make(name, 1, 4, 4, 257, 257, d, dv, dtype).causal());
    }
  }
  // The padded columns through each load and store path: array masks (the mma.sync kernel on
  // every device), [B, L, H, D] rows, element stores of the output, Q without a TMA map.
  cases.push_back(Make("tiled_d72_bool2d", 1, 4, 2, 130, 200, 72, 72, bf16).mask(MK::Bool2D).masked_rows());
  cases.push_back(Make("tiled_d200_blhd", 1, 4, 2, 60, 130, 200, 200, f16).layout(L::BLHD).out_layout(L::BLHD));
  cases.push_back(Make("tiled_d40_padded_out", 1, 2, 2, 30, 80, 40, 40, bf16).out_layout(L::Padded));
  cases.push_back(Make("tiled_d104_q_reversed", 2, 8, 2, 90, 200, 104, 104, f16).q_layout(L::ReversedL));
  cases.push_back(Make("tiled_d136_window_sinks", 1, 8, 2, 300, 300, 136, 136, bf16).window(129).sinks());
  cases.push_back(Make("tiled_d264_dv392", 1, 2, 1, 40, 90, 264, 392, bf16));  // the D 512 entries
}

}  // namespace

bool cuda_tiled_serves(const CaseSpec& spec) {
  if (spec.dtype != f16 && spec.dtype != bf16) return false;
  // Rows of whole 16-byte chunks, on a compiled size the call's rounds up to.
  if (spec.head_dim % 8 != 0 || spec.value_dim % 8 != 0) return false;
  if (plan::cuda::tiled_config_index(spec.head_dim, spec.value_dim) < 0) return false;
  const auto wide = [](L layout) { return layout != L::Padded && layout != L::StridedLast; };
  return wide(spec.layout) && wide(spec.q_layout.value_or(spec.layout));
}

std::vector<CaseSpec> tiled_cuda_cases() {
  std::vector<CaseSpec> cases;
  append_head_sizes(cases);
  const std::vector<CaseSpec> options = {
      // Causal bottom-right with Lq != Lk; rows of Lq > Lk before the first key are zeros.
      Make("tiled_causal_lq_lt_lk", 1, 4, 2, 70, 300, 128, 128, bf16).causal(),
      Make("tiled_causal_lq_gt_lk", 1, 4, 2, 200, 70, 64, 64, f16).causal().masked_rows(),
      Make("tiled_lq_gt_lk", 1, 2, 2, 300, 45, 96, 96, bf16),
      // Sliding windows: tiles skipped at both ends, a window of one key, a window inside a tile.
      Make("tiled_window130_skips_tiles", 1, 2, 1, 600, 600, 64, 64, bf16).window(130),
      Make("tiled_window1", 1, 4, 2, 90, 90, 128, 128, f16).window(1),
      Make("tiled_window64_lq_lt_lk", 1, 4, 2, 100, 700, 128, 128, f16).window(64),
      Make("tiled_window_d256", 1, 2, 2, 200, 260, 256, 256, bf16).window(70),
      // Array masks read tile by tile with broadcast strides, combined with causal too.
      Make("tiled_bool2d", 1, 4, 2, 130, 200, 64, 64, f16).mask(MK::Bool2D).masked_rows(),
      Make("tiled_bool4d_gqa4", 2, 8, 2, 40, 150, 128, 128, bf16).mask(MK::Bool4D).masked_rows(),
      Make("tiled_bool_expanded", 2, 3, 3, 33, 140, 80, 80, f16).mask(MK::BoolExpanded).masked_rows(),
      Make("tiled_key_padding", 3, 4, 2, 50, 300, 128, 128, bf16).mask(MK::KeyPadding).masked_rows(),
      Make("tiled_additive_f32_mask", 1, 4, 2, 60, 130, 64, 64, f16).mask(MK::Additive).masked_rows(),
      Make("tiled_additive_f16_mask", 1, 4, 4, 45, 100, 96, 96, f16).mask(MK::Additive, f16).masked_rows(),
      Make("tiled_additive_bf16_mask_causal", 1, 4, 2, 90, 90, 128, 128, bf16)
          .mask(MK::Additive, bf16).causal().masked_rows(),
      Make("tiled_bool2d_strided_mask", 1, 2, 2, 40, 140, 64, 64, bf16).mask(MK::Bool2D)
          .mask_layout(L::StridedLast).masked_rows(),
      Make("tiled_bool4d_permuted_mask_window", 1, 4, 2, 64, 200, 64, 64, f16).mask(MK::Bool4D)
          .mask_layout(L::BLHD).window(50).masked_rows(),
      // Sinks: in the denominator only; rows fully masked stay zeros with sinks.
      Make("tiled_sinks_gqa", 1, 8, 2, 70, 200, 64, 64, bf16).sinks(bf16),
      Make("tiled_sinks_window_mqa", 1, 8, 1, 100, 300, 64, 64, bf16).sinks().window(40),
      Make("tiled_sinks_masked_rows", 1, 4, 2, 40, 90, 128, 128, f16).mask(MK::Additive).sinks(f16).masked_rows(),
      Make("tiled_sinks_strided", 1, 4, 1, 40, 120, 192, 128, bf16).sinks(f16).sinks_layout(L::StridedLast),
      // GQA 4:1 and MQA: rows of several heads in one block, a group that does not divide the
      // block (3 heads: rows 3 x 50), GQA whose rows fit one block.
      Make("tiled_gqa4_causal", 2, 8, 2, 100, 100, 128, 128, bf16).causal(),
      Make("tiled_mqa_group3", 1, 3, 1, 50, 129, 64, 64, f16).causal(),
      Make("tiled_mqa_group8_short", 1, 8, 1, 9, 77, 80, 80, bf16),
      // Lengths off the tile: 17 rows, 1 key, 129 and 1000 keys; several row blocks per head.
      Make("tiled_17x1", 1, 2, 2, 17, 1, 64, 64, f16),
      Make("tiled_33x129", 2, 2, 2, 33, 129, 128, 128, bf16),
      Make("tiled_1000_rows", 1, 1, 1, 1000, 300, 64, 64, f16).causal(),
      Make("tiled_keys_1000", 1, 2, 1, 20, 1000, 96, 96, bf16),
      // Layouts: [B, L, H, D] in and out (16-byte stores), padded rows with gaps (16-byte loads
      // and stores), a negative stride, and an output whose rows take element stores.
      Make("tiled_blhd", 2, 4, 2, 60, 130, 128, 128, bf16).layout(L::BLHD).out_layout(L::BLHD).causal(),
      Make("tiled_padded_wide", 1, 4, 2, 50, 100, 64, 64, f16).layout(L::PaddedWide).out_layout(L::PaddedWide),
      Make("tiled_reversed_l", 1, 2, 2, 40, 90, 64, 64, bf16).layout(L::ReversedL).out_layout(L::ReversedL),
      Make("tiled_strided_out", 1, 2, 2, 30, 80, 64, 64, f16).layout(L::BLHD).out_layout(L::StridedLast),
      Make("tiled_padded_out", 1, 2, 2, 30, 80, 80, 80, bf16).out_layout(L::Padded),
      // Not served: rows that are not whole 16-byte chunks go composed (forced: Unsupported).
      Make("tiled_strided_last_composed", 1, 2, 2, 40, 60, 64, 64, bf16).layout(L::StridedLast),
      Make("tiled_forced_strided_last", 1, 2, 2, 40, 60, 64, 64, bf16).layout(L::StridedLast).route(kTiled),
      Make("tiled_forced_f32", 1, 2, 2, 40, 60, 64, 64, DType::Float32).route(kTiled),
      Make("tiled_forced_d520", 1, 2, 2, 40, 60, 520, 520, bf16).route(kTiled),
      Make("tiled_forced_d100", 1, 2, 2, 40, 60, 100, 100, f16).route(kTiled),  // rows of 12.5 chunks
      // D 512 in two value parts (grid z = b x 2 + part): batches, GQA, masks, sinks, windows and
      // [B, L, H, D] rows all pass through both parts.
      Make("tiled_d512_batch3_gqa", 3, 4, 2, 70, 90, 512, 512, bf16),
      Make("tiled_d512_causal_lq_lt_lk_sinks", 1, 4, 1, 50, 140, 512, 512, f16).causal().sinks(),
      Make("tiled_d512_window_mask", 2, 2, 2, 60, 100, 512, 512, bf16).window(30).mask(MK::Bool4D).masked_rows(),
      Make("tiled_d512_blhd", 2, 2, 1, 40, 70, 512, 512, f16).layout(L::BLHD).out_layout(L::BLHD),
      // Scale: large logits, and a negative scale (the maxima are of the scaled scores).
      Make("tiled_large_logits", 1, 2, 2, 50, 200, 64, 64, f16).scale(1.0),
      Make("tiled_negative_scale", 1, 2, 2, 50, 200, 128, 128, bf16).scale(-0.2),
      // Forced: decode rows on the tiled kernel, with sinks; and no keys at all.
      Make("tiled_forced_decode", 2, 8, 2, 1, 300, 128, 128, bf16).sinks().route(kTiled),
      Make("tiled_forced_keypad_decode", 2, 4, 1, 2, 100, 64, 64, f16).mask(MK::KeyPadding).route(kTiled)
          .masked_rows(),
      Make("tiled_no_keys", 1, 4, 2, 30, 0, 64, 64, bf16).masked_rows(),
      Make("tiled_forced_no_keys_sinks", 1, 4, 2, 30, 0, 128, 128, f16).sinks().route(kTiled).masked_rows(),
      // The Hopper kernel's edges (D 64 / 128 / 256 = Dv; 128-row blocks, 128-key tiles, 64 at
      // D 256): rows and keys off both tiles, GQA 8:1 and 4:1 whose heads cross row blocks,
      // causal with Lq < Lk and Lq > Lk, windows that skip tiles at both ends, sinks, and
      // [B, L, H, D] strides read by the TMA maps. On other devices the mma.sync kernel.
      Make("wgmma_gqa8_causal_crossing", 1, 16, 2, 100, 300, 128, 128, bf16).causal(),
      Make("wgmma_gqa4_d64_tails", 2, 8, 2, 129, 385, 64, 64, f16),
      Make("wgmma_d256_causal_lq_lt_lk", 1, 4, 2, 130, 333, 256, 256, f16).causal(),
      Make("wgmma_causal_lq_gt_lk", 1, 2, 1, 300, 140, 128, 128, bf16).causal().masked_rows(),
      Make("wgmma_window200", 1, 4, 1, 500, 500, 128, 128, bf16).window(200),
      Make("wgmma_window_sinks_d64", 1, 8, 2, 300, 300, 64, 64, f16).window(129).sinks(),
      Make("wgmma_sinks_blhd_d256", 1, 4, 2, 100, 150, 256, 256, bf16).sinks().layout(L::BLHD).out_layout(L::BLHD),
      Make("wgmma_blhd_gqa8_d64", 2, 8, 1, 70, 260, 64, 64, f16).layout(L::BLHD).out_layout(L::BLHD).causal(),
      Make("wgmma_d64_long_keys", 1, 2, 1, 40, 2100, 64, 64, bf16),  // 192-key tiles from 2048 keys
      Make("wgmma_d64_short_keys_gqa4", 3, 8, 2, 70, 512, 64, 64, f16).sinks(),  // one consumer
      // Causal blocks launched with heads inner (the planner's schedule model picks it here on
      // both kernels: CudaTiledPlan.CausalLaunchOrderFollowsTheScheduleModel).
      Make("wgmma_causal_heads_inner_d64", 2, 32, 32, 512, 512, 64, 64, bf16).causal(),
      Make("wgmma_padded_wide_d128", 1, 4, 2, 50, 200, 128, 128, bf16).layout(L::PaddedWide).out_layout(L::PaddedWide),
      // Q and the output by TMA where their rows allow, else by the consumers' copies and stores:
      // Q with a negative stride (no TMA map) and the output by TMA, and the reverse.
      Make("wgmma_q_reversed_d64", 2, 8, 2, 90, 200, 64, 64, bf16).q_layout(L::ReversedL),
      Make("wgmma_out_padded_d128", 1, 8, 2, 70, 150, 128, 128, f16).out_layout(L::Padded).causal(),
      // Caps: the score tile (128 x 64 x 4 bytes) fits; below it prefill goes composed in blocks.
      Make("tiled_cap_fits", 1, 4, 2, 100, 200, 128, 128, bf16).cap(128 * 64 * 4),
      Make("tiled_cap_below_tile", 1, 4, 2, 100, 200, 128, 128, bf16).cap(128 * 64 * 4 - 4),
  };
  cases.insert(cases.end(), options.begin(), options.end());
  return cases;
}

std::vector<CaseSpec> tiled_cuda_long_cases() {
  if (!long_tier()) return {};
  return {
      Make("long_tiled_2048_causal_gqa4_bf16", 1, 8, 2, 2048, 2048, 128, 128, bf16).causal(),
      Make("long_tiled_4097x1000_f16", 1, 2, 1, 1000, 4097, 64, 64, f16),
      Make("long_tiled_d256_1000_causal", 1, 4, 2, 1000, 1000, 256, 256, bf16).causal(),
      Make("long_tiled_d192_dv128_window", 1, 8, 1, 1500, 1500, 192, 128, f16).window(256).sinks(),
      Make("long_tiled_keypad_batch8", 8, 12, 12, 129, 513, 64, 64, bf16).mask(MK::KeyPadding).masked_rows(),
      Make("long_tiled_blhd_causal", 2, 8, 8, 1000, 1000, 96, 96, f16).layout(L::BLHD).out_layout(L::BLHD).causal(),
  };
}

}  // namespace heed::test
