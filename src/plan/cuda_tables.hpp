#pragma once
// The CUDA routing thresholds and kernel shapes, in one table. Each entry states the
// reasoning or measurement behind it; re-measure with scripts/gpu-check on the H200.

#include <cstdint>

namespace heed::plan::cuda {

// Vector route when one key head serves at most this many query rows (group × Lq): decode,
// bound by reading K and V once. Above it the composed route (cuBLAS) serves until the tiled
// kernel exists. Mirrors the CPU threshold; not yet swept on the GPU.
inline constexpr std::int64_t kVectorMaxRows = 16;
// Threads per vector block: 4 warps. Each warp holds 32 / lanes_per_key key groups; each key
// group copies vector_keys_per_step(chunks_per_lane) keys per step (K and V rows, 16 bytes per
// lane and chunk, cp.async into shared memory) through a kVectorStages-deep pipeline, so each
// block keeps (kVectorStages - 1) × 128 × 128 bytes = 32 KiB of loads in flight in 48 KiB of
// shared memory (4 blocks per SM by shared memory).
inline constexpr int kVectorThreads = 128;
inline constexpr int kVectorStages = 3;
// Keys per step of one key group: 128 bytes of K and V per lane and step at any head size.
constexpr int vector_keys_per_step(int chunks_per_lane) { return chunks_per_lane >= 4 ? 1 : 4 / chunks_per_lane; }
// Bytes of one vector load: 8 float16/bfloat16 or 4 float32 elements.
inline constexpr int kVectorLoadBytes = 16;
// Largest head size the vector kernel holds in registers (chunks_per_lane <= 512 / 32 / E).
inline constexpr std::int64_t kVectorMaxHeadDim = 512;
// Floats of q (and of the output accumulator) per lane: row_tile × chunks_per_lane × E <= 64
// keeps both in registers without spilling (nvcc -Xptxas -v, sm_90a: <= 255 registers).
inline constexpr int kVectorRegisterFloats = 64;
inline constexpr int kVectorMaxRowTile = 8;
// Key partitions: about kVectorBlocksPerSm blocks per SM (2 to 4 resident at 128 threads, so
// 2 to 4 waves, which keeps the last wave's idle share small), but no partition under
// kVectorMinKeysPerPartition keys, where the merge's rows × (Dv + 2) floats per partition would
// cost more than a few percent of the reads.
inline constexpr std::int64_t kVectorBlocksPerSm = 8;
inline constexpr std::int64_t kVectorMinKeysPerPartition = 256;

// Composed route: without a caller's cap the score buffer of one step (kv heads × rows × Lk
// float32) stays within this many bytes, so long prefill shapes are blocked instead of
// allocating gigabytes of scores.
inline constexpr std::int64_t kComposedScoreBudget = std::int64_t{1} << 30;
// Threads of the softmax and store kernels (one block per score row).
inline constexpr int kRowThreads = 256;

}  // namespace heed::plan::cuda
