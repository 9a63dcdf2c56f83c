#pragma once
// The CPU routing function: one place decides the route, its blocking and its scratch, for
// plan_attention, attention and heed explain alike.

#include <cstdint>
#include <string>

#include "heed/plan.hpp"
#include "plan/problem.hpp"
#include "plan/scratch_layout.hpp"

namespace heed::plan {

// Everything the CPU kernels need beyond the public plan.
struct CpuRoute {
  AttentionPlan plan;
  std::string merge_kernel_name;  // vector, two passes

  // Vector: tasks are (batch, key head, key block); rows = group × Lq query rows each.
  std::int64_t vector_rows = 0;
  std::int64_t key_blocks = 1;
  std::int64_t keys_per_block = 0;
  std::int64_t key_chunk = 0;
  // Tiled: tasks are (batch, query head, query block).
  std::int64_t block_q = 0;
  std::int64_t block_k = 0;
  // Composed: tasks are (batch, query head, row block) of `rows` rows.
  std::int64_t rows = 0;
  bool pack_inputs = false;  // convert q, k, v to float32 rows for BLAS

  // Per-worker regions (slice = worker) and the shared ones.
  Region q_rows, k_row, k_rows, v_rows, scores, accum, stats, out_rows;
  Region partials;  // vector, two passes: [tasks][rows][Dv + 2]
  Region packed_kv_id;  // composed with packing: which (batch, key head) each worker holds
};

CpuRoute plan_cpu(const Problem& problem);

}  // namespace heed::plan
