#pragma once
// Pass 2 of the vector (decode) kernels: the partitions' partial max, sum and output merged
// exactly (log-sum-exp) into the output. Instantiated by cuda/vector.cu.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/check.hpp"
#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/vector_common.cuh"
#include "plan/cuda_plan.hpp"

namespace heed::cuda::vector_merge {

// Pass 2: grid [rows × ceil(Dv / 128), Hkv, B]; one block merges 128 output columns of one
// query row over all partitions. Warp w merges partitions w, w + 8, ... online (the loads of
// eight partitions in flight at once, none waiting on another), then the 8 warps' states are
// merged through shared memory: one round trip to the partials for up to 64 partitions. 256
// threads of 80 registers fit beside two class-128 tensor-core pass-1 blocks (2 × 128 × 160),
// so there a programmatically dependent merge block is resident before pass 1 ends.
constexpr int kMergeThreads = 256;
constexpr int kMergeWarps = kMergeThreads / 32;
constexpr int kMergeColumnsPerLane = 4;
constexpr int kMergeColumns = 32 * kMergeColumnsPerLane;
constexpr int kMergeBatch = 8;

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) vector_merge_kernel(const VectorArgs a) {
  __shared__ float warp_m[kMergeWarps], warp_l[kMergeWarps];
  __shared__ float warp_o[kMergeWarps][kMergeColumns];
  // Launched programmatically dependent on pass 1: its partials are complete and visible after this.
  ptx::griddepcontrol_wait();
  const Call& g = a;
  const std::int64_t dv = g.value_dim;
  const std::int64_t column_blocks = (dv + kMergeColumns - 1) / kMergeColumns;
  const std::int64_t row = blockIdx.x / column_blocks, column0 = (blockIdx.x % column_blocks) * kMergeColumns;
  const std::int64_t kv_head = blockIdx.y, b = blockIdx.z;
  const float* slots = a.partials + ((b * g.kv_heads + kv_head) * a.rows + row) * a.partitions * (dv + 2);
  // A ragged or paged sequence's rows past its queries are not written; its keys may lie in
  // fewer partitions than the plan's, whose partials pass 1 left unwritten.
  const Sequence seq = call::sequence(a, b);
  const std::int64_t head = kv_head * g.group + row / g.q_len, position = row % g.q_len;
  if (position >= seq.q_len) return;
  const std::int64_t parts = sequence_partitions(a, sequence_span(a, seq));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Batches of kMergeBatch partitions: every load of a batch is issued before any is used.
  float m = -INFINITY, l = 0.0f, o[kMergeColumnsPerLane] = {};
  for (std::int64_t p0 = warp; p0 < parts; p0 += std::int64_t{kMergeWarps} * kMergeBatch) {
    float m_part[kMergeBatch], l_part[kMergeBatch], o_part[kMergeBatch][kMergeColumnsPerLane];
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      const std::int64_t p = p0 + std::int64_t{i} * kMergeWarps;
      const float* slot = slots + min(p, parts - 1) * (dv + 2);
      m_part[i] = p < parts ? slot[0] : -INFINITY;
      l_part[i] = slot[1];
#pragma unroll
      for (int c = 0; c < kMergeColumnsPerLane; ++c) {
        const std::int64_t d = column0 + lane + 32 * c;
        o_part[i][c] = d < dv ? slot[2 + d] : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      const float m_new = fmaxf(m, m_part[i]);
      const float keep = exp2f(m - score::exp_offset(m_new));
      const float add = exp2f(m_part[i] - score::exp_offset(m_new));
      l = l * keep + l_part[i] * add;
#pragma unroll
      for (int c = 0; c < kMergeColumnsPerLane; ++c) o[c] = o[c] * keep + o_part[i][c] * add;
      m = m_new;
    }
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < kMergeColumnsPerLane; ++c) warp_o[warp][lane + 32 * c] = o[c];
  __syncthreads();
  if (threadIdx.x >= kMergeColumns) return;
  const std::int64_t d = column0 + threadIdx.x;
  if (d >= dv) return;
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f, total = 0.0f;
  const float offset = score::exp_offset(m_all);
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) {
    const float weight = exp2f(warp_m[w] - offset);
    l_all += warp_l[w] * weight;
    total += warp_o[w][threadIdx.x] * weight;
  }
  write_row<T>(a, seq, head, position, d, m_all, l_all, total);
}

// Pass 2 after pass 1 on `stream`. Programmatically dependent where the plan says so (sm_90):
// its blocks may be scheduled while pass 1 finishes and wait on the device (griddepcontrol.wait)
// instead of behind a launch.
template <typename T>
void launch(const VectorArgs& a, const plan::CudaRoute& route, dim3 grid, cudaStream_t stream) {
  if (!route.vector.dependent_merge) {
    vector_merge_kernel<T><<<grid, kMergeThreads, 0, stream>>>(a);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kMergeThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, vector_merge_kernel<T>, a), "heed::attention", route.merge_kernel_name.c_str());
}

}  // namespace heed::cuda::vector_merge
