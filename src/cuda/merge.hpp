#pragma once
// merge_states on a CUDA device (cuda/merge.cu), the semantics of cpu/merge.cpp: each row's two
// parts weighed by exp(lse_part - lse), in float32. No CUDA types: attention.cpp calls it.

#include "call/merge.hpp"
#include "heed/device.hpp"

namespace heed::cuda {

// Runs the merge on `stream` (a cudaStream_t, null = the default stream) of `device`.
void merge_states(const call::Merge& m, Device device, void* stream);

}  // namespace heed::cuda
