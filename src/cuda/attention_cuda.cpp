// The CUDA backend's entry: the call descriptor with each route's launch shape, then the route.

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <variant>
#include <vector>

#include "call/metadata.hpp"
#include "cuda/allocator.hpp"
#include "cuda/check.hpp"
#include "cuda/composed.hpp"
#include "cuda/runtime.hpp"
#include "cuda/tiled.hpp"
#include "cuda/vector.hpp"

namespace heed::cuda {
namespace {

// The route's launches on the current device.
void launch_route(const Call& call, const plan::CudaRoute& route, std::byte* scratch, cudaStream_t stream) {
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
          a.partials = route.partials.at<float>(scratch);
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
          run_composed(call, route, scratch, route.plan.device.index, stream);
        }
      },
      route.plan.kernel);
}

}  // namespace

void run_attention(const Call& call, const AttentionOptions& options, const plan::CudaRoute& route,
                   void* stream_handle) {
  const int device = route.plan.device.index;
  DeviceGuard guard(device, call::op_of(call));
  Scratch scratch(device, route.plan.scratch_bytes, options.workspace, stream_handle, call::op_of(call));
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  if (call.host_metadata == 0) {
    launch_route(call, route, scratch.data(), stream);
    return;
  }
  launch_route(upload_metadata(call, route, scratch.data(), stream_handle), route, scratch.data(), stream);
}

void launch_attention(const Call& call, const plan::CudaRoute& route, std::byte* scratch, void* stream) {
  DeviceGuard guard(route.plan.device.index, call::op_of(call));
  launch_route(call, route, scratch, static_cast<cudaStream_t>(stream));
}

Call upload_metadata(const Call& call, const plan::CudaRoute& route, std::byte* scratch, void* stream) {
  DeviceGuard guard(route.plan.device.index, call::op_of(call));
  std::vector<std::int32_t> packed(static_cast<std::size_t>(call.host_metadata));
  call::pack_host_metadata(call, packed.data());
  auto* copy = route.metadata.at<std::int32_t>(scratch);
  check(cudaMemcpyAsync(copy, packed.data(), packed.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(stream)),
        call::op_of(call), "cudaMemcpyAsync of the host metadata");
  return call::with_metadata_copy(call, copy);
}

std::unique_ptr<Scratch> hold_scratch(int device, std::size_t bytes, void* workspace, void* stream, const char* op) {
  DeviceGuard guard(device, op);
  return std::make_unique<Scratch>(device, bytes, workspace, stream, op);
}

void synchronize(int device, void* stream, const char* op) {
  DeviceGuard guard(device, op);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), op, "cudaStreamSynchronize");
}

}  // namespace heed::cuda
