#pragma once
// TMA tensor maps of a call's K or V (and of Q and the output as packed rows), built on the host
// for each call (the Hopper tiled kernel and the TMA vector kernel take them as
// __grid_constant__ parameters).

#include <cuda.h>

#include <cstdint>

#include "cuda/params.hpp"

namespace heed::cuda {

// The map of the first `keys` keys of `batches` batches of one [batches, Hkv, keys, E] operand
// (E = `columns`, float16 or bfloat16; `strides` its [b, h, key, e] strides): dims (E, keys,
// Hkv, batches), boxes of 64 columns × `box_keys` keys, 128-byte swizzle, reads past either end
// as zeros. Dense operands pass B; a ragged [total, H, E] tensor is 1 batch of total rows, a
// paged cache num_pages batches of page_size rows. Sizes of 1 take a packed stride (any value
// does; the planner checked the others: positive, multiples of 16 bytes, under 2^40). keys = 0
// is described as 1 key: a kernel then loads no tile. `what` names the operand and its kernel.
CUtensorMap kv_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns, std::int64_t keys,
                          std::int64_t batches, const Strides4& strides, int box_keys, const char* what);
// The same operand as whole rows: boxes of all `columns` (at most 256) × `box_keys` keys, no
// swizzle, so a box lands in shared memory as dense rows of E elements. Rows that are no
// multiple of 64 columns decode at 0.63-0.88 of their compiled size's rate in 64-column boxes
// and 1.09-1.63 in whole rows (`heed_cuda_bench --head-sizes --mode decode`, docs/decisions.md).
CUtensorMap kv_rows_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns, std::int64_t keys,
                               std::int64_t batches, const Strides4& strides, int box_keys, const char* what);

// Whether a [B, Hq, Lq, E] operand (Q or the output) can be described by row_tensor_map: the
// group divides 64, rows are contiguous and 16-byte aligned, and the strides of dims longer
// than 1 are positive multiples of 16 bytes under 2^40 bytes.
bool row_tensor_map_fits(const void* data, const Call& g, const Strides4& strides);
// The map of such an operand as the tiled kernels' packed rows (row r of a key head's group:
// position r / group of query head r % group): dims (E, group, Lq, Hkv, B), boxes of 64 columns
// × group heads × 64 / group positions, i.e. 64 consecutive packed rows; 128-byte swizzle.
// Positions past Lq read as zeros and are not written.
CUtensorMap row_tensor_map(const void* data, DType type, const Call& g, std::int64_t columns,
                           const Strides4& strides, const char* what);

}  // namespace heed::cuda
