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

// One box of a row map (cuda/tensor_map.hpp: columns, group heads, positions, key head, batch):
// the 64 packed rows from `position` (× group heads) into shared memory, completing on `barrier`.
__device__ __forceinline__ void load_rows(unsigned destination, const CUtensorMap* map, unsigned barrier, int column,
                                          int position, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, 0, %3, %4, "
      "%5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(position), "r"(head), "r"(batch), "r"(barrier)
      : "memory");
}
// The reverse: 64 packed rows from shared memory at `source` to the map's tensor (positions past
// its end are not written). The writing threads fence.proxy.async first; store_wait() before
// the shared memory is reused or the block exits.
__device__ __forceinline__ void store_rows(const CUtensorMap* map, unsigned source, int column, int position, int head,
                                           int batch) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, 0, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(source), "r"(column), "r"(position), "r"(head), "r"(batch)
               : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void store_wait() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

}  // namespace heed::cuda::tma
