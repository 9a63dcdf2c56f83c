#pragma once
// The call descriptor: one attention call as validation leaves it. `Problem` is what the planner
// reads (sizes, dtype, options, layout facts; equal problems give equal plans); `Call` adds the
// data (pointers, strides, scale, mask and sink arguments). Plain structs, no CUDA types: the
// CPU kernels read a Call directly, the CUDA launches copy it by value.

#include <cstdint>
#include <optional>

#include "core/host_device.hpp"
#include "heed/dtype.hpp"
#include "heed/options.hpp"

namespace heed::call {

inline constexpr const char* kOp = "heed::attention";
inline constexpr const char* kVarlenOp = "heed::attention_varlen";
inline constexpr const char* kPagedOp = "heed::attention_paged";

// How a batch's sequences lie in memory (serving.hpp): Dense [B, H, L, E] tensors; Ragged rows
// of [total, H, E] by cu_seqlens; Paged keys in pages of a cache by a block table.
enum class Form : std::uint8_t { Dense, Ragged, Paged };

enum class MaskKind : std::uint8_t { None, Bool, Additive };

// Strides in elements of a [b, h, i, j] (or [b, h, l, d]) tensor; zero along broadcast axes.
struct Strides {
  std::int64_t s[4] = {0, 0, 0, 0};
  HEED_HOST_DEVICE std::int64_t operator[](int axis) const { return s[axis]; }
  HEED_HOST_DEVICE std::int64_t& operator[](int axis) { return s[axis]; }
  bool operator==(const Strides&) const = default;
};

struct Mask {
  const void* data = nullptr;
  MaskKind kind = MaskKind::None;
  DType dtype = DType::Bool;
  Strides strides;  // [b, h, i, j]; zero along broadcast dimensions
};

struct Sinks {
  const void* data = nullptr;  // null: no sinks
  DType dtype = DType::Float32;
  std::int64_t stride = 1;
};

struct Problem {
  Form form = Form::Dense;
  // Ragged and paged: batch is the sequence count and q_len / kv_len bound every sequence's
  // lengths (max_seqlen_q / k), so that one plan serves every batch of that layout.
  std::int64_t batch = 0;
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;
  std::int64_t head_dim = 0;
  std::int64_t value_dim = 0;
  std::int64_t group = 0;  // query heads per key head: Hq / Hkv (0 when Hkv is)
  DType dtype = DType::Float32;
  bool causal = false;
  // Sliding window (causal only); 0: none. Validation stores at most Lk: a wider window hides
  // nothing.
  std::int64_t window = 0;
  MaskKind mask_kind = MaskKind::None;
  bool has_sinks = false;
  // Logit softcap c: scores become c · tanh(s / c) after the scale; 0: none.
  float softcap = 0.0f;
  std::int64_t page_size = 0;  // paged: keys per page
  std::int64_t total_kv = 0;   // ragged: rows of k and v
  bool has_lse = false;        // the call writes each row's log-sum-exp
  // CUDA: int32 values of host-resident metadata copied into the scratch's "metadata" buffer
  // before the launch (call/metadata.hpp); 0 where it is all on the device, or on the CPU.
  std::int64_t host_metadata = 0;
  std::optional<std::int64_t> max_score_bytes;
  std::optional<std::int64_t> max_scratch_bytes;
  RouteChoice route = RouteChoice::Auto;
  // Rows of q, k and v are contiguous and do not overlap (leading dimension >= the row), so
  // BLAS could read them in place were they float32.
  bool rows_contiguous = true;
  // Rows of q, k and v can be read as whole 16-byte chunks: stride-1 last dimension, the other
  // strides and the data pointers multiples of 16 bytes. For shapes alone (contiguous, aligned
  // data): row sizes in whole 16-byte chunks.
  bool rows_wide = true;
  // Batch and head index of q, k and v fold into one: each tensor's batch stride is its heads
  // times its head stride (or B is 1), so one strided-batched GEMM can cover several batches.
  bool batch_folds = true;
  // k's and v's strides along B, H and L are positive wherever the size is above 1 (and below
  // 2^40 bytes): what a TMA tensor map can describe.
  bool kv_strides_positive = true;
  // k's and v's key rows each hold every key head ([.., L, Hkv, E] order, a paged cache's
  // [pages, page_size, Hkv, E]): stride-1 rows whose heads lie within one row stride. A reader
  // that walks the rows once for all heads then reads the tensors in order.
  bool kv_heads_in_rows = false;

  HEED_HOST_DEVICE bool empty_output() const {
    return batch == 0 || q_heads == 0 || q_len == 0 || value_dim == 0;
  }
  bool operator==(const Problem&) const = default;
};

// Where the sequences of a ragged or paged batch are. Host or device pointers as the call's
// device; null where the form has none. Device-resident values are clamped where they are read
// (sequence(), key_offset()), so no entry reads or writes outside the caller's tensors.
struct Sequences {
  const std::int32_t* cu_q = nullptr;         // [B + 1] query row starts; null: q's batch index
  const std::int32_t* cu_k = nullptr;         // ragged: [B + 1] key row starts
  const std::int32_t* seqlens_k = nullptr;    // paged: [B] keys per sequence
  const std::int32_t* block_table = nullptr;  // paged: [B, max_pages]
  std::int64_t table_strides[2] = {0, 0};
  std::int64_t max_pages = 0;
  std::int64_t num_pages = 0;  // paged: pages in the cache
  std::int64_t total_q = 0;    // rows of q where cu_q is given
  std::int64_t total_k = 0;    // ragged: rows of k and v
  // CUDA: which arrays are on the host, to be copied to the device before the kernels read them.
  struct HostArrays {
    bool cu_q = false, cu_k = false, seqlens_k = false, block_table = false;
    bool operator==(const HostArrays&) const = default;
  } host;
};

// The public entry point a problem came through, for error messages.
inline const char* op_of(Form form) {
  return form == Form::Ragged ? kVarlenOp : form == Form::Paged ? kPagedOp : kOp;
}
inline const char* op_of(const Problem& p) { return op_of(p.form); }

struct Call : Problem {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  Strides q_strides, k_strides, v_strides, out_strides;
  float scale = 1.0f;
  Mask mask;
  Sinks sinks;
  bool out_rows_wide = false;  // out's rows take 16-byte stores, as rows_wide says of q, k, v
  Sequences seqs;
  float* lse = nullptr;  // [b, h, i] float32 through lse_strides; null: not asked for
  Strides lse_strides;   // axes 0..2 used
};

// One sequence of a call as the kernels see it: its lengths and where its rows start. A dense
// call's sequence b is batch b; ragged and paged sequences read their metadata, clamped.
struct Sequence {
  std::int64_t index = 0;  // b: the batch index of dense strides, masks and the block table
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;
  std::int64_t q_row = 0;  // q's, out's and lse's row 0 is this row of the [total_q, ...] tensor
  std::int64_t k_row = 0;  // ragged: k's and v's row 0 is this row of [total_k, ...]
  const std::int32_t* pages = nullptr;  // paged: block-table row b
};

namespace detail {
HEED_HOST_DEVICE std::int64_t clamp(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
}  // namespace detail

// Sequence b of the call. Rows [begin, end) of a cu_seqlens array are clamped to the tensor's
// rows and lengths to the plan's bounds, whatever device-resident metadata holds.
HEED_HOST_DEVICE Sequence sequence(const Call& c, std::int64_t b) {
  Sequence s;
  s.index = b;
  s.q_len = c.q_len;
  s.kv_len = c.kv_len;
  if (c.seqs.cu_q != nullptr) {
    s.q_row = detail::clamp(c.seqs.cu_q[b], 0, c.seqs.total_q);
    s.q_len = detail::clamp(c.seqs.cu_q[b + 1] - s.q_row, 0, c.q_len);
    s.q_len = detail::clamp(s.q_len, 0, c.seqs.total_q - s.q_row);
  }
  if (c.form == Form::Ragged) {
    s.k_row = detail::clamp(c.seqs.cu_k[b], 0, c.seqs.total_k);
    s.kv_len = detail::clamp(c.seqs.cu_k[b + 1] - s.k_row, 0, c.kv_len);
    s.kv_len = detail::clamp(s.kv_len, 0, c.seqs.total_k - s.k_row);
  } else if (c.form == Form::Paged) {
    s.kv_len = detail::clamp(c.seqs.seqlens_k[b], 0, c.kv_len);
    s.pages = c.seqs.block_table + b * c.seqs.table_strides[0];
  }
  return s;
}

// Element offset of row i of head h of a q-like tensor (q, out; lse through its strides).
HEED_HOST_DEVICE std::int64_t row_offset(const Strides& st, const Sequence& s, std::int64_t h,
                                                std::int64_t i) {
  return s.index * st[0] + h * st[1] + (s.q_row + i) * st[2];
}

// Element offset of key row j of key head h in k or v (strides `st`). Paged keys read their page
// from the block table, clamped to the cache.
HEED_HOST_DEVICE std::int64_t key_offset(const Call& c, const Strides& st, const Sequence& s, std::int64_t h,
                                                std::int64_t j) {
  if (s.pages != nullptr) {
    const std::int64_t page = detail::clamp(s.pages[(j / c.page_size) * c.seqs.table_strides[1]], 0,
                                            c.seqs.num_pages - 1);
    return page * st[0] + h * st[1] + (j % c.page_size) * st[2];
  }
  return s.index * st[0] + h * st[1] + (s.k_row + j) * st[2];
}

// Key rows from j on that lie at one stride from key row j (the rest of its page, when paged).
HEED_HOST_DEVICE std::int64_t key_run(const Call& c, const Sequence& s, std::int64_t j) {
  return s.pages != nullptr ? c.page_size - j % c.page_size : s.kv_len - j;
}

}  // namespace heed::call
