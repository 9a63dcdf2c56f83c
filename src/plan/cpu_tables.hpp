#pragma once
// The CPU routing thresholds and tile limits, in one table. Each threshold states the
// measurement behind it; re-measure with `heed bench` and tools in docs/performance.md.

#include <cstdint>

namespace heed::plan::cpu {

// Vector route when one key head serves at most this many query rows (group × Lq): the work
// is bound by reading K and V, and the vector route alone splits keys across threads when
// (batch × key heads) is small. heed_route_sweep (docs/performance.md), 2 threads, B 1, 32/8
// heads, Lk 4096, D 128, vector vs tiled: Lq 1 (4 rows) 1.45 vs 1.35 ms, Lq 2 3.13 vs 3.19,
// Lq 16 (64 rows) 8.20 vs 8.22: within 10% where 8 key heads fill 2 threads; the threshold
// keeps decode on the route that can split keys when they do not.
inline constexpr std::int64_t kVectorMaxRows = 16;
// Keys per partition below which splitting a (batch, key head) task costs more (a second
// dispatch and the merge) than it gains in threads. Swept 2026-11-30 on this 2-core machine:
// decode, 8 query heads on one key head (so one task for two threads), D 128, f32, median of
// 2001 calls, µs, for a minimum of 64 / 128 / 256 / 512 keys: Lk 256: 49 / 59 / 32 / 32;
// Lk 512: 78 / 84 / 74 / 61; Lk 1024: 147 / 145 / 142 / 145; Lk 2048: 228 for all;
// Lk 8192: 707 / 703 / 699 / 721 (within noise). Splitting pays from about 1024 keys.
inline constexpr std::int64_t kVectorMinKeysPerBlock = 512;
// Key blocks per thread when (batch × key heads) tasks cannot fill the threads.
inline constexpr std::int64_t kVectorBlocksPerThread = 2;
// Keys whose scores the vector kernel holds at once per query row. `heed bench`, alternating
// builds with 64 and 256, three rounds, median ms: llama3-8b-decode 14.37 / 13.96 / 12.22 vs
// 11.59 / 10.80 / 10.53; its bf16 variant 8.99 / 9.21 / 8.45 vs 8.94 / 8.37 / 8.31.
inline constexpr std::int64_t kVectorKeyChunk = 256;
// How far ahead of the key or value row in use the vector kernel requests the caller's rows
// into L2 (prefetcht2), in bytes. In-process A/B (each call alternating the variants, 12 calls
// each), 2026-12-01, this machine, median of per-call ratios to no prefetch at 1 / 2 threads.
// float32 rows (512 bytes) 4, 8, 16, 32 KiB ahead: llama3-8b-decode 0.925 / 0.905 / 0.902 /
// 0.900 and 0.947 / 0.929 / 0.929 / 0.946, -128k 0.925 / 0.891 / 0.883 / 0.878 and 0.959 /
// 0.915 / 0.919 / 0.924. 16-bit rows (256 bytes) 2, 4, 8, 16 KiB ahead: -bf16 1.160 / 0.897 /
// 0.909 / 0.926 and 1.133 / 0.866 / 0.860 / 0.898, -f16 1.067 / 0.841 / 0.842 / 0.848 and 1.029
// / 0.840 / 0.816 / 0.864. Requests into L1 (prefetcht0) measured 0.95-0.99 for float32 at 4
// KiB, slower from 8 KiB, and 1.10-1.31 for bfloat16. Xeon of the H200 machine, 10-12 calls
// each, no prefetch against 8 KiB ahead, 2 / 16 threads: llama3-8b-decode 1.543 / 1.370, -bf16
// 1.339 / 0.964, -f16 1.368 / 0.998, -128k 1.501 / 1.299; 4 and 16 KiB within 0.97-1.06 of 8.
inline constexpr std::int64_t kVectorPrefetchBytes = 8192;

// Keys per score block of the fused micro-kernels (one AVX-512 register of float32).
inline constexpr std::int64_t kKeyLanes = 16;

// Composed (BLAS) route when Lk is at most this (checked first) and the scores fit the cap.
// heed_route_sweep (2026-11-30, this 2-core machine, commit after the vectorised softmax),
// B 4, 8 heads, Lq = Lk, D 64 / 128, composed vs the faster fused route: Lk 8: 0.025 /
// 0.038 vs 0.040 / 0.060 ms; Lk 16: 0.072 / 0.099 vs 0.101 / 0.153 ms; Lk 32: 0.260 /
// 0.344 vs 0.173 / 0.308 ms. Composed wins up to 16 keys only.
inline constexpr std::int64_t kComposedMaxKeys = 16;

// Tiled route: query rows per tile (positions x the heads of a group), and the limits of the
// key tile, whose size the L2 budget below then picks. Rows: heed_route_sweep over (block_k
// max, rows) in {64, 128} x {64, 128}, 2 threads, B 4, 8 heads, L 128-512: 128 rows was best
// or within 5% (L 512, D 128: 38.7 ms vs 42.3 for 64 rows). Key tile limit, after the
// vectorised softmax: `heed bench` alternating builds with a limit of 64 and 256, three rounds,
// median ms: bge-small 138.5 / 143.0 / 140.3 vs 114.2 / 95.5 / 115.1, llama3-8b-prefill
// 929.9 / 953.7 / 925.7 vs 840.6 / 764.3 / 846.6, bert-base 218 / 223 / 178 vs 182 / 163 / 183.
// Later the same day, after the shuffle transpose and in-place value rows, 128 against 256
// rows, two alternating rounds (the second on a busier machine), ms: bert-base 147 / 172 vs
// 143 / 158, llama3-8b-prefill 705 / 822 vs 693 / 762; heed_route_sweep B 4, 8 heads, L 512,
// D 128, tiled 23.7 / 27.6 vs 23.3 / 25.4: 256 rows, on the FMA kernels.
inline constexpr std::int64_t kTiledBlockRows = 256;
// The FMA kernels' rows where a worker's tiles at this many rows, with whole key tiles, still
// fit the L2 budget below, and the tasks give every thread kTiledMinTasksPerThread or more:
// each key tile's preparation (its transpose, widening 16-bit rows) then serves twice the rows.
// In-process A/B (each call alternating 256 and 512 rows, `heed bench` with a probe patch),
// 2026-12-01, 2 threads, fastest call / median of per-call ratios to 256 rows: this machine
// (1 MiB L2) bert-base 135.9 against 139.8 ms, 0.963; bge-small 79.1 against 85.4, 0.927;
// llama3-8b-prefill (D 128, whose tiles at 512 rows exceed 1 MiB) 688.6 against 679.8, 1.010.
// Xeon of the H200 machine (2 MiB L2): bge-small 61.7 against 65.3-66.2 ms, 0.948 / 0.949;
// bert-base 126.3-132.6 against 120.7-136.5, 0.994 / 0.975; at 16 threads bert-base 0.984 /
// 0.976, bge-small 0.968 / 0.993; float32 Llama on the FMA kernels (not its route there) 535
// against 568 ms causal, 1012 against 1036 non-causal.
inline constexpr std::int64_t kTiledMaxBlockRows = 512;
inline constexpr std::int64_t kTiledMinTasksPerThread = 4;
// The bfloat16 matrix units' kernel (AMX tiles, AVX512-BF16 dot products): 256 rows. Xeon of
// the H200 machine, 2 threads, `heed bench --reps 8` under HEED_CPU_TILED_ROWS, two rounds of
// 128 / 256 rows (256 keys), ms (2026-12-01, session 10): llama3-8b-prefill-bf16 192.3 / 178.5
// against 143.5 / 130.6, llama3-8b-prefill (float32 on the tiles) 469.1 / 612.4 against 429.6
// / 394.0, -f16 256.2 / 302.4 against 234.0 / 234.9, qwen-d256 39.7 / 29.9 against 28.2 / 28.6
// (512-key tiles: bfloat16 faster still, 126.1 / 120.5, float32 and float16 slower, 451 / 454
// and 253 / 243). On dot products here: llama3-8b-prefill-bf16 358 / 362 against 362 / 361,
// qwen-d256 92.1 / 92.4 against 89.2 / 89.3 (its keys then 128, this L2 being 1 MiB).
inline constexpr std::int64_t kBf16UnitBlockRows = 256;
// float32 runs on the AMX tiles (three bfloat16 parts, six products) from this head size up;
// below, the FMA kernels. Xeon of the H200 machine, 2 threads, two alternating rounds of
// HEED_CPU_ISA=amx against avx512bf16 (FMAs), ms (2026-11-30, session 7): llama3-8b-prefill
// (D 128, causal) 696 / 447 against 560 / 586, llama3-8b-prefill-full 989 / 852 against
// 1219 / 1262; but bert-base (D 64) 211 / 158 against 156 / 133 and bge-small (D 32) 136 /
// 107 against 82 / 81: at small D the splitting and the six products' fixed costs outweigh
// the FMAs saved.
inline constexpr std::int64_t kAmxFloat32MinHeadDim = 128;
inline constexpr std::int64_t kTiledMinBlockK = 16;
inline constexpr std::int64_t kTiledMaxBlockK = 256;
// Fraction (1/N) of the per-core L2 that one worker's tiles may fill. Swept 2026-11-30 on this
// 2-core machine (1 MiB L2): llama3-8b-prefill f32 (32/8 heads, 4k, D 128, causal, 2 threads,
// repeated heed::attention calls, three alternating rounds, ms): N = 1 (256-key tiles) 732 /
// 731 / 732; N = 2 (128 keys) 749 / 746 / 770; N = 4 (64 keys) 790 / 787 / 781. The whole L2
// wins: the key tile is streamed once per row block, and larger tiles amortise the softmax
// bookkeeping; BERT-base and bge-small reach the 256-key limit at any N.
inline constexpr std::int64_t kTiledL2Share = 1;

// The encoder layer's projections: positions per BLAS task (q, k, v and out each, within one
// sequence). Single-threaded OpenBLAS sgemm, [rows, 384] x [384, 384] over 8192 rows in
// blocks, median of 5, 2026-11-30 on this 2-core machine (loaded by other jobs): 32 rows 34.7
// GFLOP/s, 64: 60.1, 128: 62.6, 256: 64.8, 512 to 8192: 65.3 to 65.8. From 128 rows a block
// is within 5% of one call, and a 32 x 128-token batch still gives 96 projection tasks.
inline constexpr std::int64_t kLayerProjectionRows = 128;

// The smallest packed key tile of the bfloat16 tiled route (AMX tiles or AVX512-BF16 dot
// products) under a sliding window, where the planner shrinks tiles towards half the window.
// gpt-oss-window (64/8 heads, 4k, D 64, window 128, sinks, bf16), 2 threads, AVX512-BF16,
// 2026-11-30, `heed bench --reps 3`, ms over six alternating runs: 64-key tiles 54.3-71.7
// (median 55.4), 128-key 61.0-72.9, 256-key (no shrinking) 80.8-89.2.
inline constexpr std::int64_t kAmxWindowMinKeys = 64;

}  // namespace heed::plan::cpu
