// Where the TMA vector kernel's 16-key tiles lie in its maps and which of a tile's keys it keeps
// (cuda/vector_keys.hpp): host arithmetic, tested without a GPU. The kernel issues each tile's
// copies at tile_coordinates(first key) and zeroes V rows outside value_keep_masks.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/vector_keys.hpp"

namespace heed::cuda {
namespace {

using vector_tma::align_block_keys;
using vector_tma::map_extent;
using vector_tma::tile_coordinates;
using vector_tma::value_keep_masks;

TEST(VectorTmaKeys, PagedBlocksStartOnWholeTiles) {
  // A block from key 37 (a window's start, or a partition's) of 100 keys: from key 32, the 5
  // lead keys loaded and masked.
  const vector_tma::BlockKeys paged = align_block_keys(true, 37, 100);
  EXPECT_EQ(paged.begin, 32);
  EXPECT_EQ(paged.lead, 5);
  EXPECT_EQ(paged.keys, 105);
  const vector_tma::BlockKeys aligned = align_block_keys(true, 48, 10);
  EXPECT_EQ(aligned.begin, 48);
  EXPECT_EQ(aligned.lead, 0);
  EXPECT_EQ(aligned.keys, 10);
  // Dense and ragged blocks, and blocks with no key, stay as they are.
  const vector_tma::BlockKeys dense = align_block_keys(false, 37, 100);
  EXPECT_EQ(dense.begin, 37);
  EXPECT_EQ(dense.lead, 0);
  EXPECT_EQ(dense.keys, 100);
  const vector_tma::BlockKeys empty = align_block_keys(true, 37, 0);
  EXPECT_EQ(empty.keys, 0);
  EXPECT_EQ(empty.lead, 0);
}

// A paged call over `num_pages` pages of `page_size`, its block table `table` (one row).
call::Call paged_call(const std::vector<std::int32_t>& table, std::int64_t page_size, std::int64_t num_pages) {
  call::Call c;
  c.form = call::Form::Paged;
  c.batch = 1;
  c.page_size = page_size;
  c.kv_len = static_cast<std::int64_t>(table.size()) * page_size;
  c.seqs.block_table = table.data();
  c.seqs.table_strides[0] = static_cast<std::int64_t>(table.size());
  c.seqs.table_strides[1] = 1;
  c.seqs.max_pages = static_cast<std::int64_t>(table.size());
  c.seqs.num_pages = num_pages;
  return c;
}

TEST(VectorTmaKeys, PagedTilesFindTheirPageAndRow) {
  const std::vector<std::int32_t> table = {5, 2, 7, 0};
  const call::Call c = paged_call(table, 64, 8);
  std::int32_t length = 256;
  call::Call with_lengths = c;
  with_lengths.seqs.seqlens_k = &length;
  const call::Sequence s = call::sequence(with_lengths, 0);
  ASSERT_EQ(s.pages, table.data());
  // Every 16-key tile of a page of 64 lies inside it: rows 0, 16, 32, 48 of the page.
  for (int key = 0; key < 256; key += 16) {
    const vector_tma::TileCoordinates t = tile_coordinates(c, s, key);
    EXPECT_EQ(t.batch, table[static_cast<std::size_t>(key / 64)]) << key;
    EXPECT_EQ(t.row, key % 64) << key;
    EXPECT_LE(t.row + 16, 64) << "a tile crosses its page";
    // The same element as call::key_offset's, for a cache of [8, Hkv 2, 64, D 128] strides.
    call::Strides st;
    st[0] = 2 * 64 * 128;
    st[1] = 64 * 128;
    st[2] = 128;
    st[3] = 1;
    EXPECT_EQ(t.batch * st[0] + st[1] + t.row * st[2], call::key_offset(c, st, s, 1, key)) << key;
  }
}

TEST(VectorTmaKeys, GarbageBlockTablesAreClampedToTheCache) {
  const std::vector<std::int32_t> table = {-3, std::numeric_limits<std::int32_t>::max(), 8, -1};
  const call::Call c = paged_call(table, 16, 8);
  call::Sequence s;
  s.pages = table.data();
  EXPECT_EQ(tile_coordinates(c, s, 0).batch, 0);
  EXPECT_EQ(tile_coordinates(c, s, 16).batch, 7);
  EXPECT_EQ(tile_coordinates(c, s, 32).batch, 7);
  EXPECT_EQ(tile_coordinates(c, s, 48).batch, 0);
}

TEST(VectorTmaKeys, DenseAndRaggedTilesAreRows) {
  call::Call dense;
  dense.batch = 3;
  call::Sequence s;
  s.index = 2;
  EXPECT_EQ(tile_coordinates(dense, s, 48).row, 48);
  EXPECT_EQ(tile_coordinates(dense, s, 48).batch, 2);
  call::Call ragged;
  ragged.form = call::Form::Ragged;
  s.k_row = 1000;
  EXPECT_EQ(tile_coordinates(ragged, s, 48).row, 1048);
  EXPECT_EQ(tile_coordinates(ragged, s, 48).batch, 0);
}

TEST(VectorTmaKeys, MapsSpanTheFormsRows) {
  call::Call c;
  c.batch = 4;
  EXPECT_EQ(map_extent(c, 900).keys, 900);
  EXPECT_EQ(map_extent(c, 900).batches, 4);
  c.form = call::Form::Ragged;
  c.seqs.total_k = 5000;
  EXPECT_EQ(map_extent(c, 900).keys, 5000);
  EXPECT_EQ(map_extent(c, 900).batches, 1);
  c.form = call::Form::Paged;
  c.page_size = 32;
  c.seqs.num_pages = 77;
  EXPECT_EQ(map_extent(c, 900).keys, 32);
  EXPECT_EQ(map_extent(c, 900).batches, 77);
}

// Lane tq's V registers hold keys 2tq, 2tq + 1 (0-1) and 2tq + 8, 2tq + 9 (2-3) of the tile.
TEST(VectorTmaKeys, ValueRowsOutsideTheBlockAreZeroed) {
  // A whole tile inside [0, 100): every half kept.
  for (int tq = 0; tq < 4; ++tq) {
    const vector_tma::KeepMasks m = value_keep_masks(32, 0, 100, tq);
    EXPECT_EQ(m.low, 0xffffffffu);
    EXPECT_EQ(m.high, 0xffffffffu);
  }
  // The last tile of [0, 37): keys 32..36 kept. Lane tq 2: keys 36 (kept), 37, 44, 45 (not).
  const vector_tma::KeepMasks tail = value_keep_masks(32, 0, 37, 2);
  EXPECT_EQ(tail.low, 0x0000ffffu);
  EXPECT_EQ(tail.high, 0u);
  EXPECT_EQ(value_keep_masks(32, 0, 37, 0).low, 0xffffffffu);  // keys 32, 33
  EXPECT_EQ(value_keep_masks(32, 0, 37, 0).high, 0u);          // keys 40, 41
  // The first tile of a block with 5 lead keys: keys 0..4 zeroed. Lane tq 2: keys 4 (zeroed), 5.
  const vector_tma::KeepMasks lead = value_keep_masks(0, 5, 105, 2);
  EXPECT_EQ(lead.low, 0xffff0000u);
  EXPECT_EQ(lead.high, 0xffffffffu);  // keys 12, 13
  EXPECT_EQ(value_keep_masks(0, 5, 105, 0).low, 0u);  // keys 0, 1
}

}  // namespace
}  // namespace heed::cuda
