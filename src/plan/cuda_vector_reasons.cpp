// The TMA vector kernel's part of plan_cuda's reasons: whether it serves a problem, and how it
// and the other vector kernels read K and V (cuda_plan.cpp explains the rest).

#include "plan/cuda_vector_reasons.hpp"

#include "core/format.hpp"
#include "plan/cuda_tables.hpp"

namespace heed::plan {

using namespace cuda;

// Why the TMA kernel cannot serve `p` on `device`, or empty when it can.
std::string vector_tma_why_not(const Problem& p, const CudaDeviceInfo& device, bool row_copies) {
  if (device.major != 9 || device.minor != 0) {
    return format("the TMA kernel runs on compute capability 9.0 only (this device: {}.{})", device.major,
                  device.minor);
  }
  if (!device.wgmma_built) return "this build has no sm_90a code (HEED_CUDA_ARCHS without 90a)";
  if (p.dtype != DType::Float16 && p.dtype != DType::BFloat16) return "the TMA kernel takes float16 and bfloat16";
  if (vector_tma_head_class(p.head_dim, p.value_dim) == 0) {
    std::string classes;
    for (int head_class : kVectorTmaHeadClasses) classes += (classes.empty() ? "" : ", ") + format("{}", head_class);
    return format("the TMA kernel's classes ({}; D and Dv rounded up, each into the class's last 64-column box) "
                  "hold no D {} / Dv {}",
                  classes, p.head_dim, p.value_dim);
  }
  if (!p.rows_wide || !p.kv_strides_positive) {
    return "the TMA kernel's tensor maps need contiguous 16-byte rows and positive strides of k and v";
  }
  // Its maps hold a paged cache's pages as batches of page_size rows: no 16-key box may cross one.
  // Row copies serve other pages, planned only where asked until measured on a GPU.
  if (p.form == call::Form::Paged && p.page_size % kVectorMmaKeysPerTile != 0 && !row_copies) {
    return format("pages of {} keys (its 16-key boxes must not cross a page: page sizes of a multiple of 16; "
                  "HEED_CUDA_VECTOR=tma-rows asks for its row copies, not yet measured)",
                  p.page_size);
  }
  if (p.kv_len >= (std::int64_t{1} << 31)) return "the TMA kernel's key coordinates are 32-bit";
  return {};
}

// Why an override keeps the vector route off the TMA kernel, or empty under none.
std::string vector_tma_overridden(CudaVectorKernel asked) {
  switch (asked) {
    case CudaVectorKernel::Fma: return "HEED_CUDA_VECTOR=fma asks for the CUDA-core kernel";
    case CudaVectorKernel::Mma: return "HEED_CUDA_VECTOR=mma asks for the cp.async tensor-core kernel";
    case CudaVectorKernel::CpAsync: return "the caller's overrides ask for the cp.async kernels, chosen by rows";
    case CudaVectorKernel::TmaRows:
    case CudaVectorKernel::Auto: break;
  }
  return {};
}

// How the TMA kernel loads K and V, for the plan's explanation.
std::string vector_tma_loads_reason(const Problem& p, const CudaVectorShape& s) {
  if (s.row_copies) {
    return format("loads: one bulk copy (cp.async.bulk, no tensor map) per key row, lanes 0-15 of each warp a row "
                  "each, into rows {} bytes apart in its ring (an odd number of 16-byte chunks: conflict-free "
                  "ldmatrix, no swizzle), one mbarrier per slot; pages of {} keys are no multiple of 16, so a "
                  "16-key box would cross pages (HEED_CUDA_VECTOR=tma-rows)",
                  vector_tma_row_pitch(s.head_class), p.page_size);
  }
  const auto boxes = [](std::int64_t columns) {
    return vector_tma_whole_rows(columns) ? format("whole rows ({} columns x 16 keys, no swizzle)", columns)
                                          : std::string("64-column x 16-key boxes, 128-byte swizzle");
  };
  const std::string k = boxes(p.head_dim), v = boxes(p.value_dim);
  return format("loads: TMA (cp.async.bulk.tensor, {}) by lane 0 of each warp into its ring, one mbarrier per "
                "slot; this 9.0 device and the call's contiguous 16-byte rows allow it",
                k == v ? k : format("K as {}, V as {}", k, v));
}

// How the vector kernels serve a ragged or paged batch (the TMA kernel: maps over all rows or
// pages, tiles outside a block's keys masked and their V rows zeroed).
std::string vector_serving_reason(const Problem& p, const CudaVectorShape& s) {
  const bool tma = s.tma, tensor_cores = s.tensor_cores;
  const std::string keys =
      p.form == call::Form::Ragged
          ? format("keys at cu_seqlens_k[b] of k and v{}", tma ? " (TMA maps over the [total_k, Hkv, E] rows)" : "")
      : tma && s.row_copies
          ? format("keys read in place from pages of {} keys by one bulk copy per key row at (row, key head, "
                   "page), each lane's block-table entry read a 16-key tile ahead",
                   p.page_size)
      : tma ? format("keys read in place from pages of {} keys by TMA boxes at (row, key head, page), one "
                     "block-table read per 16-key tile, tiles from a multiple of 16 keys so none crosses a page",
                     p.page_size)
      : tensor_cores ? format("keys read in place from pages of {} keys, one block-table read per page run", p.page_size)
                     : format("keys read in place from pages of {} keys, each step's block-table entries read a step "
                              "ahead of its copies",
                              p.page_size);
  return format("serving: {} sequences; grid, row tiles and partitions sized by the bounds Lq {} / Lk {}; each "
                "block reads its sequence's lengths (clamped) and exits past its rows or keys; {}",
                p.batch, p.q_len, p.kv_len, keys);
}

}  // namespace heed::plan
