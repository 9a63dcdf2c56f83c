// The CUDA backend's entry: the call descriptor with each route's launch shape, then the route.

#include <cuda_runtime.h>

#include <type_traits>
#include <variant>

#include "cuda/allocator.hpp"
#include "cuda/check.hpp"
#include "cuda/composed.hpp"
#include "cuda/runtime.hpp"
#include "cuda/tiled.hpp"
#include "cuda/vector.hpp"

namespace heed::cuda {

void run_attention(const Call& call, const AttentionOptions& options, const plan::CudaRoute& route,
                   void* stream_handle) {
  const int device = route.plan.device.index;
  DeviceGuard guard(device, call::op_of(call));
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  Scratch scratch(device, route.plan.scratch_bytes, options.workspace, stream_handle, call::op_of(call));
  std::visit(
      [&](const auto& kernel) {
        using Kernel = std::decay_t<decltype(kernel)>;
        if constexpr (std::is_same_v<Kernel, route::Vector>) {
          VectorArgs a;
          static_cast<Call&>(a) = call;
          a.transform = score::transform(call, score::kLog2e);
          a.wide_loads = call.rows_wide;
          const plan::CudaVectorShape& s = route.vector;
          a.lanes_per_key = s.lanes_per_key;
          a.rows = s.rows;
          a.row_tiles = s.row_tiles;
          a.span_begin = s.span_begin;
          a.span_end = s.span_end;
          a.partitions = s.partitions;
          a.keys_per_partition = s.keys_per_partition;
          a.partials = route.partials.at<float>(scratch.data());
          run_vector(a, route, stream);
        } else if constexpr (std::is_same_v<Kernel, route::Tiled>) {
          TiledArgs a;
          static_cast<Call&>(a) = call;
          a.transform = score::transform(call, score::kLog2e);
          a.rows = route.tiled.rows;
          a.row_blocks = route.tiled.row_blocks;
          a.wide_out = call.out_rows_wide;
          a.value_parts = route.tiled.value_parts;
          a.heads_inner = route.tiled.heads_inner;
          run_tiled(a, route, stream);
        } else {
          run_composed(call, route, scratch.data(), device, stream);
        }
      },
      route.plan.kernel);
}

}  // namespace heed::cuda
