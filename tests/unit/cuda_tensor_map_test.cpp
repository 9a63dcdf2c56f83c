// Which Q and output views the Hopper tiled kernel moves by TMA (cuda/tensor_map.hpp's
// row_tensor_map_fits): host logic only, so it runs without a GPU.

#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/tensor_map.hpp"

namespace heed::cuda {
namespace {

// B 2, 8 query heads on 2 key heads (group 4), Lq 100, D 64: [B, H, L, D] contiguous.
Call geometry(std::int64_t q_heads = 8, std::int64_t kv_heads = 2) {
  Call g;
  g.batch = 2;
  g.q_heads = q_heads;
  g.kv_heads = kv_heads;
  g.group = q_heads / kv_heads;
  g.q_len = 100;
  g.kv_len = 100;
  g.head_dim = 64;
  g.value_dim = 64;
  return g;
}

Strides4 contiguous(const Call& g) { return {{g.q_heads * g.q_len * 64, g.q_len * 64, 64, 1}}; }

alignas(16) std::uint16_t buffer[64];

TEST(RowTensorMap, ContiguousAndBlhdRowsFit) {
  const Call g = geometry();
  EXPECT_TRUE(row_tensor_map_fits(buffer, g, contiguous(g)));
  const Strides4 blhd{{g.q_len * g.q_heads * 64, 64, g.q_heads * 64, 1}};  // [B, L, H, D] storage
  EXPECT_TRUE(row_tensor_map_fits(buffer, g, blhd));
}

TEST(RowTensorMap, GroupsThatDoNotDivide64DoNot) {
  const Call g3 = geometry(6, 2);  // group 3: a box of 64 rows is not whole positions
  EXPECT_FALSE(row_tensor_map_fits(buffer, g3, contiguous(g3)));
  const Call g64 = geometry(64, 1);
  EXPECT_TRUE(row_tensor_map_fits(buffer, g64, contiguous(g64)));
  const Call g128 = geometry(128, 1);
  EXPECT_FALSE(row_tensor_map_fits(buffer, g128, contiguous(g128)));
}

TEST(RowTensorMap, RowsMustBeContiguousAlignedAndForward) {
  const Call g = geometry();
  Strides4 s = contiguous(g);
  EXPECT_FALSE(row_tensor_map_fits(reinterpret_cast<const std::uint16_t*>(buffer) + 1, g, s));  // 2-byte aligned
  s = contiguous(g);
  s.s[3] = 2;
  EXPECT_FALSE(row_tensor_map_fits(buffer, g, s));  // strided last dimension
  s = contiguous(g);
  s.s[2] = 67;
  EXPECT_FALSE(row_tensor_map_fits(buffer, g, s));  // rows 134 bytes apart
  s = contiguous(g);
  s.s[2] = -64;
  EXPECT_FALSE(row_tensor_map_fits(buffer, g, s));  // positions backwards
  s = contiguous(g);
  s.s[1] = 0;
  EXPECT_FALSE(row_tensor_map_fits(buffer, g, s));  // heads broadcast
  s = contiguous(g);
  s.s[0] = std::int64_t{1} << 39;
  EXPECT_FALSE(row_tensor_map_fits(buffer, g, s));  // a stride of 2^40 bytes
}

TEST(RowTensorMap, DimensionsOfOneTakeAnyStride) {
  Call g = geometry();
  g.batch = 1;
  Strides4 s = contiguous(g);
  s.s[0] = 3;  // one batch: never stepped
  EXPECT_TRUE(row_tensor_map_fits(buffer, g, s));
  g.q_len = 1;
  s.s[2] = 5;  // one position
  EXPECT_TRUE(row_tensor_map_fits(buffer, g, s));
}

}  // namespace
}  // namespace heed::cuda
