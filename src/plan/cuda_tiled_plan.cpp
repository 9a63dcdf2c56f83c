#include "plan/cuda_tiled_plan.hpp"

#include <algorithm>
#include <limits>

#include "core/format.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::plan {
namespace {

using namespace cuda;
constexpr std::int64_t kMaxGridYZ = 65535;

std::string served_head_sizes() {
  std::string text;
  for (const TiledConfig& c : kTiledConfigs) {
    if (!text.empty()) text += ", ";
    const std::int64_t dv = served_value_dim(c);
    text += c.head_dim == dv ? format("{}", c.head_dim) : format("{}/{}", c.head_dim, dv);
  }
  return text;
}

}  // namespace

std::optional<CudaTiledFit> fit_cuda_tiled(const Problem& p, const CudaDeviceInfo& device, std::size_t& min_cap,
                                           std::string& why_not) {
  min_cap = std::numeric_limits<std::size_t>::max();
  if (p.dtype != DType::Float16 && p.dtype != DType::BFloat16) {
    why_not = format("the tiled kernel multiplies float16 and bfloat16 on tensor cores; {} stays on cuBLAS",
                     to_string(p.dtype));
    return std::nullopt;
  }
  const int index = tiled_config_index(p.head_dim, p.value_dim);
  if (index < 0) {
    why_not = format("no tiled kernel is built for D {} / Dv {} (built: D {}); above 256 the output rows of a "
                     "warp alone would take Dv / 2 float32 registers per thread (256 at Dv 512), so Dv 512 splits "
                     "its columns and other sizes are not built",
                     p.head_dim, p.value_dim, served_head_sizes());
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
  s.rows = p.group() * p.q_len;
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
  if (static_cast<std::size_t>(s.shared_bytes) > device.shared_per_block) {
    why_not = format("its {} bytes of shared memory per block exceed the device's {}", s.shared_bytes,
                     device.shared_per_block);
    return std::nullopt;
  }
  if (p.max_score_bytes && fit.intermediate > static_cast<std::size_t>(*p.max_score_bytes)) {
    min_cap = fit.intermediate;
    why_not = format("its {} x {} score tile per block ({} bytes) exceeds max_score_bytes {}", s.block_m, s.block_n,
                     fit.intermediate, *p.max_score_bytes);
    return std::nullopt;
  }
  return fit;
}

void build_cuda_tiled(CudaRoute& r, const Problem& p, const CudaTiledFit& fit) {
  CudaTiledShape& s = r.tiled;
  s = fit.shape;
  r.plan.kernel = route::Tiled{s.block_m, s.block_n};
  r.plan.kernel_name = std::string("heed_cuda_tiled_") + short_name(p.dtype);
  auto& reasons = r.plan.reasons;
  reasons.push_back(format("tiled tiles: {} rows x {} keys; {} warps of 16 rows (mma.sync m16n8k16, float32 "
                           "accumulators), Q {}; K/V tiles through a {}-stage cp.async ring; {} bytes of shared "
                           "memory per block",
                           s.block_m, s.block_n, s.warps,
                           s.q_in_registers ? "in registers" : "read from shared memory per key tile", s.stages,
                           s.shared_bytes));
  if (s.value_parts > 1) {
    reasons.push_back(format("value split: Dv {} in {} parts of {} columns, blocks z = b x {} + part; each part "
                             "computes S over all of D {} again ({}x the FLOPs of one pass), since a warp's {} "
                             "output columns would not fit its registers",
                             p.value_dim, s.value_parts, p.value_dim / s.value_parts, s.value_parts, p.head_dim,
                             static_cast<double>(s.value_parts * p.head_dim + p.value_dim) /
                                 static_cast<double>(p.head_dim + p.value_dim),
                             p.value_dim));
  }
  reasons.push_back(format("tiled rows: the {} heads of a key head packed with its {} positions ({} rows: row r is "
                           "position r / {}, head r % {}), so each K/V tile is read once per group",
                           p.group(), p.q_len, s.rows, p.group(), p.group()));
  const std::int64_t grid_z = p.batch * s.value_parts;
  reasons.push_back(p.causal ? format("schedule: grid [{}, {}, {}], row blocks launched last first (under causal "
                                      "masking the last positions see the most keys, so the longest blocks start "
                                      "first); key tiles no row of a block can see{} are neither loaded nor multiplied",
                                      s.row_blocks, p.kv_heads, grid_z, p.window ? " (causal, window)" : "")
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
