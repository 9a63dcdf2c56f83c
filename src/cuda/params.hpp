#pragma once
// The CUDA launches' arguments: the call descriptor (call/call.hpp) as validation built it, plus
// each route's launch shape. No CUDA types: built by host code, copied by value into the
// launches.

#include <cstdint>

#include "call/call.hpp"
#include "score/score.hpp"

namespace heed::cuda {

using call::Call;
using call::MaskKind;
using Strides4 = call::Strides;

struct VectorArgs : Call {
  score::Transform transform;  // in log2 units: scores are exponents of 2
  bool wide_loads = false;     // 16-byte loads: last dimensions contiguous and rows aligned
  int lanes_per_key = 32;
  std::int64_t rows = 0;  // group × Lq
  std::int64_t row_tiles = 1;
  std::int64_t span_begin = 0, span_end = 0;
  std::int64_t partitions = 1, keys_per_partition = 0;
  float* partials = nullptr;  // [B][Hkv][rows][partitions][Dv + 2] when partitions > 1
  // The tensor-core kernel only (cuda/vector_mma.cuh):
  int row_tile = 8;    // query rows per block: 8 or 16
  int k_steps = 0;     // ceil(D / 32): 32-element steps of a K row
  int v_steps = 0;     // ceil(Dv / 64): 64-element steps of a V row
  int ring_items = 2;  // 16-key K or V items per warp in the shared-memory ring
};

}  // namespace heed::cuda
