#pragma once
// The CPU routing thresholds and tile limits, in one table. Each threshold states the
// measurement behind it; re-measure with `heed bench` and tools in docs/performance.md.

#include <cstdint>

namespace heed::plan::cpu {

// Vector route when one key head serves at most this many query rows (group × Lq): then
// every key is read once for all rows and the work is bound by reading K and V.
// Initial value from the decode shapes of the suite (group 4 and 8, Lq 1); to be swept in
// the CPU-kernels issue.
inline constexpr std::int64_t kVectorMaxRows = 16;
// Keys per partition below which splitting a (batch, key head) task costs more in merging
// than it gains in threads.
inline constexpr std::int64_t kVectorMinKeysPerBlock = 256;
// Key blocks per thread when (batch × key heads) tasks cannot fill the threads.
inline constexpr std::int64_t kVectorBlocksPerThread = 2;
// Keys whose scores the vector kernel holds at once per query row.
inline constexpr std::int64_t kVectorKeyChunk = 64;

// Keys per score block of the fused micro-kernels (one AVX-512 register of float32).
inline constexpr std::int64_t kKeyLanes = 16;

// Composed (BLAS) route when Lk is at most this and the scores fit the cap.
inline constexpr std::int64_t kComposedMaxKeys = 128;

// Tiled route: query rows per tile (positions x the heads of a group), and the limits of the
// key tile.
inline constexpr std::int64_t kTiledBlockRows = 64;
inline constexpr std::int64_t kTiledMinBlockK = 16;
inline constexpr std::int64_t kTiledMaxBlockK = 512;
// Fraction (1/N) of the per-core L2 that one worker's tiles may fill.
inline constexpr std::int64_t kTiledL2Share = 2;

}  // namespace heed::plan::cpu
