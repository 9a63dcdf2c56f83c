#pragma once
// The CPU routing thresholds and tile limits, in one table. Each entry gives its reason and the
// benchmark case that measures it; the figures are in docs/decisions.md.

#include <cstdint>

namespace heed::plan::cpu {

// Vector route when one key head serves at most this many query rows (group × Lq): decode is
// bound by reading K and V, and only this route splits keys across threads when (batch × key
// heads) is small. Measured by heed_route_sweep (B 1, 32/8 heads, Lk 4096, Lq 1-16).
inline constexpr std::int64_t kVectorMaxRows = 16;
// Keys per partition below which splitting a (batch, key head) task costs more (a second
// dispatch, the merge) than the threads gain. Measured by decode of 8 query heads on one key
// head (one task for two threads), D 128, float32, Lk 256-8192.
inline constexpr std::int64_t kVectorMinKeysPerBlock = 512;
// Key blocks per thread when (batch × key heads) tasks cannot fill the threads.
inline constexpr std::int64_t kVectorBlocksPerThread = 2;
// Keys whose scores the vector kernel holds at once per query row. Cases: llama3-8b-decode,
// llama3-8b-decode-bf16.
inline constexpr std::int64_t kVectorKeyChunk = 256;
// How far ahead of the key or value row in use the vector kernel requests the caller's rows
// into L2 (prefetcht2), in bytes: one core's own misses in flight fall short of a read stream.
// Cases: llama3-8b-decode, -bf16, -f16, -128k.
inline constexpr std::int64_t kVectorPrefetchBytes = 8192;

// Keys per score chunk where one task reads every key head of its rows (K and V in [.., L, Hkv,
// E] order): the chunk's rows, all heads, stay in L2 while each head passes over them. Cases:
// heed_serving_bench's paged decode and dense [B, Lk, Hkv, D].
inline constexpr std::int64_t kVectorHeadsKeyChunk = 64;

// Keys per score block of the fused micro-kernels (one AVX-512 register of float32).
inline constexpr std::int64_t kKeyLanes = 16;

// Composed (BLAS) route when Lk is at most this (checked first) and the scores fit the cap:
// on so few keys BLAS over materialised scores beats the fused routes. Measured by
// heed_route_sweep (B 4, 8 heads, Lq = Lk 8-32, D 64 and 128).
inline constexpr std::int64_t kComposedMaxKeys = 16;

// Tiled route on the FMA kernels: query rows per task (positions x the heads of a group); more
// rows amortise each key tile's transpose. Cases: bert-base, llama3-8b-prefill.
inline constexpr std::int64_t kTiledBlockRows = 256;
// The FMA kernels' rows where a worker's tiles at this many rows, with whole key tiles, still
// fit the L2 budget below and every thread gets kTiledMinTasksPerThread tasks: each key tile's
// preparation then serves twice the rows. Cases: bert-base, bge-small, llama3-8b-prefill.
inline constexpr std::int64_t kTiledMaxBlockRows = 512;
inline constexpr std::int64_t kTiledMinTasksPerThread = 4;
// Rows per task of the bfloat16 matrix units' kernel (AMX tiles, AVX512-BF16 dot products).
// Cases: llama3-8b-prefill-bf16, llama3-8b-prefill-f16, llama3-8b-prefill, qwen-d256.
inline constexpr std::int64_t kBf16UnitBlockRows = 256;
// float32 runs on the AMX tiles (three bfloat16 parts, six products) from this head size up;
// below it the splitting and the six products cost more than the FMAs they save. Cases:
// llama3-8b-prefill, llama3-8b-prefill-full (D 128), bert-base (D 64), bge-small (D 32).
inline constexpr std::int64_t kAmxFloat32MinHeadDim = 128;
// The key tile's limits on the FMA kernels; the L2 budget below picks its size between them.
// Cases: bge-small, llama3-8b-prefill, bert-base.
inline constexpr std::int64_t kTiledMinBlockK = 16;
inline constexpr std::int64_t kTiledMaxBlockK = 256;
// Fraction (1/N) of the per-core L2 that one worker's tiles may fill: the whole L2, since larger
// key tiles amortise the softmax's bookkeeping. Case: llama3-8b-prefill.
inline constexpr std::int64_t kTiledL2Share = 1;

// The encoder layer's projections: positions per BLAS task (q, k, v and out each, within one
// sequence): from 128 rows single-threaded sgemm is within 5% of one large call. Measured by
// sgemm [rows, 384] x [384, 384]; bench/minilm_bench.py --parts layer times the layer.
inline constexpr std::int64_t kLayerProjectionRows = 128;

// The smallest packed key tile of the bfloat16 tiled route (AMX tiles or AVX512-BF16 dot
// products) under a sliding window, where the planner shrinks tiles towards half the window.
// Case: gpt-oss-window.
inline constexpr std::int64_t kAmxWindowMinKeys = 64;

}  // namespace heed::plan::cpu
