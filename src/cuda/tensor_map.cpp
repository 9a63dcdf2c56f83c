#include "cuda/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

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

namespace {

CUtensorMapDataType map_type_of(DType type, const char* what) {
  switch (type) {
    case DType::Float16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::BFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default: throw Error(ErrorKind::Internal, format("[heed::attention] {}: float16 and bfloat16 only", what));
  }
}

// Byte strides of dims 1.. of a map whose dims are `dims` (elements) and element strides
// `strides`: a dim of size 1 takes a packed stride (any value does; TMA only requires one).
template <int kRank>
void byte_strides_of(const cuuint64_t (&dims)[kRank], const std::int64_t (&strides)[kRank - 1],
                     cuuint64_t (&byte_strides)[kRank - 1]) {
  cuuint64_t packed = dims[0] * 2;
  for (int axis = 0; axis < kRank - 1; ++axis) {
    packed = (packed + 15) / 16 * 16;
    byte_strides[axis] = dims[axis + 1] > 1 ? static_cast<cuuint64_t>(strides[axis]) * 2 : packed;
    packed = byte_strides[axis] * dims[axis + 1];
  }
}

template <int kRank>
CUtensorMap encode(const void* data, DType type, const cuuint64_t (&dims)[kRank],
                   const cuuint64_t (&byte_strides)[kRank - 1], const cuuint32_t (&box)[kRank], const char* what,
                   CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  cuuint32_t element_strides[kRank];
  for (int axis = 0; axis < kRank; ++axis) element_strides[axis] = 1;
  CUtensorMap map;
  const CUresult result = encode_function()(&map, map_type_of(type, what), kRank, const_cast<void*>(data), dims,
                                            byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    std::string shape;
    for (int axis = 0; axis < kRank; ++axis) shape += format("{}{}", axis > 0 ? ", " : "", dims[axis]);
    std::string steps;
    for (int axis = 0; axis < kRank - 1; ++axis) steps += format("{}{}", axis > 0 ? ", " : "", byte_strides[axis]);
    throw Error(ErrorKind::Internal,
                format("[heed::attention] cuTensorMapEncodeTiled for {} failed ({}): dims [{}], byte strides [{}]",
                       what, static_cast<int>(result), shape, steps));
  }
  return map;
}

CUtensorMap kv_map(const void* data, DType type, const Call& g, std::int64_t columns, std::int64_t keys,
                   std::int64_t batches, const Strides4& strides, cuuint32_t box_columns, int box_keys,
                   CUtensorMapSwizzle swizzle, const char* what) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(columns),
                              static_cast<cuuint64_t>(std::max<std::int64_t>(keys, 1)),
                              static_cast<cuuint64_t>(g.kv_heads), static_cast<cuuint64_t>(batches)};
  const std::int64_t steps[3] = {strides.s[2], strides.s[1], strides.s[0]};
  cuuint64_t byte_strides[3];
  byte_strides_of(dims, steps, byte_strides);
  const cuuint32_t box[4] = {box_columns, static_cast<cuuint32_t>(box_keys), 1, 1};
  return encode(data, type, dims, byte_strides, box, what, swizzle);
}

}  // namespace

CUtensorMap kv_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns, std::int64_t keys,
                          std::int64_t batches, const Strides4& strides, int box_keys, const char* what) {
  return kv_map(data, type, g, columns, keys, batches, strides, 64, box_keys, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

CUtensorMap kv_rows_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns, std::int64_t keys,
                               std::int64_t batches, const Strides4& strides, int box_keys, const char* what) {
  if (columns < 8 || columns > 256 || columns % 8 != 0) {
    throw Error(ErrorKind::Internal, format("[heed::attention] {}: whole-row boxes of {} columns", what, columns));
  }
  return kv_map(data, type, g, columns, keys, batches, strides, static_cast<cuuint32_t>(columns), box_keys,
                CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

bool row_tensor_map_fits(const void* data, const Call& g, const Strides4& strides) {
  if (g.group < 1 || 64 % g.group != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0 || strides.s[3] != 1) return false;
  const std::int64_t extents[3] = {g.batch, g.q_heads, g.q_len};
  for (int axis = 0; axis < 3; ++axis) {
    const std::int64_t stride = strides.s[axis];
    if (extents[axis] > 1 && (stride <= 0 || stride % 8 != 0 || stride >= (std::int64_t{1} << 39))) return false;
  }
  return true;
}

CUtensorMap row_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns,
                           const Strides4& strides, const char* what) {
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(g.group),
                              static_cast<cuuint64_t>(std::max<std::int64_t>(g.q_len, 1)),
                              static_cast<cuuint64_t>(g.kv_heads), static_cast<cuuint64_t>(g.batch)};
  const std::int64_t steps[4] = {strides.s[1], strides.s[2], strides.s[1] * g.group, strides.s[0]};
  cuuint64_t byte_strides[4];
  byte_strides_of(dims, steps, byte_strides);
  const cuuint32_t box[5] = {64, static_cast<cuuint32_t>(g.group), static_cast<cuuint32_t>(64 / g.group), 1, 1};
  return encode(data, type, dims, byte_strides, box, what);
}

}  // namespace heed::cuda
