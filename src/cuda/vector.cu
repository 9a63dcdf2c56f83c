// The vector (decode) route's dispatch: pass 1 on the kernel the plan names (CUDA cores:
// cuda/vector_fma.cuh; tensor cores: cuda/vector_mma.cuh; TMA: cuda/vector_tma.cuh), then the
// merge of the partitions' partials (cuda/vector_merge.cuh) where the keys are partitioned.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/vector.hpp"
#include "cuda/vector_fma.cuh"
#include "cuda/vector_merge.cuh"
#include "cuda/vector_mma.hpp"
#include "cuda/vector_tma.hpp"
#include "heed/error.hpp"

namespace heed::cuda {
namespace {

// The TMA kernel on `stream`, with its tensor maps.
template <typename T>
void run_tma(const VectorArgs& a, const plan::CudaRoute& route, dim3 grid, cudaStream_t stream) {
  const plan::CudaVectorShape& s = route.vector;
  VectorTmaArgs tma;
  static_cast<VectorArgs&>(tma) = a;
  make_vector_tma_maps(tma, s);
  LaunchRecord record(route.plan.kernel_name.c_str(), grid.x, grid.y, grid.z, stream);
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    vector_tma::launch<T>(tma, s, grid, stream);
  } else {
    throw Error(ErrorKind::Internal, "[heed::attention] no TMA vector kernel for float32");
  }
  check_launch("heed::attention", route.plan.kernel_name.c_str());
}

template <typename T>
void run_typed(const VectorArgs& args, const plan::CudaRoute& route, cudaStream_t stream) {
  const plan::CudaVectorShape& s = route.vector;
  VectorArgs a = args;
  a.row_tile = s.row_tile;
  a.k_steps = s.k_steps;
  a.v_steps = s.v_steps;
  a.ring_items = s.ring_items;
  const dim3 grid(static_cast<unsigned>(s.partitions * s.row_tiles), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(a.batch));
  if (s.tma) {
    run_tma<T>(a, route, grid, stream);
  } else {
    LaunchRecord record(route.plan.kernel_name.c_str(), grid.x, grid.y, grid.z, stream);
    if (s.tensor_cores) {
      if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        vector_mma::launch<T>(a, s, grid, stream);
      } else {
        throw Error(ErrorKind::Internal, "[heed::attention] no tensor-core vector kernel for float32");
      }
    } else {
      vector_fma::launch<T>(a, s.chunks_per_lane, s.row_tile, grid, stream);
    }
    check_launch("heed::attention", route.plan.kernel_name.c_str());
  }
  if (s.partitions > 1) {
    const auto column_blocks = (a.value_dim + vector_merge::kMergeColumns - 1) / vector_merge::kMergeColumns;
    const dim3 merge_grid(static_cast<unsigned>(s.rows * column_blocks), grid.y, grid.z);
    LaunchRecord record(route.merge_kernel_name.c_str(), merge_grid.x, merge_grid.y, merge_grid.z, stream);
    vector_merge::launch<T>(a, route, merge_grid, stream);
    check_launch("heed::attention", route.merge_kernel_name.c_str());
  }
}

}  // namespace

void run_vector(const VectorArgs& args, const plan::CudaRoute& route, cudaStream_t stream) {
  switch (args.dtype) {
    case DType::Float32: return run_typed<float>(args, route, stream);
    case DType::Float16: return run_typed<__half>(args, route, stream);
    case DType::BFloat16: return run_typed<__nv_bfloat16>(args, route, stream);
    case DType::Bool:
    case DType::Int32: break;
  }
  throw Error(ErrorKind::Internal, "[heed::attention] vector route: unsupported dtype");
}

}  // namespace heed::cuda
