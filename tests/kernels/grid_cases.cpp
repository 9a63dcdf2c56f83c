#include "kernels/grid_cases.hpp"

#include "support/case_builder.hpp"

#include <string>

namespace heed::test {
namespace {

constexpr DType f32 = DType::Float32;
constexpr DType f16 = DType::Float16;
constexpr DType bf16 = DType::BFloat16;

using MK = MaskKind;
using L = Layout;
constexpr RouteChoice kVector = RouteChoice::Vector;
constexpr RouteChoice kTiled = RouteChoice::Tiled;
constexpr RouteChoice kComposed = RouteChoice::Composed;

// Every (dtype, route, mask) combination on one odd GQA shape with D != Dv: "plain" has the
// mask alone, "full" adds causal, a window and sinks (and the [B, L, H, D] layout).
void append_combinations(std::vector<CaseSpec>& cases, const std::string& prefix, std::int64_t batch,
                         std::int64_t q_heads, std::int64_t kv_heads, std::int64_t q_len, std::int64_t kv_len,
                         bool full_only) {
  const std::pair<RouteChoice, const char*> routes[] = {
      {RouteChoice::Auto, "auto"}, {kVector, "vector"}, {kTiled, "tiled"}, {kComposed, "composed"}};
  const MaskKind masks[] = {MK::None, MK::Bool2D, MK::Bool4D, MK::BoolExpanded, MK::Additive, MK::KeyPadding};
  for (DType dtype : {f32, f16, bf16}) {
    for (const auto& [route, route_name] : routes) {
      for (MaskKind mask : masks) {
        for (bool full : {false, true}) {
          if (full_only && !full) continue;
          const std::string name = prefix + "_" + short_name(dtype) + "_" + route_name + "_" + to_string(mask) +
                                   (full ? "_full" : "_plain");
          Make make(name, batch, q_heads, kv_heads, q_len, kv_len, 96, 64, dtype);
          make.mask(mask, dtype).route(route);
          if (full) make.sinks().window(kv_len - q_len / 2).layout(L::BLHD);
          if (mask != MK::None) make.masked_rows();
          cases.push_back(make);
        }
      }
    }
  }
}

// Oracle cost of the quick tier: each case at most ~1.3e8 double multiply-adds, most below
// 1e7, so the tier stays within seconds even under the sanitizers.
std::vector<CaseSpec> sizes_heads_groups() {
  return {
      // Odd sizes.
      Make("tiny_1x1", 1, 1, 1, 1, 1, 32),
      Make("odd_7x17", 2, 3, 3, 7, 17),
      Make("odd_17x7", 1, 2, 1, 17, 7),
      Make("odd_127x129", 1, 2, 2, 127, 129),
      Make("odd_129x127", 1, 2, 2, 129, 127),
      Make("odd_129x1000", 1, 1, 1, 129, 1000),
      Make("odd_1000x17", 1, 1, 1, 1000, 17),
      Make("square_1000_causal", 1, 1, 1, 1000, 1000).causal(),
      Make("decode_mqa_1000", 1, 8, 1, 1, 1000, 128),
      // Head sizes, D != Dv.
      Make("d32", 1, 2, 2, 33, 200, 32),
      Make("d96_dv64", 1, 2, 1, 40, 150, 96, 64),
      Make("d192_dv128", 1, 2, 2, 17, 129, 192, 128),
      Make("d256_composed", 1, 2, 2, 20, 100, 256),
      Make("d512", 1, 1, 1, 17, 130, 512),
      Make("d512_decode", 1, 4, 1, 1, 200, 512),
      Make("d80_dv112", 1, 2, 2, 24, 60, 80, 112),
      // GQA and MQA.
      Make("gqa_decode_bf16", 2, 32, 8, 1, 300, 128, 128, bf16),
      Make("gqa_prefill_causal", 1, 8, 2, 65, 200).causal(),
      Make("mqa_prefill", 2, 4, 1, 33, 140),
      Make("gqa_7q_vector", 1, 4, 2, 7, 129),
  };
}

std::vector<CaseSpec> masks_windows_sinks() {
  return {
      // Masks.
      Make("causal_square_129", 1, 2, 2, 129, 129).causal(),
      Make("causal_lq_gt_lk", 1, 2, 2, 50, 20).causal().masked_rows(),
      Make("causal_decode_3q", 1, 4, 1, 3, 300).causal(),
      Make("bool2d_tiled", 1, 2, 2, 37, 150).mask(MK::Bool2D).masked_rows(),
      Make("bool4d_composed", 2, 2, 1, 20, 60).mask(MK::Bool4D).masked_rows(),
      Make("bool_expanded", 2, 3, 3, 17, 140).mask(MK::BoolExpanded).masked_rows(),
      Make("additive_tiled", 1, 2, 2, 29, 131).mask(MK::Additive).masked_rows(),
      Make("additive_f16_composed", 1, 2, 2, 30, 64, 64, 64, f16).mask(MK::Additive, f16).masked_rows(),
      Make("additive_bf16_decode", 1, 8, 2, 1, 250, 64, 64, bf16).mask(MK::Additive, bf16),
      Make("key_padding_vector", 3, 2, 2, 7, 100).mask(MK::KeyPadding).masked_rows(),
      Make("key_padding_tiled", 2, 4, 2, 40, 300).mask(MK::KeyPadding).masked_rows(),
      Make("causal_and_bool", 1, 2, 2, 40, 140).causal().mask(MK::Bool2D).masked_rows(),
      // Sliding windows.
      Make("window16_tiled", 1, 2, 2, 100, 300).window(16),
      Make("window1_composed", 1, 2, 1, 20, 50).window(1),
      Make("window100_decode", 1, 8, 2, 1, 1000).window(100),
      Make("window5_lq_gt_lk", 1, 2, 2, 40, 30).window(5).masked_rows(),
      // Sinks.
      Make("sinks_tiled", 1, 4, 2, 33, 150).sinks(),
      Make("sinks_decode_bf16", 1, 8, 1, 1, 600, 64, 64, bf16).sinks(bf16),
      Make("sinks_window_bf16", 1, 8, 2, 64, 200, 64, 64, bf16).window(32).sinks(),
      Make("sinks_masked_rows_composed", 1, 2, 2, 20, 40).mask(MK::Additive).sinks().masked_rows(),
      Make("sinks_causal_lq_gt_lk_f16", 1, 2, 2, 30, 12, 64, 64, f16).causal().sinks(f16).masked_rows(),
  };
}

std::vector<CaseSpec> caps_layouts_dtypes() {
  return {
      // Score caps (Auto).
      Make("cap_blocks_16rows", 1, 2, 2, 200, 100).cap(100 * 4 * 16),
      Make("cap_blocks_odd", 1, 3, 3, 127, 127).cap(127 * 4 * 10 + 3),
      Make("cap_blocks_f16_causal", 1, 2, 2, 129, 128, 64, 64, f16).causal().cap(128 * 4 * 33),
      Make("cap_blocks_short_keys", 1, 2, 2, 200, 16).cap(16 * 4 * 16),
      Make("cap_blocks_short_keys_odd_bf16", 1, 3, 3, 127, 13, 64, 64, bf16).causal().cap(13 * 4 * 10 + 3),
      Make("cap_tiny_tiled", 1, 2, 2, 64, 300).cap(256),
      Make("cap_below_row", 1, 2, 2, 40, 50).cap(100),
      Make("cap_vector_chunk", 1, 8, 1, 1, 300).cap(8 * 32 * 4),  // 32 of its 64-key chunk
      // Strided inputs and outputs.
      Make("blhd_tiled", 2, 4, 2, 33, 140).layout(L::BLHD).out_layout(L::BLHD),
      Make("blhd_decode", 2, 8, 2, 1, 500).layout(L::BLHD).out_layout(L::BLHD),
      Make("blhd_composed_bf16", 1, 4, 2, 30, 90, 64, 64, bf16).layout(L::BLHD),
      Make("padded_composed", 1, 2, 2, 17, 60).layout(L::Padded).out_layout(L::Padded),
      Make("padded_f16_tiled", 1, 2, 2, 20, 200, 64, 64, f16).layout(L::Padded).out_layout(L::Padded),
      Make("strided_last_tiled", 1, 2, 1, 9, 200).layout(L::StridedLast),
      Make("strided_last_composed", 1, 2, 2, 40, 100).layout(L::StridedLast).out_layout(L::StridedLast),
      Make("reversed_l_tiled", 1, 2, 2, 20, 130).layout(L::ReversedL).out_layout(L::ReversedL),
      Make("reversed_l_decode_sinks", 2, 8, 2, 1, 300).layout(L::ReversedL).sinks().sinks_layout(L::StridedLast),
      Make("padded_bool4d_mask", 2, 2, 2, 20, 140).mask(MK::Bool4D).mask_layout(L::Padded).masked_rows(),
      Make("permuted_additive_mask", 1, 4, 2, 21, 90).mask(MK::Additive).mask_layout(L::BLHD).masked_rows(),
      Make("strided_bool2d_mask_vector", 1, 4, 2, 3, 200).mask(MK::Bool2D).mask_layout(L::StridedLast),
      Make("strided_sinks_tiled", 1, 4, 1, 40, 200, 64, 64, f16).sinks(bf16).sinks_layout(L::StridedLast),
      // dtypes and large logits.
      Make("f16_tiled_causal", 1, 2, 2, 65, 257, 128, 128, f16).causal(),
      Make("bf16_composed_additive", 1, 4, 4, 30, 100, 64, 64, bf16).mask(MK::Additive, bf16).masked_rows(),
      Make("f16_decode_gqa", 1, 16, 2, 1, 700, 64, 64, f16),
      Make("large_logits_tiled", 1, 2, 2, 33, 300).scale(1.0),
      Make("large_logits_decode", 1, 4, 1, 1, 700).scale(1.0),
      Make("large_logits_composed_f16", 1, 2, 2, 40, 100, 64, 64, f16).scale(1.0),
      // A negative scale, large enough that taking the smallest scaled score for the largest
      // would overflow the weights: the largest comes from the smallest score.
      Make("negative_scale_tiled_bf16", 1, 4, 2, 40, 300, 64, 64, bf16).causal().scale(-12.0),
      Make("negative_scale_tiled_f16", 1, 2, 2, 33, 100, 64, 64, f16).scale(-12.0),
      Make("negative_scale_tiled_d128", 1, 2, 1, 40, 90, 128, 128).scale(-12.0),
      // Several query blocks per key head, each reading every key tile, the last one partial.
      Make("blocks_mqa_f16_causal", 1, 8, 1, 160, 300, 64, 64, f16).causal(),
      Make("blocks_strided_f32", 1, 8, 2, 260, 200, 64, 64).layout(L::StridedLast).causal(),
      Make("blocks_bf16_d128_dv96", 1, 4, 1, 300, 257, 128, 96, bf16).causal(),
      Make("blocks_f32_sinks", 2, 8, 2, 257, 270).sinks(),
      // 512 rows per tiled task on the FMA kernels where the tiles fit L2 and the tasks are at
      // least 4 per thread (so on 2 threads, as in CI): a whole sequence; 128 positions of 4 heads.
      Make("rows512_f32_d32", 4, 2, 2, 512, 512, 32, 32),
      Make("rows512_f16_gqa_causal", 2, 8, 2, 300, 300, 64, 64, f16).causal(),
  };
}

std::vector<CaseSpec> forced_routes_and_empty() {
  return {
      // Forced routes over masks, sinks and windows.
      Make("force_vector_bool", 1, 2, 1, 20, 150).mask(MK::Bool2D).route(kVector).masked_rows(),
      Make("force_vector_window_sinks", 1, 4, 2, 9, 300).window(50).sinks().route(kVector),
      Make("force_vector_additive", 1, 2, 2, 12, 90).mask(MK::Additive).route(kVector).masked_rows(),
      Make("force_vector_lq_gt_lk", 1, 2, 1, 30, 10).causal().route(kVector).masked_rows(),
      Make("force_vector_keypad_bf16", 2, 4, 1, 2, 700, 64, 64, bf16).mask(MK::KeyPadding).route(kVector).masked_rows(),
      Make("force_vector_strided_f16", 1, 2, 2, 5, 600, 64, 64, f16).layout(L::StridedLast).route(kVector),
      Make("force_tiled_decode_sinks", 1, 8, 2, 1, 300).sinks().route(kTiled),
      Make("force_tiled_bool4d", 2, 2, 2, 17, 40).mask(MK::Bool4D).route(kTiled).masked_rows(),
      Make("force_tiled_additive_f16", 1, 2, 1, 20, 70, 64, 64, f16).mask(MK::Additive).route(kTiled).masked_rows(),
      Make("force_tiled_window7", 1, 2, 2, 50, 90).window(7).route(kTiled),
      Make("force_tiled_keypad_sinks", 2, 2, 2, 30, 80).mask(MK::KeyPadding).sinks().route(kTiled).masked_rows(),
      Make("force_tiled_bool_expanded_blhd", 2, 2, 1, 19, 130).mask(MK::BoolExpanded).layout(L::BLHD).route(kTiled).masked_rows(),
      Make("force_composed_long", 1, 2, 2, 65, 400).causal().route(kComposed),
      Make("force_composed_window_sinks", 1, 4, 1, 30, 300).window(20).sinks().route(kComposed),
      Make("force_composed_decode_bool", 1, 8, 8, 1, 100).mask(MK::Bool2D).route(kComposed),
      Make("force_composed_blocks_causal", 1, 2, 2, 100, 300).causal().cap(300 * 4 * 7).route(kComposed),
      Make("force_composed_blocks_additive_f16", 1, 2, 2, 45, 200, 64, 64, f16).mask(MK::Additive)
          .layout(L::BLHD).cap(200 * 4 * 9).route(kComposed).masked_rows(),
      Make("force_composed_keypad_bf16", 3, 2, 1, 25, 150, 64, 64, bf16).mask(MK::KeyPadding).route(kComposed).masked_rows(),
      // Empty sizes: no write (B, Hq, Lq or Dv = 0), zeros (Lk = 0).
      Make("empty_batch", 0, 2, 2, 7, 17),
      Make("empty_heads", 1, 0, 2, 7, 17),
      Make("empty_heads_and_kv_heads", 2, 0, 0, 7, 17),
      Make("empty_q_len", 2, 2, 1, 0, 17).causal(),
      Make("empty_value_dim", 1, 2, 2, 7, 17, 64, 0),
      Make("empty_kv_len", 1, 2, 2, 7, 0).masked_rows(),
      Make("empty_kv_len_sinks_f16", 1, 4, 2, 7, 0, 64, 64, f16).sinks().masked_rows(),
      Make("empty_kv_len_decode", 2, 8, 2, 1, 0).masked_rows(),
      Make("empty_kv_len_forced_tiled", 1, 2, 2, 20, 0).route(kTiled).masked_rows(),
      Make("empty_kv_len_forced_composed", 1, 2, 2, 20, 0).route(kComposed).masked_rows(),
  };
}

// Logit softcap on every dtype and route, with a window, sinks and fully masked rows. q and k
// spread wide (raw scaled scores over ±40), so capped scores span about 2c: the regime where the
// cap decides the softmax.
std::vector<CaseSpec> softcap_cases() {
  std::vector<CaseSpec> cases;
  const std::pair<RouteChoice, const char*> routes[] = {
      {RouteChoice::Auto, "auto"}, {kVector, "vector"}, {kTiled, "tiled"}, {kComposed, "composed"}};
  for (DType dtype : {f32, f16, bf16}) {
    const std::string dt = short_name(dtype);
    for (const auto& [route, route_name] : routes) {
      cases.push_back(Make("softcap_" + dt + "_" + route_name, 1, 4, 2, 33, 150, 64, 64, dtype)
                          .softcap(30).stddev(4).window(100).sinks().mask(MK::Bool2D).route(route).masked_rows());
      cases.push_back(Make("softcap_decode_" + dt + "_" + route_name, 2, 8, 2, 1, 300, 128, 128, dtype)
                          .softcap(50).stddev(4).route(route));
    }
    // The prefill kernels' own shapes (on Hopper the wgmma kernel): no array mask.
    cases.push_back(Make("softcap_prefill_" + dt, 1, 4, 2, 200, 512, 128, 128, dtype).softcap(20).stddev(4).causal());
    cases.push_back(Make("softcap_prefill_d64_" + dt, 2, 4, 4, 130, 384, 64, 64, dtype).softcap(50).stddev(6));
    // Scores far inside the cap (tanh near its linear part), as most of a capped model's are.
    cases.push_back(Make("softcap_prefill_small_" + dt, 1, 4, 2, 200, 512, 128, 128, dtype).softcap(50).causal());
  }
  // A NaN in q makes its row NaN, never a row of zeros, on every route and dtype; the other
  // rows, and rows a mask hides, keep their values.
  for (DType dtype : {f32, f16, bf16}) {
    const std::string dt = short_name(dtype);
    for (const auto& [route, route_name] : routes) {
      cases.push_back(Make("nan_q_" + dt + "_" + route_name, 1, 2, 1, 12, 70, 64, 64, dtype)
                          .nan_query().mask(MK::Bool2D).sinks().route(route).masked_rows());
      cases.push_back(Make("nan_q_decode_" + dt + "_" + route_name, 1, 4, 1, 1, 40, 64, 64, dtype)
                          .nan_query().route(route));
    }
  }
  cases.push_back(Make("nan_q_issue_repro", 1, 1, 1, 1, 3, 4).nan_query());
  cases.push_back(Make("nan_q_prefill_bf16", 1, 4, 2, 200, 512, 128, 128, bf16).nan_query().causal());
  // Scores within about 4·c of each other at a small cap: every weight is far from underflow.
  cases.push_back(Make("softcap_small_cap_bf16", 1, 2, 2, 65, 257, 128, 128, bf16).softcap(2).stddev(6).causal());
  return cases;
}

// Every head size up to 256 that is a multiple of 8, and 512, on the tiled and vector routes
// (the CPU kernels take D at run time; the CUDA kernels round it up to a compiled size): prefill
// with GQA and a partial last key tile, decode with a group of 8 rows (the CUDA tensor-core
// kernels' threshold). The dtypes take turns; the shapes stay small for the oracle.
std::vector<CaseSpec> head_sizes() {
  std::vector<CaseSpec> cases;
  const DType dtypes[] = {f32, f16, bf16};
  std::vector<std::int64_t> sizes;
  for (std::int64_t d = 8; d <= 256; d += 8) sizes.push_back(d);
  sizes.push_back(512);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t d = sizes[i];
    const DType tiled_dtype = dtypes[i % 3], vector_dtype = dtypes[(i + 1) % 3];
    const std::string name = "head_size_" + std::to_string(d);
    cases.push_back(Make(name + "_tiled_" + short_name(tiled_dtype), 1, 4, 2, 20, 45, d, d, tiled_dtype).route(kTiled));
    cases.push_back(
        Make(name + "_vector_" + short_name(vector_dtype), 1, 16, 2, 1, 70, d, d, vector_dtype).route(kVector));
  }
  return cases;
}

std::vector<CaseSpec> make_quick() {
  std::vector<CaseSpec> cases;
  for (auto part : {sizes_heads_groups, masks_windows_sinks, caps_layouts_dtypes, forced_routes_and_empty,
                    softcap_cases, head_sizes}) {
    const std::vector<CaseSpec> more = part();
    cases.insert(cases.end(), more.begin(), more.end());
  }
  append_combinations(cases, "combo", 2, 6, 2, 37, 140, /*full_only=*/false);
  return cases;
}

// The long tier: the sizes of design.md §7 (4097 included), bigger batches and heads, and
// every (dtype, route, mask) combination on an odd shape.
std::vector<CaseSpec> make_long() {
  std::vector<CaseSpec> cases = {
      Make("long_prefill_4097_causal", 1, 2, 1, 4097, 4097).causal(),
      Make("long_decode_4097_gqa", 4, 32, 8, 1, 4097, 128),
      Make("long_prefill_1000_d128_bf16", 1, 4, 2, 1000, 1000, 128, 128, bf16).causal(),
      Make("long_window128_sinks_bf16", 1, 16, 2, 1000, 4097, 64, 64, bf16).window(128).sinks(),
      Make("long_d512_1000", 1, 2, 2, 1000, 1000, 512),
      Make("long_cap_blocks_4097", 1, 2, 2, 4097, 128).cap(128 * 4 * 100),
      Make("long_force_composed_blocks", 1, 4, 2, 1000, 4097).causal().cap(4097 * 4 * 50).route(kComposed),
      Make("long_blhd_f16", 2, 8, 8, 1000, 1000, 64, 64, f16).layout(L::BLHD).out_layout(L::BLHD).causal(),
      Make("long_keypad_batch8", 8, 12, 12, 129, 513).mask(MK::KeyPadding).masked_rows(),
  };
  append_combinations(cases, "long_combo", 2, 6, 2, 127, 257, /*full_only=*/true);
  return cases;
}

}  // namespace

const std::vector<CaseSpec>& quick_cases() {
  static const std::vector<CaseSpec> cases = make_quick();
  return cases;
}

const std::vector<CaseSpec>& long_cases() {
  static const std::vector<CaseSpec> cases = make_long();
  return cases;
}

std::vector<CaseSpec> long_tier_cases() { return long_tier() ? long_cases() : std::vector<CaseSpec>{}; }

std::vector<CaseSpec> tier_cases() {
  std::vector<CaseSpec> cases = quick_cases();
  if (long_tier()) cases.insert(cases.end(), long_cases().begin(), long_cases().end());
  return cases;
}

}  // namespace heed::test
