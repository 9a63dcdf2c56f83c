// The CUDA tiled kernel's shared-memory layout and ldmatrix addresses (cuda/tiled_layout.hpp),
// checked on the host for every entry of kTiledConfigs: the kernel's copies place each chunk
// of Q, K and V once, inside its tile; ldmatrix (emulated: lanes 8i..8i+7 address matrix i's
// rows, lane t receives row t / 4, elements 2(t % 4) and 2(t % 4) + 1, or the transpose) gives
// every lane exactly the elements the PTX ISA's mma.m16n8k16 fragment layouts ask for; every
// ldmatrix phase reads 8 different bank groups; the output tile round-trips through the rows.

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/tiled_layout.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::tiled {
namespace {

using plan::cuda::kTiledConfigs;

// What a 16-byte chunk of shared memory holds: tensor ('Q', 'K', 'V'), row, chunk of the row.
using Chunk = std::tuple<char, int, int>;
// One element of an operand: tensor, row, column (element index within the row).
using Element = std::tuple<char, int, int>;

struct Emulator {
  std::map<unsigned, Chunk> shared;  // chunk index -> contents

  void place(unsigned chunk, Chunk contents) {
    EXPECT_EQ(shared.count(chunk), 0u) << "two copies into chunk " << chunk;
    shared[chunk] = contents;
  }

  // ldmatrix.x4 with each lane's byte address: regs[lane][i][x].
  std::array<std::array<std::array<Element, 2>, 4>, 32> load(const std::array<unsigned, 32>& address,
                                                             bool transposed) {
    std::array<std::array<std::array<Element, 2>, 4>, 32> regs{};
    for (int i = 0; i < 4; ++i) {
      std::set<unsigned> groups;
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(address[8 * i + j] % 16, 0u);
        groups.insert((address[8 * i + j] / 16) % 8);
      }
      EXPECT_EQ(groups.size(), 8u) << "bank conflict in an ldmatrix phase";
    }
    for (int t = 0; t < 32; ++t) {
      for (int i = 0; i < 4; ++i) {
        for (int x = 0; x < 2; ++x) {
          const int stored_row = transposed ? 2 * (t % 4) + x : t / 4;
          const int column = transposed ? t / 4 : 2 * (t % 4) + x;
          const auto found = shared.find(address[8 * i + stored_row] / 16);
          if (found == shared.end()) {
            ADD_FAILURE() << "ldmatrix reads an unwritten chunk";
            continue;
          }
          const auto [tensor, row, chunk] = found->second;
          regs[t][i][x] = {tensor, row, 8 * chunk + column};
        }
      }
    }
    return regs;
  }
};

// Entry I's tile geometry, as the kernel lays it out.
template <int I>
struct Tiles {
  static constexpr auto c = kTiledConfigs[I];
  static constexpr int kChunksK = static_cast<int>(c.head_dim / 8), kChunksV = static_cast<int>(c.value_dim / 8);
  using KLayout = RowLayout<kChunksK>;
  using VLayout = RowLayout<kChunksV>;
  static constexpr int kBlockN = c.block_n;
  static constexpr int kQTile = 16 * c.warps * KLayout::kStride, kKTile = kBlockN * KLayout::kStride;
  static constexpr int kStage = kKTile + kBlockN * VLayout::kStride;
};

using Registers = std::array<std::array<std::array<Element, 2>, 4>, 32>;

// Every lane's registers of one x4 load against want(lane, register, element).
template <typename Want>
void expect_fragments(const Registers& regs, Want want, const std::string& what) {
  for (int t = 0; t < 32; ++t) {
    for (int i = 0; i < 4; ++i) {
      for (int x = 0; x < 2; ++x) EXPECT_EQ(regs[t][i][x], want(t, i, x)) << what << " lane " << t << " reg " << i;
    }
  }
}

// The kernel's copies: each warp its 16 Q rows; all threads one stage's K and V tiles.
template <int I>
void place_tiles(Emulator& e) {
  using G = Tiles<I>;
  for (int warp = 0; warp < G::c.warps; ++warp) {
    for (int index = 0; index < 16 * G::kChunksK; ++index) {
      const int r = warp * 16 + index / G::kChunksK, chunk = index % G::kChunksK;
      const int at = G::KLayout::at(r, chunk);
      EXPECT_TRUE(at >= 0 && at < G::kQTile);
      e.place(static_cast<unsigned>(at), {'Q', r, chunk});
    }
  }
  for (int index = 0; index < G::kBlockN * G::kChunksK; ++index) {
    const int at = G::KLayout::at(index / G::kChunksK, index % G::kChunksK);
    EXPECT_TRUE(at >= 0 && at < G::kKTile);
    e.place(static_cast<unsigned>(G::kQTile + at), {'K', index / G::kChunksK, index % G::kChunksK});
  }
  for (int index = 0; index < G::kBlockN * G::kChunksV; ++index) {
    const int at = G::VLayout::at(index / G::kChunksV, index % G::kChunksV);
    EXPECT_TRUE(at >= 0 && at < G::kStage - G::kKTile);
    e.place(static_cast<unsigned>(G::kQTile + G::kKTile + at), {'V', index / G::kChunksV, index % G::kChunksV});
  }
}

// A fragments of Q: a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..).
template <int I>
void check_q_fragments(Emulator& e) {
  using G = Tiles<I>;
  for (int warp = 0; warp < G::c.warps; ++warp) {
    for (int kk = 0; kk < G::c.head_dim / 16; ++kk) {
      std::array<unsigned, 32> address{};
      for (int lane = 0; lane < 32; ++lane) {
        FragmentAddress<G::kChunksK> f;
        f.init(0, warp * 16 + q_lane(lane).row, q_lane(lane).chunk);
        address[lane] = f.at(0, 2 * kk);
      }
      expect_fragments(e.load(address, false), [&](int t, int i, int x) {
        return Element{'Q', warp * 16 + t / 4 + 8 * (i & 1), 16 * kk + 2 * (t % 4) + x + 8 * (i >> 1)};
      }, testing::PrintToString(std::make_pair(warp, kk)) + " Q (warp, kk)");
    }
  }
}

// B fragments of Kᵀ (B[k][n] = K[n][k]): b0 (k 2t.., n g), b1 (k 2t + 8.., n g); registers 2, 3
// for the keys 8 further.
template <int I>
void check_k_fragments(Emulator& e) {
  using G = Tiles<I>;
  for (int kk = 0; kk < G::c.head_dim / 16; ++kk) {
    for (int p = 0; p < G::kBlockN / 16; ++p) {
      std::array<unsigned, 32> address{};
      for (int lane = 0; lane < 32; ++lane) {
        FragmentAddress<G::kChunksK> f;
        f.init(16u * G::kQTile, k_lane(lane).row, k_lane(lane).chunk);
        address[lane] = f.at(16 * p, 2 * kk);
      }
      expect_fragments(e.load(address, false), [&](int t, int i, int x) {
        return Element{'K', 16 * p + 8 * (i >> 1) + t / 4, 16 * kk + 8 * (i & 1) + 2 * (t % 4) + x};
      }, testing::PrintToString(std::make_pair(kk, p)) + " K (kk, p)");
    }
  }
}

// B fragments of V (B[k][n] = V[k][n], transposed loads): b0 (keys 2t.., dv g), b1 (keys
// 2t + 8.., dv g); registers 2, 3 for the columns 8 further.
template <int I>
void check_v_fragments(Emulator& e) {
  using G = Tiles<I>;
  for (int kk = 0; kk < G::kBlockN / 16; ++kk) {
    for (int p = 0; p < G::c.value_dim / 16; ++p) {
      std::array<unsigned, 32> address{};
      for (int lane = 0; lane < 32; ++lane) {
        FragmentAddress<G::kChunksV> f;
        f.init(16u * (G::kQTile + G::kKTile), v_lane(lane).row, v_lane(lane).chunk);
        address[lane] = f.at(16 * kk, 2 * p);
      }
      expect_fragments(e.load(address, true), [&](int t, int i, int x) {
        return Element{'V', 16 * kk + 8 * (i & 1) + 2 * (t % 4) + x, 16 * p + 8 * (i >> 1) + t / 4};
      }, testing::PrintToString(std::make_pair(kk, p)) + " V (kk, p)");
    }
  }
}

// The output tile: accumulator (g + 8·half, 8j + 2t..) written as word t of chunk (row, j) of
// the warp's 16 rows, read back as whole chunks; inside the warp's Q rows, one bank per lane.
template <int I>
void check_output_tile() {
  using G = Tiles<I>;
  std::map<int, std::pair<int, int>> words;
  for (int j = 0; j < G::c.value_dim / 8; ++j) {
    for (int half = 0; half < 2; ++half) {
      std::set<int> banks;
      for (int t = 0; t < 32; ++t) {
        const int word = 4 * G::VLayout::at(t / 4 + 8 * half, j) + t % 4;
        EXPECT_LT(word, 4 * 16 * G::KLayout::kStride) << "output rows spill out of the warp's Q rows";
        EXPECT_EQ(words.count(word), 0u);
        words[word] = {t / 4 + 8 * half, 8 * j + 2 * (t % 4)};
        banks.insert(word % 32);
      }
      EXPECT_EQ(banks.size(), 32u) << "bank conflict writing the output tile";
    }
  }
  for (int index = 0; index < 16 * G::kChunksV; ++index) {
    const int r = index / G::kChunksV, chunk = index % G::kChunksV;
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(words[4 * G::VLayout::at(r, chunk) + w], std::make_pair(r, 8 * chunk + 2 * w));
    }
  }
}

template <int I>
void check_config() {
  using G = Tiles<I>;
  SCOPED_TRACE(testing::Message() << "D " << G::c.head_dim << " Dv " << G::c.value_dim);
  EXPECT_EQ(16 * (G::kQTile + G::c.stages * G::kStage), plan::cuda::tiled_shared_bytes(G::c));
  Emulator e;
  place_tiles<I>(e);
  check_q_fragments<I>(e);
  check_k_fragments<I>(e);
  check_v_fragments<I>(e);
  check_output_tile<I>();
}

template <std::size_t... I>
void check_all(std::index_sequence<I...>) {
  (check_config<static_cast<int>(I)>(), ...);
}

TEST(CudaTiledLayout, FragmentsMatchTheMmaLayoutsForEveryConfiguration) {
  check_all(std::make_index_sequence<plan::cuda::kTiledConfigCount>{});
}

}  // namespace
}  // namespace heed::cuda::tiled
