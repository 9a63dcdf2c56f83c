#include "plan/cuda_tiled_plan.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

#include "core/format.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::plan {
namespace {

using namespace cuda;
constexpr std::int64_t kMaxGridYZ = 65535;

std::string head_sizes(std::int64_t head_dim, std::int64_t value_dim) {
  return head_dim == value_dim ? format("{}", head_dim) : format("{}/{}", head_dim, value_dim);
}

std::string served_head_sizes() {
  std::string text;
  for (const TiledConfig& c : kTiledConfigs) {
    const std::string size = head_sizes(c.head_dim, served_value_dim(c));
    if (text.find(size) == std::string::npos) text += (text.empty() ? "" : ", ") + size;
  }
  return text;
}

// "head size 72 runs on the compiled 80 ...", or empty where the call's sizes are compiled.
std::string rounding(const Problem& p, std::int64_t head_dim, std::int64_t value_dim) {
  if (p.head_dim == head_dim && p.value_dim == value_dim) return {};
  const std::string sizes = p.head_dim == p.value_dim ? format("head size {}", p.head_dim)
                                                      : format("head sizes D {} / Dv {}", p.head_dim, p.value_dim);
  return format("{} {} on the compiled {} (loads past the call's columns read zeros, stores past Dv are skipped)",
                sizes, p.head_dim == p.value_dim ? "runs" : "run", head_sizes(head_dim, value_dim));
}

// The key tiles each row block visits, in launch order (the last row block first), as the
// kernels' block_reach computes them; the same for every (batch, key head) pair.
std::vector<std::int64_t> row_block_tiles(const Problem& p, const CudaTiledShape& s) {
  std::vector<std::int64_t> tiles(static_cast<std::size_t>(s.row_blocks));
  const std::int64_t group = p.group, offset = p.kv_len - p.q_len;
  for (std::int64_t i = 0; i < s.row_blocks; ++i) {
    const std::int64_t row0 = (s.row_blocks - 1 - i) * s.block_m, row_last = std::min(row0 + s.block_m, s.rows) - 1;
    std::int64_t begin = 0, end = p.kv_len;
    if (p.causal) end = std::clamp<std::int64_t>(row_last / group + offset + 1, 0, p.kv_len);
    if (p.window > 0) begin = std::clamp<std::int64_t>(row0 / group + offset - p.window + 1, 0, p.kv_len);
    tiles[static_cast<std::size_t>(i)] = begin < end ? (end + s.block_n - 1) / s.block_n - begin / s.block_n : 0;
  }
  return tiles;
}

// When the last block of a greedy list schedule finishes: each block, in launch order, starts
// on the slot that frees first (as the hardware hands out blocks), costing its key tiles plus
// one for its start and end.
std::int64_t list_schedule_finish(const std::vector<std::int64_t>& tiles, std::int64_t pairs, bool heads_inner,
                                  std::int64_t slots) {
  std::priority_queue<std::int64_t, std::vector<std::int64_t>, std::greater<>> free_at;
  for (std::int64_t slot = 0; slot < slots; ++slot) free_at.push(0);
  std::int64_t finish = 0;
  const auto place = [&](std::int64_t cost) {
    const std::int64_t start = free_at.top();
    free_at.pop();
    free_at.push(start + cost + 1);
    finish = std::max(finish, start + cost + 1);
  };
  const std::int64_t blocks = static_cast<std::int64_t>(tiles.size());
  for (std::int64_t outer = 0; outer < (heads_inner ? blocks : pairs); ++outer) {
    for (std::int64_t inner = 0; inner < (heads_inner ? pairs : blocks); ++inner) {
      place(tiles[static_cast<std::size_t>(heads_inner ? outer : inner)]);
    }
  }
  return finish;
}

// Launch order under causal masking. Head-major, a late pair's longest blocks can start after
// most of the work (D 512 at 4k, 8 heads: 512 blocks of 1 to 128 key tiles); with heads inner
// every pair's row block goes before the next row block of any, but concurrent blocks then
// read the K/V of every pair (4k and 16k at D 128 and D 256 measured 2-3% slower that way,
// where the model has the two orders within 1%). So heads inner only where the model has it
// finish at least 5% sooner; up to 2^17 blocks are modelled (more make many waves).
void choose_launch_order(const Problem& p, const CudaDeviceInfo& device, CudaTiledFit& fit) {
  CudaTiledShape& s = fit.shape;
  const std::int64_t pairs = p.batch * p.kv_heads * s.value_parts;
  if (!p.causal || pairs < 2 || s.row_blocks < 2 || pairs * s.row_blocks > (std::int64_t{1} << 17)) return;
  const std::int64_t per_sm = s.wgmma ? hopper_blocks_per_sm(kHopperConfigs[s.config]) : 1;
  fit.slots = std::int64_t{std::max(device.sm_count, 1)} * per_sm;
  const std::vector<std::int64_t> tiles = row_block_tiles(p, s);
  fit.finish_head_major = list_schedule_finish(tiles, pairs, false, fit.slots);
  fit.finish_heads_inner = list_schedule_finish(tiles, pairs, true, fit.slots);
  s.heads_inner = 20 * fit.finish_heads_inner < 19 * fit.finish_head_major;
}

// How a ragged or paged batch runs: grid and rows sized by the bounds, each block over its own
// sequence.
std::string serving_reason(const Problem& p, const CudaTiledShape& s) {
  const std::string keys =
      p.form == call::Form::Ragged ? std::string("keys at cu_seqlens_k[b] of k and v")
      : s.wgmma && hopper_paging(p.page_size, kHopperConfigs[s.config]) == HopperPaging::Rows
          ? format("keys read in place from pages of {} keys by the block table: a {}-key tile's rows copied by "
                   "the producer warpgroup with cp.async, each row from its own page (TMA boxes need pages of a "
                   "multiple of {} keys); rows past the sequence are zeros, nothing read for them",
                   p.page_size, s.block_n, kHopperPageBoxKeys)
      : s.wgmma
          ? format("keys read in place from pages of {} keys by the block table: a {}-key tile as TMA boxes of {} "
                   "keys, each from one page (the producer warp's lanes read the block-table entries, clamped to "
                   "the cache, a tile ahead and issue a box each); boxes past the sequence are addressed past the "
                   "cache and read as zeros, and the V rows past its last key in a partial box (a page's tail, "
                   "which may hold NaN) are zeroed in shared memory before P·V",
                   p.page_size, s.block_n, hopper_page_box_keys(p.page_size, static_cast<int>(s.block_n)))
          : format("keys read in place from pages of {} keys by the block table (a tile's rows at one stride from "
                   "its first while they share a page, {})",
                   p.page_size,
                   p.page_size >= s.block_n ? "so whole tiles unless one straddles a page boundary"
                                            : format("each row its own page lookup below {}-key tiles", s.block_n));
  return format("serving: {} sequences, grid and rows sized by the bounds Lq {} / Lk {}; block (row block i, key "
                "head, b) takes sequence b's row block i counted from its last (each sequence's longest blocks "
                "first), and blocks past its rows exit at once; {}{}",
                p.batch, p.q_len, p.kv_len, keys, p.has_lse ? "; lse per row at the finalize step (natural log)" : "");
}

// Why the Hopper kernel cannot serve `p` on `device`, or empty when it can.
std::string hopper_why_not(const Problem& p, const CudaDeviceInfo& device, int index) {
  if (device.major != 9 || device.minor != 0) {
    return format("the wgmma kernel runs on compute capability 9.0 only (this device: {}.{})", device.major,
                  device.minor);
  }
  if (!device.wgmma_built) return "this build has no sm_90a code (HEED_CUDA_ARCHS without 90a)";
  if (index < 0) {
    std::string built;
    for (const HopperConfig& c : kHopperConfigs) {
      const std::string size = format("{}", c.head_dim);
      if (built.find(size) == std::string::npos) built += (built.empty() ? "" : ", ") + size;
    }
    return format("the wgmma kernel is built for D = Dv in {} (a call's sizes rounded up), none of them holds D {} / "
                  "Dv {}",
                  built, p.head_dim, p.value_dim);
  }
  if (p.form == call::Form::Paged && hopper_paging(p.page_size, kHopperConfigs[index]) == HopperPaging::None) {
    return format("pages of {} keys stay on the mma.sync kernel (this {}-key entry's producer has 24 registers a "
                  "thread, too few for row copies, and its TMA boxes need pages of a multiple of {} keys)",
                  p.page_size, kHopperConfigs[index].block_n, kHopperPageBoxKeys);
  }
  if (p.has_lse) return "lse stays on the mma.sync kernel (the wgmma kernel writes no lse so far)";
  if (p.mask_kind != MaskKind::None) {
    return "array masks stay on the mma.sync kernel (the wgmma kernel's consumers would spill reading them per "
           "score)";
  }
  if (!p.kv_strides_positive) {
    return "k's or v's strides along B, H or L are zero or negative, which a TMA tensor map cannot describe";
  }
  const auto shared = static_cast<std::size_t>(hopper_shared_bytes(kHopperConfigs[index]));
  if (shared > device.shared_per_block) {
    return format("its {} bytes of shared memory per block exceed the device's {}", shared, device.shared_per_block);
  }
  if (p.max_score_bytes) {
    const HopperConfig& c = kHopperConfigs[index];
    const auto tile = static_cast<std::size_t>(hopper_block_m(c) * c.block_n * 4);
    if (tile > static_cast<std::size_t>(*p.max_score_bytes)) {
      return format("its {} x {} score tile ({} bytes) exceeds max_score_bytes {}", hopper_block_m(c),
                    kHopperConfigs[index].block_n, tile, *p.max_score_bytes);
    }
  }
  return {};
}

// The entry of the planned one's compiled sizes with the key tile and consumers the overrides
// ask for; the planned one where they ask for none or no entry has them.
int tuned_hopper_entry(const CudaWgmmaTuning& t, int planned) {
  if (planned < 0 || (t.block_n <= 0 && t.consumers <= 0)) return planned;
  for (int i = 0; i < kHopperPlannedCount; ++i) {
    const HopperConfig& c = kHopperConfigs[i];
    if (c.head_dim != kHopperConfigs[planned].head_dim || c.value_dim != kHopperConfigs[planned].value_dim) continue;
    if ((t.block_n <= 0 || c.block_n == t.block_n) && (t.consumers <= 0 || c.consumers == t.consumers)) return i;
  }
  return planned;
}

// What the wgmma overrides changed, for the plan's reason ("" where nothing).
std::string wgmma_tuning_named(const CudaWgmmaTuning& t, int planned, int tuned) {
  std::string named;
  if (tuned != planned) {
    named += format(" (HEED_CUDA_WGMMA_KEYS={} HEED_CUDA_WGMMA_CONSUMERS={}: the {} x {}-key entry)", t.block_n,
                    t.consumers, hopper_block_m(kHopperConfigs[tuned]), kHopperConfigs[tuned].block_n);
  }
  if (t.pingpong != Toggle::Auto) named += t.pingpong == Toggle::On ? " (HEED_CUDA_PINGPONG=on)" : " (HEED_CUDA_PINGPONG=off)";
  return named;
}

}  // namespace

std::optional<CudaTiledFit> fit_cuda_tiled(const Problem& p, const CudaDeviceInfo& device,
                                           const PlanOverrides& overrides, std::size_t& min_cap, std::string& why_not) {
  const CudaTiledKernel asked = overrides.cuda_tiled;
  const CudaWgmmaTuning& tuning = overrides.cuda_wgmma_tuning;
  min_cap = std::numeric_limits<std::size_t>::max();
  if (p.dtype != DType::Float16 && p.dtype != DType::BFloat16) {
    why_not = format("the tiled kernel multiplies float16 and bfloat16 on tensor cores; {} stays on cuBLAS",
                     to_string(p.dtype));
    return std::nullopt;
  }
  const int index = tiled_config_index(p.head_dim, p.value_dim, static_cast<std::int64_t>(device.shared_per_block));
  if (index < 0) {
    const int any = tiled_config_index(p.head_dim, p.value_dim);
    if (any >= 0) {
      why_not = format("its {} bytes of shared memory per block (compiled D {}) exceed the device's {}",
                       tiled_shared_bytes(kTiledConfigs[any]),
                       head_sizes(kTiledConfigs[any].head_dim, served_value_dim(kTiledConfigs[any])),
                       device.shared_per_block);
    } else {
      why_not = format("no tiled kernel is built for D {} / Dv {} (compiled: D {}, a call's sizes rounded up to the "
                       "next); above 256 the output rows of a warp alone would take Dv / 2 float32 registers per "
                       "thread (256 at Dv 512), so Dv 512 splits its columns and other sizes are not built",
                       p.head_dim, p.value_dim, served_head_sizes());
    }
    return std::nullopt;
  }
  if (!p.rows_wide) {
    why_not = "the tiled kernel copies q, k and v rows as 16-byte chunks: their last dimension must be contiguous "
              "and their other strides and data pointers multiples of 16 bytes";
    return std::nullopt;
  }
  const TiledConfig& c = kTiledConfigs[index];
  CudaTiledFit fit;
  CudaTiledShape& s = fit.shape;
  s.config = index;
  s.warps = c.warps;
  s.stages = c.stages;
  s.q_in_registers = c.q_in_registers;
  s.block_m = std::int64_t{kTiledRowsPerWarp} * c.warps;
  s.block_n = c.block_n;
  s.rows = p.group * p.q_len;
  s.row_blocks = (s.rows + s.block_m - 1) / s.block_m;
  s.shared_bytes = tiled_shared_bytes(c);
  s.value_parts = c.value_parts;
  fit.intermediate = static_cast<std::size_t>(s.block_m * s.block_n * 4);
  if (p.q_len >= kTiledMaxLength || p.kv_len >= kTiledMaxLength || s.rows >= 2 * kTiledMaxLength) {
    why_not = format("Lq {} or Lk {} reaches the tiled kernel's 32-bit index range ({} positions)", p.q_len, p.kv_len,
                     kTiledMaxLength);
    return std::nullopt;
  }
  if (p.batch * c.value_parts > kMaxGridYZ || p.kv_heads > kMaxGridYZ) {
    why_not = format("B {} x {} value part(s) or Hkv {} exceeds the grid's {}", p.batch, c.value_parts, p.kv_heads,
                     kMaxGridYZ);
    return std::nullopt;
  }
  if (p.max_score_bytes && fit.intermediate > static_cast<std::size_t>(*p.max_score_bytes)) {
    min_cap = fit.intermediate;
    why_not = format("its {} x {} score tile per block ({} bytes) exceeds max_score_bytes {}", s.block_m, s.block_n,
                     fit.intermediate, *p.max_score_bytes);
    return std::nullopt;
  }
  // On Hopper the wgmma kernel where it serves, unless HEED_CUDA_TILED=mma.
  const int planned = hopper_config_index(p.head_dim, p.value_dim, p.causal, p.kv_len);
  const int hopper = tuned_hopper_entry(tuning, planned);
  std::string hopper_why = hopper_why_not(p, device, hopper);
  // Where both serve, the kernel of less padded work at the wgmma kernel's measured speed-up
  // (kWgmmaSpeedup), unless HEED_CUDA_TILED=wgmma asks for it.
  if (hopper_why.empty() && asked == CudaTiledKernel::Auto && !wgmma_pays(kHopperConfigs[hopper], c)) {
    hopper_why = format("the wgmma kernel's compiled {} multiplies {} columns per (row, key), the mma.sync kernel's "
                        "compiled {} {}: not under the {}x that the wgmma kernel's speed per FLOP makes up for",
                        head_sizes(kHopperConfigs[hopper].head_dim, kHopperConfigs[hopper].value_dim),
                        hopper_padded_work(kHopperConfigs[hopper]), head_sizes(c.head_dim, served_value_dim(c)),
                        tiled_padded_work(c), kWgmmaSpeedup);
  }
  if (asked == CudaTiledKernel::Mma) {
    fit.kernel_reason = "tiled kernel mma.sync: HEED_CUDA_TILED=mma";
  } else if (!hopper_why.empty()) {
    fit.kernel_reason = format("tiled kernel mma.sync{}: {}",
                               asked == CudaTiledKernel::Wgmma ? " (HEED_CUDA_TILED=wgmma not served)" : "",
                               hopper_why);
  } else {
    const HopperConfig& h = kHopperConfigs[hopper];
    s.config = hopper;
    s.wgmma = true;
    s.warps = hopper_threads(h) / 32;
    s.stages = h.stages;
    const bool pingpong = tuning.pingpong == Toggle::Auto ? h.pingpong : tuning.pingpong == Toggle::On;
    s.pingpong = pingpong && h.consumers == 2 && !h.depth_split;
    s.value_parts = 1;
    s.q_in_registers = false;
    s.block_m = hopper_block_m(h);
    s.block_n = h.block_n;
    s.row_blocks = (s.rows + s.block_m - 1) / s.block_m;
    s.shared_bytes = hopper_shared_bytes(h);
    fit.intermediate = static_cast<std::size_t>(s.block_m * s.block_n * 4);
    fit.kernel_reason = format("tiled kernel wgmma: compute capability 9.0 with sm_90a code{}{}",
                               asked == CudaTiledKernel::Wgmma ? " (HEED_CUDA_TILED=wgmma)" : "",
                               wgmma_tuning_named(tuning, planned, hopper));
  }
  choose_launch_order(p, device, fit);
  return fit;
}

void build_cuda_tiled(CudaRoute& r, const Problem& p, const CudaTiledFit& fit) {
  CudaTiledShape& s = r.tiled;
  s = fit.shape;
  r.plan.kernel = route::Tiled{s.block_m, s.block_n};
  r.plan.kernel_name = std::string(s.wgmma ? "heed_cuda_tiled_wgmma_" : "heed_cuda_tiled_") + short_name(p.dtype);
  auto& reasons = r.plan.reasons;
  reasons.push_back(fit.kernel_reason);
  const std::string rounded =
      s.wgmma ? rounding(p, kHopperConfigs[s.config].head_dim, kHopperConfigs[s.config].value_dim)
              : rounding(p, kTiledConfigs[s.config].head_dim, served_value_dim(kTiledConfigs[s.config]));
  if (!rounded.empty()) reasons.push_back(rounded);
  if (s.wgmma) {
    const HopperConfig& h = kHopperConfigs[s.config];
    reasons.push_back(format("tiled tiles: {} rows x {} keys; one producer warpgroup (one thread issues TMA copies "
                             "of K and V, 128-byte swizzle, into a {}-stage ring completed on mbarriers; setmaxnreg "
                             "{}) and {} consumer warpgroup(s) of 64 rows (wgmma m64nNk16, float32 accumulators, Q "
                             "and K from shared memory, P from registers; setmaxnreg {}); S of tile j and P·V of "
                             "tile j-1 in flight during tile j's softmax{}; {} bytes of shared memory per block, {} "
                             "block(s) per SM",
                             s.block_m, s.block_n, s.stages, hopper_producer_registers(h), h.consumers,
                             hopper_consumer_registers(h),
                             s.pingpong ? ", the warpgroups taking turns to issue (ping-pong)" : "", s.shared_bytes,
                             hopper_blocks_per_sm(h)));
  } else {
    reasons.push_back(format("tiled tiles: {} rows x {} keys; {} warps of 16 rows (mma.sync m16n8k16, float32 "
                             "accumulators), Q {}; K/V tiles through a {}-stage cp.async ring; {} bytes of shared "
                             "memory per block",
                             s.block_m, s.block_n, s.warps,
                             s.q_in_registers ? "in registers" : "read from shared memory per key tile", s.stages,
                             s.shared_bytes));
  }
  if (s.wgmma && kHopperConfigs[s.config].depth_split) {
    const HopperConfig& h = kHopperConfigs[s.config];
    reasons.push_back(format("depth split: both consumers hold the block's {} rows, each {} of D's {} columns and {} "
                             "of Dv's {}; each issues S over its columns, the two partial score tiles are summed "
                             "through shared memory ({} bytes, two buffers), and each multiplies the weights into "
                             "its columns of V: S is computed once, O ({} columns per thread row) fits the registers",
                             s.block_m, h.head_dim / 2, h.head_dim, h.value_dim / 2, h.value_dim,
                             hopper_exchange_bytes(h), h.value_dim / 2));
  }
  if (s.value_parts > 1) {
    const TiledConfig& c = kTiledConfigs[s.config];
    const std::int64_t dv = served_value_dim(c);
    reasons.push_back(format("value split: Dv {} in {} parts of {} columns, blocks z = b x {} + part; each part "
                             "computes S over all of D {} again ({}x the FLOPs of one pass), since a warp's {} "
                             "output columns would not fit its registers",
                             dv, s.value_parts, c.value_dim, s.value_parts, c.head_dim,
                             static_cast<double>(s.value_parts * c.head_dim + dv) /
                                 static_cast<double>(c.head_dim + dv),
                             dv));
  }
  reasons.push_back(format("tiled rows: the {} heads of a key head packed with its {} positions ({} rows: row r is "
                           "position r / {}, head r % {}), so each K/V tile is read once per group",
                           p.group, p.q_len, s.rows, p.group, p.group));
  if (p.form != call::Form::Dense) reasons.push_back(serving_reason(p, s));
  const std::int64_t grid_z = p.batch * s.value_parts;
  std::string order;
  if (fit.finish_head_major > 0) {
    order = format(
        ", {} (a greedy schedule of the blocks' key tiles on {} resident blocks finishes after {} tile-times "
        "head-major, {} with heads inner{})",
        s.heads_inner ? "each row block of every (batch, key head) pair before the next row block of any"
                      : "head-major",
        fit.slots, fit.finish_head_major, fit.finish_heads_inner,
        s.heads_inner ? "" : ": head-major keeps a pair's K/V in L2 unless heads inner finishes 5% sooner");
  }
  reasons.push_back(p.causal ? format("schedule: grid [{}, {}, {}], row blocks launched last first{} (under causal "
                                      "masking the last positions see the most keys, so the longest blocks start "
                                      "first); key tiles no row of a block can see{} are neither loaded nor multiplied",
                                      s.row_blocks, p.kv_heads, grid_z, order, p.window ? " (causal, window)" : "")
                               : format("schedule: grid [{}, {}, {}], every block over all {} keys", s.row_blocks,
                                        p.kv_heads, grid_z, p.kv_len));
  reasons.push_back(format("scores: {} x {} float32 per block in registers ({} bytes), never in memory", s.block_m,
                           s.block_n, fit.intermediate));
  const std::int64_t blocks = s.row_blocks * p.kv_heads * grid_z;
  r.plan.workers = static_cast<int>(std::min<std::int64_t>(blocks, std::numeric_limits<int>::max()));
  r.plan.buffers.clear();
  r.plan.scratch_bytes = 0;
}

}  // namespace heed::plan
