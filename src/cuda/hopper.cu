// The Hopper tiled route's dispatch: TMA tensor maps of K and V for the call, then the plan's
// instantiation (src/cuda/hopper/*.cu) on grid [row_blocks, Hkv, B], recorded by the profiler.

#include "cuda/hopper.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <utility>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
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

// The map of one [B, Hkv, Lk, E] operand: dims (E, Lk, Hkv, B), boxes of 64 columns × block_n
// keys, 128-byte swizzle, keys past Lk read as zeros. Sizes of 1 take a packed stride (any
// value does; the planner checked the others: positive, multiples of 16 bytes, under 2^40).
// Lk = 0 is described as 1 key: the kernel then loads no tile.
CUtensorMap tensor_map(const void* data, CUtensorMapDataType type, const Geometry& g, std::int64_t columns,
                       const Strides4& strides, int block_n, const char* name) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(std::max<std::int64_t>(g.kv_len, 1)),
                              static_cast<cuuint64_t>(g.kv_heads), static_cast<cuuint64_t>(g.batch)};
  cuuint64_t byte_strides[3];
  cuuint64_t packed = static_cast<cuuint64_t>(columns) * 2;
  for (int axis = 0; axis < 3; ++axis) {
    const std::int64_t stride = strides.s[2 - axis];
    packed = (packed + 15) / 16 * 16;
    byte_strides[axis] = dims[axis + 1] > 1 ? static_cast<cuuint64_t>(stride) * 2 : packed;
    packed = byte_strides[axis] * dims[axis + 1];
  }
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(block_n), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = encode_function()(&map, type, 4, const_cast<void*>(data), dims, byte_strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::Internal,
                format("[heed::attention] cuTensorMapEncodeTiled for {} failed ({}): dims [{}, {}, {}, {}], byte "
                       "strides [{}, {}, {}]",
                       name, static_cast<int>(result), dims[0], dims[1], dims[2], dims[3], byte_strides[0],
                       byte_strides[1], byte_strides[2]));
  }
  return map;
}

template <typename T, std::size_t... I>
bool launch_config(int config, const HopperArgs& args, dim3 grid, cudaStream_t stream, std::index_sequence<I...>) {
  return ((config == static_cast<int>(I)
               ? (hopper::launch<T, static_cast<int>(I)>(args, grid, stream), true)
               : false) ||
          ...);
}

template <typename T>
void launch_typed(int config, const HopperArgs& args, dim3 grid, cudaStream_t stream) {
  if (!launch_config<T>(config, args, grid, stream, std::make_index_sequence<plan::cuda::kHopperConfigCount>{})) {
    throw Error(ErrorKind::Internal, format("[heed::attention] no Hopper tiled kernel for configuration {}", config));
  }
}

}  // namespace

void run_tiled_hopper(const TiledArgs& args, const plan::CudaRoute& route, cudaStream_t stream) {
  const plan::CudaTiledShape& s = route.tiled;
  const dim3 grid(static_cast<unsigned>(s.row_blocks), static_cast<unsigned>(args.g.kv_heads),
                  static_cast<unsigned>(args.g.batch));
  HopperArgs a;
  static_cast<TiledArgs&>(a) = args;
  CUtensorMapDataType type;
  switch (args.type) {
    case ElementType::Float16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case ElementType::BFloat16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    default: throw Error(ErrorKind::Internal, "[heed::attention] Hopper tiled route: float16 and bfloat16 only");
  }
  a.pingpong = s.pingpong;
  const int block_n = static_cast<int>(s.block_n);
  a.k_map = tensor_map(args.k, type, args.g, args.g.head_dim, args.k_strides, block_n, "k");
  a.v_map = tensor_map(args.v, type, args.g, args.g.value_dim, args.v_strides, block_n, "v");
  LaunchRecord record(route.plan.kernel_name.c_str(), grid.x, grid.y, grid.z, stream);
  if (args.type == ElementType::Float16) {
    launch_typed<__half>(s.config, a, grid, stream);
  } else {
    launch_typed<__nv_bfloat16>(s.config, a, grid, stream);
  }
  check_launch("heed::attention", route.plan.kernel_name.c_str());
}

}  // namespace heed::cuda
