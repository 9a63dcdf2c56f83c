#pragma once
// The inline PTX of the kernels, each instruction written once (the wgmma.mma_async wrappers
// are generated: cmake/instances.cpp). Shared-memory operands are shared::cta addresses
// (shared_address). A wrapper clobbers "memory" where the compiler must not move ordinary loads
// and stores across it: where asynchronously written data becomes visible (wait_group, mbarrier
// waits, fences) and where it reads or writes shared memory not named by an operand.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace heed::cuda::ptx {

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// --- cp.async (sm_80): 16 bytes global -> shared, in commit groups ---------------------------

// "memory": the copy overwrites shared memory, so earlier ordinary reads of the slot stay before it.
__device__ __forceinline__ void cp_async_16(unsigned shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(global) : "memory");
}
// The same, or 16 zero bytes (nothing read) when !valid.
__device__ __forceinline__ void cp_async_16_or_zero(unsigned shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global), "r"(valid ? 16 : 0)
               : "memory");
}
// An arrival on `barrier` once every cp.async this thread issued so far has landed (.noinc: the
// barrier's count includes it).
__device__ __forceinline__ void cp_async_arrive(unsigned barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}
// No clobber: committing reads and writes nothing; it stays after its copies as volatile asm, and
// their bytes are visible only after wait_group, which carries the clobber.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Brings the line holding `p` (a valid address) into L1, so that a later load of it does not wait
// on L2 or memory; nothing is returned and nothing waits for it.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }
// All but the newest kPending groups have landed; "memory" keeps the shared loads of them after it.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// --- shared-memory fragments -----------------------------------------------------------------

// ldmatrix x4: four 8 × 8 16-bit matrices, the row addresses of matrix i from lanes 8i .. 8i + 7.
__device__ __forceinline__ void ldmatrix_x4(unsigned address, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned address, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
// The 8 × 8 16-bit matrix whose row lane / 4, columns 2 (lane % 4) and + 1 this lane holds, transposed.
__device__ __forceinline__ unsigned movmatrix_trans(unsigned x) {
  unsigned y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint4 ld_shared_v4(unsigned address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(unsigned address, const uint4& value) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(value.x), "r"(value.y),
               "r"(value.z), "r"(value.w)
               : "memory");
}

// --- tensor cores and the special-function unit ----------------------------------------------

// c += a (16×16, row-major fragments) · b (16×8, column-major fragments), m16n8k16, T float16 or
// bfloat16, float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                             std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "float16 or bfloat16");
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// 2^x (ex2.approx.ftz: relative error about 2^-22; 2^-inf = 0).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// tanh (tanh.approx: relative error about 2^-11, NaN kept, ±1 at the saturations; sm_75 and up).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// --- mbarriers and fences (sm_90) ------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(unsigned barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count) : "memory");
}
// Arrives once and expects `bytes` more from the copy engine before the phase completes.
__device__ __forceinline__ void mbarrier_expect_bytes(unsigned barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Spins until the phase of the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned barrier, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}
// The initialised mbarriers visible to the copy engine (and the cluster) before their first use.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The generic proxy's shared-memory writes (st.shared, cp.async) visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// 16 zero bytes at a shared::cta address, an ordinary (generic-proxy) store.
__device__ __forceinline__ void st_shared_zero_16(unsigned address) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(address), "r"(0u) : "memory");
}

// --- TMA (cp.async.bulk.tensor, sm_90) -------------------------------------------------------

// `bytes` (a multiple of 16) from 16-byte-aligned global memory into shared memory at
// `destination` by the copy engine (no tensor map), completing on `barrier`.
__device__ __forceinline__ void bulk_load(unsigned destination, const void* source, unsigned bytes,
                                          unsigned barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   destination),
               "l"(source), "r"(bytes), "r"(barrier)
               : "memory");
}

// One box of a 4-d tensor map (columns, rows of one (key head, batch)) into shared memory at
// `destination`, completing on `barrier`.
__device__ __forceinline__ void tma_load_box(unsigned destination, const CUtensorMap* map, unsigned barrier,
                                             int column, int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(row), "r"(head), "r"(batch), "r"(barrier)
      : "memory");
}
// One box of a row map (cuda/tensor_map.hpp: columns, group heads, positions, key head, batch):
// the 64 packed rows from `position` (× group heads) into shared memory, completing on `barrier`.
__device__ __forceinline__ void tma_load_rows(unsigned destination, const CUtensorMap* map, unsigned barrier,
                                              int column, int position, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, 0, %3, %4, "
      "%5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(position), "r"(head), "r"(batch), "r"(barrier)
      : "memory");
}
// The reverse: 64 packed rows from shared memory at `source` to the map's tensor (positions past
// its end are not written). The writing threads fence_proxy_async_shared() first;
// tma_store_wait() before the shared memory is reused or the block exits.
__device__ __forceinline__ void tma_store_rows(const CUtensorMap* map, unsigned source, int column, int position,
                                               int head, int batch) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, 0, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(source), "r"(column), "r"(position), "r"(head), "r"(batch)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// --- wgmma bookkeeping (sm_90a; the mma_async wrappers are generated) ------------------------

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from touching accumulators across an asynchronous wgmma.
template <int kTiles>
__device__ __forceinline__ void hold(float (&d)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// --- block scheduling ------------------------------------------------------------------------

// Named barrier kId (0 is __syncthreads) over kThreads threads: bar.sync waits, bar.arrive does not.
template <int kId, int kThreads>
__device__ __forceinline__ void bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// A warpgroup's register budget moved to or from the other warpgroups (sm_90a).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Programmatic dependent launch (sm_90; nothing before): the dependent grid may launch now /
// this grid waits until the grid it depends on has completed and its writes are visible.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace heed::cuda::ptx
