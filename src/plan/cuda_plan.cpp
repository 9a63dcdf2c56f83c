#include "plan/cuda_plan.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "core/format.hpp"
#include "heed/error.hpp"
#include "memory/cpu_allocator.hpp"
#include "plan/planner.hpp"
#include "plan/cuda_tables.hpp"
#include "plan/cuda_tiled_plan.hpp"
#include "plan/cuda_vector_reasons.hpp"

namespace heed::plan {
namespace {

using namespace cuda;
constexpr std::int64_t kFloat = 4;
constexpr std::int64_t kMaxGridYZ = 65535;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

std::int64_t pow2_ceil(std::int64_t value) {
  std::int64_t p = 1;
  while (p < value) p *= 2;
  return p;
}

std::size_t float_bytes(const Problem& p, std::int64_t count_a, std::int64_t count_b, const char* what) {
  return static_cast<std::size_t>(checked_mul(checked_mul(count_a, count_b, op_of(p), what), kFloat, op_of(p), what));
}

std::string kernel_name(const char* route, DType dtype) {
  return std::string("heed_cuda_") + route + "_" + short_name(dtype);
}

// Keys any query row can see, [begin, end), bottom-right aligned (as cpu/params.hpp).
std::pair<std::int64_t, std::int64_t> visible_span(const Problem& p) {
  if (p.q_len == 0) return {0, 0};
  std::int64_t begin = 0, end = p.kv_len;
  const std::int64_t offset = p.kv_len - p.q_len;
  if (p.causal) end = std::clamp<std::int64_t>(p.q_len - 1 + offset + 1, 0, p.kv_len);
  if (p.window > 0) begin = std::clamp<std::int64_t>(offset - p.window + 1, 0, p.kv_len);
  return {begin, std::max(begin, end)};
}

struct VectorFit {
  CudaVectorShape shape;
  std::size_t intermediate = 0;
  std::string cores_why;  // the CUDA-core kernel: why not tensor cores
  std::string tma_why;    // not the TMA kernel: why not (empty on the TMA kernel)
};

// The CUDA-core kernel's register tiling (cuda/vector.cu).
VectorFit fit_vector_fma(const Problem& p) {
  VectorFit fit;
  CudaVectorShape& s = fit.shape;
  s.elems_per_chunk = kVectorLoadBytes / static_cast<int>(size_of(p.dtype));
  const std::int64_t chunks = std::max<std::int64_t>(
      1, ceil_div(std::max(p.head_dim, p.value_dim), s.elems_per_chunk));
  s.lanes_per_key = static_cast<int>(std::min<std::int64_t>(32, pow2_ceil(chunks)));
  s.chunks_per_lane = static_cast<int>(pow2_ceil(ceil_div(chunks, s.lanes_per_key)));
  s.rows = p.group * p.q_len;
  int tile = 1;
  // Rows per tile: within the register budget, and at most lanes_per_key / keys_per_step, so
  // that every score of a step has its own lane (the kernel's transposed reduction).
  const int keys_per_step = vector_keys_per_step(s.chunks_per_lane);
  while (tile < kVectorMaxRowTile && tile < s.rows &&
         2 * tile * s.chunks_per_lane * s.elems_per_chunk <= kVectorRegisterFloats &&
         2 * tile * keys_per_step <= s.lanes_per_key) {
    tile *= 2;
  }
  s.row_tile = tile;
  s.row_tiles = std::max<std::int64_t>(1, ceil_div(s.rows, tile));
  const std::int64_t keys_in_flight = (kVectorThreads / s.lanes_per_key) * vector_keys_per_step(s.chunks_per_lane);
  fit.intermediate = float_bytes(p, std::min<std::int64_t>(std::max<std::int64_t>(s.rows, 1), tile), keys_in_flight,
                                 "scores in flight");
  return fit;
}

// Dynamic shared memory of a tensor-core kernel block: the ring and q, or the warps' partial
// outputs after the key loop, whichever is larger; the TMA kernel aligns it to the swizzle.
std::int64_t mma_shared_bytes(const CudaVectorShape& s, int ring_items) {
  const std::int64_t ring = std::int64_t{ring_items} * s.warps * vector_tma_item_bytes(s.head_class, s.row_copies);
  return std::max(ring + vector_mma_q_bytes(s.head_class), vector_mma_epilogue_bytes(s.head_class, s.warps)) +
         (s.tma ? kVectorTmaAlignBytes : 0);
}

// The ring of a tensor-core kernel: as many items (at most kVectorMmaMaxRingItems) as fit the
// block's share of the SM at `blocks` blocks per SM, trying fewer blocks down to one; false
// where not even kVectorMmaMinRingItems fit.
bool fit_ring(CudaVectorShape& s, const CudaDeviceInfo& device, int blocks) {
  const std::int64_t kernel_static = !s.tma                          ? kVectorMmaStaticSharedBytes
                                     : s.warps == kVectorTmaWideWarps ? kVectorTmaWideStaticSharedBytes
                                                                      : kVectorTmaStaticSharedBytes;
  const auto static_bytes = static_cast<std::int64_t>(device.reserved_shared_per_block) + kernel_static;
  const std::int64_t item = s.warps * vector_tma_item_bytes(s.head_class, s.row_copies);
  const std::int64_t beside_ring = vector_mma_q_bytes(s.head_class) + (s.tma ? kVectorTmaAlignBytes : 0);
  for (; blocks >= 1; --blocks) {
    const std::int64_t budget = std::min(static_cast<std::int64_t>(device.shared_per_sm) / blocks - static_bytes,
                                         static_cast<std::int64_t>(device.shared_per_block) - kernel_static);
    const std::int64_t items = std::min<std::int64_t>(kVectorMmaMaxRingItems, (budget - beside_ring) / item);
    if (items >= kVectorMmaMinRingItems && mma_shared_bytes(s, static_cast<int>(items)) <= budget) {
      s.ring_items = static_cast<int>(items);
      s.blocks_per_sm = blocks;
      s.shared_bytes = mma_shared_bytes(s, s.ring_items);
      return true;
    }
  }
  return false;
}

// Rows, row tile and scores in flight of a tensor-core kernel.
void fit_mma_rows(VectorFit& fit, const Problem& p) {
  CudaVectorShape& s = fit.shape;
  s.rows = p.group * p.q_len;
  s.row_tile = s.rows <= 8 ? 8 : vector_mma_max_row_tile(s.head_class);
  s.row_tiles = std::max<std::int64_t>(1, ceil_div(s.rows, s.row_tile));
  fit.intermediate = float_bytes(p, std::min<std::int64_t>(std::max<std::int64_t>(s.rows, 1), s.row_tile),
                                 kVectorMmaWarps * kVectorMmaKeysPerTile, "scores in flight");
}

// The tensor-core kernel's class, row tile and shared-memory ring (cuda/vector_mma.cuh);
// nullopt where no class holds the head sizes or no ring fits the device.
std::optional<VectorFit> fit_vector_mma(const Problem& p, const CudaDeviceInfo& device,
                                        const CudaVectorTuning& tuning) {
  VectorFit fit;
  CudaVectorShape& s = fit.shape;
  s.tensor_cores = true;
  s.elems_per_chunk = kVectorLoadBytes / static_cast<int>(size_of(p.dtype));
  s.k_steps = static_cast<int>(ceil_div(p.head_dim, 32));
  s.v_steps = static_cast<int>(ceil_div(p.value_dim, 64));
  for (int head_class : kVectorMmaHeadClasses) {
    if (s.k_steps * 32 <= head_class && s.v_steps * 64 <= head_class) {
      s.head_class = head_class;
      break;
    }
  }
  if (s.head_class == 0) return std::nullopt;
  fit_mma_rows(fit, p);
  const int blocks = tuning.blocks_per_sm > 0 ? tuning.blocks_per_sm : kVectorMmaBlocksPerSm;
  if (!fit_ring(s, device, blocks)) return std::nullopt;
  return fit;
}

// The TMA kernel (cuda/vector_tma.cuh): the tensor-core kernel's tiles, a ring of TMA copies.
std::optional<VectorFit> fit_vector_tma(const Problem& p, const CudaDeviceInfo& device,
                                        const CudaVectorTuning& tuning) {
  VectorFit fit;
  CudaVectorShape& s = fit.shape;
  s.tensor_cores = true;
  s.tma = true;
  s.row_copies = p.form == call::Form::Paged && p.page_size % kVectorMmaKeysPerTile != 0;
  s.elems_per_chunk = kVectorLoadBytes / static_cast<int>(size_of(p.dtype));
  s.head_class = vector_tma_head_class(p.head_dim, p.value_dim);
  s.k_steps = static_cast<int>(ceil_div(p.head_dim, 32));
  s.v_steps = static_cast<int>(ceil_div(p.value_dim, 64));
  fit_mma_rows(fit, p);
  // Wide blocks where the groups about fill the SMs (cuda_tables.hpp), or where asked.
  const std::int64_t groups = p.batch * p.kv_heads * s.row_tiles;
  const bool wide_fits = vector_tma_wide_serves(s.head_class, s.row_tile);
  const bool wide = tuning.warps > 0 ? tuning.warps == kVectorTmaWideWarps && wide_fits
                                     : wide_fits && tuning.blocks_per_sm == 0 && 2 * groups >= device.sm_count &&
                                           groups <= device.sm_count;
  if (wide) {
    s.warps = kVectorTmaWideWarps;
    if (fit_ring(s, device, 1)) return fit;
    s.warps = kVectorMmaWarps;
  }
  const int blocks = std::min(tuning.blocks_per_sm > 0 ? tuning.blocks_per_sm : vector_tma_blocks_per_sm(s.head_class),
                              vector_tma_register_blocks(s.head_class, s.row_tile));
  if (!fit_ring(s, device, blocks)) return std::nullopt;
  return fit;
}

// The vector kernel: TMA where it serves, else tensor cores for 16-bit types (unless fma is
// asked, rows are too few or the cap is below its scores in flight), else CUDA cores, with the
// reasons; nullopt when no kernel holds the head sizes or fits the cap.
std::optional<VectorFit> fit_vector(const Problem& p, const CudaDeviceInfo& device, const PlanOverrides& overrides,
                                    std::size_t& min_cap, std::string& why_not) {
  VectorFit fma = fit_vector_fma(p);
  min_cap = fma.intermediate;
  if (p.head_dim > kVectorMaxHeadDim || p.value_dim > kVectorMaxHeadDim) {
    why_not = format("head sizes D {} / Dv {} exceed the vector kernel's {}", p.head_dim, p.value_dim,
                     kVectorMaxHeadDim);
    min_cap = std::numeric_limits<std::size_t>::max();
    return std::nullopt;
  }
  if (p.batch > kMaxGridYZ || p.kv_heads > kMaxGridYZ) {
    why_not = format("B {} or Hkv {} exceeds the grid's {}", p.batch, p.kv_heads, kMaxGridYZ);
    min_cap = std::numeric_limits<std::size_t>::max();
    return std::nullopt;
  }
  const auto cap = p.max_score_bytes ? static_cast<std::size_t>(*p.max_score_bytes)
                                     : std::numeric_limits<std::size_t>::max();
  const std::int64_t rows = p.group * p.q_len, groups = p.batch * p.kv_heads;
  const bool few_groups = rows >= kVectorMmaFewGroupRows && groups * kVectorMmaFewGroupsFactor <= device.sm_count;
  const CudaVectorKernel asked = overrides.cuda_vector;
  const CudaVectorTuning& tuning = overrides.cuda_vector_tuning;
  std::string tma_why =
      asked != CudaVectorKernel::Auto && asked != CudaVectorKernel::TmaRows
          ? vector_tma_overridden(asked)
          : vector_tma_why_not(p, device, asked == CudaVectorKernel::TmaRows);
  if (tma_why.empty()) {
    if (const auto tma = fit_vector_tma(p, device, tuning)) {
      min_cap = std::min(min_cap, tma->intermediate);
      if (tma->intermediate <= cap) return tma;
      tma_why = "the cap is below its scores in flight";
    } else {
      tma_why = "no ring of two items fits the device's shared memory";
    }
  }
  std::string cores_why;
  if (p.dtype == DType::Float32) {
    cores_why = "float32";
  } else if (asked == CudaVectorKernel::Fma) {
    cores_why = "HEED_CUDA_VECTOR=fma";
  } else if (asked != CudaVectorKernel::Mma && rows < kVectorMmaMinRows && !few_groups) {
    cores_why = format("{} query rows per key head < {} and {} (batch x key head) groups, where they measured faster",
                       rows, kVectorMmaMinRows, groups);
  } else if (p.head_dim == 0) {
    cores_why = "D 0 gives the tensor-core kernel no steps";
  } else if (auto mma = fit_vector_mma(p, device, tuning)) {
    min_cap = std::min(min_cap, mma->intermediate);
    if (mma->intermediate <= cap) {
      mma->tma_why = tma_why;
      return mma;
    }
    cores_why = format("the tensor-core kernel's {} scores in flight exceed max_score_bytes {}",
                       static_cast<std::int64_t>(mma->intermediate / kFloat), *p.max_score_bytes);
  } else {
    cores_why = format("no tensor-core head class holds D {} / Dv {}, or no ring of two items fits the device's "
                       "shared memory",
                       p.head_dim, p.value_dim);
  }
  if (fma.intermediate > cap) {
    why_not = format("its {} scores in flight ({} bytes) exceed max_score_bytes {}",
                     static_cast<std::int64_t>(min_cap / kFloat), min_cap, *p.max_score_bytes);
    return std::nullopt;
  }
  fma.cores_why = cores_why;
  fma.tma_why = tma_why;
  return fma;
}

struct ComposedFit {
  std::int64_t rows = 0;
  std::int64_t heads = 0;
  bool fold_batch = false;
  bool pack_to_fold = false;  // contiguous rows packed anyway, because that folds the batches
  std::size_t intermediate = 0;
  bool capped = false;
};

std::optional<ComposedFit> fit_composed(const Problem& p, std::size_t& min_cap) {
  min_cap = std::max<std::size_t>(float_bytes(p, 1, p.kv_len, "a score row"), 1);
  const std::int64_t row_bytes = std::max<std::int64_t>(p.kv_len * kFloat, 1);
  // The caller's cap, else the default budget (at least one row: a long row still runs).
  const std::int64_t budget = p.max_score_bytes ? *p.max_score_bytes : std::max(kComposedScoreBudget, row_bytes);
  // Batches fold into one GEMM batch where q, k and v have one stride per (batch, head): in
  // place, or packed where that at least halves the steps of four launches each (MiniLM's
  // layer: 1 step instead of 32); long rows, one pair per step, gain nothing from a copy.
  const std::int64_t q_len = std::max<std::int64_t>(p.q_len, 1);
  const std::int64_t rows = std::min(q_len, budget / row_bytes);
  if (rows < 1) return std::nullopt;
  const std::int64_t pairs = std::max<std::int64_t>(checked_mul(p.batch, p.kv_heads, op_of(p), "batch x key heads"), 1);
  const std::int64_t per_step = std::max<std::int64_t>(budget / (row_bytes * rows), 1);
  const auto steps = [&](bool fold) {
    const std::int64_t heads = fold ? pairs : std::max<std::int64_t>(p.kv_heads, 1);
    return (fold ? 1 : p.batch) * ceil_div(heads, std::min(per_step, heads));
  };
  ComposedFit fit;
  fit.fold_batch = p.batch > 1 && (p.batch_folds || !p.rows_contiguous);
  fit.pack_to_fold = p.batch > 1 && !fit.fold_batch && 2 * steps(true) <= steps(false);
  fit.fold_batch = fit.fold_batch || fit.pack_to_fold;
  const std::int64_t heads = fit.fold_batch ? pairs : std::max<std::int64_t>(p.kv_heads, 1);
  fit.rows = rows;
  fit.heads = std::clamp<std::int64_t>(per_step, 1, heads);
  fit.intermediate = float_bytes(p, fit.heads * fit.rows, p.kv_len, "a score step");
  fit.capped = p.max_score_bytes && (fit.rows < q_len || fit.heads < heads) &&
               float_bytes(p, heads * q_len, p.kv_len, "scores") > static_cast<std::size_t>(*p.max_score_bytes);
  return fit;
}

[[noreturn]] void no_route_fits(const Problem& p, const std::string& route, std::size_t min_cap) {
  throw Error(ErrorKind::InvalidArgument,
              format("[{}] max_score_bytes ({}) is below what {} needs; the smallest cap that fits is {} bytes",
                     op_of(p), *p.max_score_bytes, route, min_cap));
}

// The tensor-core kernel's partition count: the fewest of the candidates that minimise
// waves × (keys per partition + overhead) + merge overhead (cuda_tables.hpp).
std::int64_t mma_partitions(std::int64_t groups, std::int64_t span, std::int64_t slots, std::int64_t overhead,
                            std::int64_t min_keys) {
  const auto cost = [&](std::int64_t parts) {
    const std::int64_t waves = ceil_div(groups * parts, slots);
    return waves * (ceil_div(span, parts) + overhead) + (parts > 1 ? overhead : 0);
  };
  // No partition above 2^30 keys: the kernel counts a block's keys in 32 bits.
  const std::int64_t fewest = std::max<std::int64_t>(1, ceil_div(span, std::int64_t{1} << 30));
  const std::int64_t most = std::max(fewest, span / min_keys);
  std::int64_t best = fewest;
  for (std::int64_t waves = 1; waves <= kVectorMaxWaves; ++waves) {
    const std::int64_t parts =
        std::clamp<std::int64_t>(waves * slots / std::max<std::int64_t>(groups, 1), fewest, most);
    if (cost(parts) < cost(best)) best = parts;
  }
  return best;
}

// Facts of a vector plan's key partitions that its explanation names.
struct VectorSpan {
  std::int64_t span = 0;      // keys visible to the call's rows
  std::int64_t groups = 0;    // batch x key head x row tile
  std::int64_t slots = 0;     // resident block slots the partitions fill
  std::int64_t overhead = 0;  // a block's fixed cost, in keys
};

// Partitions of the visible span: for the tensor-core kernels the fewest waves of (keys + a
// block's overhead), for the CUDA-core kernel about kVectorBlocksPerSm blocks per SM.
VectorSpan size_partitions(CudaVectorShape& s, const Problem& p, const CudaDeviceInfo& device,
                           const CudaVectorTuning& tuning, std::int64_t max_partitions) {
  VectorSpan v;
  const auto [begin, end] = visible_span(p);
  s.span_begin = begin;
  s.span_end = end;
  v.span = end - begin;
  v.groups = p.batch * p.kv_heads * s.row_tiles;
  v.slots = std::int64_t{device.sm_count} *
            (s.tma ? std::min(s.blocks_per_sm, kVectorTmaPartitionBlocksPerSm) : s.blocks_per_sm);
  const std::int64_t key_bytes =
      std::max<std::int64_t>(1, (p.head_dim + p.value_dim) * static_cast<std::int64_t>(size_of(p.dtype)));
  v.overhead = ceil_div(kVectorBlockOverheadBytes, key_bytes);
  s.partitions = 1;
  if (s.tensor_cores) {
    s.partitions = mma_partitions(v.groups, v.span, v.slots, v.overhead, std::int64_t{s.warps} * kVectorMmaKeysPerTile);
  } else {
    const std::int64_t target = kVectorBlocksPerSm * device.sm_count;
    if (v.groups < target && v.span >= 2 * kVectorMinKeysPerPartition) {
      s.partitions = std::clamp<std::int64_t>(ceil_div(target, std::max<std::int64_t>(v.groups, 1)), 1,
                                              v.span / kVectorMinKeysPerPartition);
    }
  }
  if (tuning.partitions > 0) s.partitions = std::min(tuning.partitions, std::max<std::int64_t>(v.span, 1));
  s.partitions = std::clamp<std::int64_t>(s.partitions, 1, max_partitions);
  if (tuning.ring_items > 0 && s.tensor_cores) {
    s.ring_items = std::clamp(tuning.ring_items, kVectorMmaMinRingItems, s.ring_items);
    s.shared_bytes = mma_shared_bytes(s, s.ring_items);
  }
  s.keys_per_partition = std::max<std::int64_t>(ceil_div(v.span, s.partitions), 1);
  // TMA: whole 16-key tiles per partition, so that only the span's last tile reads past it.
  if (s.tma) s.keys_per_partition = ceil_div(s.keys_per_partition, kVectorMmaKeysPerTile) * kVectorMmaKeysPerTile;
  s.partitions = std::max<std::int64_t>(1, ceil_div(v.span, s.keys_per_partition));
  return v;
}

void explain_mma_vector(std::vector<std::string>& reasons, const Problem& p, const CudaDeviceInfo& device,
                        const VectorFit& fit, const CudaVectorShape& s, const VectorSpan& v) {
  reasons.push_back(format("vector kernel: tensor cores (mma.sync m16n8k16, {} in, float32 accumulate), keys as M "
                           "and query rows as N: {} query rows per key head in {} tile(s) of {}; head class {} "
                           "(D {} in {} steps of 32, Dv {} in {} steps of 64)",
                           short_name(p.dtype), s.rows, s.row_tiles, s.row_tile, s.head_class, p.head_dim, s.k_steps,
                           p.value_dim, s.v_steps));
  if (p.head_dim != s.head_class || p.value_dim != s.head_class) {
    reasons.push_back(format("{} on the compiled {} ({}, stores past Dv skipped)",
                             p.head_dim == p.value_dim
                                 ? format("head size {} runs", p.head_dim)
                                 : format("head sizes D {} / Dv {} run", p.head_dim, p.value_dim),
                             s.head_class,
                             s.tma ? "the kernel skips the class's columns past the call's"
                                   : "the copies past the call's columns write zeros"));
  }
  reasons.push_back(s.tma ? vector_tma_loads_reason(p, s)
                          : format("loads: per-lane cp.async of each lane's fragments ({})", fit.tma_why));
  reasons.push_back(format("ring: {} items of 16 keys (K or V) per warp x {} warps, {} bytes of shared memory per "
                           "block, {} block(s) per SM ({} bytes per SM){}",
                           s.ring_items, s.warps, s.shared_bytes, s.blocks_per_sm, device.shared_per_sm,
                           s.warps == kVectorTmaWideWarps
                               ? format("; wide blocks: {} (batch x key head x row tile) groups about fill the {} "
                                        "SMs, each streamed by one block of 16 warps",
                                        v.groups, device.sm_count)
                               : std::string()));
  reasons.push_back(format("key partitions: {} of {} keys: {} (batch x key head x row tile) groups over {} x {} "
                           "block slots, {} wave(s); {} keys visible{} (fewest waves x (keys + {} keys of "
                           "per-block overhead))",
                           s.partitions, s.keys_per_partition, v.groups, device.sm_count, v.slots / device.sm_count,
                           ceil_div(v.groups * s.partitions, v.slots), v.span, p.window ? " in the window" : "",
                           v.overhead));
}

void explain_fma_vector(std::vector<std::string>& reasons, const Problem& p, const VectorFit& fit,
                        const CudaVectorShape& s, const VectorSpan& v, const CudaDeviceInfo& device) {
  reasons.push_back(format("vector kernel: CUDA cores ({}): {} lanes per key x {} chunk(s) of {} elements "
                           "(16-byte loads); {} query rows per block in {} tile(s) of {}",
                           fit.cores_why, s.lanes_per_key, s.chunks_per_lane, s.elems_per_chunk, s.rows, s.row_tiles,
                           s.row_tile));
  if (!fit.tma_why.empty() && p.dtype != DType::Float32) reasons.push_back("no TMA kernel: " + fit.tma_why);
  reasons.push_back(format("key partitions: {} of {} keys ({} (batch x key head x row tile) groups for {} x {} "
                           "SMs; {} keys visible{}, >= {} keys per partition)",
                           s.partitions, s.keys_per_partition, v.groups, kVectorBlocksPerSm, device.sm_count, v.span,
                           p.window ? " in the window" : "", kVectorMinKeysPerPartition));
}

// The two-pass vector route's partials: max, sum and Dv outputs per row, partition and
// (batch, key head).
std::size_t partials_bytes(const Problem& p, std::int64_t rows, std::int64_t partitions) {
  const std::int64_t slots =
      checked_mul(checked_mul(p.batch * p.kv_heads, rows, op_of(p), "partials"), partitions, op_of(p), "partials");
  return float_bytes(p, slots, p.value_dim + 2, "partials");
}

void build_vector(CudaRoute& r, const Problem& p, const CudaDeviceInfo& device, const VectorFit& fit,
                  const CudaVectorTuning& tuning, std::int64_t max_partitions) {
  auto& reasons = r.plan.reasons;
  CudaVectorShape& s = r.vector;
  s = fit.shape;
  const VectorSpan v = size_partitions(s, p, device, tuning, max_partitions);
  const int passes = s.partitions > 1 ? 2 : 1;
  s.dependent_merge = passes == 2 && device.major >= 9;
  r.plan.kernel = route::Vector{passes, s.partitions, passes};
  r.plan.kernel_name = kernel_name(s.tma ? "vector_tma" : s.tensor_cores ? "vector_mma" : "vector", p.dtype);
  r.merge_kernel_name = kernel_name("vector_merge", p.dtype);
  if (s.tensor_cores) {
    explain_mma_vector(reasons, p, device, fit, s, v);
  } else {
    explain_fma_vector(reasons, p, fit, s, v, device);
  }
  if (p.form != call::Form::Dense) reasons.push_back(vector_serving_reason(p, s));
  if (p.has_lse) {
    reasons.push_back(format("lse: each row's natural-log sum (sinks included) written {}",
                             passes == 2 ? "by the merge" : "with the row"));
  }
  if (tuning.any()) {
    reasons.push_back(format("tuned by the caller: {} partition(s), {} ring item(s), {} block(s) per SM, {} warps "
                             "per block asked",
                             tuning.partitions, tuning.ring_items, tuning.blocks_per_sm, tuning.warps));
  }
  if (passes == 2) {
    reasons.push_back(format("two passes: partial max, sum and output per partition, merged exactly by {}{}",
                             r.merge_kernel_name,
                             s.dependent_merge ? " (launched programmatically dependent: its blocks wait on the "
                                                 "device, not behind a launch)"
                                               : ""));
  }
  const std::int64_t blocks = s.partitions * s.row_tiles * p.batch * p.kv_heads;
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(blocks, std::numeric_limits<int>::max()));
  ScratchLayout layout;
  if (passes == 2) {
    r.partials = layout.add("partials", partials_bytes(p, s.rows, s.partitions));
  }
  r.plan.buffers = layout.buffers();
  r.plan.scratch_bytes = layout.total_bytes();
}

void build_composed(CudaRoute& r, const Problem& p, const ComposedFit& fit) {
  CudaComposedShape& c = r.composed;
  c.rows = fit.rows;
  c.heads = fit.heads;
  c.fold_batch = fit.fold_batch;
  c.row_blocks = ceil_div(p.q_len, c.rows);
  c.pack_qk = !p.rows_contiguous || fit.pack_to_fold;
  c.pack_v = c.pack_qk || p.dtype != DType::Float32;
  r.plan.kernel = c.rows < p.q_len ? Kernel{route::ComposedBlocks{c.rows}} : Kernel{route::Composed{}};
  r.plan.kernel_name = kernel_name(c.rows < p.q_len ? "composed_blocks" : "composed", p.dtype);
  r.softmax_kernel_name = kernel_name("softmax", p.dtype);
  r.plan.reasons.push_back(format("composed steps: {} row block(s) of {} rows x {} (batch, key head) pair(s) per "
                                  "cuBLAS batch, {} ({} bytes of scores per step)",
                                  c.row_blocks, c.rows, c.heads,
                                  c.fold_batch ? "across batches (one stride per pair)" : "within one batch",
                                  fit.intermediate));
  r.plan.reasons.push_back(
      format("cuBLAS reads {}; P.V in float32{} (FP32 compute, no TF32)",
             !c.pack_qk          ? "q and k in place"
             : fit.pack_to_fold ? "q and k packed to contiguous rows (their batches do not fold in place)"
                                : "q and k packed to contiguous rows (their rows are not contiguous)",
             c.pack_v ? (p.dtype == DType::Float32 ? ", v packed" : ", v converted to float32") : ", v in place"));
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(
      std::numeric_limits<int>::max(), checked_mul(c.rows, c.heads, op_of(p), "softmax blocks")));
  ScratchLayout layout;
  if (c.pack_qk) {
    r.q_packed = layout.add("q_packed", static_cast<std::size_t>(checked_mul(
                                Shape{p.batch, p.q_heads, p.q_len, p.head_dim}.numel(op_of(p)),
                                static_cast<std::int64_t>(size_of(p.dtype)), op_of(p), "q bytes")));
    r.k_packed = layout.add("k_packed", static_cast<std::size_t>(checked_mul(
                                Shape{p.batch, p.kv_heads, p.kv_len, p.head_dim}.numel(op_of(p)),
                                static_cast<std::int64_t>(size_of(p.dtype)), op_of(p), "k bytes")));
  }
  if (c.pack_v) {
    r.v_packed = layout.add("v_float32", float_bytes(p, p.batch * p.kv_heads, p.kv_len * p.value_dim, "v"));
  }
  r.scores = layout.add("scores", fit.intermediate);
  r.out_rows = layout.add("out_rows", float_bytes(p, c.heads * c.rows, p.value_dim, "output rows"));
  r.plan.buffers = layout.buffers();
  r.plan.scratch_bytes = layout.total_bytes();
}

// Host-resident metadata is copied to the device before the launch: one more buffer, after the
// route's (call/metadata.hpp packs it).
void add_metadata(CudaRoute& r, const Problem& p) {
  if (p.host_metadata == 0) return;
  const auto values = static_cast<std::size_t>(checked_mul(p.host_metadata, 4, op_of(p), "metadata bytes"));
  const std::size_t bytes = memory::rounded_size(values);
  r.metadata = Region{r.plan.scratch_bytes, bytes};
  r.plan.buffers.push_back({"metadata", r.plan.scratch_bytes, bytes, 1});
  r.plan.scratch_bytes += bytes;
  r.plan.reasons.push_back(format("metadata: {} int32 values on the host, copied to the device before the launch",
                                  p.host_metadata));
}

// An empty output (B, Hq, Lq or Dv = 0) launches nothing and holds nothing, so no route is sized:
// its other sizes have no bounded product (B = 0 leaves Lq and Lk free up to int64's limit). The
// kernel is the caller's route, else the composed one.
void plan_empty(CudaRoute& r, const Problem& p) {
  plan_empty_output(r.plan, p, "workers: 0 thread blocks of the main launch");
  r.plan.kernel_name = kernel_name(route_name(r.plan.kernel), p.dtype);
}

}  // namespace

namespace {

// What each CUDA route can do for a problem: its fit, else the smallest cap it needs and why not.
struct CudaFits {
  std::optional<VectorFit> vector;
  std::optional<CudaTiledFit> tiled;
  std::optional<ComposedFit> composed;
  std::size_t vector_min = 0, tiled_min = 0, composed_min = 0;
  std::string vector_why, tiled_why;
  std::string composed_why;  // set where the composed route cannot serve the call's form at any cap
};

// Why the composed route (cuBLAS over dense [B, H, L, D] strides) cannot serve `p`, or empty.
std::string composed_why_not(const Problem& p) {
  if (p.form == call::Form::Paged) return "paged keys: its GEMMs read one strided tensor, not a block table";
  if (p.form == call::Form::Ragged) return "ragged rows: its GEMMs take one sequence length per batch";
  if (p.has_lse) return "it does not write lse";
  return {};
}

enum class Use { Vector, Tiled, Composed };

// The route: the caller's, else by query rows per key head (vector for few, tiled for many),
// falling back on what fits the score cap. `capped` is set where the cap moved the call.
Use choose_route(const Problem& p, const CudaFits& f, std::vector<std::string>& reasons, bool& capped) {
  const std::int64_t rows = p.group * p.q_len;
  Use use = Use::Composed;
  switch (p.route) {
    case RouteChoice::Tiled:
      if (!f.tiled) {
        if (p.max_score_bytes && f.tiled_min != std::numeric_limits<std::size_t>::max()) {
          no_route_fits(p, "the tiled route (one block's score tile)", f.tiled_min);
        }
        throw Error(ErrorKind::Unsupported, format("[{}] the CUDA tiled route cannot serve: {}", op_of(p), f.tiled_why));
      }
      use = Use::Tiled;
      reasons.push_back("route tiled: asked for by the caller");
      break;
    case RouteChoice::Vector:
      if (!f.vector) {
        if (p.max_score_bytes && f.vector_min != std::numeric_limits<std::size_t>::max()) {
          no_route_fits(p, "the vector route", f.vector_min);
        }
        throw Error(ErrorKind::Unsupported, format("[{}] the CUDA vector route cannot serve: {}", op_of(p), f.vector_why));
      }
      use = Use::Vector;
      reasons.push_back("route vector: asked for by the caller");
      break;
    case RouteChoice::Composed:
      if (!f.composed_why.empty()) {
        throw Error(ErrorKind::Unsupported,
                    format("[{}] the CUDA composed route cannot serve: {}", op_of(p), f.composed_why));
      }
      if (!f.composed) no_route_fits(p, "the composed route (one row of Lk scores)", f.composed_min);
      reasons.push_back("route composed: asked for by the caller");
      break;
    case RouteChoice::Auto:
      if (rows <= kVectorMaxRows && f.vector) {
        use = Use::Vector;
        reasons.push_back(format("route vector: {} query rows per key head (group {} x Lq {}) <= {}", rows,
                                 p.group, p.q_len, kVectorMaxRows));
      } else if (rows > kVectorMaxRows && f.tiled) {
        use = Use::Tiled;
        reasons.push_back(format("route tiled: {} query rows per key head (group {} x Lq {}) > {}", rows, p.group,
                                 p.q_len, kVectorMaxRows));
      } else if (f.composed) {
        reasons.push_back(rows <= kVectorMaxRows
                              ? format("route composed: the vector route cannot serve ({})", f.vector_why)
                              : format("route composed: {} query rows per key head > {}, but the tiled route cannot "
                                       "serve: {}",
                                       rows, kVectorMaxRows, f.tiled_why));
        // The cap alone moved prefill off the tiled route.
        if (rows > kVectorMaxRows && f.tiled_min != std::numeric_limits<std::size_t>::max()) capped = true;
      } else if (f.tiled) {
        use = Use::Tiled;
        capped = f.composed_why.empty();
        reasons.push_back(capped ? format("route tiled: the vector route cannot serve ({}) and one row of {} scores "
                                          "({} bytes) exceeds max_score_bytes {}",
                                          f.vector_why, p.kv_len, f.composed_min, *p.max_score_bytes)
                                 : format("route tiled: the vector route cannot serve ({}), nor the composed route "
                                          "({})",
                                          f.vector_why, f.composed_why));
      } else if (f.vector) {
        use = Use::Vector;
        capped = f.composed_why.empty();
        reasons.push_back(capped ? format("route vector: one row of {} scores ({} bytes) exceeds max_score_bytes {}",
                                          p.kv_len, f.composed_min, *p.max_score_bytes)
                                 : format("route vector: {} query rows per key head > {}, but neither the tiled "
                                          "route ({}) nor the composed route ({}) can serve",
                                          rows, kVectorMaxRows, f.tiled_why, f.composed_why));
      } else if (!f.composed_why.empty()) {
        if (p.max_score_bytes && std::min(f.vector_min, f.tiled_min) != std::numeric_limits<std::size_t>::max()) {
          no_route_fits(p, "the vector and tiled routes", std::min(f.vector_min, f.tiled_min));
        }
        throw Error(ErrorKind::Unsupported,
                    format("[{}] no CUDA route serves this call: vector ({}), tiled ({}), composed ({})", op_of(p),
                           f.vector_why, f.tiled_why, f.composed_why));
      } else {
        no_route_fits(p, "any route", std::min({f.vector_min, f.composed_min, f.tiled_min}));
      }
      break;
  }
  return use;
}

// Under max_scratch_bytes: the vector route in fewer key partitions (one needs no partials),
// the composed route in smaller blocks (half the score step at a time), until the layout fits;
// else the smallest budget, named. The tiled kernels hold no scratch.
template <typename Build>
void fit_scratch_budget(CudaRoute& r, const Problem& p, Use use, const std::optional<ComposedFit>& composed,
                        const Build& build) {
  const auto budget = static_cast<std::size_t>(*p.max_scratch_bytes);
  const std::size_t unbounded = r.plan.scratch_bytes;
  if (unbounded <= budget) return;
  std::string form;
  if (use == Use::Vector) {
    const std::int64_t before = r.vector.partitions;
    const std::size_t per_partition = partials_bytes(p, r.vector.rows, 1);
    const std::size_t for_partials = budget - std::min(budget, r.metadata.slice_bytes);
    const auto fits = static_cast<std::int64_t>(for_partials / std::max<std::size_t>(per_partition, 1));
    build(ComposedFit{}, fits >= 2 ? fits : 1);
    form = format("{} key partition(s) of {}", r.vector.partitions, before);
  } else if (use == Use::Composed) {
    Problem smaller = p;
    ComposedFit fit = *composed;
    while (r.plan.scratch_bytes > budget && (fit.rows > 1 || fit.heads > 1)) {
      smaller.max_score_bytes = static_cast<std::int64_t>(fit.intermediate / 2);
      std::size_t min_cap = 0;
      const std::optional<ComposedFit> next = fit_composed(smaller, min_cap);
      if (!next) break;
      fit = *next;
      build(fit, std::numeric_limits<std::int64_t>::max());
    }
    form = format("composed in blocks of {} rows x {} (batch, key head) pair(s)", fit.rows, fit.heads);
  }
  if (r.plan.scratch_bytes > budget) refuse_scratch_budget(p, r.plan);
  r.plan.reasons.push_back(format("scratch bound by max_scratch_bytes {}: {} bytes against {} without it, {}", budget,
                                  r.plan.scratch_bytes, unbounded, form));
}

}  // namespace

CudaRoute plan_cuda(const Problem& p, const CudaDeviceInfo& device, const PlanOverrides& overrides) {
  CudaRoute r;
  r.plan.device = Device::cuda(device.index);
  r.plan.dtype = p.dtype;
  auto& reasons = r.plan.reasons;
  reasons.push_back(describe(p, format(" on cuda:{} ({}, {} SMs)", device.index, device.name, device.sm_count)));
  if (p.empty_output()) {
    plan_empty(r, p);
    return r;
  }

  CudaFits f;
  f.vector = fit_vector(p, device, overrides, f.vector_min, f.vector_why);
  f.composed_why = composed_why_not(p);
  if (f.composed_why.empty()) {
    f.composed = fit_composed(p, f.composed_min);
  } else {
    f.composed_min = std::numeric_limits<std::size_t>::max();
  }
  f.tiled = fit_cuda_tiled(p, device, overrides, f.tiled_min, f.tiled_why);
  const auto& vector = f.vector;
  const auto& tiled = f.tiled;
  const auto& composed = f.composed;
  bool capped = false;
  const Use use = choose_route(p, f, reasons, capped);
  r.plan.capped = capped;
  // The route's layout with at most `max_partitions` key partitions (vector) or the composed
  // route's `blocks`; retried by fit_scratch_budget.
  const CudaRoute chosen = r;
  const auto build = [&](const ComposedFit& blocks, std::int64_t max_partitions) {
    r = chosen;
    if (use == Use::Tiled) {
      r.plan.max_intermediate_bytes = tiled->intermediate;
      build_cuda_tiled(r, p, *tiled);
    } else if (use == Use::Vector) {
      r.plan.max_intermediate_bytes = vector->intermediate;
      build_vector(r, p, device, *vector, overrides.cuda_vector_tuning, max_partitions);
    } else {
      r.plan.max_intermediate_bytes = blocks.intermediate;
      build_composed(r, p, blocks);
      if (blocks.capped && p.max_score_bytes) {
        r.plan.capped = true;
        r.plan.reasons.push_back(format("capped: {} rows x {} (batch, key head) pairs x {} keys x 4 = {} bytes <= "
                                        "max_score_bytes {}",
                                        blocks.rows, blocks.heads, p.kv_len, blocks.intermediate,
                                        *p.max_score_bytes));
      }
    }
    add_metadata(r, p);
  };
  build(composed.value_or(ComposedFit{}), std::numeric_limits<std::int64_t>::max());
  if (p.max_scratch_bytes) fit_scratch_budget(r, p, use, composed, build);
  reasons.push_back(format("workers: {} thread blocks of the main launch", r.plan.workers));
  reasons.push_back(format("scratch: {} bytes in {} buffers; largest score intermediate {} bytes",
                           r.plan.scratch_bytes, r.plan.buffers.size(), r.plan.max_intermediate_bytes));
  return r;
}

const CudaRoute& plan_cuda_cached(const Problem& problem, const CudaDeviceInfo& device,
                                  const PlanOverrides& overrides) {
  struct Entry {
    Problem problem;
    int device = -1;
    PlanOverrides overrides;
    CudaRoute route;
  };
  constexpr std::size_t kEntries = 4;
  thread_local std::array<Entry, kEntries> entries;
  thread_local std::size_t next = 0;
  for (const Entry& entry : entries) {
    if (entry.device == device.index && entry.problem == problem && entry.overrides == overrides) return entry.route;
  }
  Entry& entry = entries[next];
  next = (next + 1) % kEntries;
  entry.device = -1;  // a throwing plan leaves no stale entry
  entry.route = plan_cuda(problem, device, overrides);
  entry.problem = problem;
  entry.overrides = overrides;
  entry.device = device.index;
  return entry.route;
}

}  // namespace heed::plan
