#pragma once
// The TMA vector (decode) kernel: float16 / bfloat16 on a 9.0 device, D = Dv = the head class
// (64, 128 or 256), one instantiation per class, row tile and block width (4 warps, or 16 for
// wide blocks at classes 64 and 128 with one n-tile; cuda/vector_tma_<dtype>.cu).
//
// The products are the tensor-core vector kernel's (cuda/vector_mma.cuh: mma.sync m16n8k16,
// keys as M, query rows as N, Sᵀ's accumulator turned into Pᵀ by movmatrix); only the loads
// differ. Each warp streams its own 16-key tiles (tile t of the block goes to warp t % W), K
// and V of a tile as two items of a per-warp ring in shared memory. Lane 0 copies an item as
// 64-column boxes by TMA (cp.async.bulk.tensor, 128-byte swizzle) that complete on the slot's
// mbarrier: the copy engine, not the lanes, keeps the ring's bytes in flight, which per-lane
// cp.async could not (the cp.async kernel stalls near 3 TB/s with ~100 KiB requested per SM).
// Lanes read their MMA fragments with ldmatrix (K as A, V transposed as Vᵀ's A), swizzled,
// so without bank conflicts.
//
// Keys past the visible span read as zeros (the maps' key dimension ends there); keys of a
// tile past the block's range are masked. Partitions' partials are merged by the cp.async
// kernel's merge pass (cuda/vector.cu), launched programmatically dependent.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/format.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/tma.cuh"
#include "cuda/vector_common.cuh"
#include "cuda/vector_mma.cuh"
#include "cuda/vector_tma.hpp"
#include "heed/error.hpp"
#include "plan/cuda_plan.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::cuda::vector_tma {

using vector_mma::load_shared;
using vector_mma::mma;
using vector_mma::pack;
using vector_mma::transpose_8x8;

constexpr int kTileKeys = plan::cuda::kVectorMmaKeysPerTile;
constexpr int kMaxRows = 16;
constexpr int kMaxRing = plan::cuda::kVectorMmaMaxRingItems;
constexpr int kBoxColumns = plan::cuda::kVectorTmaBoxColumns;
constexpr unsigned kBoxBytes = kTileKeys * kBoxColumns * 2;  // 16 rows of 128 bytes
constexpr unsigned kAlign = plan::cuda::kVectorTmaAlignBytes;
static_assert(kBoxColumns * 2 == 128, "a box row is one 128-byte swizzle row");

// W: warps per block (4, or 16 for wide blocks; cuda_tables.hpp).
template <int W>
struct StaticShared {
  std::uint64_t full[W][kMaxRing];  // one mbarrier per ring slot of each warp
  RowInfo rows[kMaxRows];
  float warp_m[W][kMaxRows];
  float warp_l[W][kMaxRows];
};
static_assert(sizeof(StaticShared<plan::cuda::kVectorMmaWarps>) <= plan::cuda::kVectorTmaStaticSharedBytes);
static_assert(sizeof(StaticShared<plan::cuda::kVectorTmaWideWarps>) <= plan::cuda::kVectorTmaWideStaticSharedBytes);

// mbarriers and TMA loads (each box 64 columns × 16 keys of one key head and batch): cuda/tma.cuh.
using tma::barrier_expect_bytes;
using tma::barrier_init;
using tma::barrier_wait;

__device__ __forceinline__ void load_matrix(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void load_matrix_transposed(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// This lane's ldmatrix addresses within an item (16 keys × class columns as 64-column boxes,
// 128-byte swizzled: chunk c of key row k sits at k·128 + ((c ^ (k & 7)) · 16)). Matrix i of
// an x4 load takes its row addresses from lanes 8i .. 8i + 7. K (A of Sᵀ = K·Qᵀ): matrices
// (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15) of
// a 16-dim step. V (A of Oᵀ = Vᵀ·Pᵀ, transposed on load): (keys 0-7, columns 0-7), (keys 0-7,
// columns 8-15), (keys 8-15, columns 0-7), (keys 8-15, columns 8-15) of a 16-column m-tile.
struct FragmentAddresses {
  unsigned k_row, v_row;  // byte offset of the lane's key row
  unsigned k_chunk[4], v_chunk[4];  // swizzled byte offset of step / m-tile j within its box (j = 0..3)
};

__device__ __forceinline__ FragmentAddresses fragment_addresses(int lane) {
  FragmentAddresses f;
  const int row = lane & 7;
  const int k_key = ((lane >> 3) & 1) * 8 + row, k_half = lane >> 4;
  const int v_key = (lane >> 4) * 8 + row, v_half = (lane >> 3) & 1;
  f.k_row = static_cast<unsigned>(k_key) * 128;
  f.v_row = static_cast<unsigned>(v_key) * 128;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f.k_chunk[j] = static_cast<unsigned>(((2 * j + k_half) ^ row) << 4);
    f.v_chunk[j] = static_cast<unsigned>(((2 * j + v_half) ^ row) << 4);
  }
  return f;
}

// The online-softmax state of this lane's rows and its share of Oᵀ: kClass / 16 m-tiles of 16
// columns ([0] (column c, row 2tq), [1] (c, 2tq + 1), [2] (c + 8, 2tq), [3] (c + 8, 2tq + 1)).
template <int NT, int kClass>
using Accumulators = vector_mma::Accumulators<NT, kClass / 64>;

// Scores of one K item for the lane's (key, row) pairs, masked, then the online softmax and
// Pᵀ as the next V item's B operand.
template <typename T, int kClass, int NT>
__device__ __forceinline__ void consume_keys(const VectorArgs& a, const RowInfo* rows, unsigned item,
                                             const FragmentAddresses& f, unsigned q_lane, int n_tiles, int key0,
                                             std::int64_t key_begin, std::int64_t b, const int (&lo)[NT][2],
                                             const int (&hi)[NT][2], int tq, int gid,
                                             Accumulators<NT, kClass>& acc) {
  constexpr int kPairs = kClass / 32;  // pairs of 16-dim steps; q holds one 16-byte chunk per pair
  float s[NT][4], s_odd[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = s_odd[nt][e] = 0.0f;
#pragma unroll
  for (int pair = 0; pair < kPairs; ++pair) {
    const unsigned box = item + static_cast<unsigned>(pair / 2) * kBoxBytes + f.k_row;
    unsigned k_even[4], k_odd[4];
    load_matrix(box + f.k_chunk[(2 * pair) & 3], k_even);
    load_matrix(box + f.k_chunk[(2 * pair + 1) & 3], k_odd);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= n_tiles) break;
      const uint4 q = load_shared(q_lane + static_cast<unsigned>(nt * kPairs + pair) * 32 * 16);
      mma<T>(s[nt], k_even[0], k_even[1], k_even[2], k_even[3], q.x, q.y);
      mma<T>(s_odd[nt], k_odd[0], k_odd[1], k_odd[2], k_odd[3], q.z, q.w);
    }
  }
  vector_mma::softmax_item<T, NT, kClass / 16, true>(a, rows, s, s_odd, n_tiles, key0, key_begin, b, lo, hi,
                                                     tq, gid, acc);
}

// Oᵀ += Vᵀ · Pᵀ for one V item: one transposed x4 load per 16-column m-tile.
template <typename T, int kClass, int NT>
__device__ __forceinline__ void consume_values(unsigned item, const FragmentAddresses& f, int n_tiles,
                                               Accumulators<NT, kClass>& acc) {
#pragma unroll
  for (int t = 0; t < kClass / 16; ++t) {
    unsigned v[4];
    load_matrix_transposed(item + static_cast<unsigned>(t / 4) * kBoxBytes + f.v_row + f.v_chunk[t & 3], v);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= n_tiles) break;
      mma<T>(acc.o[nt][t], v[0], v[1], v[2], v[3], acc.p[nt][0], acc.p[nt][1]);
    }
  }
}

// Resident blocks per SM the register budget is cut for (ptxas, sm_90a): see cuda_tables.hpp;
// one wide block.
template <int kClass, int NT, int W>
constexpr int kMinBlocks = W == plan::cuda::kVectorMmaWarps ? plan::cuda::vector_tma_register_blocks(kClass, NT * 8) : 1;

// NT: n-tiles of 8 query rows (the plan's row tile / 8); W: warps per block.
template <typename T, int kClass, int NT, int W>
__global__ void __launch_bounds__(32 * W, kMinBlocks<kClass, NT, W>)
    vector_tma_kernel(const __grid_constant__ VectorTmaArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kWarps = W, kThreads = 32 * W;
  constexpr int kBoxes = kClass / kBoxColumns;
  constexpr unsigned kItemBytes = kBoxes * kBoxBytes;
  constexpr int kPairs = kClass / 32;
  static_assert(NT >= 1 && NT * 8 <= kMaxRows, "one or two n-tiles of 8 rows");
  extern __shared__ unsigned char shared_raw[];
  __shared__ StaticShared<W> sh;

  // The merge pass may launch now; it waits for this grid's completion before reading.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const std::int64_t b = blockIdx.z, kv_head = blockIdx.y;
  const std::int64_t tile = blockIdx.x % a.row_tiles, part = blockIdx.x / a.row_tiles;
  const std::int64_t row0 = tile * a.row_tile;
  const int tile_rows = static_cast<int>(min(std::int64_t{a.row_tile}, a.rows - row0));
  const int n_tiles = (tile_rows + 7) / 8;

  // The swizzle's atoms are 1024 bytes: align the base (the planner adds kAlign bytes for this).
  const auto raw = static_cast<unsigned>(__cvta_generic_to_shared(shared_raw));
  const unsigned base = (raw + kAlign - 1) & ~(kAlign - 1);
  const int ring_items = a.ring_items;
  const unsigned ring = base + static_cast<unsigned>(warp * ring_items) * kItemBytes;
  const unsigned q_base = base + static_cast<unsigned>(kWarps * ring_items) * kItemBytes;
  const auto full = static_cast<unsigned>(__cvta_generic_to_shared(&sh.full[warp][0]));

  if (threadIdx.x < tile_rows) sh.rows[threadIdx.x] = row_info(a, kv_head, row0 + threadIdx.x);
  if (lane == 0) {
    for (int slot = 0; slot < ring_items; ++slot) barrier_init(full + 8u * slot, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // This block's keys: its partition, narrowed to what the tile's rows can see.
  std::int64_t key_begin = 0;
  int lo[NT][2], hi[NT][2];
  const int keys = vector_mma::partition_keys<NT>(a, sh.rows, tile_rows, part, tq, key_begin, lo, hi);

  // This warp's tiles (16 keys each; tile t of the block goes to warp t % kWarps) as K and V items.
  constexpr int kBlockStep = kWarps * kTileKeys;
  const int tiles = keys > warp * kTileKeys ? (keys - warp * kTileKeys + kBlockStep - 1) / kBlockStep : 0;
  const int items = 2 * tiles;
  const int head = static_cast<int>(kv_head), batch = static_cast<int>(b);
  const int first_key = static_cast<int>(key_begin) + warp * kTileKeys;
  int issue_slot = 0;
  // Lane 0 only: item `item` into the next slot (K of tile item / 2 when even, V when odd).
  const auto issue = [&](int item) {
    const unsigned destination = ring + static_cast<unsigned>(issue_slot) * kItemBytes;
    const unsigned barrier = full + 8u * static_cast<unsigned>(issue_slot);
    const int key0 = first_key + (item >> 1) * kBlockStep;
    const CUtensorMap* map = (item & 1) != 0 ? &a.v_map : &a.k_map;
    barrier_expect_bytes(barrier, kItemBytes);
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
      tma::load_box(destination + box * kBoxBytes, map, barrier, box * kBoxColumns, key0, head, batch);
    }
    issue_slot = issue_slot + 1 == ring_items ? 0 : issue_slot + 1;
  };
  if (lane == 0) {
    for (int item = 0; item < ring_items - 1 && item < items; ++item) issue(item);
  }

  // q as B fragments (row nt·8 + gid; dims 32·pair + 2tq + {0, 8, 16, 24}, two each), zeros
  // past the tile: one 16-byte chunk per lane and pair (4-byte loads of even dims, wide rows).
  for (int index = threadIdx.x; index < NT * kPairs * 32; index += kThreads) {
    const int nt = index / (kPairs * 32), pair = (index / 32) % kPairs, fragment_lane = index % 32;
    const int r = nt * 8 + fragment_lane / 4, d = 32 * pair + 2 * (fragment_lane % 4);
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < tile_rows) {
      const RowInfo& row = sh.rows[r];
      const auto* words = reinterpret_cast<const unsigned*>(static_cast<const T*>(a.q) + b * a.q_strides.s[0] +
                                                            row.head * a.q_strides.s[1] +
                                                            row.position * a.q_strides.s[2] + d);
      value = make_uint4(words[0], words[4], words[8], words[12]);
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_base + static_cast<unsigned>(index) * 16),
                 "r"(value.x), "r"(value.y), "r"(value.z), "r"(value.w)
                 : "memory");
  }
  __syncthreads();

  Accumulators<NT, kClass> acc;
  acc.reset();
  const FragmentAddresses f = fragment_addresses(lane);
  const unsigned q_lane = q_base + static_cast<unsigned>(lane) * 16;
  int read_slot = 0;
  unsigned phase = 0;
  for (int item = 0; item < items; ++item) {
    __syncwarp();  // every lane is done with the slot the previous item was read from
    if (lane == 0 && item + ring_items - 1 < items) issue(item + ring_items - 1);
    barrier_wait(full + 8u * static_cast<unsigned>(read_slot), phase);
    __syncwarp();
    const unsigned slot = ring + static_cast<unsigned>(read_slot) * kItemBytes;
    if (++read_slot == ring_items) {
      read_slot = 0;
      phase ^= 1u;
    }
    if ((item & 1) == 0) {
      const int key0 = (warp + kWarps * (item >> 1)) * kTileKeys;
      consume_keys<T, kClass, NT>(a, sh.rows, slot, f, q_lane, n_tiles, key0, key_begin, b, lo, hi, tq, gid, acc);
    } else {
      consume_values<T, kClass, NT>(slot, f, n_tiles, acc);
    }
  }

  acc.sum_over_warp();
  __syncthreads();  // every warp is done with the ring: it becomes warp_out
  // warp_out[warp][row][column], float32, the tile's rows.
  auto* warp_out = reinterpret_cast<float*>(shared_raw + (base - raw));
  constexpr int kRowsPerWarp = NT * 8;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt >= n_tiles) break;
    const int row = nt * 8 + 2 * tq;
#pragma unroll
    for (int t = 0; t < kClass / 16; ++t) {
      float* out = warp_out + (warp * kRowsPerWarp + row) * kClass + 16 * t + gid;
      out[0] = acc.o[nt][t][0];
      out[kClass] = acc.o[nt][t][1];
      out[8] = acc.o[nt][t][2];
      out[kClass + 8] = acc.o[nt][t][3];
    }
    if (gid == 0) acc.store_stats(nt, row, sh.warp_m[warp], sh.warp_l[warp]);
  }
  __syncthreads();

  // The warps' partial rows merged exactly; written out, or as this partition's partial.
  vector_mma::merge_warps<T, kRowsPerWarp, kClass>(a, b, kv_head, part, row0, sh.rows, tile_rows, kClass, sh.warp_m,
                                                   sh.warp_l, warp_out);
#else
  __trap();  // planned on 9.0 devices only
#endif
}

template <typename T, int kClass, int NT, int W>
void launch_kernel(const VectorTmaArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  static_assert(std::int64_t{kClass / kBoxColumns * kBoxBytes} == plan::cuda::vector_mma_item_bytes(kClass),
                "the planner's item size");
  allow_shared_bytes<vector_tma_kernel<T, kClass, NT, W>>(s.shared_bytes);
  vector_tma_kernel<T, kClass, NT, W><<<grid, 32 * W, static_cast<std::size_t>(s.shared_bytes), stream>>>(a);
}

template <typename T, int kClass>
void launch_class(const VectorTmaArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  constexpr int kWide = plan::cuda::kVectorTmaWideWarps;
  if (s.warps == kWide) {
    if constexpr (plan::cuda::vector_tma_wide_serves(kClass, 8)) {
      if (s.row_tile <= 8) return launch_kernel<T, kClass, 1, kWide>(a, s, grid, stream);
    }
    throw Error(ErrorKind::Internal, format("[heed::attention] no wide TMA vector kernel for head class {}, row tile {}",
                                            kClass, s.row_tile));
  }
  if (s.row_tile <= 8) return launch_kernel<T, kClass, 1, plan::cuda::kVectorMmaWarps>(a, s, grid, stream);
  return launch_kernel<T, kClass, 2, plan::cuda::kVectorMmaWarps>(a, s, grid, stream);
}

template <typename T>
void launch(const VectorTmaArgs& a, const plan::CudaVectorShape& s, dim3 grid, cudaStream_t stream) {
  switch (s.head_class) {
    case 64: return launch_class<T, 64>(a, s, grid, stream);
    case 128: return launch_class<T, 128>(a, s, grid, stream);
    case 256: return launch_class<T, 256>(a, s, grid, stream);
  }
  throw Error(ErrorKind::Internal, format("[heed::attention] no TMA vector kernel for head class {}", s.head_class));
}

}  // namespace heed::cuda::vector_tma
