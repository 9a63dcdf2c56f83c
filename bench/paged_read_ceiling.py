#!/usr/bin/env python3
"""What the GPU reads of a paged KV cache when nothing but the reads is done: the ceiling of paged
decode, against which the attention kernels' paged rates are judged.

The cache is [pages, page_size, Hkv, D] bfloat16 (the layout of heed's serving bench, Hkv 8,
D 128), K and V, every sequence's pages shuffled over it (or in order). A plain CUDA kernel
(CuPy) reads every key row of every head once: each block one (sequence, key range, key head), or
one (sequence, key range) over all heads; each thread looks its keys' pages up in the block table
and keeps 8 + 8 16-byte loads in flight. Then the same reads as bulk copies (cp.async.bulk, one
per 256-byte key row, a per-warp ring of mbarrier slots, sm_90), the loads of the TMA decode
kernel's row copies, at ring depths and blocks per SM its planner may choose. Rates count K and
V bytes over the median of 10 timed rounds of 10 launches between CUDA events. Needs CuPy and a
9.0 GPU.

usage: paged_read_ceiling.py
"""
import cupy as cp
import numpy as np

SOURCE = r'''
extern "C" __global__ void read_pages(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                      const int* __restrict__ table, int max_pages, int page_size, int kv_heads,
                                      int keys_per_block, int heads_fastest, int all_heads, unsigned* sink) {
  const int b = blockIdx.z;
  const int part = heads_fastest ? blockIdx.y : blockIdx.x;
  const int head = heads_fastest ? blockIdx.x : blockIdx.y;
  const int words = all_heads ? kv_heads * 16 : 16;  // 16-byte words a key row holds for this block
  const long count = (long)keys_per_block * words;
  unsigned acc = 0;
  for (long first = threadIdx.x; first < count; first += 128 * 8) {
    uint4 kw[8], vw[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const long i = first + u * 128;
      kw[u] = vw[u] = make_uint4(0, 0, 0, 0);
      if (i < count) {
        const int key = part * keys_per_block + (int)(i / words), word = (int)(i % words);
        const long page = table[b * max_pages + key / page_size];
        const long at = ((page * page_size + key % page_size) * kv_heads) * 16 + (all_heads ? word : head * 16 + word);
        kw[u] = __ldg(k + at);
        vw[u] = __ldg(v + at);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= kw[u].x ^ kw[u].w ^ vw[u].y ^ vw[u].z;
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads
}

// The same reads as one bulk copy (cp.async.bulk, no tensor map) per 256-byte key row into shared
// memory, as a TMA decode kernel would load pages of one key: each warp a ring of `ring` items of
// 16 rows (K or V of 16 keys; rows 272 bytes apart, the pitch that keeps ldmatrix conflict-free),
// lanes 0-15 each copying one row, the item completing on its slot's mbarrier; each lane looks
// its key's page up a tile ahead. One block per (key range, key head, sequence), 4 warps.
__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void wait_phase(unsigned bar, unsigned phase) {
  unsigned done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(phase) : "memory");
  } while (done == 0);
}
extern "C" __global__ void __launch_bounds__(128) bulk_rows(const char* __restrict__ k, const char* __restrict__ v,
                                      const int* __restrict__ table, int max_pages, int page_size, int kv_heads,
                                      int keys_per_block, int ring, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __shared__ __align__(8) unsigned long long bars[4][16];
  const int b = blockIdx.z, part = blockIdx.x, head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned pitch = 272, item_bytes = 16 * pitch;
  const unsigned base = smem(shared_raw) + warp * ring * item_bytes, bar0 = smem(&bars[warp][0]);
  if (lane == 0) {
    for (int s = 0; s < ring; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const int tiles = keys_per_block / 64, items = 2 * tiles;
  const int first = part * keys_per_block + warp * 16 + (lane & 15);
  const long row_bytes = 256, head_bytes = (long)head * row_bytes;
  long cur = 0, ahead = table[b * max_pages + first / page_size] * (long)page_size + first % page_size;
  int slot = 0;
  auto issue = [&](int i) {
    const int t = i >> 1;
    if ((i & 1) == 0) {
      cur = ahead;
      const int key = first + (t + 1 < tiles ? t + 1 : t) * 64;
      ahead = table[b * max_pages + key / page_size] * (long)page_size + key % page_size;
    }
    const unsigned bar = bar0 + 8 * slot;
    if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(16 * 256) : "memory");
    if (lane < 16) {
      const char* src = ((i & 1) ? v : k) + (cur * kv_heads) * row_bytes + head_bytes;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(base + slot * item_bytes + lane * pitch), "l"(src), "r"(256), "r"(bar) : "memory");
    }
    slot = slot + 1 == ring ? 0 : slot + 1;
  };
  for (int i = 0; i < ring - 1 && i < items; ++i) issue(i);
  unsigned acc = 0, phase = 0;
  int read = 0;
  for (int i = 0; i < items; ++i) {
    __syncwarp();
    if (i + ring - 1 < items) issue(i + ring - 1);
    wait_phase(bar0 + 8 * read, phase);
    unsigned w;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w) : "r"(base + read * item_bytes + (lane & 15) * pitch + (lane >> 4) * 128) : "memory");
    acc ^= w;
    if (++read == ring) { read = 0; phase ^= 1u; }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}
'''
KV_HEADS = 8


def paged_cache(batch, keys, page_size, shuffled):
    """K, V as uint32 words of a [pages, page_size, Hkv, 128] bfloat16 cache, the block table, and
    the words one of K or V holds in 16-byte units."""
    max_pages = keys // page_size
    pages = batch * max_pages
    words = pages * page_size * KV_HEADS * 16
    k = cp.ones(words * 4, dtype=cp.uint32)
    v = cp.full(words * 4, 2, dtype=cp.uint32)
    order = np.arange(pages, dtype=np.int32)
    if shuffled:
        np.random.default_rng(page_size).shuffle(order)
    return k, v, cp.asarray(order.reshape(batch, max_pages)), max_pages, words


def timed(launch, words):
    """Microseconds and TB/s (K and V bytes) of `launch`: the median of 10 rounds of 10 launches."""
    for _ in range(3):
        launch()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    rounds = []
    for _ in range(10):
        start.record()
        for _ in range(10):
            launch()
        end.record()
        end.synchronize()
        rounds.append(cp.cuda.get_elapsed_time(start, end) / 10)
    ms = sorted(rounds)[len(rounds) // 2]
    return ms * 1e3, 2 * words * 16 / (ms * 1e-3) / 1e12


def rate(kernel, batch, keys, page_size, heads_fastest, all_heads, shuffled, keys_per_block=512):
    k, v, table, max_pages, words = paged_cache(batch, keys, page_size, shuffled)
    sink = cp.zeros(1, dtype=cp.uint32)
    if all_heads:
        keys_per_block //= KV_HEADS  # as many bytes per block as one head's 512 keys
        grid = (keys // keys_per_block, 1, batch)
    else:
        grid = (KV_HEADS, keys // keys_per_block, batch) if heads_fastest else (keys // keys_per_block, KV_HEADS, batch)
    args = (k, v, table, np.int32(max_pages), np.int32(page_size), np.int32(KV_HEADS), np.int32(keys_per_block),
            np.int32(heads_fastest), np.int32(all_heads), sink)
    return timed(lambda: kernel(grid, (128,), args), words)


def bulk_rate(kernel, batch, keys, page_size, shuffled, ring, blocks_per_sm, keys_per_block=512):
    k, v, table, max_pages, words = paged_cache(batch, keys, page_size, shuffled)
    sink = cp.zeros(1, dtype=cp.uint32)
    # The ring, padded so that at most blocks_per_sm blocks fit an SM's 228 KiB.
    shared = max(4 * ring * 16 * 272, (228 << 10) // (blocks_per_sm + 1) + 1024)
    kernel.max_dynamic_shared_size_bytes = shared
    grid = (keys // keys_per_block, KV_HEADS, batch)
    args = (k, v, table, np.int32(max_pages), np.int32(page_size), np.int32(KV_HEADS), np.int32(keys_per_block),
            np.int32(ring), sink)
    return timed(lambda: kernel(grid, (128,), args, shared_mem=shared), words)


def main():
    module = cp.RawModule(code=SOURCE, options=("--gpu-architecture=sm_90a",))
    bulk = module.get_function("bulk_rows")
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for batch, keys in [(16, 8192), (64, 4096), (1, 32768)]:
        for page_size, shuffled in [(1, True), (1, False), (16, True)]:
            for ring, blocks in [(3, 4), (4, 3), (6, 2), (12, 1)]:
                for per_block in [512, 128] if batch == 1 else [512]:
                    us, tbytes = bulk_rate(bulk, batch, keys, page_size, shuffled, ring, blocks, per_block)
                    print(f"B{batch} x {keys} page {page_size:3d} bulk rows, ring {ring:2d}, {blocks} blocks/SM, "
                          f"{'shuffled' if shuffled else 'in order'}, {per_block} keys a block:"
                          f" {us:8.1f} us {tbytes:5.2f} TB/s", flush=True)
    kernel = module.get_function("read_pages")
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    orders = [(0, 0, "a block per key head"), (1, 0, "key heads fastest"), (0, 1, "all heads a block")]
    for batch, keys in [(16, 8192), (64, 4096), (1, 32768)]:
        for page_size in [1, 16, 128]:
            for heads_fastest, all_heads, label in orders:
                for shuffled in [True, False] if page_size == 1 else [True]:
                    for per_block in [512, 128] if batch == 1 else [512]:  # one sequence: more blocks
                        us, tbytes = rate(kernel, batch, keys, page_size, heads_fastest, all_heads, shuffled, per_block)
                        print(f"B{batch} x {keys} page {page_size:3d} {label:21s} "
                              f"{'shuffled' if shuffled else 'in order'}, {per_block} keys a block:"
                              f" {us:8.1f} us {tbytes:5.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
