// The TMA vector kernel's tensor maps of K and V, built on the host for each call.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/vector_tma.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {
namespace {

// cuTensorMapEncodeTiled from the driver the runtime loaded (heed does not link libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found),
          "heed::attention", "cudaGetDriverEntryPointByVersion (cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
      throw Error(ErrorKind::Unsupported, "[heed::attention] the CUDA driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return function;
}

// The map of one [B, Hkv, Lk, E] operand over its first `keys` keys: dims (E, keys, Hkv, B),
// boxes of 64 columns × 16 keys, 128-byte swizzle, reads past either end as zeros. Sizes of 1
// take a packed stride (any value does; the planner checked the others: positive, multiples of
// 16 bytes).
CUtensorMap key_map(const void* data, CUtensorMapDataType type, const Geometry& g, std::int64_t columns,
                    std::int64_t keys, const Strides4& strides, const char* name) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(columns),
                              static_cast<cuuint64_t>(std::max<std::int64_t>(keys, 1)),
                              static_cast<cuuint64_t>(g.kv_heads), static_cast<cuuint64_t>(g.batch)};
  cuuint64_t byte_strides[3];
  cuuint64_t packed = static_cast<cuuint64_t>(columns) * 2;
  for (int axis = 0; axis < 3; ++axis) {
    const std::int64_t stride = strides.s[2 - axis];
    packed = (packed + 15) / 16 * 16;
    byte_strides[axis] = dims[axis + 1] > 1 ? static_cast<cuuint64_t>(stride) * 2 : packed;
    packed = byte_strides[axis] * dims[axis + 1];
  }
  const cuuint32_t box[4] = {plan::cuda::kVectorTmaBoxColumns, plan::cuda::kVectorMmaKeysPerTile, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = encode_function()(&map, type, 4, const_cast<void*>(data), dims, byte_strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::Internal,
                format("[heed::attention] cuTensorMapEncodeTiled for the vector kernel's {} failed ({}): dims [{}, "
                       "{}, {}, {}], byte strides [{}, {}, {}]",
                       name, static_cast<int>(result), dims[0], dims[1], dims[2], dims[3], byte_strides[0],
                       byte_strides[1], byte_strides[2]));
  }
  return map;
}

}  // namespace

void make_vector_tma_maps(VectorTmaArgs& args, const plan::CudaVectorShape& shape) {
  CUtensorMapDataType type;
  switch (args.type) {
    case ElementType::Float16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case ElementType::BFloat16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    default: throw Error(ErrorKind::Internal, "[heed::attention] TMA vector kernel: float16 and bfloat16 only");
  }
  if (!args.wide_loads) {
    throw Error(ErrorKind::Internal,
                "[heed::attention] TMA vector kernel planned for rows that are not 16-byte chunks");
  }
  // Keys past the visible span (the last tile of the last partition) read as zeros.
  args.k_map = key_map(args.k, type, args.g, args.g.head_dim, shape.span_end, args.k_strides, "k");
  args.v_map = key_map(args.v, type, args.g, args.g.value_dim, shape.span_end, args.v_strides, "v");
}

}  // namespace heed::cuda
