#pragma once
// mbarriers and TMA box loads (sm_90): the device helpers of the kernels that stream K and V
// with cp.async.bulk.tensor (the Hopper tiled kernel, the TMA vector kernel). Addresses are
// shared::cta addresses (__cvta_generic_to_shared).

#include <cuda.h>

#include <cstdint>

namespace heed::cuda::tma {

__device__ __forceinline__ void barrier_init(unsigned barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count) : "memory");
}
// Arrives once and expects `bytes` more from the copy engine before the phase completes.
__device__ __forceinline__ void barrier_expect_bytes(unsigned barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Spins until the phase of the given parity has completed.
__device__ __forceinline__ void barrier_wait(unsigned barrier, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

// One box of a 4-d tensor map (columns, rows of one (key head, batch)) into shared memory at
// `destination`, completing on `barrier`.
__device__ __forceinline__ void load_box(unsigned destination, const CUtensorMap* map, unsigned barrier, int column,
                                         int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(row), "r"(head), "r"(batch), "r"(barrier)
      : "memory");
}

// The same box into the same shared-memory offset of every block of the cluster in `mask`,
// completing on the barrier at `barrier`'s offset in each of them.
__device__ __forceinline__ void load_box_multicast(unsigned destination, const CUtensorMap* map, unsigned barrier,
                                                   int column, int row, int head, int batch, std::uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(row), "r"(head), "r"(batch), "r"(barrier), "h"(mask)
      : "memory");
}

// Clusters: this block's rank, an arrival on the barrier at `barrier`'s offset in block `rank`
// (default .release.cta semantics, as CUTLASS's cluster barrier: the arrivals release stages
// whose reads have completed; .release.cluster would add a GPU-wide fence to every one), and
// the cluster-wide barrier (every thread of every block).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ void barrier_arrive_remote(unsigned barrier, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(barrier), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

}  // namespace heed::cuda::tma
