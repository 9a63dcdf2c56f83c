// The tiled route on AMX tiles (bfloat16, float16 and float32 inputs), or for bfloat16 inputs
// on AVX512-BF16 dot products where there are no tiles (same layouts). Two passes:
//   pack:  K and V of every (batch, key head) into tile order, once per call (each key tile
//          is then read by every query block without being converted again);
//   tiled: per (batch, key head, block of query positions), the same online softmax as the
//          AVX-512 kernel (its helpers are shared), with S = Q·Kᵀ and O += P·V on the tiles,
//          float32 accumulation. bfloat16: q and k exact, P rounded to bfloat16. float16: every
//          operand x is split exactly into two bfloat16 parts x = x0 + x1 (a float16 has 11
//          significant bits), and each product takes three tile products, x0·y0 + x0·y1 +
//          x1·y0 (x1·y1 is below 2^-16 of it); P is split the same way (16 bits of it kept).
//          float32: three parts x = x0 + x1 + x2 (8 significant bits each; what is left is
//          below 2^-26 |x|), and the six products xi·yj with i + j <= 2 (the three dropped are
//          below 2^-25 of the product, under float32's own rounding of 2^-24); P as well.
// Compiled for AVX-512 with AVX512-BF16 and AMX; the dispatch point runs it only for plans made
// where cpu_info().isa is Amx (tiles) or Avx512Bf16 (dot products).

#define HEED_ISA amx
#define HEED_KERNEL_HELPERS_ONLY
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cpu/kernels_impl.hpp"

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <type_traits>

#include "cpu/amx_tiles.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {
namespace {

using Bits = std::uint16_t;  // bfloat16 storage

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// bfloat16 bits of 16 floats, rounded to nearest even (AVX512-BF16: NaN stays NaN, float32
// denormals become zero).
[[gnu::always_inline]] inline __m256i to_bf16(__m512 x) { return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x)); }

// Up to three bfloat16 parts of 16 values, x = part[0] + part[1] + ...: each part the
// bfloat16 nearest to what the parts before it leave (the subtractions are exact in float32).
inline constexpr int kMaxParts = 3;
inline constexpr int kMaxProducts = kMaxParts * (kMaxParts + 1) / 2;  // the pairs i + j < parts
struct Parts {
  __m256i part[kMaxParts];
};
[[gnu::always_inline]] inline __m512 widen_bf16(__m256i bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
[[gnu::always_inline]] inline Parts split(__m512 x, std::int64_t parts) {
  Parts out{};
  for (std::int64_t i = 0; i < parts; ++i) {
    out.part[i] = to_bf16(x);
    if (i + 1 < parts) x = _mm512_sub_ps(x, widen_bf16(out.part[i]));
  }
  return out;
}
// Values [0, width) of a 16-bit row (element stride `stride`), zeros after; width <= 16.
[[gnu::always_inline]] inline __m256i load16(const Bits* row, std::int64_t stride, std::int64_t width) {
  if (width <= 0) return _mm256_setzero_si256();
  if (stride == 1) return _mm256_maskz_loadu_epi16(static_cast<__mmask16>(width >= 16 ? 0xffffu : (1u << width) - 1), row);
  alignas(32) Bits values[16] = {};
  for (std::int64_t e = 0; e < std::min<std::int64_t>(width, 16); ++e) values[e] = row[e * stride];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(values));
}
// The same for float32 rows.
[[gnu::always_inline]] inline __m512 load16(const float* row, std::int64_t stride, std::int64_t width) {
  if (width <= 0) return _mm512_setzero_ps();
  if (stride == 1) return _mm512_maskz_loadu_ps(static_cast<__mmask16>(width >= 16 ? 0xffffu : (1u << width) - 1), row);
  alignas(64) float values[16] = {};
  for (std::int64_t e = 0; e < std::min<std::int64_t>(width, 16); ++e) values[e] = row[e * stride];
  return _mm512_load_ps(values);
}
// Values [offset, offset + width) of the caller's q, k or v (element stride `stride`) as
// `parts` bfloat16 parts: bfloat16 is its own single part; float16 widens exactly to float32
// and splits in two; float32 splits in three.
[[gnu::always_inline]] inline Parts load_parts(const void* base, DType dtype, std::int64_t offset,
                                               std::int64_t stride, std::int64_t width, std::int64_t parts) {
  if (dtype == DType::Float32) return split(load16(static_cast<const float*>(base) + offset, stride, width), parts);
  const __m256i raw = load16(static_cast<const Bits*>(base) + offset, stride, width);
  if (dtype == DType::BFloat16) return {{raw, _mm256_setzero_si256(), _mm256_setzero_si256()}};
  return split(_mm512_cvtph_ps(raw), parts);
}

// 2^x on every lane for softmax weights (x <= 0), as accurate as the weights are kept: one
// bfloat16 part (8 significant bits) takes a degree-3 polynomial for 2^f (relative error within
// 1.04e-4, 19 times below the part's own rounding), two parts (16 bits, float16) degree 4
// (3.5e-6), three (float32) the full degree 5 (1.8e-7). Each polynomial has p(0) = 1 and
// p(1) = 2 exactly, so weights stay continuous across integers. Else as microkernel::exp2: f = t
// - floor(t) by vreduceps, 2^floor(t) by vscalefps; 0 for -inf, NaN kept.
template <int kParts>
[[gnu::always_inline]] inline __m512 exp2_weights(__m512 t) {
  if constexpr (kParts >= 3) {
    return microkernel::exp2(t);
  } else {
    const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 poly;
    if constexpr (kParts == 1) {
      poly = _mm512_set1_ps(7.826796919107437e-2f);
      poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.26307675242424e-1f));
      poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.954243779182434e-1f));
    } else {
      poly = _mm512_set1_ps(1.3555747456848621e-2f);
      poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(5.203237012028694e-2f));
      poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.413797676563263e-1f));
      poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.930321455001831e-1f));
    }
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(poly, t);
  }
}

float exp2_weight(float x) { return _mm512_cvtss_f32(microkernel::exp2(_mm512_set1_ps(x))); }

// Calls f(std::integral_constant<int, parts>{}) for parts 1, 2 or 3 (the weights' bfloat16
// parts), so that the softmax is compiled once per part count.
template <typename F>
void with_parts(std::int64_t parts, F&& f) {
  if (parts == 1) return f(std::integral_constant<int, 1>{});
  if (parts == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 3>{});
}

// Up to three bfloat16 parts of 32 floats (lo: the first 16), as split does for 16: the parts
// of both halves rounded by one vcvtne2ps2bf16.
struct Parts32 {
  __m512i part[kMaxParts];
};
template <int kParts>
[[gnu::always_inline]] inline Parts32 split32(__m512 lo, __m512 hi) {
  Parts32 out{};
  for (int i = 0; i < kParts; ++i) {
    out.part[i] = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    if (i + 1 < kParts) {
      lo = _mm512_sub_ps(lo, widen_bf16(_mm512_castsi512_si256(out.part[i])));
      hi = _mm512_sub_ps(hi, widen_bf16(_mm512_extracti64x4_epi64(out.part[i], 1)));
    }
  }
  return out;
}

// w[j] = 0 for j in [from, to) in every part.
void zero_weights(Bits* w, std::int64_t w_part, std::int64_t parts, std::int64_t from, std::int64_t to) {
  if (from >= to) return;
  for (std::int64_t i = 0; i < parts; ++i) std::memset(w + i * w_part + from, 0, static_cast<std::size_t>(to - from) * sizeof(Bits));
}

// The online-softmax step of one row on a tile of scores s[0..count) (raw q·k), fused for
// the tiles: one pass for the tile's max of s·scale, one for the weights 2^(s·c - max) with
// their sum, written straight to bfloat16 w[0..depth) (zeros outside the row's keys). Row
// maxima are kept in log2 units. Returns false when the row sees no key of the tile.
// With more than one part (float16, float32 inputs), the weights are split as the operands are;
// part i of row r's weights is at w + i * w_part.
template <int kParts>
bool softmax_to_bf16(const Call& p, const Workspace& t, const Sequence& seq, std::int64_t row, RowAt at,
                     std::int64_t key, std::int64_t count, float* s, Bits* w, std::int64_t w_part, std::int64_t depth,
                     std::int64_t columns) {
  const KeyRange range = score::keys_for_row(p, seq, at.position);
  const std::int64_t first = std::clamp<std::int64_t>(range.begin - key, 0, count);
  const std::int64_t last = std::clamp<std::int64_t>(range.end - key, 0, count);
  if (first >= last) {
    zero_weights(w, w_part, kParts, 0, depth);
    return false;
  }
  const score::Transform transform = score::transform(p, 1.0f);
  float c = transform.dot_scale * microkernel::kLog2e;
  if (!transform.linear() || p.mask.kind != MaskKind::None) {  // transformed and masked, natural units
    for (std::int64_t j = first; j < last; ++j) s[j] *= transform.dot_scale;
    mask_scores(p, transform, seq, at.head, at.position, key + first, last - first, s + first);
    c = microkernel::kLog2e;
  }
  // The largest s·c: where c > 0, the largest s times c (s·c rounds monotonically), without a
  // multiplication per score.
  const __m512 scale = _mm512_set1_ps(c);
  const auto largest = [&](auto scaled) {
    const auto value = [&](__m512 x) { return decltype(scaled)::value ? _mm512_mul_ps(x, scale) : x; };
    __m512 best[2] = {_mm512_set1_ps(kNegInf), _mm512_set1_ps(kNegInf)};
    std::int64_t j = first;
    for (; j + 32 <= last; j += 32) {
      best[0] = _mm512_max_ps(best[0], value(_mm512_loadu_ps(s + j)));
      best[1] = _mm512_max_ps(best[1], value(_mm512_loadu_ps(s + j + 16)));
    }
    for (; j < last; j += 16) {
      const __mmask16 tail = static_cast<__mmask16>(last - j >= 16 ? 0xffffu : (1u << (last - j)) - 1);
      best[0] = _mm512_mask_max_ps(best[0], tail, best[0], value(_mm512_maskz_loadu_ps(tail, s + j)));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(best[0], best[1]));
  };
  const float best_s = c > 0.0f ? largest(std::false_type{}) : largest(std::true_type{});
  const float tile_max = c > 0.0f && best_s != kNegInf ? best_s * c : best_s;
  if (tile_max == kNegInf) {
    // Every visible score is -inf or NaN: a NaN (from NaN inputs) makes the row NaN for good.
    for (std::int64_t j = first; j < last; ++j) {
      if (s[j] != s[j]) t.row_sum[row] = s[j];
    }
    zero_weights(w, w_part, kParts, 0, depth);
    return false;
  }
  const float old_max = t.row_max[row];
  const float new_max = old_max > tile_max ? old_max : tile_max;
  const float correction = exp2_weight(old_max - new_max);
  const __m512 shift = _mm512_set1_ps(-new_max);
  zero_weights(w, w_part, kParts, 0, first);
  zero_weights(w, w_part, kParts, last, depth);
  __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  std::int64_t j = first;
  for (; j + 32 <= last; j += 32) {
    const __m512 lo = exp2_weights<kParts>(_mm512_fmadd_ps(_mm512_loadu_ps(s + j), scale, shift));
    const __m512 hi = exp2_weights<kParts>(_mm512_fmadd_ps(_mm512_loadu_ps(s + j + 16), scale, shift));
    sum[0] = _mm512_add_ps(sum[0], lo);
    sum[1] = _mm512_add_ps(sum[1], hi);
    const Parts32 split_weights = split32<kParts>(lo, hi);
    for (int i = 0; i < kParts; ++i) _mm512_storeu_si512(w + i * w_part + j, split_weights.part[i]);
  }
  for (; j < last; j += 16) {
    const __mmask16 tail = static_cast<__mmask16>(last - j >= 16 ? 0xffffu : (1u << (last - j)) - 1);
    const __m512 weights = exp2_weights<kParts>(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, s + j), scale, shift));
    sum[0] = _mm512_mask_add_ps(sum[0], tail, sum[0], weights);
    const Parts split_weights = split(weights, kParts);
    for (int i = 0; i < kParts; ++i) _mm256_mask_storeu_epi16(w + i * w_part + j, tail, split_weights.part[i]);
  }
  t.row_sum[row] = t.row_sum[row] * correction + _mm512_reduce_add_ps(_mm512_add_ps(sum[0], sum[1]));
  t.row_max[row] = new_max;
  if (correction != 1.0f) {
    float* acc = t.accum + row * t.accum_stride;
    const __m512 rescale = _mm512_set1_ps(correction);
    for (std::int64_t d = 0; d < columns; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), rescale));
  }
  return true;
}

// acc + Σ a·b over the 16 bfloat16 pairs of each lane (vdpbf16ps), the pairs held as integer
// vectors and cast to __m512bh only here. Not std::bit_cast: at -O0 that is a call, and clang
// 16 to 19 lose a call's bfloat16-vector result used in another basic block (x86 FastISel; the
// -fsanitize=alignment checks before a store make one), which gave zero / NaN rows.
[[gnu::always_inline]] inline __m512 dot_pairs(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// The same products as amx::gemm (same operand layouts) on AVX512-BF16 dot products, for CPUs
// without tiles: a register block of R rows × P vectors of 16 columns; each vdpbf16ps adds a
// broadcast pair of A (two k) times 16 pairs of B.
template <int R, int P, bool Accumulate>
[[gnu::always_inline]] inline void dot_block(const amx::Product* products, int count, std::int64_t lda,
                                             std::int64_t ldb, std::int64_t i, std::int64_t j, std::byte* c,
                                             std::int64_t ldc) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < P; ++q) {
      acc[r][q] = Accumulate ? _mm512_loadu_ps(reinterpret_cast<const float*>(c + (i + r) * ldc + (j + 16 * q) * 4))
                             : _mm512_setzero_ps();
    }
  }
  for (int product = 0; product < count; ++product) {
    const std::byte* a = products[product].a + i * lda;
    const std::byte* b = products[product].b + j * 4;
    const std::int64_t pairs = products[product].steps * amx::kTileDepth / 2;
    for (std::int64_t k = 0; k < pairs; ++k) {
      __m512i columns[P];
      for (int q = 0; q < P; ++q) columns[q] = _mm512_loadu_si512(b + k * ldb + q * 64);
      for (int r = 0; r < R; ++r) {
        std::int32_t word;
        std::memcpy(&word, a + r * lda + k * 4, sizeof(word));
        const __m512i pair = _mm512_set1_epi32(word);
        for (int q = 0; q < P; ++q) acc[r][q] = dot_pairs(acc[r][q], pair, columns[q]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < P; ++q) _mm512_storeu_ps(reinterpret_cast<float*>(c + (i + r) * ldc + (j + 16 * q) * 4), acc[r][q]);
  }
}

template <bool Accumulate>
void dot_gemm(const amx::Product* products, int count, std::int64_t lda, std::int64_t ldb, std::byte* c,
              std::int64_t ldc, std::int64_t m, std::int64_t n) {
  for (std::int64_t i = 0; i < m; i += 8) {  // m is a multiple of 16
    std::int64_t j = 0;
    for (; j + 32 <= n; j += 32) dot_block<8, 2, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
    for (; j < n; j += 16) dot_block<8, 1, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
  }
}

template <bool Accumulate>
void product(bool tiles, const amx::Product* products, int count, std::int64_t lda, std::int64_t ldb, std::byte* c,
             std::int64_t ldc, std::int64_t m, std::int64_t n) {
  if (tiles) return amx::gemm<Accumulate>(products, count, lda, ldb, c, ldc, m, n);
  dot_gemm<Accumulate>(products, count, lda, ldb, c, ldc, m, n);
}

struct Packed {
  const plan::CpuRoute::Amx& amx;
  std::byte* base;  // all tiles; under PerHead one (batch, key head)'s; under PerTask one worker's slot

  // Kᵀ of tile `tile` of (b, kv_head), part by part: depth/2 rows of `keys` pairs (d, d+1);
  // then V, part by part: keys/2 rows of `columns` pairs (key, key+1).
  std::uint32_t* k(const Call& p, const Sequence& seq, std::int64_t kv_head, std::int64_t tile,
                   std::int64_t part = 0) const {
    using Packing = plan::CpuRoute::Amx::Packing;
    const std::int64_t index =
        amx.packing == Packing::PerTask   ? 0
        : amx.packing == Packing::PerHead ? tile
        : amx.head_tiles > 0              ? kv_head * amx.head_tiles + seq.k_row / amx.keys + seq.index + tile
                                          : (seq.index * p.kv_heads + kv_head) * amx.key_tiles + tile;
    return reinterpret_cast<std::uint32_t*>(base + static_cast<std::size_t>(index) * amx.tile_bytes) +
           part * k_words();
  }
  std::uint32_t* v(const Call& p, const Sequence& seq, std::int64_t kv_head, std::int64_t tile,
                   std::int64_t part = 0) const {
    return k(p, seq, kv_head, tile, amx.parts) + part * amx.keys / 2 * amx.columns;
  }
  std::int64_t k_words() const { return amx.depth / 2 * amx.keys; }
};

// 16 × 16 words transposed: rows[r] holds words (r, 0..15) on entry and (0..15, r) on exit.
[[gnu::always_inline]] inline void transpose_words(__m512i rows[16]) {
  __m512i t[16];
  for (int r = 0; r < 16; r += 2) {
    t[r] = _mm512_unpacklo_epi32(rows[r], rows[r + 1]);
    t[r + 1] = _mm512_unpackhi_epi32(rows[r], rows[r + 1]);
  }
  for (int r = 0; r < 16; r += 4) {
    rows[r] = _mm512_unpacklo_epi64(t[r], t[r + 2]);
    rows[r + 1] = _mm512_unpackhi_epi64(t[r], t[r + 2]);
    rows[r + 2] = _mm512_unpacklo_epi64(t[r + 1], t[r + 3]);
    rows[r + 3] = _mm512_unpackhi_epi64(t[r + 1], t[r + 3]);
  }
  // rows[4q + k] now holds, in each 128-bit lane L, words (4L + 0..3 of the 4 rows 4q..4q+3) at
  // column 4L + k; the lanes are gathered across the four groups.
  for (int k = 0; k < 4; ++k) {
    const __m512i a = _mm512_shuffle_i32x4(rows[k], rows[4 + k], 0x88);       // lanes 0, 2 of each
    const __m512i b = _mm512_shuffle_i32x4(rows[k], rows[4 + k], 0xdd);       // lanes 1, 3
    const __m512i c = _mm512_shuffle_i32x4(rows[8 + k], rows[12 + k], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(rows[8 + k], rows[12 + k], 0xdd);
    t[k] = _mm512_shuffle_i32x4(a, c, 0x88);       // lane 0 of every group: column k
    t[8 + k] = _mm512_shuffle_i32x4(a, c, 0xdd);   // lane 2: column 8 + k
    t[4 + k] = _mm512_shuffle_i32x4(b, d, 0x88);   // lane 1: column 4 + k
    t[12 + k] = _mm512_shuffle_i32x4(b, d, 0xdd);  // lane 3: column 12 + k
  }
  for (int r = 0; r < 16; ++r) rows[r] = t[r];
}

// Packs keys [tile * keys, +keys) of (b, kv_head); keys past Lk and dimensions past D / Dv
// are zeros. Kᵀ moves 16 keys × 16 words at a time through a transpose.
void pack_tile(const Call& p, const Packed& packed, const Sequence& seq, std::int64_t kv_head,
               std::int64_t tile) {
  const auto& amx = packed.amx;
  const std::int64_t parts = amx.parts;
  const std::int64_t first = tile * amx.keys;
  const std::int64_t count = std::min(amx.keys, seq.kv_len - first);
  KeyRows k_rows(p, p.k_strides, seq, kv_head), v_rows(p, p.v_strides, seq, kv_head);
  // Kᵀ: word (d/2, j) = (k[j][d], k[j][d + 1]).
  for (std::int64_t j0 = 0; j0 < amx.keys; j0 += 16) {
    for (std::int64_t d0 = 0; d0 < amx.depth; d0 += 32) {
      __m512i words[kMaxParts][16];
      for (int r = 0; r < 16; ++r) {
        const std::int64_t j = j0 + r;
        if (j >= count) {
          for (std::int64_t i = 0; i < parts; ++i) words[i][r] = _mm512_setzero_si512();
          continue;
        }
        const std::int64_t row = k_rows.offset(first + j);
        const Parts low = load_parts(p.k, p.dtype, row + d0 * p.k_strides[3], p.k_strides[3], p.head_dim - d0, parts);
        const Parts high = load_parts(p.k, p.dtype, row + (d0 + 16) * p.k_strides[3], p.k_strides[3],
                                      p.head_dim - d0 - 16, parts);
        for (std::int64_t i = 0; i < parts; ++i) {
          words[i][r] = _mm512_inserti64x4(_mm512_castsi256_si512(low.part[i]), high.part[i], 1);
        }
      }
      for (std::int64_t i = 0; i < parts; ++i) {
        transpose_words(words[i]);
        std::uint32_t* kt = packed.k(p, seq, kv_head, tile, i);
        for (int r = 0; r < 16; ++r) _mm512_storeu_si512(kt + (d0 / 2 + r) * amx.keys + j0, words[i][r]);
      }
    }
  }
  // V: word (j/2, c) = (v[j][c], v[j + 1][c]).
  const auto value_parts = [&](std::int64_t j, std::int64_t c0) -> Parts {
    if (j >= count) return {};
    return load_parts(p.v, p.dtype, v_rows.offset(first + j) + c0 * p.v_strides[3], p.v_strides[3],
                      p.value_dim - c0, parts);
  };
  const auto pair = [](__m256i even, __m256i odd) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(even), _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
  };
  for (std::int64_t j = 0; j < amx.keys; j += 2) {
    for (std::int64_t c0 = 0; c0 < amx.columns; c0 += 16) {
      const Parts even = value_parts(j, c0), odd = value_parts(j + 1, c0);
      for (std::int64_t i = 0; i < parts; ++i) {
        _mm512_storeu_si512(packed.v(p, seq, kv_head, tile, i) + j / 2 * amx.columns + c0, pair(even.part[i], odd.part[i]));
      }
    }
  }
}

// The tile products of one sum A·B over split operands: A_i·B_j for i + j < parts (one for
// bfloat16, three for float16, six for float32), the smaller terms first. Returns the count.
int split_products(std::int64_t parts, const std::byte* a, std::int64_t a_part, const std::byte* b,
                   std::int64_t b_part, std::int64_t steps, amx::Product (&products)[kMaxProducts]) {
  int count = 0;
  for (std::int64_t order = parts - 1; order >= 0; --order) {
    for (std::int64_t i = 0; i <= order; ++i) products[count++] = {a + i * a_part, b + (order - i) * b_part, steps};
  }
  return count;
}

struct Task {
  Bits* q;      // [parts][amx.rows × amx.depth]
  float* s;     // [amx.rows × amx.keys]
  Bits* w;      // the weights P, [parts][amx.rows × amx.keys]
  Workspace t;  // accumulators (rows amx.columns apart) and row statistics for the shared helpers
};

void tiled_task(const Call& p, const plan::CpuRoute& r, const Packed& packed, const Task& task,
                const Sequence& seq, const Rows& rows) {
  if (rows.size() == 0) return;
  const auto& amx = r.amx;
  const std::int64_t q_part = amx.rows * amx.depth, w_part = amx.rows * amx.keys;
  std::memset(task.q, 0, static_cast<std::size_t>(amx.parts * q_part) * sizeof(Bits));
  std::memset(task.w, 0, static_cast<std::size_t>(amx.parts * w_part) * sizeof(Bits));
  std::memset(task.t.accum, 0, static_cast<std::size_t>(amx.rows * amx.columns) * sizeof(float));
  for (std::int64_t row = 0; row < rows.size(); ++row) {
    const RowAt at = rows(row);
    const std::int64_t from = call::row_offset(p.q_strides, seq, at.head, at.position);
    for (std::int64_t d = 0; d < p.head_dim; d += 16) {
      const Parts parts = load_parts(p.q, p.dtype, from + d * p.q_strides[3], p.q_strides[3], p.head_dim - d, amx.parts);
      for (std::int64_t i = 0; i < amx.parts; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(task.q + i * q_part + row * amx.depth + d), parts.part[i]);
      }
    }
    task.t.row_max[row] = kNegInf;
    task.t.row_sum[row] = 0.0f;
  }
  const auto bytes = [](const void* pointer) { return static_cast<const std::byte*>(pointer); };
  // Only the packed tiles holding keys some row can see.
  const std::int64_t key_begin = score::keys_for_row(p, seq, rows.first).begin;
  const std::int64_t key_end = score::keys_for_row(p, seq, rows.first + rows.count - 1).end;
  std::optional<amx::Tiles> tiles;
  if (amx.tiles) tiles.emplace();
  for (std::int64_t tile = key_begin / amx.keys; key_begin < key_end && tile * amx.keys < key_end; ++tile) {
    const std::int64_t key = tile * amx.keys;
    const std::int64_t count = std::min(amx.keys, seq.kv_len - key);
    if (amx.packing == plan::CpuRoute::Amx::Packing::PerTask) pack_tile(p, packed, seq, rows.kv_head, tile);
    const std::int64_t k_steps = amx.depth / amx::kTileDepth;
    amx::Product products[kMaxProducts];
    int product_count = split_products(amx.parts, bytes(task.q), q_part * 2, bytes(packed.k(p, seq, rows.kv_head, tile)),
                                       packed.k_words() * 4, k_steps, products);
    product<false>(amx.tiles, products, product_count, amx.depth * 2, amx.keys * 4,
                   reinterpret_cast<std::byte*>(task.s), amx.keys * 4, amx.rows, round_up(count, amx::kTileColumns));
    const std::int64_t depth = round_up(count, amx::kTileDepth);  // keys the value product reads
    bool any = false;
    with_parts(amx.parts, [&](auto parts) {
      for (std::int64_t row = 0; row < rows.size(); ++row) {
        any |= softmax_to_bf16<decltype(parts)::value>(p, task.t, seq, row, rows(row), key, count, task.s + row * amx.keys,
                                                       task.w + row * amx.keys, w_part, depth, amx.columns);
      }
    });
    if (!any) continue;
    const std::int64_t v_steps = depth / amx::kTileDepth;
    product_count = split_products(amx.parts, bytes(task.w), w_part * 2, bytes(packed.v(p, seq, rows.kv_head, tile)),
                                   amx.keys / 2 * amx.columns * 4, v_steps, products);
    product<true>(amx.tiles, products, product_count, amx.keys * 2, amx.columns * 4,
                  reinterpret_cast<std::byte*>(task.t.accum), amx.columns * 4, amx.rows, amx.columns);
  }
  for (std::int64_t row = 0; row < rows.size(); ++row) {
    finish_row(p, seq, rows(row), task.t.row_max[row], task.t.row_sum[row], task.t.accum + row * amx.columns);
  }
}

}  // namespace

void run_tiled_kernel(const Call& p, const plan::CpuRoute& r, std::byte* scratch) {
  using Packing = plan::CpuRoute::Amx::Packing;
  const auto& amx = r.amx;
  const Packed packed{amx, amx.packed.at<std::byte>(scratch)};
  const std::int64_t blocks = (p.q_len + r.block_q - 1) / r.block_q;
  const std::int64_t pairs = p.batch * p.kv_heads;
  // Task `work` (of tiled_task_at's order) on `worker`'s buffers.
  const auto run_task = [&](std::int64_t work, int worker) {
    const TiledTask at = tiled_task_at(p, r, work, blocks);
    const auto w = static_cast<std::size_t>(worker);
    float* stats = r.stats.at<float>(scratch, w);
    const std::int64_t stat_rows = p.group * r.block_q;
    Workspace t{};
    t.scores = r.scores.at<float>(scratch, w);
    t.accum = r.accum.at<float>(scratch, w);
    t.row_max = stats;
    t.row_sum = stats + stat_rows;
    t.accum_stride = amx.columns;
    const Task task{amx.q.at<Bits>(scratch, w), t.scores, amx.p.at<Bits>(scratch, w), t};
    const Packed slot{amx, amx.packed.at<std::byte>(scratch, amx.packing == Packing::PerTask ? w : 0)};
    tiled_task(p, r, slot, task, at.seq, at.rows);
  };
  // Packs pairs [first, first + count) (grid [key tiles, Hkv, B], or [key tiles, 1, 1] for one).
  const auto pack_pairs = [&](std::int64_t first, std::int64_t count) {
    const profile::Dispatch dispatch(amx.pack_kernel_name.c_str(), amx.key_tiles, count == 1 ? 1 : p.kv_heads,
                                     count == 1 ? 1 : p.batch);
    parallel_for(r.plan.workers, count * amx.key_tiles, [&](std::int64_t work, int) {
      const std::int64_t tile = work % amx.key_tiles, pair = first + work / amx.key_tiles;
      const Sequence seq = call::sequence(p, pair / p.kv_heads);
      if (tile * amx.keys < seq.kv_len) pack_tile(p, packed, seq, pair % p.kv_heads, tile);
    });
  };
  if (amx.packing == Packing::PerHead) {
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      pack_pairs(pair, 1);
      const profile::Dispatch dispatch(r.plan.kernel_name.c_str(), blocks, 1, 1);
      parallel_for(r.plan.workers, blocks, [&](std::int64_t block, int worker) { run_task(pair * blocks + block, worker); });
    }
    return;
  }
  if (amx.packing == Packing::Once) pack_pairs(0, pairs);
  const profile::Dispatch dispatch(r.plan.kernel_name.c_str(), blocks, p.kv_heads, p.batch);
  parallel_for(r.plan.workers, pairs * blocks, run_task);
}

// out[i] = 2^x[i] by the weights' exp for `parts` bfloat16 parts (tests check its accuracy).
void weights_exp2(int parts, const float* x, std::int64_t count, float* out) {
  with_parts(parts, [&](auto kparts) {
    for (std::int64_t i = 0; i < count; i += 16) {
      const auto lanes = static_cast<__mmask16>(count - i >= 16 ? 0xffffu : (1u << (count - i)) - 1);
      _mm512_mask_storeu_ps(out + i, lanes, exp2_weights<decltype(kparts)::value>(_mm512_maskz_loadu_ps(lanes, x + i)));
    }
  });
}

// Four independent accumulators fed by two A and two B tiles, `steps` times: the tiles' own
// bfloat16 rate. Returns the FLOPs done.
double matrix_chains(std::int64_t steps) {
  alignas(64) static const std::array<Bits, amx::kTileRows * amx::kTileBytes / 2> operand = [] {
    std::array<Bits, amx::kTileRows * amx::kTileBytes / 2> values{};
    for (std::size_t e = 0; e < values.size(); ++e) values[e] = float_to_bfloat16_bits(0.5f + 0.001f * static_cast<float>(e % 97));
    return values;
  }();
  alignas(64) float sink[amx::kTileRows * amx::kTileColumns];
  const amx::Tiles tiles;
  amx::zero<0>();
  amx::zero<1>();
  amx::zero<2>();
  amx::zero<3>();
  amx::load<4>(operand.data(), amx::kTileBytes);
  amx::load<5>(operand.data(), amx::kTileBytes);
  amx::load<6>(operand.data(), amx::kTileBytes);
  amx::load<7>(operand.data(), amx::kTileBytes);
  for (std::int64_t step = 0; step < steps; ++step) {
    amx::dot_bf16<0, 4, 6>();
    amx::dot_bf16<1, 4, 7>();
    amx::dot_bf16<2, 5, 6>();
    amx::dot_bf16<3, 5, 7>();
  }
  amx::store<0>(sink, amx::kTileBytes);
  volatile float keep = sink[0];
  (void)keep;
  return static_cast<double>(steps) * 4 * amx::kTileRows * amx::kTileColumns * amx::kTileDepth * 2;
}

// Independent vdpbf16ps chains: the CPU's own bfloat16 dot-product rate.
double dot_chains(std::int64_t steps) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int chain = 0; chain < kChains; ++chain) acc[chain] = _mm512_set1_ps(1e-3f * static_cast<float>(chain));
  const __m512i a = _mm512_set1_epi32(0x3f003f01);
  const __m512i b = _mm512_set1_epi32(0x3f013f00);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (int chain = 0; chain < kChains; ++chain) acc[chain] = dot_pairs(acc[chain], a, b);
  }
  __m512 sum = acc[0];
  for (int chain = 1; chain < kChains; ++chain) sum = _mm512_add_ps(sum, acc[chain]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  volatile float keep = lanes[0];
  (void)keep;
  return static_cast<double>(steps) * kChains * 16 * 2 * 2;
}

}  // namespace HEED_ISA
}  // namespace heed::cpu
