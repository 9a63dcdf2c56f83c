// The TMA vector kernel's tensor maps of K and V, built on the host for each call.

#include "cuda/tensor_map.hpp"
#include "cuda/vector_tma.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {

static_assert(plan::cuda::kVectorTmaBoxColumns == 64, "kv_tensor_map's boxes are 64 columns wide");

void make_vector_tma_maps(VectorTmaArgs& args, const plan::CudaVectorShape& shape) {
  if (!args.wide_loads) {
    throw Error(ErrorKind::Internal,
                "[heed::attention] TMA vector kernel planned for rows that are not 16-byte chunks");
  }
  // Keys past the visible span (the last tile of the last partition) read as zeros.
  args.k_map = kv_tensor_map(args.k, args.dtype, args, args.head_dim, shape.span_end, args.k_strides,
                             plan::cuda::kVectorMmaKeysPerTile, "the TMA vector kernel's k");
  args.v_map = kv_tensor_map(args.v, args.dtype, args, args.value_dim, shape.span_end, args.v_strides,
                             plan::cuda::kVectorMmaKeysPerTile, "the TMA vector kernel's v");
}

}  // namespace heed::cuda
