#include "cuda/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "heed/error.hpp"

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

}  // namespace

CUtensorMap kv_tensor_map(const void* data, ElementType type, const Geometry& g, std::int64_t columns,
                          std::int64_t keys, const Strides4& strides, int box_keys, const char* what) {
  CUtensorMapDataType map_type;
  switch (type) {
    case ElementType::Float16: map_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case ElementType::BFloat16: map_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    default: throw Error(ErrorKind::Internal, format("[heed::attention] {}: float16 and bfloat16 only", what));
  }
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
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_keys), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = encode_function()(&map, map_type, 4, const_cast<void*>(data), dims, byte_strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::Internal,
                format("[heed::attention] cuTensorMapEncodeTiled for {} failed ({}): dims [{}, {}, {}, {}], byte "
                       "strides [{}, {}, {}]",
                       what, static_cast<int>(result), dims[0], dims[1], dims[2], dims[3], byte_strides[0],
                       byte_strides[1], byte_strides[2]));
  }
  return map;
}

}  // namespace heed::cuda
