#pragma once
// The AMX tile operations the bfloat16 tiled kernel uses, behind one small interface: the
// hardware instructions, or (HEED_AMX_EMULATION, for testing the kernel's data layout on
// machines without AMX) a plain C++ model of them with the same operands.
//
// heed configures every tile the same way: 16 rows of 64 bytes. A tile then holds 16 × 16
// float32 (an accumulator C), 16 × 32 bfloat16 (a row-major operand A), or 16 rows of 16
// bfloat16 pairs (an operand B in "VNNI" order: B row r holds, for each of 16 columns n, the
// pair (B[2r][n], B[2r+1][n])). tdpbf16ps computes C[m][n] += Σ_k A[m][k] · B[k][n] over the
// 32 k of one tile pair.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(HEED_AMX_EMULATION)
#include <immintrin.h>
#endif

// The instruction-set namespace of kernels_amx.cpp (HEED_ISA amx, inline), its one includer.
namespace heed::cpu::inline amx {

inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 64;        // per row
inline constexpr int kTileDepth = 32;        // bfloat16 k per tdpbf16ps
inline constexpr int kTileColumns = 16;      // float32 n per accumulator

#if defined(HEED_AMX_EMULATION)

struct Registers {
  alignas(64) unsigned char tile[8][kTileRows * kTileBytes];
};
inline thread_local Registers registers;

inline void configure() {}
inline void release() {}
template <int T>
inline void zero() {
  std::memset(registers.tile[T], 0, sizeof(registers.tile[T]));
}
template <int T>
inline void load(const void* base, std::int64_t stride) {
  for (int row = 0; row < kTileRows; ++row) {
    std::memcpy(registers.tile[T] + row * kTileBytes, static_cast<const unsigned char*>(base) + row * stride, kTileBytes);
  }
}
template <int T>
inline void store(void* base, std::int64_t stride) {
  for (int row = 0; row < kTileRows; ++row) {
    std::memcpy(static_cast<unsigned char*>(base) + row * stride, registers.tile[T] + row * kTileBytes, kTileBytes);
  }
}
inline float widen(std::uint16_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}
template <int C, int A, int B>
inline void dot_bf16() {
  float c[kTileRows][kTileColumns];
  std::uint16_t a[kTileRows][kTileDepth], b[kTileRows][2 * kTileColumns];
  std::memcpy(c, registers.tile[C], sizeof(c));
  std::memcpy(a, registers.tile[A], sizeof(a));
  std::memcpy(b, registers.tile[B], sizeof(b));
  for (int m = 0; m < kTileRows; ++m) {
    for (int n = 0; n < kTileColumns; ++n) {
      float sum = c[m][n];
      for (int pair = 0; pair < kTileDepth / 2; ++pair) {
        sum += widen(a[m][2 * pair]) * widen(b[pair][2 * n]) + widen(a[m][2 * pair + 1]) * widen(b[pair][2 * n + 1]);
      }
      c[m][n] = sum;
    }
  }
  std::memcpy(registers.tile[C], c, sizeof(c));
}

#else

// ldtilecfg's 64-byte operand: palette 1, every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t columns_bytes[16] = {};
  std::uint8_t rows[16] = {};
};

inline void configure() {
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.columns_bytes[tile] = kTileBytes;
    config.rows[tile] = kTileRows;
  }
  _tile_loadconfig(&config);
}
inline void release() { _tile_release(); }
// GCC's tile intrinsics paste their tile number into the instruction, so each tile used gets
// its own specialisation.
template <int T>
void zero();
template <int T>
void load(const void* base, std::int64_t stride);
template <int T>
void store(void* base, std::int64_t stride);
template <int C, int A, int B>
void dot_bf16();
#define HEED_TILE(T)                                                                                 \
  template <>                                                                                        \
  inline void zero<T>() {                                                                            \
    _tile_zero(T);                                                                                   \
  }                                                                                                  \
  template <>                                                                                        \
  inline void load<T>(const void* base, std::int64_t stride) {                                       \
    _tile_loadd(T, base, stride);                                                                    \
  }                                                                                                  \
  template <>                                                                                        \
  inline void store<T>(void* base, std::int64_t stride) {                                            \
    _tile_stored(T, base, stride);                                                                   \
  }
HEED_TILE(0)
HEED_TILE(1)
HEED_TILE(2)
HEED_TILE(3)
HEED_TILE(4)
HEED_TILE(5)
HEED_TILE(6)
HEED_TILE(7)
#undef HEED_TILE
#define HEED_TILE_DOT(C, A, B)    \
  template <>                     \
  inline void dot_bf16<C, A, B>() { \
    _tile_dpbf16ps(C, A, B);      \
  }
HEED_TILE_DOT(0, 4, 6)
HEED_TILE_DOT(1, 4, 7)
HEED_TILE_DOT(2, 5, 6)
HEED_TILE_DOT(3, 5, 7)
#undef HEED_TILE_DOT

#endif

// Holds the tile configuration for one task on this thread; releases the tiles after.
class Tiles {
 public:
  Tiles() { configure(); }
  ~Tiles() { release(); }
  Tiles(const Tiles&) = delete;
  Tiles& operator=(const Tiles&) = delete;
};

// One product of a sum C (+)= Σ A_s · B_s: A_s bfloat16 [m × 32·steps], B_s in VNNI order
// [16·steps rows of n pairs]. float16 inputs split in two bfloat16 parts add three products.
struct Product {
  const std::byte* a;
  const std::byte* b;
  std::int64_t steps;
};

// C[m × n] (+)= Σ_s A_s · B_s for `count` products sharing lda, ldb (bytes between rows) and C
// (float32, rows ldc bytes apart); m and n multiples of 16. Register blocks of up to 2 × 2
// accumulators: tiles 0-3 hold C, 4-5 A, 6-7 B.
template <int RM, int RN, bool Accumulate>
inline void gemm_block(const Product* products, int count, std::int64_t lda, std::int64_t ldb, std::int64_t i,
                       std::int64_t j, std::byte* c, std::int64_t ldc) {
  const auto c_at = [&](int r, int s) { return c + (i + r * kTileRows) * ldc + (j + s * kTileColumns) * 4; };
  if constexpr (Accumulate) {
    load<0>(c_at(0, 0), ldc);
    if constexpr (RN == 2) load<1>(c_at(0, 1), ldc);
    if constexpr (RM == 2) load<2>(c_at(1, 0), ldc);
    if constexpr (RM == 2 && RN == 2) load<3>(c_at(1, 1), ldc);
  } else {
    zero<0>();
    if constexpr (RN == 2) zero<1>();
    if constexpr (RM == 2) zero<2>();
    if constexpr (RM == 2 && RN == 2) zero<3>();
  }
  for (int product = 0; product < count; ++product) {
    const std::byte* a = products[product].a + i * lda;
    const std::byte* b = products[product].b + j * 4;
    for (std::int64_t step = 0; step < products[product].steps; ++step) {
      const std::byte* a_step = a + step * kTileBytes;
      const std::byte* b_step = b + step * kTileRows * ldb;
      load<4>(a_step, lda);
      load<6>(b_step, ldb);
      dot_bf16<0, 4, 6>();
      if constexpr (RN == 2) {
        load<7>(b_step + kTileBytes, ldb);
        dot_bf16<1, 4, 7>();
      }
      if constexpr (RM == 2) {
        load<5>(a_step + kTileRows * lda, lda);
        dot_bf16<2, 5, 6>();
        if constexpr (RN == 2) dot_bf16<3, 5, 7>();
      }
    }
  }
  store<0>(c_at(0, 0), ldc);
  if constexpr (RN == 2) store<1>(c_at(0, 1), ldc);
  if constexpr (RM == 2) store<2>(c_at(1, 0), ldc);
  if constexpr (RM == 2 && RN == 2) store<3>(c_at(1, 1), ldc);
}

template <bool Accumulate>
inline void gemm(const Product* products, int count, std::int64_t lda, std::int64_t ldb, std::byte* c,
                 std::int64_t ldc, std::int64_t m, std::int64_t n) {
  for (std::int64_t i = 0; i < m; i += 2 * kTileRows) {
    const bool two_m = i + 2 * kTileRows <= m;
    for (std::int64_t j = 0; j < n; j += 2 * kTileColumns) {
      const bool two_n = j + 2 * kTileColumns <= n;
      if (two_m && two_n) {
        gemm_block<2, 2, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
      } else if (two_m) {
        gemm_block<2, 1, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
      } else if (two_n) {
        gemm_block<1, 2, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
      } else {
        gemm_block<1, 1, Accumulate>(products, count, lda, ldb, i, j, c, ldc);
      }
    }
  }
}

}  // namespace heed::cpu::amx
