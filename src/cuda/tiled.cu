// The tiled route's dispatch: the plan's entry of kTiledConfigs and dtype select the instance
// compiled for that entry (the generated instance files), launched on grid [row_blocks, Hkv, B]
// and recorded by the profiler.

#include "cuda/tiled.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <utility>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/hopper.hpp"
#include "cuda/launch.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {
namespace {

using plan::cuda::kTiledConfigs;

// The instance of entry I, found by the entry's key (so the table's order cannot mis-wire it).
template <typename T, std::size_t I>
void launch_entry(const TiledArgs& args, dim3 grid, cudaStream_t stream) {
  constexpr plan::cuda::TiledKey key = plan::cuda::tiled_key(kTiledConfigs[I]);
  tiled::launch<T, key.head_dim, key.value_dim, key.block_m, key.block_n>(args, grid, stream);
}

template <typename T, std::size_t... I>
bool launch_config(int config, const TiledArgs& args, dim3 grid, cudaStream_t stream, std::index_sequence<I...>) {
  return ((config == static_cast<int>(I) ? (launch_entry<T, I>(args, grid, stream), true) : false) || ...);
}

template <typename T>
void launch_typed(int config, const TiledArgs& args, dim3 grid, cudaStream_t stream) {
  if (!launch_config<T>(config, args, grid, stream, std::make_index_sequence<plan::cuda::kTiledConfigCount>{})) {
    throw Error(ErrorKind::Internal, format("[heed::attention] no tiled kernel for configuration {}", config));
  }
}

}  // namespace

void run_tiled(const TiledArgs& args, const plan::CudaRoute& route, cudaStream_t stream) {
  const plan::CudaTiledShape& s = route.tiled;
  if (s.wgmma) {
    run_tiled_hopper(args, route, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(s.row_blocks), static_cast<unsigned>(args.kv_heads),
                  static_cast<unsigned>(args.batch * s.value_parts));
  LaunchRecord record(route.plan.kernel_name.c_str(), grid.x, grid.y, grid.z, stream);
  switch (args.dtype) {
    case DType::Float16: launch_typed<__half>(s.config, args, grid, stream); break;
    case DType::BFloat16: launch_typed<__nv_bfloat16>(s.config, args, grid, stream); break;
    default: throw Error(ErrorKind::Internal, "[heed::attention] tiled route: float16 and bfloat16 only");
  }
  check_launch("heed::attention", route.plan.kernel_name.c_str());
}

}  // namespace heed::cuda
