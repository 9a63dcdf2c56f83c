#pragma once
// Register-blocked float32 micro-kernels and a vectorisable exp, written as plain loops over
// fixed-size blocks so the compiler keeps the accumulators in registers. Included by each
// instruction-set translation unit (generic, avx2, avx512) inside its own namespace.

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/isa.hpp"
#include "cpu/load.hpp"
#include "plan/cpu_tables.hpp"

namespace heed::cpu {
inline namespace HEED_ISA {
namespace microkernel {

// Keys per score block: the planner rounds the key count of score tiles up to this.
using plan::cpu::kKeyLanes;
// Value columns per register block.
inline constexpr std::int64_t kValueBlock = 16;

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2High = 0.693359375f;
inline constexpr float kLn2Low = -2.12194440e-4f;
inline constexpr float kExpUnderflow = -87.3365f;  // below: exp underflows float32 to zero
inline constexpr float kExpOverflow = 88.3762f;


// The widest float32 vector of the translation unit's instruction set. Blocks of 16 keys or
// value columns are kParts such vectors; arrays of native vectors stay in registers.
#if defined(__AVX512F__)
#define HEED_VECTOR_BYTES 64
#elif defined(__AVX__)
#define HEED_VECTOR_BYTES 32
#else
#define HEED_VECTOR_BYTES 16
#endif
typedef float vec __attribute__((vector_size(HEED_VECTOR_BYTES)));
typedef float vec_unaligned __attribute__((vector_size(HEED_VECTOR_BYTES), aligned(4)));
inline constexpr int kVectorLanes = HEED_VECTOR_BYTES / 4;
inline constexpr int kParts = 16 / kVectorLanes;
static_assert(kKeyLanes == 16 && kValueBlock == 16, "blocks are 16 float32 lanes");
// Register blocks of the two GEMM micro-kernels: kRowBlock rows by kWide vectors (32 lanes
// on AVX-512, 16 on AVX2 and SSE), sized so accumulators plus loads fit the register file
// (AVX-512: 8 x 2 of 32 zmm; AVX2: 6 x 2 of 16 ymm; SSE: 2 x 4 of 16 xmm).
inline constexpr int kWide = kVectorLanes == 16 ? 2 : kParts;
inline constexpr int kRowBlock = kVectorLanes == 16 ? 8 : (kVectorLanes == 8 ? 6 : 2);

[[gnu::always_inline]] inline vec load(const float* from) { return *reinterpret_cast<const vec_unaligned*>(from); }

// bfloat16 storage read straight into float32 lanes (decode reads K and V rows in place).
struct Bf16 {
  std::uint16_t bits;
};
typedef std::uint16_t vec_u16 __attribute__((vector_size(HEED_VECTOR_BYTES / 2), aligned(2)));
typedef std::uint32_t vec_u32 __attribute__((vector_size(HEED_VECTOR_BYTES)));
[[gnu::always_inline]] inline vec load(const Bf16* from) {
  const vec_u16 raw = *reinterpret_cast<const vec_u16*>(from);
  return std::bit_cast<vec>(__builtin_convertvector(raw, vec_u32) << 16);
}
// float16 storage, widened with the F16C / AVX-512 conversion where the ISA has one.
struct F16 {
  std::uint16_t bits;
};
[[gnu::always_inline]] inline vec load(const F16* from) {
#if defined(__AVX512F__)
  // The masked form with a zero source: GCC 12 warns on the plain form's undefined source.
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from));
  return std::bit_cast<vec>(_mm512_mask_cvtph_ps(_mm512_setzero_ps(), static_cast<__mmask16>(0xffff), raw));
#elif defined(__F16C__)
  return std::bit_cast<vec>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from))));
#else
  vec values;
  for (int lane = 0; lane < kVectorLanes; ++lane) values[lane] = half_to_float(from[lane].bits);
  return values;
#endif
}
[[gnu::always_inline]] inline float to_float(F16 value) { return half_to_float(value.bits); }
[[gnu::always_inline]] inline float to_float(float value) { return value; }
[[gnu::always_inline]] inline float to_float(Bf16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}
[[gnu::always_inline]] inline void store(float* to, vec value) { *reinterpret_cast<vec_unaligned*>(to) = value; }

typedef std::int32_t vec_int __attribute__((vector_size(HEED_VECTOR_BYTES)));

// exp(x) on every lane, branch-free: 0 far below (so exp(-inf) = 0), +inf above, NaN kept.
#if defined(__AVX512F__)
// 2^t on every lane in seven instructions: f = t - floor(t) by vreduceps, 2^f by a degree-5
// polynomial on [0, 1) (minimax relative error with p(0) = 1 exactly; within 1.8e-7 relative
// after rounding), and 2^floor(t) applied by vscalefps, which floors its exponent operand
// itself. No clamps: vreduceps gives 0 for ±inf, so 2^-inf = 1 · 2^-inf = 0 and 2^inf = inf;
// scalef underflows to 0 and overflows to inf; NaN is kept. The version before (clamp to ±160,
// round to nearest, subtract, degree 6 on [-0.5, 0.5]) took eleven, within 2.2e-7.
[[gnu::always_inline]] inline __m512 exp2(__m512 t) {
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 poly = _mm512_set1_ps(1.8671300495043397e-3f);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(9.0170307084918022e-3f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(5.5799912661314011e-2f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.4016444385051727e-1f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.9315129518508911e-1f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(poly, t);
}
// AVX-512: exp(x) = 2^(x·log2 e).
[[gnu::always_inline]] inline vec fast_exp(vec x) {
  return std::bit_cast<vec>(exp2(_mm512_mul_ps(std::bit_cast<__m512>(x), _mm512_set1_ps(kLog2e))));
}
#else
// Within 2 ulp on [-87.3, 88.3].
[[gnu::always_inline]] inline vec fast_exp(vec x) {
  vec clamped = x < kExpUnderflow ? vec{} + kExpUnderflow : x;
  clamped = clamped > kExpOverflow ? vec{} + kExpOverflow : clamped;
  // Round half away from zero by truncation (the kernels' -fassociative-math would fold the
  // add-and-subtract rounding trick away).
  const vec scaled = clamped * kLog2e;
  const vec_int n_int = __builtin_convertvector(scaled + (scaled < 0.0f ? vec{} - 0.5f : vec{} + 0.5f), vec_int);
  const vec n = __builtin_convertvector(n_int, vec);
  const vec r = (clamped - n * kLn2High) - n * kLn2Low;
  vec poly = vec{} + 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = (poly * r * r + r) + 1.0f;
  const vec_int bits = std::bit_cast<vec_int>(poly) + (n_int << 23);
  vec result = std::bit_cast<vec>(bits);
  result = x < kExpUnderflow ? vec{} : result;
  result = x > kExpOverflow ? vec{} + __builtin_inff() : result;
  return x != x ? x : result;
}
#endif

// The same for one value (row corrections, merges and tails).
inline float fast_exp(float x) { return fast_exp(vec{} + x)[0]; }

inline constexpr float kLn2 = 0.693147180559945309f;
// 2^t on every lane: vscalefps and the polynomial above on AVX-512, else exp(t · ln 2).
[[gnu::always_inline]] inline vec exp2_lanes(vec t) {
#if defined(__AVX512F__)
  return std::bit_cast<vec>(exp2(std::bit_cast<__m512>(t)));
#else
  return fast_exp(t * kLn2);
#endif
}
inline float exp2_lanes(float t) { return exp2_lanes(vec{} + t)[0]; }

// dst[0..count) = float(src[0..count)) for float16 / bfloat16 storage, a vector at a time.
template <typename T>
inline void widen_row(const T* src, std::int64_t count, float* dst) {
  std::int64_t e = 0;
  for (; e + kVectorLanes <= count; e += kVectorLanes) store(dst + e, load(src + e));
  for (; e < count; ++e) dst[e] = to_float(src[e]);
}

#if defined(__AVX512F__)
// dst[c * ldd + r] = float(src[r * lds + c]) for a 16 × 16 block (float32, or 16-bit rows
// widened as they are loaded): unpacks within 128-bit lanes, then the lanes gathered across
// groups of four rows.
template <typename T>
inline void transpose16(const T* src, std::int64_t lds, float* dst, std::int64_t ldd) {
  __m512 rows[16], t[16];
  for (int r = 0; r < 16; ++r) rows[r] = std::bit_cast<__m512>(load(src + r * lds));
  for (int r = 0; r < 16; r += 2) {
    t[r] = _mm512_unpacklo_ps(rows[r], rows[r + 1]);
    t[r + 1] = _mm512_unpackhi_ps(rows[r], rows[r + 1]);
  }
  for (int r = 0; r < 16; r += 4) {
    const __m512d a = _mm512_castps_pd(t[r]), b = _mm512_castps_pd(t[r + 1]);
    const __m512d c = _mm512_castps_pd(t[r + 2]), d = _mm512_castps_pd(t[r + 3]);
    rows[r] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    rows[r + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    rows[r + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    rows[r + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // rows[4q + k], 128-bit lane L: column 4L + k of rows 4q .. 4q + 3.
  for (int k = 0; k < 4; ++k) {
    const __m512 a = _mm512_shuffle_f32x4(rows[k], rows[4 + k], 0x88);
    const __m512 b = _mm512_shuffle_f32x4(rows[k], rows[4 + k], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(rows[8 + k], rows[12 + k], 0x88);
    const __m512 d = _mm512_shuffle_f32x4(rows[8 + k], rows[12 + k], 0xdd);
    _mm512_storeu_ps(dst + k * ldd, _mm512_shuffle_f32x4(a, c, 0x88));
    _mm512_storeu_ps(dst + (8 + k) * ldd, _mm512_shuffle_f32x4(a, c, 0xdd));
    _mm512_storeu_ps(dst + (4 + k) * ldd, _mm512_shuffle_f32x4(b, d, 0x88));
    _mm512_storeu_ps(dst + (12 + k) * ldd, _mm512_shuffle_f32x4(b, d, 0xdd));
  }
}
#endif

// The largest of s[0..count). Four running maxima, so that a row is not one chain of max
// latencies (4 cycles each on Sapphire Rapids) but limited by the loads.
inline float max_of(const float* s, std::int64_t count) {
  constexpr int kChains = 4;
  vec best[kChains];
  for (int chain = 0; chain < kChains; ++chain) best[chain] = vec{} - __builtin_inff();
  std::int64_t j = 0;
  for (; j + kChains * kVectorLanes <= count; j += kChains * kVectorLanes) {
    for (int chain = 0; chain < kChains; ++chain) {
      const vec values = load(s + j + chain * kVectorLanes);
      best[chain] = values > best[chain] ? values : best[chain];
    }
  }
  for (; j + kVectorLanes <= count; j += kVectorLanes) {
    const vec values = load(s + j);
    best[0] = values > best[0] ? values : best[0];
  }
  for (int chain = 1; chain < kChains; ++chain) best[0] = best[chain] > best[0] ? best[chain] : best[0];
  float result = -__builtin_inff();
  for (int lane = 0; lane < kVectorLanes; ++lane) result = best[0][lane] > result ? best[0][lane] : result;
  for (; j < count; ++j) result = s[j] > result ? s[j] : result;
  return result;
}

// s[j] = 2^(s[j] · log2 e − shift) for j < count, the product and difference in one FMA;
// returns their sum. `shift` is a row maximum times log2 e, rounded as these products are, so
// the row's largest weight is 2^(its own rounding) ≈ 1.
inline float exp2_shifted(float* s, std::int64_t count, float shift) {
  vec sum = vec{};
  std::int64_t j = 0;
  for (; j + kVectorLanes <= count; j += kVectorLanes) {
#if defined(__AVX512F__)
    const vec t = std::bit_cast<vec>(
        _mm512_fmadd_ps(std::bit_cast<__m512>(load(s + j)), _mm512_set1_ps(kLog2e), _mm512_set1_ps(-shift)));
#else
    const vec t = load(s + j) * kLog2e - shift;
#endif
    const vec weights = exp2_lanes(t);
    store(s + j, weights);
    sum += weights;
  }
  float total = 0.0f;
  for (int lane = 0; lane < kVectorLanes; ++lane) total += sum[lane];
  for (; j < count; ++j) {
    s[j] = exp2_lanes(std::fma(s[j], kLog2e, -shift));
    total += s[j];
  }
  return total;
}

// The one GEMM register block: C[R × P vectors] (=|+=) A[R × n] · B[n × P vectors], A's rows
// lda apart (its columns contiguous), B's rows ldb apart, C's rows ldc apart. Scores are
// Q·Kᵀ with Kᵀ stored [D × ldk]; the value update is P·V into the accumulators.
// B's row k is row_of(k) (gemm_block: b + k · ldb; gathered value rows: their own addresses).
template <int R, int P, bool Accumulate, typename RowOf>
[[gnu::always_inline]] inline void gemm_block_rows(const float* a, std::int64_t lda, RowOf row_of, std::int64_t n,
                                                   float* c, std::int64_t ldc) {
  vec sum[R][P];
  for (int r = 0; r < R; ++r) {
    for (int part = 0; part < P; ++part) sum[r][part] = Accumulate ? load(c + r * ldc + part * kVectorLanes) : vec{};
  }
  for (std::int64_t k = 0; k < n; ++k) {
    vec row[P];
    const auto* b = row_of(k);
    for (int part = 0; part < P; ++part) row[part] = load(b + part * kVectorLanes);
    for (int r = 0; r < R; ++r) {
      const float scalar = a[r * lda + k];
      for (int part = 0; part < P; ++part) sum[r][part] += scalar * row[part];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int part = 0; part < P; ++part) store(c + r * ldc + part * kVectorLanes, sum[r][part]);
  }
}

template <int R, int P, bool Accumulate, typename T>
[[gnu::always_inline]] inline void gemm_block(const float* a, std::int64_t lda, const T* b, std::int64_t ldb,
                                              std::int64_t n, float* c, std::int64_t ldc) {
  gemm_block_rows<R, P, Accumulate>(a, lda, [&](std::int64_t k) { return b + k * ldb; }, n, c, ldc);
}

// R rows of scores: wide key blocks, then 16-key blocks.
template <int R>
inline void score_rows(const float* q, std::int64_t head_dim, const float* k_t, std::int64_t ldk, float* s) {
  constexpr std::int64_t kWideKeys = kWide * kVectorLanes;
  std::int64_t key = 0;
  for (; key + kWideKeys <= ldk; key += kWideKeys) {
    gemm_block<R, kWide, false>(q, head_dim, k_t + key, ldk, head_dim, s + key, ldk);
  }
  for (; key < ldk; key += kKeyLanes) gemm_block<R, kParts, false>(q, head_dim, k_t + key, ldk, head_dim, s + key, ldk);
}

// Calls body.template operator()<R>(row) for full blocks of kRowBlock rows, then once with
// the remaining rows as a compile-time count.
template <int R = kRowBlock, typename Body>
inline void for_row_blocks(std::int64_t rows, Body&& body, std::int64_t row = 0) {
  if constexpr (R == kRowBlock) {
    for (; row + R <= rows; row += R) body.template operator()<R>(row);
  }
  if constexpr (R > 1) {
    if (rows - row == R - 1) return body.template operator()<R - 1>(row);
    for_row_blocks<R - 1>(rows, body, row);
  }
}

#if defined(__AVX512F__)
// The four lane sums of acc[0..3] at once, in order: pairs of rows interleaved and added, then
// the four 128-bit quarters (instead of 4 × 16 dependent scalar additions per key).
[[gnu::always_inline]] inline __m128 lane_sums4(const vec (&acc)[4]) {
  const __m512 a0 = std::bit_cast<__m512>(acc[0]), a1 = std::bit_cast<__m512>(acc[1]);
  const __m512 a2 = std::bit_cast<__m512>(acc[2]), a3 = std::bit_cast<__m512>(acc[3]);
  const __m512 b01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 b23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512d c0 = _mm512_castps_pd(b01), c1 = _mm512_castps_pd(b23);
  // Each 128-bit quarter now holds partial sums of rows 0, 1, 2, 3 in order.
  const __m512 c = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(c0, c1)), _mm512_castpd_ps(_mm512_unpackhi_pd(c0, c1)));
  const __m256 halves = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

// bfloat16 key rows (D a multiple of 32) against q rows in pair order: each 64-byte load of 32
// keys' elements yields its even elements by one shift and its odd ones by one mask (not two
// widening instructions per 16), so q's 32 columns are stored evens first, then odds.
inline void pair_order(const float* q, std::int64_t rows, std::int64_t head_dim, float* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t d = 0; d < head_dim; d += 32) {
      for (int e = 0; e < 16; ++e) {
        out[r * head_dim + d + e] = q[r * head_dim + d + 2 * e];
        out[r * head_dim + d + 16 + e] = q[r * head_dim + d + 2 * e + 1];
      }
    }
  }
}
// s[r * lds] = q[r]·k for R (1 or 4) rows in pair order against one bfloat16 key row.
template <int R>
[[gnu::always_inline]] inline void dot_rows_pairs(const float* q, std::int64_t head_dim, const Bf16* k, float* s,
                                                  std::int64_t lds) {
  vec acc[R] = {};
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::int64_t d = 0; d < head_dim; d += 32) {
    const __m512i raw = _mm512_loadu_si512(k + d);
    const vec even = std::bit_cast<vec>(_mm512_slli_epi32(raw, 16));
    const vec odd = std::bit_cast<vec>(_mm512_and_si512(raw, high));
    for (int r = 0; r < R; ++r) acc[r] += load(q + r * head_dim + d) * even + load(q + r * head_dim + d + 16) * odd;
  }
  if constexpr (R == 4) {
    alignas(16) float total[4];
    _mm_store_ps(total, lane_sums4(acc));
    for (int r = 0; r < R; ++r) s[r * lds] = total[r];
  } else {
    for (int r = 0; r < R; ++r) s[r * lds] = _mm512_reduce_add_ps(std::bit_cast<__m512>(acc[r]));
  }
}
inline void dot_all_rows_pairs(const float* q, std::int64_t rows, std::int64_t head_dim, const Bf16* k, float* s,
                               std::int64_t lds) {
  std::int64_t row = 0;
  for (; row + 4 <= rows; row += 4) dot_rows_pairs<4>(q + row * head_dim, head_dim, k, s + row * lds, lds);
  for (; row < rows; ++row) dot_rows_pairs<1>(q + row * head_dim, head_dim, k, s + row * lds, lds);
}
#endif

// s[r * lds] = q[r]·k for R rows against one key row k (float32 or bfloat16, length D).
template <int R, typename T>
[[gnu::always_inline]] inline void dot_rows(const float* q, std::int64_t head_dim, const T* k, float* s,
                                            std::int64_t lds) {
  vec acc[R] = {};
  std::int64_t d = 0;
  for (; d + kVectorLanes <= head_dim; d += kVectorLanes) {
    const vec keys = load(k + d);
    for (int r = 0; r < R; ++r) acc[r] += load(q + r * head_dim + d) * keys;
  }
#if defined(__AVX512F__)
  if constexpr (R == 4) {
    alignas(16) float total[4];
    _mm_store_ps(total, lane_sums4(acc));
    for (int r = 0; r < R; ++r) {
      float sum = total[r];
      for (std::int64_t e = d; e < head_dim; ++e) sum += q[r * head_dim + e] * to_float(k[e]);
      s[r * lds] = sum;
    }
    return;
  }
#endif
  for (int r = 0; r < R; ++r) {
    float sum = 0.0f;
    for (int lane = 0; lane < kVectorLanes; ++lane) sum += acc[r][lane];
    for (std::int64_t e = d; e < head_dim; ++e) sum += q[r * head_dim + e] * to_float(k[e]);
    s[r * lds] = sum;
  }
}

// Scores of `rows` rows against one key row: s[r * lds] = q[r]·k.
template <typename T>
inline void dot_all_rows(const float* q, std::int64_t rows, std::int64_t head_dim, const T* k, float* s,
                         std::int64_t lds) {
  std::int64_t row = 0;
  for (; row + 4 <= rows; row += 4) dot_rows<4>(q + row * head_dim, head_dim, k, s + row * lds, lds);
  for (; row < rows; ++row) dot_rows<1>(q + row * head_dim, head_dim, k, s + row * lds, lds);
}

// acc[r][:] += p[r * ldp] · v for `rows` rows and one value row v of length Dv.
template <typename T>
inline void axpy_all_rows(const float* p, std::int64_t ldp, std::int64_t rows, const T* v,
                          std::int64_t value_dim, float* acc) {
  if (rows <= 4) {  // decode: each value vector read (and widened) once for all rows
    float weight[4];
    float* out[4];
    int active = 0;  // rows with a zero weight skip the key, as below
    for (std::int64_t row = 0; row < rows; ++row) {
      if (p[row * ldp] == 0.0f) continue;
      weight[active] = p[row * ldp];
      out[active++] = acc + row * value_dim;
    }
    std::int64_t d = 0;
    for (; d + kVectorLanes <= value_dim; d += kVectorLanes) {
      const vec values = load(v + d);
      for (int row = 0; row < active; ++row) store(out[row] + d, load(out[row] + d) + weight[row] * values);
    }
    for (; d < value_dim; ++d) {
      for (int row = 0; row < active; ++row) out[row][d] += weight[row] * to_float(v[d]);
    }
    return;
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    const float weight = p[row * ldp];
    if (weight == 0.0f) continue;
    float* out = acc + row * value_dim;
    std::int64_t d = 0;
    for (; d + kVectorLanes <= value_dim; d += kVectorLanes) store(out + d, load(out + d) + weight * load(v + d));
    for (; d < value_dim; ++d) out[d] += weight * to_float(v[d]);
  }
}

// S[rows × ldk] = Q[rows × D] · Kᵀ, with Kᵀ stored [D × ldk] (ldk a multiple of kKeyLanes).
inline void scores_tile(const float* q, std::int64_t rows, std::int64_t head_dim, const float* k_t,
                        std::int64_t ldk, float* s) {
  for_row_blocks(rows, [&]<int R>(std::int64_t row) {
    score_rows<R>(q + row * head_dim, head_dim, k_t, ldk, s + row * ldk);
  });
}

// The same for one value column (the tail when Dv is not a multiple of 16).
template <int R, typename T>
[[gnu::always_inline]] inline void value_column(const float* p, std::int64_t ldp, std::int64_t count,
                                                const T* v, std::int64_t ldv, float* acc, std::int64_t lda) {
  for (int r = 0; r < R; ++r) {
    float sum = acc[r * lda];
    for (std::int64_t j = 0; j < count; ++j) sum += p[r * ldp + j] * to_float(v[j * ldv]);
    acc[r * lda] = sum;
  }
}

// R rows of the accumulator: wide column blocks, 16-column blocks, then single columns.
template <int R, typename T>
inline void value_rows(const float* p, std::int64_t ldp, std::int64_t count, const T* v, std::int64_t ldv,
                       std::int64_t value_dim, float* acc) {
  constexpr std::int64_t kWideColumns = kWide * kVectorLanes;
  std::int64_t column = 0;
  for (; column + kWideColumns <= value_dim; column += kWideColumns) {
    gemm_block<R, kWide, true>(p, ldp, v + column, ldv, count, acc + column, value_dim);
  }
  for (; column + kValueBlock <= value_dim; column += kValueBlock) {
    gemm_block<R, kParts, true>(p, ldp, v + column, ldv, count, acc + column, value_dim);
  }
  for (; column < value_dim; ++column) value_column<R>(p, ldp, count, v + column, ldv, acc + column, value_dim);
}

// ACC[R × Dv] += P[R × count] · V[count × Dv] for value rows at their own addresses v[j]
// (pages of fewer keys than a block), register-blocked as value_rows.
template <int R, typename T>
inline void gathered_value_rows(const float* p, std::int64_t ldp, std::int64_t count, const T* const* v,
                                std::int64_t value_dim, float* acc) {
  constexpr std::int64_t kWideColumns = kWide * kVectorLanes;
  std::int64_t column = 0;
  for (; column + kWideColumns <= value_dim; column += kWideColumns) {
    gemm_block_rows<R, kWide, true>(p, ldp, [&](std::int64_t k) { return v[k] + column; }, count, acc + column,
                                    value_dim);
  }
  for (; column + kValueBlock <= value_dim; column += kValueBlock) {
    gemm_block_rows<R, kParts, true>(p, ldp, [&](std::int64_t k) { return v[k] + column; }, count, acc + column,
                                     value_dim);
  }
  for (; column < value_dim; ++column) {
    for (int r = 0; r < R; ++r) {
      float sum = acc[r * value_dim + column];
      for (std::int64_t j = 0; j < count; ++j) sum += p[r * ldp + j] * to_float(v[j][column]);
      acc[r * value_dim + column] = sum;
    }
  }
}

template <typename T>
inline void accumulate_gathered_values(const float* p, std::int64_t ldp, std::int64_t rows, std::int64_t count,
                                       const T* const* v, std::int64_t value_dim, float* acc) {
  for_row_blocks(rows, [&]<int R>(std::int64_t row) {
    gathered_value_rows<R>(p + row * ldp, ldp, count, v, value_dim, acc + row * value_dim);
  });
}

// ACC[rows × Dv] += P[rows × count] (row stride ldp) · V[count × Dv] (rows ldv apart, float32,
// bfloat16 or float16 widened in registers).
template <typename T>
inline void accumulate_values(const float* p, std::int64_t ldp, std::int64_t rows, std::int64_t count,
                              const T* v, std::int64_t ldv, std::int64_t value_dim, float* acc) {
  for_row_blocks(rows, [&]<int R>(std::int64_t row) {
    value_rows<R>(p + row * ldp, ldp, count, v, ldv, value_dim, acc + row * value_dim);
  });
}

}  // namespace microkernel
}  // namespace HEED_ISA
}  // namespace heed::cpu
