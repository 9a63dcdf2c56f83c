#!/usr/bin/env python3
"""What the GPU reads of a paged KV cache when nothing but the reads is done: the ceiling of paged
decode, against which the attention kernels' paged rates are judged.

The cache is [pages, page_size, Hkv, D] bfloat16 (the layout of heed's serving bench, Hkv 8,
D 128), K and V, every sequence's pages shuffled over it (or in order). A plain CUDA kernel
(CuPy) reads every key row of every head once: each block one (sequence, key range, key head), or
one (sequence, key range) over all heads; each thread looks its keys' pages up in the block table
and keeps 8 + 8 16-byte loads in flight. Rates count K and V bytes over the median of 10 timed
rounds of 10 launches between CUDA events. Needs CuPy and a GPU.

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
'''
KV_HEADS = 8


def rate(kernel, batch, keys, page_size, heads_fastest, all_heads, shuffled, keys_per_block=512):
    max_pages = keys // page_size
    pages = batch * max_pages
    words = pages * page_size * KV_HEADS * 16
    k = cp.ones(words * 4, dtype=cp.uint32)
    v = cp.full(words * 4, 2, dtype=cp.uint32)
    order = np.arange(pages, dtype=np.int32)
    if shuffled:
        np.random.default_rng(page_size).shuffle(order)
    table = cp.asarray(order.reshape(batch, max_pages))
    sink = cp.zeros(1, dtype=cp.uint32)
    if all_heads:
        keys_per_block //= KV_HEADS  # as many bytes per block as one head's 512 keys
        grid = (keys // keys_per_block, 1, batch)
    else:
        grid = (KV_HEADS, keys // keys_per_block, batch) if heads_fastest else (keys // keys_per_block, KV_HEADS, batch)
    args = (k, v, table, np.int32(max_pages), np.int32(page_size), np.int32(KV_HEADS), np.int32(keys_per_block),
            np.int32(heads_fastest), np.int32(all_heads), sink)
    for _ in range(3):
        kernel(grid, (128,), args)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    rounds = []
    for _ in range(10):
        start.record()
        for _ in range(10):
            kernel(grid, (128,), args)
        end.record()
        end.synchronize()
        rounds.append(cp.cuda.get_elapsed_time(start, end) / 10)
    ms = sorted(rounds)[len(rounds) // 2]
    return ms * 1e3, 2 * words * 16 / (ms * 1e-3) / 1e12


def main():
    kernel = cp.RawModule(code=SOURCE).get_function("read_pages")
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
