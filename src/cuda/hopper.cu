// The Hopper tiled route's dispatch: TMA tensor maps of K and V by form (and of Q and the output
// where their rows allow) for the call, then the instance compiled for the plan's entry of
// kHopperConfigs (the generated instance files) on grid [row_blocks, Hkv, B], recorded by the
// profiler.

#include "cuda/hopper.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <utility>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/tensor_map.hpp"
#include "cuda/vector_keys.hpp"
#include "heed/error.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda {
namespace {

// The instance of entry I, found by the entry's key (so the table's order cannot mis-wire it).
template <typename T, std::size_t I>
void launch_entry(const HopperArgs& args, dim3 grid, cudaStream_t stream) {
  constexpr plan::cuda::HopperKey key = plan::cuda::hopper_key(plan::cuda::kHopperConfigs[I]);
  hopper::launch<T, key.head_dim, key.value_dim, key.block_n, key.consumers>(args, grid, stream);
}

template <typename T, std::size_t... I>
bool launch_config(int config, const HopperArgs& args, dim3 grid, cudaStream_t stream, std::index_sequence<I...>) {
  return ((config == static_cast<int>(I) ? (launch_entry<T, I>(args, grid, stream), true) : false) || ...);
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
  const dim3 grid(static_cast<unsigned>(s.row_blocks), static_cast<unsigned>(args.kv_heads),
                  static_cast<unsigned>(args.batch));
  HopperArgs a;
  static_cast<TiledArgs&>(a) = args;
  a.pingpong = s.pingpong;
  const int block_n = static_cast<int>(s.block_n);
  // K and V maps by form, as the TMA vector kernel's (vector_keys.hpp): dense [B, Hkv, Lk]; a
  // ragged batch's [total_k] rows as one batch, each block reading its sequence's from cu_seqlens
  // (keys of a tile past it are masked like any); a paged cache's pages as num_pages batches of
  // page_size rows, a tile copied as boxes of one page each; pages of no multiple of 16 keys row
  // by row by the producer warpgroup (no maps).
  const bool paged = args.form == call::Form::Paged;
  a.row_copies = paged && plan::cuda::hopper_paging(args.page_size, plan::cuda::kHopperConfigs[s.config]) ==
                              plan::cuda::HopperPaging::Rows;
  a.key_box = paged ? plan::cuda::hopper_page_box_keys(args.page_size, block_n) : block_n;
  a.key_boxes = block_n / a.key_box;
  if (!a.row_copies) {
    const vector_tma::MapExtent extent = vector_tma::map_extent(args, args.kv_len);
    // A cache of no pages may come with null k and v (its blocks load no tile): q's address
    // stands in so that the maps encode.
    const auto data = [&](const void* operand) { return operand != nullptr ? operand : args.q; };
    a.k_map = kv_tensor_map(data(args.k), args.dtype, args, args.head_dim, extent.keys, extent.batches,
                            args.k_strides, a.key_box, "the Hopper tiled kernel's k");
    a.v_map = kv_tensor_map(data(args.v), args.dtype, args, args.value_dim, extent.keys, extent.batches,
                            args.v_strides, a.key_box, "the Hopper tiled kernel's v");
  }
  // Queries placed by cu_seqlens_q (ragged, chunked paged) are one batch of total_q rows.
  const bool q_rows = args.seqs.cu_q != nullptr;
  Call rows = args;
  if (q_rows) {
    rows.batch = 1;
    rows.q_len = args.seqs.total_q;
  }
  if (row_tensor_map_fits(args.q, rows, args.q_strides)) {
    a.q_map = row_tensor_map(args.q, args.dtype, rows, args.head_dim, args.q_strides, "the Hopper tiled kernel's q");
    a.q_rows_tma = true;
  }
  // A TMA store clips at the tensor's end only: a sequence's last box of total_q rows would write
  // the next sequence's rows, so those go by the consumers' guarded stores.
  if (!q_rows && row_tensor_map_fits(args.out, args, args.out_strides)) {
    a.out_map = row_tensor_map(args.out, args.dtype, args, args.value_dim, args.out_strides,
                               "the Hopper tiled kernel's out");
    a.out_rows_tma = true;
  }
  LaunchRecord record(route.plan.kernel_name.c_str(), grid.x, grid.y, grid.z, stream);
  if (args.dtype == DType::Float16) {
    launch_typed<__half>(s.config, a, grid, stream);
  } else {
    launch_typed<__nv_bfloat16>(s.config, a, grid, stream);
  }
  check_launch("heed::attention", route.plan.kernel_name.c_str());
}

}  // namespace heed::cuda
