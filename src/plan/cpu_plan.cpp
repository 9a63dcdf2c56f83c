#include "plan/cpu_plan.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "core/cpu_info.hpp"
#include "core/format.hpp"
#include "heed/error.hpp"
#include "plan/planner.hpp"
#include "plan/cpu_tables.hpp"

namespace heed::plan {
namespace {

using namespace cpu;
constexpr std::int64_t kFloat = 4;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

// Score tiles of the fused routes hold their key count rounded up to whole key lanes.
std::int64_t key_lanes(std::int64_t keys) { return ceil_div(std::max<std::int64_t>(keys, 1), kKeyLanes) * kKeyLanes; }

// Bytes of `count_a * count_b` float32 values, overflow-checked.
std::size_t float_bytes(const Problem& p, std::int64_t count_a, std::int64_t count_b, const char* what) {
  return static_cast<std::size_t>(checked_mul(checked_mul(count_a, count_b, op_of(p), what), kFloat, op_of(p), what));
}

// The keys one query row can see at most: the window bounds it; [first, last) over all rows.
std::int64_t visible_key_span(const Problem& p) {
  if (p.window == 0) return p.kv_len;
  // window + rows - 1 keys, at most Lk (validation keeps window <= Lk, so nothing overflows).
  const std::int64_t rows = std::max<std::int64_t>(p.q_len, 1);
  return rows - 1 >= p.kv_len - p.window ? p.kv_len : p.window + rows - 1;
}

struct Fit {
  std::int64_t a = 0;  // rows (composed), block_q (tiled), key_chunk (vector)
  std::int64_t b = 0;  // block_k (tiled)
  std::size_t intermediate = 0;
  bool capped = false;  // the cap made the blocking smaller than the route's own choice
  std::string rows_why{};  // tiled: how its rows per tile were chosen (the FMA kernels' rule, or an override)
  std::string keys_why{};  // tiled: the override of its key tile limit, where one is in force
};

// Largest blocking of each route whose score-sized intermediate fits the cap, or nullopt
// with min_cap set to the smallest cap the route accepts.
std::optional<Fit> fit_composed(const Problem& p, std::size_t& min_cap) {
  const std::size_t row_bytes = float_bytes(p, 1, p.kv_len, "a score row");
  const std::size_t all_rows = float_bytes(p, p.q_len, p.kv_len, "the scores of one head");
  min_cap = std::max<std::size_t>(row_bytes, 1);
  if (!p.max_score_bytes || all_rows <= static_cast<std::size_t>(*p.max_score_bytes)) {
    return Fit{p.q_len, 0, all_rows};
  }
  const auto rows = static_cast<std::int64_t>(static_cast<std::size_t>(*p.max_score_bytes) / row_bytes);
  if (rows < 1) return std::nullopt;
  return Fit{rows, 0, float_bytes(p, rows, p.kv_len, "a score block"), true};
}

// Whether the tiled route multiplies on bfloat16 units: AMX tiles (bfloat16; float16 in two
// parts, three products; float32 in three parts, six products, from kAmxFloat32MinHeadDim) or
// AVX512-BF16 dot products (bfloat16 only: float16's three products and float32's six would
// cost more than FMAs there).
bool on_bf16_units(const Problem& p, const CpuInfo& cpu) {
  if (cpu.isa < CpuIsa::Avx512Bf16 || p.kv_len == 0) return false;
  if (p.dtype == DType::Float32) return cpu.isa == CpuIsa::Amx && p.head_dim >= kAmxFloat32MinHeadDim;
  return p.dtype == DType::BFloat16 || cpu.isa == CpuIsa::Amx;
}

// A tiled worker's tiles in floats: q rows, accumulators and row stats, then the K and V tiles
// and the scores. In double: it only steers the tile size, and huge head sizes must not overflow.
double tile_floats(const Problem& p, std::int64_t rows, std::int64_t keys) {
  const double row_floats = static_cast<double>(p.head_dim) + static_cast<double>(p.value_dim);
  return static_cast<double>(rows) * (row_floats + 2) + static_cast<double>(keys) * (row_floats + static_cast<double>(rows));
}

// A count in double as int64 for the explanation: int64's limit beyond it (head sizes near that
// limit), where the conversion would be undefined.
std::int64_t whole_count(double count) {
  return count < 0x1p63 ? static_cast<std::int64_t>(count) : std::numeric_limits<std::int64_t>::max();
}

// Tiled tiles hold block_q query positions of every head of a group (group × block_q rows).
std::optional<Fit> fit_tiled(const Problem& p, const CpuInfo& cpu, const PlanOverrides& overrides,
                             std::size_t& min_cap) {
  const std::int64_t group = std::max<std::int64_t>(p.group, 1);
  const auto positions_for = [&](std::int64_t rows) {
    return std::clamp<std::int64_t>(rows / group, 1, std::max<std::int64_t>(p.q_len, 1));
  };
  const double budget = static_cast<double>(cpu.l2_bytes) / kTiledL2Share;
  const auto footprint = [&](std::int64_t rows, std::int64_t keys) { return tile_floats(p, rows, keys) * kFloat; };
  const std::int64_t asked_rows = overrides.cpu_tiled_rows, asked_keys = overrides.cpu_tiled_keys;
  std::int64_t block_k = asked_keys > 0 ? std::max(asked_keys, kTiledMinBlockK) : kTiledMaxBlockK;
  std::int64_t target_rows =
      asked_rows > 0 ? asked_rows : (on_bf16_units(p, cpu) ? kBf16UnitBlockRows : kTiledBlockRows);
  std::string rows_why, keys_why;
  if (asked_rows > 0) {
    rows_why = format("rows per tile from HEED_CPU_TILED_ROWS={} (tuning), not the planner's table", asked_rows);
  } else if (!on_bf16_units(p, cpu)) {
    // The FMA kernels take kTiledMaxBlockRows rows where those tiles, with whole key tiles, fit
    // the budget and still give each thread kTiledMinTasksPerThread tasks.
    const std::int64_t positions = positions_for(kTiledMaxBlockRows), rows = group * positions;
    const std::int64_t keys = std::min(block_k, std::max<std::int64_t>(p.kv_len, 1));
    const std::int64_t tasks = p.batch * p.kv_heads * ceil_div(std::max<std::int64_t>(p.q_len, 1), positions);
    const bool fits = footprint(rows, keys) <= budget;
    const bool enough = tasks >= kTiledMinTasksPerThread * cpu.threads;
    if (fits && enough) target_rows = kTiledMaxBlockRows;
    rows_why = format("rows per tile up to {} (at {} rows the tiles, with {}-key tiles, {} the L2 budget, and {} "
                      "tasks {} {} per thread for {} threads)",
                      fits && enough ? kTiledMaxBlockRows : kTiledBlockRows, rows, keys, fits ? "fit" : "exceed",
                      tasks, enough ? "are at least" : "would be under", kTiledMinTasksPerThread, cpu.threads);
  }
  if (asked_keys > 0) {
    keys_why = format("at most {} keys per tile from HEED_CPU_TILED_KEYS (tuning), not the planner's table",
                      asked_keys);
  }
  std::int64_t block_q = positions_for(target_rows);
  const auto rows = [&] { return group * block_q; };
  while (block_k > kTiledMinBlockK && footprint(rows(), block_k) > budget) block_k /= 2;
  block_k = std::min(block_k, std::max<std::int64_t>(p.kv_len, 1));
  const auto tile_bytes = [&] { return float_bytes(p, rows(), key_lanes(block_k), "a score tile"); };
  min_cap = float_bytes(p, group, kKeyLanes, "a score tile");
  bool capped = false;
  if (p.max_score_bytes) {
    const auto cap = static_cast<std::size_t>(*p.max_score_bytes);
    while (tile_bytes() > cap && block_k > kKeyLanes) {
      block_k = std::max(kKeyLanes, block_k / 2);
      capped = true;
    }
    if (tile_bytes() > cap) {  // then as many query positions as the cap holds
      block_q = std::max<std::int64_t>(1, static_cast<std::int64_t>(cap / float_bytes(p, group, key_lanes(block_k), "a score tile")));
      capped = true;
    }
    if (tile_bytes() > cap) return std::nullopt;
  }
  return Fit{block_q, block_k, tile_bytes(), capped, rows_why, keys_why};
}

std::optional<Fit> fit_vector(const Problem& p, std::int64_t rows, std::size_t& min_cap) {
  std::int64_t chunk = std::clamp<std::int64_t>(visible_key_span(p), 1, kVectorKeyChunk);
  const auto tile_bytes = [&] { return float_bytes(p, rows, key_lanes(chunk), "a score chunk"); };
  min_cap = float_bytes(p, std::max<std::int64_t>(rows, 1), kKeyLanes, "a score chunk");
  bool capped = false;
  if (p.max_score_bytes) {
    const auto cap = static_cast<std::size_t>(*p.max_score_bytes);
    while (chunk > kKeyLanes && tile_bytes() > cap) {
      chunk = std::max(kKeyLanes, chunk / 2);
      capped = true;
    }
    if (tile_bytes() > cap) return std::nullopt;
  }
  return Fit{chunk, 0, tile_bytes(), capped};
}

std::string kernel_name(const char* route, DType dtype) {
  return std::string("heed_cpu_") + route + "_" + short_name(dtype);
}

void build_vector(CpuRoute& r, const Problem& p, const CpuInfo& cpu, const Fit& fit) {
  auto& reasons = r.plan.reasons;
  const std::int64_t span = visible_key_span(p);
  r.vector_rows = p.group * p.q_len;
  // Key rows that hold every head are read whole, once: a task per (batch, key head) would read
  // a head's slice of each row, a few cache lines every row stride.
  r.heads_together = p.kv_heads_in_rows && r.vector_rows <= kVectorMaxRows;
  const std::int64_t tasks = r.heads_together ? p.batch : p.batch * p.kv_heads;
  r.key_chunk = r.heads_together ? std::min(fit.a, kVectorHeadsKeyChunk) : fit.a;
  r.key_blocks = 1;
  if (r.heads_together) {
    reasons.push_back(format("key heads together: K and V rows hold all {} key heads, so each task walks its "
                             "rows once for every head, {} keys at a time",
                             p.kv_heads, r.key_chunk));
  }
  if (tasks < cpu.threads && span >= 2 * kVectorMinKeysPerBlock) {
    const std::int64_t wanted = ceil_div(cpu.threads * kVectorBlocksPerThread, std::max<std::int64_t>(tasks, 1));
    r.key_blocks = std::clamp<std::int64_t>(span / kVectorMinKeysPerBlock, 1, wanted);
  }
  r.keys_per_block = ceil_div(span, r.key_blocks);
  if (r.keys_per_block > 0) r.key_blocks = ceil_div(span, r.keys_per_block);
  r.key_blocks = std::max<std::int64_t>(r.key_blocks, 1);
  const int passes = r.key_blocks > 1 ? 2 : 1;
  r.plan.kernel = route::Vector{passes, r.key_blocks, passes};
  r.merge_kernel_name = std::string("heed_cpu_vector_merge_") + short_name(p.dtype);
  reasons.push_back(format("key blocks: {} of {} keys ({} {} tasks for {} threads; "
                           "{} keys visible per row{}, >= {} keys per block)",
                           r.key_blocks, r.keys_per_block, tasks, r.heads_together ? "batch" : "(batch x key head)",
                           cpu.threads, span,
                           p.window ? " in the window" : "", kVectorMinKeysPerBlock));
  if (passes == 2) reasons.push_back("two passes: partial max, sum and output per block, merged exactly");
  const std::int64_t work = tasks * r.key_blocks;
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(cpu.threads, work));
  const auto workers = static_cast<std::size_t>(r.plan.workers);
  ScratchLayout layout;
  // Every head's rows and running state per worker where heads go together.
  const std::int64_t rows = r.heads_together ? checked_mul(r.vector_rows, p.kv_heads, op_of(p), "rows") : r.vector_rows;
  r.q_rows = layout.add("q_rows", float_bytes(p, rows, p.head_dim, "q rows"), workers);
  r.k_row = layout.add("k_rows", float_bytes(p, kKeyLanes, p.head_dim, "k rows"), workers);
  r.k_rows = layout.add("k_chunk_t", float_bytes(p, key_lanes(r.key_chunk), p.head_dim, "k chunk"), workers);
  r.v_rows = layout.add("v_chunk", float_bytes(p, r.key_chunk, p.value_dim, "v chunk"), workers);
  r.scores = layout.add("scores", float_bytes(p, r.vector_rows, key_lanes(r.key_chunk), "scores"), workers);
  r.accum = layout.add("accum", float_bytes(p, rows, p.value_dim, "accum"), workers);
  r.stats = layout.add("row_max_sum", float_bytes(p, rows, 2, "row stats"), workers);
  if (passes == 2) {
    // [(batch, key head, key block)][rows][Dv + 2] in either task order.
    const std::int64_t blocks = checked_mul(p.batch * p.kv_heads, r.key_blocks, op_of(p), "partials");
    r.partials = layout.add("partials", float_bytes(p, checked_mul(blocks, r.vector_rows, op_of(p), "partials"),
                                                   p.value_dim + 2, "partials"));
  }
  r.plan.buffers = layout.buffers();
  r.plan.scratch_bytes = layout.total_bytes();
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return ceil_div(value, multiple) * multiple; }

// The AMX layout of a tiled plan, when the tiles serve it (on_bf16_units) and the padded score
// tile is within the cap.
void plan_amx(CpuRoute& r, const Problem& p, const CpuInfo& cpu, CpuRoute::Amx::Packing packing) {
  if (!on_bf16_units(p, cpu)) return;
  auto& amx = r.amx;
  amx.tiles = cpu.isa == CpuIsa::Amx;
  amx.parts = p.dtype == DType::Float32 ? 3 : p.dtype == DType::Float16 ? 2 : 1;
  amx.rows = round_up(p.group * r.block_q, 16);
  amx.depth = round_up(p.head_dim, 32);
  amx.columns = round_up(p.value_dim, 16);
  amx.keys = round_up(r.block_k, 32);
  // Packed tiles start at multiples of `keys`, so a window's span of window + block_q - 1 keys
  // costs about span + keys: under a window the tiles shrink towards half of it.
  if (p.window > 0) amx.keys = std::min(amx.keys, std::max<std::int64_t>(kAmxWindowMinKeys, round_up(p.window / 2, 32)));
  const std::size_t tile = float_bytes(p, amx.rows, amx.keys, "a score tile");
  if (p.max_score_bytes && tile > static_cast<std::size_t>(*p.max_score_bytes)) return;
  amx.on = true;
  amx.key_tiles = ceil_div(p.kv_len, amx.keys);
  if (p.form == call::Form::Ragged) amx.head_tiles = checked_add(p.total_kv / amx.keys, p.batch, op_of(p), "packed tiles");
  amx.tile_bytes = static_cast<std::size_t>(checked_add(checked_mul(amx.depth / 2, amx.keys, op_of(p), "a packed key tile"),
                                                        checked_mul(amx.keys / 2, amx.columns, op_of(p), "a packed value tile"),
                                                        op_of(p), "a packed tile")) * 4 * static_cast<std::size_t>(amx.parts);
  amx.pack_kernel_name = std::string("heed_cpu_tiled_pack_") + short_name(p.dtype);
  amx.packing = packing;
  r.plan.max_intermediate_bytes = tile;
  using Packing = CpuRoute::Amx::Packing;
  const std::string packed =
      packing == Packing::PerHead
          ? format("packed one (batch, key head) at a time into {} tiles of {} keys, its query blocks run after it",
                   amx.key_tiles, amx.keys)
      : packing == Packing::PerTask
          ? format("packed per task, each task packing the tiles of {} keys it reads into its worker's slot", amx.keys)
      : amx.head_tiles > 0
          ? format("packed once into {} tiles of {} keys per key head (each sequence's own) by {} [{}, {}, {}]",
                   amx.head_tiles, amx.keys, amx.pack_kernel_name, amx.key_tiles, p.kv_heads, p.batch)
          : format("packed once into {} tiles of {} keys per (batch, key head) by {} [{}, {}, {}]", amx.key_tiles,
                   amx.keys, amx.pack_kernel_name, amx.key_tiles, p.kv_heads, p.batch);
  r.plan.reasons.push_back(format("{}: K and V {}; scores {} x {}, values {} x {} in bfloat16 products",
                                  amx.tiles ? "AMX tiles" : "AVX512-BF16 dot products", packed, amx.rows, amx.keys,
                                  amx.rows, amx.columns));
  if (amx.parts == 2) {
    r.plan.reasons.push_back("float16 on the tiles: q, k, v and the weights split exactly into two bfloat16 parts "
                             "(x = x0 + x1); three tile products per product (x0·y0 + x0·y1 + x1·y0)");
  }
  if (amx.parts == 3) {
    r.plan.reasons.push_back("float32 on the tiles: q, k, v and the weights split into three bfloat16 parts (x = x0 "
                             "+ x1 + x2, 24 significant bits); six tile products per product (xi·yj, i + j <= 2; "
                             "the rest is below float32's rounding); float32 accumulation");
  }
}

void build_tiled(CpuRoute& r, const Problem& p, const CpuInfo& cpu, const Fit& fit, CpuRoute::Amx::Packing packing) {
  r.block_q = fit.a;
  r.block_k = fit.b;
  const std::int64_t rows = p.group * r.block_q;
  r.plan.kernel = route::Tiled{r.block_q, r.block_k};
  plan_amx(r, p, cpu, packing);
  r.plan.reasons.push_back(format("tiles: {} query positions x {} heads of a key head = {} rows, x {} keys; "
                                  "{} floats of tiles per worker within 1/{} of the {} KiB L2",
                                  r.block_q, p.group, rows, r.block_k,
                                  whole_count(tile_floats(p, rows, r.block_k)),
                                  kTiledL2Share, cpu.l2_bytes >> 10));
  if (!fit.rows_why.empty()) r.plan.reasons.push_back(fit.rows_why);
  if (!fit.keys_why.empty()) r.plan.reasons.push_back(fit.keys_why);
  const std::int64_t tasks = p.batch * p.kv_heads * ceil_div(p.q_len, r.block_q);
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(cpu.threads, tasks));
  const auto workers = static_cast<std::size_t>(r.plan.workers);
  ScratchLayout layout;
  if (r.amx.on) {
    const auto& amx = r.amx;
    if (amx.packing == CpuRoute::Amx::Packing::PerTask) {
      r.amx.packed = layout.add("kv_tile", amx.tile_bytes, workers);
    } else if (amx.packing == CpuRoute::Amx::Packing::PerHead) {
      r.amx.packed = layout.add("kv_head_packed", static_cast<std::size_t>(checked_mul(
                                                      amx.key_tiles, static_cast<std::int64_t>(amx.tile_bytes), op_of(p),
                                                      "one key head's packed K and V")));
    } else {
      const std::int64_t tiles =
          amx.head_tiles > 0 ? checked_mul(p.kv_heads, amx.head_tiles, op_of(p), "packed tiles")
                             : checked_mul(checked_mul(p.batch, p.kv_heads, op_of(p), "packed tiles"), amx.key_tiles, op_of(p),
                                           "packed tiles");
      r.amx.packed = layout.add("kv_packed", static_cast<std::size_t>(checked_mul(
                                                 tiles, static_cast<std::int64_t>(amx.tile_bytes), op_of(p), "packed K and V")));
    }
    r.amx.q = layout.add("q_bf16", float_bytes(p, amx.rows * amx.parts, amx.depth / 2, "q tile"), workers);
    r.scores = layout.add("scores", float_bytes(p, amx.rows, amx.keys, "score tile"), workers);
    r.amx.p = layout.add("p_bf16", float_bytes(p, amx.rows * amx.parts, amx.keys / 2, "weight tile"), workers);
    r.accum = layout.add("accum", float_bytes(p, amx.rows, amx.columns, "accum"), workers);
    r.stats = layout.add("row_max_sum", float_bytes(p, rows, 2, "row stats"), workers);
    r.plan.buffers = layout.buffers();
    r.plan.scratch_bytes = layout.total_bytes();
    return;
  }
  r.q_rows = layout.add("q_tile", float_bytes(p, rows, p.head_dim, "q tile"), workers);
  r.k_row = layout.add("k_rows", float_bytes(p, kKeyLanes, p.head_dim, "k rows"), workers);
  r.k_rows = layout.add("k_tile_t", float_bytes(p, key_lanes(r.block_k), p.head_dim, "k tile"), workers);
  r.v_rows = layout.add("v_tile", float_bytes(p, r.block_k, p.value_dim, "v tile"), workers);
  r.scores = layout.add("scores", float_bytes(p, rows, key_lanes(r.block_k), "score tile"), workers);
  r.accum = layout.add("accum", float_bytes(p, rows, p.value_dim, "accum"), workers);
  r.stats = layout.add("row_max_sum", float_bytes(p, rows, 2, "row stats"), workers);
  r.plan.buffers = layout.buffers();
  r.plan.scratch_bytes = layout.total_bytes();
}

void build_composed(CpuRoute& r, const Problem& p, const CpuInfo& cpu, const Fit& fit) {
  r.rows = fit.a;
  if (fit.capped) {
    r.plan.kernel = route::ComposedBlocks{r.rows};
  } else {
    r.plan.kernel = route::Composed{};
  }
  r.pack_inputs = p.dtype != DType::Float32 || !p.rows_contiguous;
  r.plan.reasons.push_back(
      r.pack_inputs ? format("inputs converted to float32 rows for BLAS ({}{})", to_string(p.dtype),
                             p.rows_contiguous ? "" : ", rows not contiguous")
                    : std::string("BLAS reads q, k and v in place (float32, last dimension contiguous)"));
  const std::int64_t tasks = p.batch * p.q_heads * ceil_div(p.q_len, std::max<std::int64_t>(r.rows, 1));
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(cpu.threads, tasks));
  const auto workers = static_cast<std::size_t>(r.plan.workers);
  ScratchLayout layout;
  r.scores = layout.add("scores", float_bytes(p, r.rows, p.kv_len, "scores"), workers);
  r.out_rows = layout.add("out_rows", float_bytes(p, r.rows, p.value_dim, "output rows"), workers);
  if (r.pack_inputs) {
    r.q_rows = layout.add("q_rows", float_bytes(p, r.rows, p.head_dim, "q rows"), workers);
    r.k_rows = layout.add("k_rows", float_bytes(p, p.kv_len, p.head_dim, "k rows"), workers);
    r.v_rows = layout.add("v_rows", float_bytes(p, p.kv_len, p.value_dim, "v rows"), workers);
    r.packed_kv_id = layout.add("packed_kv_id", sizeof(std::int64_t), workers);
  }
  r.plan.buffers = layout.buffers();
  r.plan.scratch_bytes = layout.total_bytes();
}

[[noreturn]] void no_route_fits(const Problem& p, const char* route, std::size_t min_cap) {
  throw Error(ErrorKind::InvalidArgument,
              format("[{}] max_score_bytes ({}) is below what {} needs; the smallest cap that fits is {} bytes",
                     op_of(p), *p.max_score_bytes, route, min_cap));
}

enum class Pick { Vector, Tiled, Composed };

struct Fits {
  bool vector, composed, tiled;
};
struct MinCaps {
  std::size_t vector, composed, tiled;
};

// The route: the caller's, or Auto's from the thresholds of cpu_tables.hpp, moved by the cap
// where the preferred route's intermediate does not fit (then the plan is capped).
Pick choose_route(const Problem& p, Fits fits, MinCaps mins, AttentionPlan& plan) {
  auto& reasons = plan.reasons;
  const std::int64_t rows = p.group * p.q_len;
  switch (p.route) {
    case RouteChoice::Vector:
      if (!fits.vector) no_route_fits(p, "the vector route (16 scores per query row of a key head)", mins.vector);
      reasons.push_back("route vector: asked for by the caller");
      return Pick::Vector;
    case RouteChoice::Composed:
      if (p.form == call::Form::Paged) {
        throw Error(ErrorKind::Unsupported, format("[{}] route composed reads K and V as BLAS matrices, which a paged "
                                                   "cache is not; use auto, vector or tiled", call::kPagedOp));
      }
      if (!fits.composed) no_route_fits(p, "the composed route (one row of Lk scores)", mins.composed);
      reasons.push_back("route composed: asked for by the caller");
      return Pick::Composed;
    case RouteChoice::Tiled:
      if (!fits.tiled) no_route_fits(p, "the tiled route (16 keys for one position of each head of a group)", mins.tiled);
      reasons.push_back("route tiled: asked for by the caller");
      return Pick::Tiled;
    case RouteChoice::Auto:
      break;
  }
  // A paged cache is no BLAS matrix: its calls take the fused routes.
  const Pick preferred = p.kv_len <= kComposedMaxKeys && p.form != call::Form::Paged ? Pick::Composed
                         : rows <= kVectorMaxRows        ? Pick::Vector
                                                         : Pick::Tiled;
  Pick pick = Pick::Tiled;
  if (preferred == Pick::Composed && fits.composed) {
    pick = Pick::Composed;
    reasons.push_back(format("route composed: Lk {} <= {}, where BLAS on materialised scores wins", p.kv_len,
                             kComposedMaxKeys));
  } else if (rows <= kVectorMaxRows && fits.vector) {
    pick = Pick::Vector;
    reasons.push_back(format("route vector: {} query rows per key head (group {} x Lq {}) <= {}", rows, p.group,
                             p.q_len, kVectorMaxRows));
  } else if (fits.tiled) {
    reasons.push_back(preferred == Pick::Composed
                          ? format("route tiled: one row of {} scores ({} bytes) exceeds max_score_bytes {}",
                                   p.kv_len, mins.composed, *p.max_score_bytes)
                      : preferred == Pick::Vector
                          ? format("route tiled: the vector route's {} x 16 scores exceed max_score_bytes {}", rows,
                                   *p.max_score_bytes)
                          : format("route tiled: {} query rows per key head > {} and Lk {} > {}", rows,
                                   kVectorMaxRows, p.kv_len, kComposedMaxKeys));
  } else {
    no_route_fits(p, "any route", std::min({mins.vector, mins.composed, mins.tiled}));
  }
  plan.capped = pick != preferred;
  return pick;
}

// An empty output (B, Hq, Lq or Dv = 0) runs nothing and holds nothing, so no route is sized: its
// other sizes have no bounded product (B = 0 leaves Lq and Lk free up to int64's limit). The
// kernel is the caller's route, else the composed one.
void plan_empty(CpuRoute& r, const Problem& p, const CpuInfo& cpu) {
  plan_empty_output(r.plan, p, format("workers: 0 of {} threads", cpu.threads));
  r.plan.kernel_name = kernel_name(route_name(r.plan.kernel), p.dtype);
}

// How the bfloat16 units' K and V are packed before any budget: once for dense and ragged calls
// (a ragged batch's tiles sized by its total rows); per task for paged ones, whose packing once
// would gather the cache into a copy.
CpuRoute::Amx::Packing first_packing(const Problem& p) {
  return p.form == call::Form::Paged ? CpuRoute::Amx::Packing::PerTask : CpuRoute::Amx::Packing::Once;
}

// Under max_scratch_bytes: K and V packed per key head or per task where the tiled route would
// pack them whole, then fewer workers, until the layout fits; else the smallest budget, named.
template <typename Build>
void fit_scratch_budget(CpuRoute& r, const Problem& p, const CpuInfo& cpu, const Build& build) {
  const auto budget = static_cast<std::size_t>(*p.max_scratch_bytes);
  const std::size_t unbounded = r.plan.scratch_bytes;
  if (unbounded <= budget) return;
  using Packing = CpuRoute::Amx::Packing;
  Packing packing = first_packing(p);
  if (r.amx.on && packing == Packing::Once) {
    // One (batch, key head) at a time where its query blocks keep every worker busy; else per task.
    const std::int64_t blocks = ceil_div(p.q_len, r.block_q);
    packing = blocks >= r.plan.workers && p.form == call::Form::Dense ? Packing::PerHead : Packing::PerTask;
    build(cpu, packing);
    if (packing == Packing::PerHead && r.plan.scratch_bytes > budget) {
      packing = Packing::PerTask;
      build(cpu, packing);
    }
  }
  CpuInfo fewer = cpu;
  while (r.plan.scratch_bytes > budget && r.plan.workers > 1) {
    fewer.threads = r.plan.workers - 1;
    build(fewer, packing);
  }
  if (r.plan.scratch_bytes > budget) refuse_scratch_budget(p, r.plan);
  r.plan.reasons.push_back(format("scratch bound by max_scratch_bytes {}: {} bytes against {} without it{}, {} of {} "
                                  "workers",
                                  budget, r.plan.scratch_bytes, unbounded,
                                  packing == Packing::PerHead   ? ", K and V packed per key head"
                                  : packing == Packing::PerTask ? ", K and V packed per task"
                                                                : "",
                                  r.plan.workers, cpu.threads));
}

}  // namespace

CpuRoute plan_cpu(const Problem& p, const CpuInfo& cpu, const PlanOverrides& overrides) {
  CpuRoute r;
  r.plan.device = Device::cpu();
  r.plan.dtype = p.dtype;
  auto& reasons = r.plan.reasons;
  reasons.push_back(describe(p));
  if (p.empty_output()) {
    plan_empty(r, p, cpu);
    return r;
  }

  const std::int64_t rows = p.group * p.q_len;
  std::size_t vector_min = 0, composed_min = 0, tiled_min = 0;
  const auto vector = fit_vector(p, rows, vector_min);
  const auto composed = fit_composed(p, composed_min);
  const auto tiled = fit_tiled(p, cpu, overrides, tiled_min);
  const Pick pick = choose_route(p, {vector.has_value(), composed.has_value(), tiled.has_value()},
                                 {vector_min, composed_min, tiled_min}, r.plan);

  // The route's layout for `c`'s threads and K/V packing; retried by fit_scratch_budget.
  const CpuRoute chosen = r;
  const auto build = [&](const CpuInfo& c, CpuRoute::Amx::Packing packing) {
    r = chosen;
    switch (pick) {
      case Pick::Vector:
        r.plan.max_intermediate_bytes = vector->intermediate;
        build_vector(r, p, c, *vector);
        r.plan.kernel_name = kernel_name("vector", p.dtype);
        if (vector->capped) {
          r.plan.capped = true;
          reasons.push_back(format("capped: {} keys per score chunk so {} rows x chunk x 4 <= {}", vector->a,
                                   rows, *p.max_score_bytes));
        }
        break;
      case Pick::Composed:
        r.plan.max_intermediate_bytes = composed->intermediate;
        build_composed(r, p, c, *composed);
        if (composed->capped) {
          r.plan.capped = true;
          r.plan.kernel_name = kernel_name("composed_blocks", p.dtype);
          reasons.push_back(format("capped: scores of {} rows x {} keys = {} bytes > max_score_bytes {}; "
                                   "composed in blocks of {} rows ({} bytes)",
                                   p.q_len, p.kv_len, float_bytes(p, p.q_len, p.kv_len, "scores"),
                                   *p.max_score_bytes, composed->a, composed->intermediate));
        } else {
          r.plan.kernel_name = kernel_name("composed", p.dtype);
        }
        break;
      case Pick::Tiled:
        r.plan.max_intermediate_bytes = tiled->intermediate;
        build_tiled(r, p, c, *tiled, packing);  // the AMX layout may raise the intermediate, within the cap
        r.plan.kernel_name = kernel_name("tiled", p.dtype);
        if (tiled->capped) {
          r.plan.capped = true;
          reasons.push_back(format("capped: tiles of {} positions x {} keys so scores stay within max_score_bytes {}",
                                   tiled->a, tiled->b, *p.max_score_bytes));
        }
        break;
    }
  };
  build(cpu, first_packing(p));
  if (p.max_scratch_bytes) fit_scratch_budget(r, p, cpu, build);
  reasons.push_back(format("workers: {} of {} threads; {} kernels", r.plan.workers, cpu.threads,
                           pick == Pick::Composed ? "BLAS"
                           : r.amx.on             ? to_string(cpu.isa)
                           : cpu.isa > CpuIsa::Avx512 ? "avx512"
                                                      : to_string(cpu.isa)));
  reasons.push_back(format("scratch: {} bytes in {} buffers; largest score intermediate {} bytes",
                           r.plan.scratch_bytes, r.plan.buffers.size(), r.plan.max_intermediate_bytes));
  return r;
}

}  // namespace heed::plan
