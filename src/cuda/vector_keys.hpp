#pragma once
// Where the vector kernels' keys lie: a paged key's page and row (every vector kernel), and the
// TMA kernel's 16-key tiles in its maps of K and V, per form, with which of a tile's keys are the
// block's. Host and device, no CUDA types: unit-tested without a GPU
// (tests/unit/cuda_vector_keys_test.cpp).
//
// Dense keys sit at (key, key head, batch) of a [B, Hkv, keys] map; ragged rows at (k_row + key,
// key head, 0) of the [total_k] rows as one batch; paged rows at (row in page, key head, page) of
// the cache's pages as num_pages batches of page_size rows, the page read from the block table
// (clamped to the cache) once per tile.

#include <cstdint>

#include "call/call.hpp"
#include "core/host_device.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {

// The page size the vector kernels divide key indices by, in 32 bits (paged_row below).
HEED_HOST_DEVICE unsigned page_divisor(std::int64_t page_size) {
  return static_cast<unsigned>(page_size < 0x7fffffff ? page_size : 0x7fffffff);
}

// Page and row within it of key j of a paged sequence whose block-table row is `pages`, the page
// clamped to the cache (device metadata may hold anything): call::key_offset's lookup in 32-bit
// arithmetic (keys < 2^31: int32 seqlens), which the vector kernels' loops take (page_of_key in
// cuda/vector_common.cuh) without a 64-bit division.
HEED_HOST_DEVICE void paged_row(const std::int32_t* pages, std::int64_t table_stride, std::int64_t num_pages,
                                std::int64_t page_size, std::int64_t j, std::int64_t& page, std::int64_t& row) {
  const unsigned size = page_divisor(page_size);
  const auto key = static_cast<unsigned>(j);
  const unsigned index = key / size;
  row = key - index * size;
  page = call::detail::clamp(pages[index * table_stride], 0, num_pages - 1);
}

namespace vector_tma {

// The extent of a form's maps: keys per batch and batches.
struct MapExtent {
  std::int64_t keys = 0, batches = 0;
};

// Dense maps end at the visible span (keys past it read as zeros); ragged ones hold every row
// (rows past a sequence are the next one's, masked and cleared); paged ones every page.
inline MapExtent map_extent(const call::Call& c, std::int64_t span_end) {
  if (c.form == call::Form::Ragged) return {c.seqs.total_k, 1};
  if (c.form == call::Form::Paged) return {c.page_size, c.seqs.num_pages > 0 ? c.seqs.num_pages : 1};
  return {span_end, c.batch};
}

// A block's keys as the kernel loads them: from `begin` (lead keys before the block's first
// included, masked), `keys` of them counting the lead.
struct BlockKeys {
  std::int64_t begin = 0;
  int lead = 0;
  int keys = 0;
};

// Paged tiles start on a multiple of 16 keys, so that with pages of a multiple of 16 a tile never
// crosses a page; the keys before the block's first (the previous partition's, or before the
// window) are loaded and masked. Dense and ragged tiles start at the block's first key.
HEED_HOST_DEVICE BlockKeys align_block_keys(bool paged, std::int64_t key_begin, int keys) {
  BlockKeys k{key_begin, 0, keys};
  if (paged && keys > 0) {
    k.lead = static_cast<int>(key_begin % plan::cuda::kVectorMmaKeysPerTile);
    k.begin = key_begin - k.lead;
    k.keys = keys + k.lead;
  }
  return k;
}

// The map coordinates of the tile whose first key is `key` (of sequence `s`): its row and batch.
struct TileCoordinates {
  int row = 0, batch = 0;
};

HEED_HOST_DEVICE TileCoordinates tile_coordinates(const call::Call& c, const call::Sequence& s, int key) {
  if (c.form == call::Form::Paged) {
    std::int64_t page = 0, row = 0;
    paged_row(s.pages, c.seqs.table_strides[1], c.seqs.num_pages, c.page_size, key, page, row);
    return {static_cast<int>(row), static_cast<int>(page)};
  }
  if (c.form == call::Form::Ragged) return {static_cast<int>(s.k_row) + key, 0};
  return {key, static_cast<int>(s.index)};
}

// Which keys of a V fragment this lane keeps: ldmatrix .trans leaves registers 0 and 1 with keys
// 2tq and 2tq + 1 of the tile (low and high halves), registers 2 and 3 with keys 2tq + 8 and
// 2tq + 9. Keys outside [first, last) (relative to the block's begin) are zeroed: a page's tail or
// the next sequence's rows may hold NaN, and a zero weight times NaN is NaN.
struct KeepMasks {
  unsigned low = 0, high = 0;  // for registers 0-1 and 2-3
};

HEED_HOST_DEVICE KeepMasks value_keep_masks(int key0, int first, int last, int tq) {
  const auto keep = [first, last](int key) { return key >= first && key < last ? 0xffffu : 0u; };
  const int key = key0 + 2 * tq;
  return {keep(key) | (keep(key + 1) << 16), keep(key + 8) | (keep(key + 9) << 16)};
}

}  // namespace vector_tma
}  // namespace heed::cuda
