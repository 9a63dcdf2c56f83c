#pragma once
// Host-resident metadata of a call on a CUDA device. Validation accepts cu_seqlens, seqlens_k
// and block_table on the host (and checks them there); the kernels read device memory, so the
// call copies them into its scratch's "metadata" buffer first. The copy is one int32 array, in
// this order: cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table (row-major [B, max_pages]).

#include <cstdint>

#include "call/call.hpp"

namespace heed::call {

// The int32 values of the call's host-resident arrays (those flagged in c.seqs.host).
std::int64_t host_metadata_count(const Call& c);

// Writes those values into `packed` (host_metadata_count(c) of them), in the copy's order.
void pack_host_metadata(const Call& c, std::int32_t* packed);

// The call reading its metadata from `copy` (a device array holding pack_host_metadata's values)
// where it was on the host; nothing is left flagged as host-resident.
Call with_metadata_copy(const Call& c, const std::int32_t* copy);

}  // namespace heed::call
