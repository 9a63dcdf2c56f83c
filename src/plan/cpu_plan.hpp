#pragma once
// The CPU routing function: one place decides the route, its blocking and its scratch, for
// plan_attention, attention and heed explain alike.

#include <cstdint>
#include <string>

#include "core/cpu_info.hpp"
#include "heed/plan.hpp"
#include "plan/overrides.hpp"
#include "plan/problem.hpp"
#include "plan/scratch_layout.hpp"

namespace heed::plan {

// Everything the CPU kernels need beyond the public plan.
struct CpuRoute {
  AttentionPlan plan;
  std::string merge_kernel_name;  // vector, two passes

  // Vector: tasks are (batch, key head, key block); rows = group × Lq query rows each. With
  // heads_together, (batch, key block) over every key head, rows walked once for all heads.
  std::int64_t vector_rows = 0;
  bool heads_together = false;
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

  // Tiled on bfloat16 matrix units: the AMX tiles (bfloat16 and float16 inputs where
  // cpu_info().isa is Amx) or AVX512-BF16 dot products (bfloat16 inputs where it is
  // Avx512Bf16). K and V are packed once into tile order by a first pass; then the tiled
  // tasks multiply on the units.
  struct Amx {
    bool on = false;
    bool tiles = false;          // AMX tiles; false: vdpbf16ps on the same packed layout
    std::int64_t parts = 1;      // bfloat16 parts per value: 1 (bfloat16), 2 (float16), 3 (float32)
    std::int64_t rows = 0;       // group × block_q rounded up to 16 (a tile's rows)
    std::int64_t depth = 0;      // D rounded up to 32 (a tile's bfloat16 depth)
    std::int64_t columns = 0;    // Dv rounded up to 16 (a tile's float32 columns)
    std::int64_t keys = 0;       // keys per packed tile: block_k rounded up to 32
    std::int64_t key_tiles = 0;  // packed tiles per (batch, key head): ceil(Lk / keys)
    // Ragged, packed once: tiles per key head over the batch, total_kv / keys + B; sequence b's
    // first is cu_seqlens_k[b] / keys + b, which leaves room for every sequence's last partial tile.
    std::int64_t head_tiles = 0;
    std::size_t tile_bytes = 0;  // one packed tile: parts × Kᵀ [depth/2 × keys], then parts × V [keys/2 × columns] pairs
    // How K and V are packed: all once by a first pass; under max_scratch_bytes one (batch, key
    // head) at a time, its query blocks run after it; or by each task into its worker's own slot
    // (one tile) for each tile it reads.
    enum class Packing { Once, PerHead, PerTask } packing = Packing::Once;
    std::string pack_kernel_name;
    Region packed, q, p;  // packed K/V (shared); per worker: q and P in bfloat16 parts
  } amx;
};

// The plan of `problem` on a CPU with the facts `cpu` (cpu_info()), overrides applied.
CpuRoute plan_cpu(const Problem& problem, const CpuInfo& cpu, const PlanOverrides& overrides = {});

}  // namespace heed::plan
