// merge_states on CUDA: one warp per row, its lanes over the row's values.

#include "cuda/merge.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/common.cuh"
#include "cuda/runtime.hpp"
#include "heed/error.hpp"

namespace heed::cuda {
namespace {

constexpr int kMaxRowAxes = 8;
constexpr int kMergeWarps = 8;
constexpr std::int64_t kMaxBlocks = 65535;

// call::Merge with fixed-size arrays, copied by value into the launch.
struct MergeArgs {
  int axes = 0;
  std::int64_t rows[kMaxRowAxes] = {};
  std::int64_t count = 0, width = 0;
  const void* out_a = nullptr;
  const void* out_b = nullptr;
  void* out = nullptr;
  std::int64_t out_a_strides[kMaxRowAxes + 1] = {}, out_b_strides[kMaxRowAxes + 1] = {},
               out_strides[kMaxRowAxes + 1] = {};
  const float* lse_a = nullptr;
  const float* lse_b = nullptr;
  float* lse = nullptr;
  std::int64_t lse_a_strides[kMaxRowAxes] = {}, lse_b_strides[kMaxRowAxes] = {}, lse_strides[kMaxRowAxes] = {};
};

// The element offset of row `row` (row-major over the row axes) through `strides`.
__device__ __forceinline__ std::int64_t offset_of(const MergeArgs& m, const std::int64_t* strides, std::int64_t row) {
  std::int64_t offset = 0;
  for (int axis = m.axes - 1; axis >= 0; --axis) {
    offset += (row % m.rows[axis]) * strides[axis];
    row /= m.rows[axis];
  }
  return offset;
}

template <typename T>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_kernel(const MergeArgs m) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = std::int64_t{gridDim.x} * kMergeWarps;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kMergeWarps + (threadIdx.x >> 5); row < m.count; row += warps) {
    const float la = m.lse_a[offset_of(m, m.lse_a_strides, row)];
    const float lb = m.lse_b[offset_of(m, m.lse_b_strides, row)];
    // Both parts empty: zeros and -inf; a NaN part: NaN; else each part's share of the union's sum.
    const float top = fmaxf(la, lb);
    float lse = top == -INFINITY ? top : top + logf(expf(la - top) + expf(lb - top));
    float wa = top == -INFINITY ? 0.0f : expf(la - lse);
    float wb = top == -INFINITY ? 0.0f : expf(lb - lse);
    if (isnan(la) || isnan(lb)) lse = wa = wb = NAN;
    const T* a = static_cast<const T*>(m.out_a) + offset_of(m, m.out_a_strides, row);
    const T* b = static_cast<const T*>(m.out_b) + offset_of(m, m.out_b_strides, row);
    T* out = static_cast<T*>(m.out) + offset_of(m, m.out_strides, row);
    const std::int64_t sa = m.out_a_strides[m.axes], sb = m.out_b_strides[m.axes], so = m.out_strides[m.axes];
    for (std::int64_t d = lane; d < m.width; d += 32) {
      // A part of weight 0 adds nothing, even where its values are not finite.
      const float va = wa == 0.0f ? 0.0f : wa * to_float(a[d * sa]);
      const float vb = wb == 0.0f ? 0.0f : wb * to_float(b[d * sb]);
      out[d * so] = from_float<T>(va + vb);
    }
    __syncwarp();  // in place: every lane has read lse_a before it is overwritten
    if (lane == 0) m.lse[offset_of(m, m.lse_strides, row)] = lse;
    __syncwarp();
  }
}

MergeArgs merge_args(const call::Merge& m) {
  MergeArgs args;
  if (m.rows.size() > static_cast<std::size_t>(kMaxRowAxes)) {
    throw Error(ErrorKind::Unsupported, format("[{}] CUDA merges rows of at most {} dimensions, got {}",
                                               call::kMergeOp, kMaxRowAxes, m.rows.size()));
  }
  args.axes = static_cast<int>(m.rows.size());
  args.count = 1;
  for (int axis = 0; axis < args.axes; ++axis) {
    const auto i = static_cast<std::size_t>(axis);
    args.rows[axis] = m.rows[i];
    args.count *= m.rows[i];
    args.lse_a_strides[axis] = m.lse_a_strides[i];
    args.lse_b_strides[axis] = m.lse_b_strides[i];
    args.lse_strides[axis] = m.lse_strides[i];
  }
  for (int axis = 0; axis <= args.axes; ++axis) {
    const auto i = static_cast<std::size_t>(axis);
    args.out_a_strides[axis] = m.out_a_strides[i];
    args.out_b_strides[axis] = m.out_b_strides[i];
    args.out_strides[axis] = m.out_strides[i];
  }
  args.width = m.width;
  args.out_a = m.out_a;
  args.out_b = m.out_b;
  args.out = m.out;
  args.lse_a = m.lse_a;
  args.lse_b = m.lse_b;
  args.lse = m.lse;
  return args;
}

}  // namespace

void merge_states(const call::Merge& m, Device device, void* stream_handle) {
  const MergeArgs args = merge_args(m);
  if (args.count == 0) return;
  DeviceGuard guard(device.index, call::kMergeOp);
  // Only the CUDA runtime can tell device memory from host memory.
  const bool values = args.width > 0;
  check_device_pointer(m.lse_a, device, "lse_a", call::kMergeOp);
  check_device_pointer(m.lse_b, device, "lse_b", call::kMergeOp);
  check_device_pointer(m.lse, device, "lse", call::kMergeOp);
  if (values) {
    check_device_pointer(m.out_a, device, "out_a", call::kMergeOp);
    check_device_pointer(m.out_b, device, "out_b", call::kMergeOp);
    check_device_pointer(m.out, device, "out", call::kMergeOp);
  }
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const std::int64_t blocks = std::min<std::int64_t>(kMaxBlocks, (args.count + kMergeWarps - 1) / kMergeWarps);
  const dim3 grid(static_cast<unsigned>(blocks)), block(kMergeWarps * 32);
  switch (m.dtype) {
    case DType::Float32: merge_kernel<float><<<grid, block, 0, stream>>>(args); break;
    case DType::Float16: merge_kernel<__half><<<grid, block, 0, stream>>>(args); break;
    case DType::BFloat16: merge_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(args); break;
    case DType::Bool:
    case DType::Int32:
      throw Error(ErrorKind::Internal, format("[{}] no CUDA merge for {}", call::kMergeOp, to_string(m.dtype)));
  }
  check_launch(call::kMergeOp, "heed_cuda_merge_states");
}

}  // namespace heed::cuda
