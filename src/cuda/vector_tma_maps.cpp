// The TMA vector kernel's tensor maps of K and V, built on the host for each call.

#include <iterator>

#include "cuda/tensor_map.hpp"
#include "cuda/vector_keys.hpp"
#include "cuda/vector_tma.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {

static_assert(plan::cuda::kVectorTmaBoxColumns == 64, "kv_tensor_map's boxes are 64 columns wide");
static_assert(std::end(plan::cuda::kVectorTmaHeadClasses)[-1] <= 256, "a whole-row box holds at most 256 columns");

namespace {

constexpr int kKeys = plan::cuda::kVectorMmaKeysPerTile;
constexpr int kColumns = plan::cuda::kVectorTmaBoxColumns;

TmaItemLayout item_layout(std::int64_t columns) {
  TmaItemLayout l;
  l.chunks = static_cast<int>(columns / 8);
  l.swizzled = !plan::cuda::vector_tma_whole_rows(columns);
  if (l.swizzled) {
    l.boxes = static_cast<int>((columns + kColumns - 1) / kColumns);
    l.row_bytes = 2 * kColumns;
    l.box_stride = kKeys * l.row_bytes;
  } else {
    l.boxes = 1;
    l.row_bytes = static_cast<unsigned>(2 * columns);
    l.box_stride = 2 * kColumns;
  }
  l.bytes = l.swizzled ? static_cast<unsigned>(l.boxes) * l.box_stride : kKeys * l.row_bytes;
  return l;
}

CUtensorMap make_map(const void* data, const VectorTmaArgs& args, std::int64_t columns,
                     const vector_tma::MapExtent& extent, const Strides4& strides, const TmaItemLayout& l,
                     const char* what) {
  return l.swizzled
             ? kv_tensor_map(data, args.dtype, args, columns, extent.keys, extent.batches, strides, kKeys, what)
             : kv_rows_tensor_map(data, args.dtype, args, columns, extent.keys, extent.batches, strides, kKeys, what);
}

// Row copies: whole rows at the class's padded pitch, one copy per key row.
TmaItemLayout row_copy_layout(std::int64_t columns, int head_class) {
  TmaItemLayout l;
  l.chunks = static_cast<int>(columns / 8);
  l.row_bytes = static_cast<unsigned>(plan::cuda::vector_tma_row_pitch(head_class));
  l.box_stride = 2 * kColumns;
  l.boxes = kKeys;
  l.bytes = static_cast<unsigned>(kKeys * 2 * columns);
  return l;
}

}  // namespace

void make_vector_tma_maps(VectorTmaArgs& args, const plan::CudaVectorShape& shape) {
  if (!args.wide_loads) {
    throw Error(ErrorKind::Internal,
                "[heed::attention] TMA vector kernel planned for rows that are not 16-byte chunks");
  }
  // Dense keys past the visible span (the last tile of the last partition) read as zeros; a
  // ragged batch's map is its rows as one batch, a paged cache's its pages as batches of rows.
  if (shape.row_copies) {
    args.row_copies = true;
    args.k_layout = row_copy_layout(args.head_dim, shape.head_class);
    args.v_layout = row_copy_layout(args.value_dim, shape.head_class);
    return;
  }
  const vector_tma::MapExtent extent = vector_tma::map_extent(args, shape.span_end);
  args.k_layout = item_layout(args.head_dim);
  args.v_layout = item_layout(args.value_dim);
  // A call with no keys (an empty ragged k, a cache of no pages) may pass null k and v: its blocks
  // load no tile, and q's address stands in so that the map encodes.
  const auto data = [&](const void* operand) { return operand != nullptr ? operand : args.q; };
  args.k_map = make_map(data(args.k), args, args.head_dim, extent, args.k_strides, args.k_layout,
                        "the TMA vector kernel's k");
  args.v_map = make_map(data(args.v), args, args.value_dim, extent, args.v_strides, args.v_layout,
                        "the TMA vector kernel's v");
}

}  // namespace heed::cuda
