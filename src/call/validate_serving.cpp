// Validation of the serving forms (serving.hpp): ragged batches and paged KV caches. Each form
// is mapped onto the dense descriptor's [b, h, row, e] strides (a ragged tensor is one batch of
// total rows; a page is a batch of page_size rows) and its metadata into call::Sequences.
// Host-resident metadata is checked entry by entry here; device-resident metadata is clamped
// where the kernels read it (call::sequence, call::key_offset).

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "call/checks.hpp"
#include "call/merge.hpp"
#include "call/metadata.hpp"
#include "call/validate.hpp"
#include "core/format.hpp"
#include "heed/error.hpp"

namespace heed::call {
namespace {

using detail::invalid;

void check_rank(const TensorView& view, int rank, const char* name, const char* layout, const char* op) {
  if (view.shape.rank() != rank) {
    invalid(op, format("{} must have rank {} {}, got shape {}", name, rank, layout, view.shape.to_string()));
  }
  for (std::int64_t dim : view.shape.dims()) {
    if (dim < 0) invalid(op, format("{} shape {} has a negative size", name, view.shape.to_string()));
  }
  view.shape.numel(op);
  detail::check_strides(view, name, op);
}

void check_dtypes(const TensorView& q, const TensorView& k, const TensorView& v, const char* op) {
  detail::check_floating(q.dtype, "q", op);
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    invalid(op, format("q, k and v must share one dtype, got q {}, k {}, v {}", to_string(q.dtype),
                       to_string(k.dtype), to_string(v.dtype)));
  }
}

void check_heads(std::int64_t q_heads, std::int64_t kv_heads, std::int64_t v_heads, const char* op) {
  if (kv_heads != v_heads) invalid(op, format("k and v head counts differ: k {}, v {}", kv_heads, v_heads));
  if (kv_heads == 0 ? q_heads != 0 : q_heads % kv_heads != 0) {
    invalid(op, format("Hq ({}) must be a multiple of Hkv ({})", q_heads, kv_heads));
  }
}

// int32 metadata of shape `dims` on the host or on q's device. Returns it where the host can
// read it, else null.
const std::int32_t* check_metadata(const TensorView& view, const char* name, const Shape& dims, const TensorView& q,
                                   const char* op) {
  if (view.dtype != DType::Int32) invalid(op, format("{} dtype must be int32, got {}", name, to_string(view.dtype)));
  if (!(view.shape == dims)) invalid(op, format("{} must have shape {}, got {}", name, dims.to_string(), view.shape.to_string()));
  detail::check_strides(view, name, op);
  if (dims.rank() == 1 && dims[0] > 1 && view.strides[0] != 1) {
    invalid(op, format("{} must be contiguous, got stride {}", name, view.strides[0]));
  }
  if (view.device.type != DeviceType::CPU && !(view.device == q.device)) {
    invalid(op, format("{} is on {} but q is on {}", name, view.device.to_string(), q.device.to_string()));
  }
  detail::check_data(view, name, op);
  return view.device.type == DeviceType::CPU ? static_cast<const std::int32_t*>(view.data) : nullptr;
}

// Host cu_seqlens [count]: 0 first, never decreasing, `total` last. Returns the longest sequence.
std::int64_t check_cu_seqlens(const std::int32_t* cu, std::int64_t count, std::int64_t total, const char* name,
                              const char* op) {
  if (cu[0] != 0) invalid(op, format("{}[0] must be 0, got {}", name, cu[0]));
  std::int64_t longest = 0;
  for (std::int64_t b = 1; b < count; ++b) {
    if (cu[b] < cu[b - 1]) {
      invalid(op, format("{} must not decrease: {}[{}] = {} < {}[{}] = {}", name, name, b, cu[b], name, b - 1, cu[b - 1]));
    }
    longest = std::max<std::int64_t>(longest, cu[b] - cu[b - 1]);
  }
  if (cu[count - 1] != total) {
    invalid(op, format("{}[{}] = {} must equal the tensor's {} rows", name, count - 1, cu[count - 1], total));
  }
  return longest;
}

// The plan's bound on a length: the caller's (at least the longest seen, where seen), else the longest.
std::int64_t length_bound(const std::optional<std::int64_t>& given, std::int64_t longest, bool seen, const char* name,
                          const char* what, const char* op) {
  if (!given) return longest;
  if (*given < 0) invalid(op, format("{} must be >= 0, got {}", name, *given));
  if (seen && *given < longest) invalid(op, format("{} ({}) is below the longest sequence's {} {}", name, *given, longest, what));
  return *given;
}

void check_rows_addressable(std::int64_t rows, const char* name, const char* op) {
  if (rows > std::numeric_limits<std::int32_t>::max()) {
    invalid(op, format("{} has {} rows, more than int32 metadata can address", name, rows));
  }
}

// A [rows, H, E] tensor as one batch of `rows` rows: [1, H, rows, E].
TensorView rows_as_batch(const TensorView& t) {
  return TensorView(t.data, t.dtype, Shape{1, t.shape[1], t.shape[0], t.shape[2]},
                    {0, t.strides[1], t.strides[0], t.strides[2]}, t.device);
}

// A [B, H, E] tensor (one row per sequence) as [B, H, 1, E].
TensorView batch_of_rows(const TensorView& t) {
  return TensorView(t.data, t.dtype, Shape{t.shape[0], t.shape[1], 1, t.shape[2]},
                    {t.strides[0], t.strides[1], 0, t.strides[2]}, t.device);
}

// A cache [num_pages, page_size, H, E] as batches of pages: [num_pages, H, page_size, E].
TensorView pages_as_batch(const TensorView& t) {
  return TensorView(t.data, t.dtype, Shape{t.shape[0], t.shape[2], t.shape[1], t.shape[3]},
                    {t.strides[0], t.strides[2], t.strides[1], t.strides[3]}, t.device);
}

// What every form fills in the same way from its [b, h, row, e] views.
void finish_problem(Problem& p, const TensorView& q, const TensorView& k, const TensorView& v,
                    const AttentionOptions& options, const char* op) {
  p.group = p.kv_heads > 0 ? p.q_heads / p.kv_heads : 0;
  p.dtype = q.dtype;
  p.causal = options.causal;
  p.route = options.route;
  p.rows_contiguous = detail::rows_contiguous(q) && detail::rows_contiguous(k) && detail::rows_contiguous(v);
  p.rows_wide = detail::rows_wide(q) && detail::rows_wide(k) && detail::rows_wide(v);
  p.batch_folds = detail::batch_folds(q) && detail::batch_folds(k) && detail::batch_folds(v);
  p.kv_strides_positive = detail::strides_positive(k) && detail::strides_positive(v);
  p.kv_heads_in_rows = detail::heads_in_rows(k) && detail::heads_in_rows(v);
  // The planner sizes per-sequence work from the bounds: their score count must fit, as dense's.
  const std::int64_t rows = checked_mul(checked_mul(p.batch, p.q_heads, op, "B * Hq"), p.q_len, op, "B * Hq * Lq");
  checked_mul(checked_mul(rows, p.kv_len, op, "the score count B * Hq * Lq * Lk"), 4, op,
              "the score bytes B * Hq * Lq * Lk * 4");
  if (options.mask) {
    invalid(op, "a mask is for dense calls only; ragged and paged calls take causal, window, sinks and softcap");
  }
  detail::check_options(p, options, op);
}

// The descriptor of validated views: data, strides, sinks.
Call descriptor(const Problem& p, const TensorView& q, const TensorView& k, const TensorView& v,
                const AttentionOptions& options) {
  Call c;
  static_cast<Problem&>(c) = p;
  c.q = q.data;
  c.k = k.data;
  c.v = v.data;
  c.q_strides = detail::strides_of(q);
  c.k_strides = detail::strides_of(k);
  c.v_strides = detail::strides_of(v);
  if (options.sinks) c.sinks = Sinks{options.sinks->data, options.sinks->dtype, options.sinks->strides[0]};
  return c;
}

// Which of a CUDA call's metadata arrays the host holds (copied to the device before the launch).
void flag_host_metadata(Call& c, const TensorView& q, std::initializer_list<std::pair<const TensorView*, bool*>> arrays) {
  if (q.device.type != DeviceType::CUDA) return;
  for (const auto& [view, host] : arrays) *host = view->device.type == DeviceType::CPU;
  c.host_metadata = host_metadata_count(c);
}

void check_inputs_present(const TensorView& q, const TensorView& k, const TensorView& v, const char* op) {
  detail::check_data(q, "q", op);
  detail::check_data(k, "k", op);
  detail::check_data(v, "v", op);
}

}  // namespace

Call validate_ragged(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                     const TensorView* out, float scale, const AttentionOptions& options) {
  const char* op = kVarlenOp;
  check_rank(q, 3, "q", "[total_q, Hq, D]", op);
  check_rank(k, 3, "k", "[total_k, Hkv, D]", op);
  check_rank(v, 3, "v", "[total_k, Hkv, Dv]", op);
  check_dtypes(q, k, v, op);
  check_heads(q.shape[1], k.shape[1], v.shape[1], op);
  if (q.shape[2] != k.shape[2]) invalid(op, format("q and k head sizes differ: q {}, k {}", q.shape[2], k.shape[2]));
  if (k.shape[0] != v.shape[0]) invalid(op, format("k and v rows differ: k {}, v {}", k.shape[0], v.shape[0]));
  detail::check_device(k, "k", q, op);
  detail::check_device(v, "v", q, op);
  check_rows_addressable(q.shape[0], "q", op);
  check_rows_addressable(k.shape[0], "k", op);
  const Shape& cu_shape = batch.cu_seqlens_q.shape;
  if (cu_shape.rank() != 1 || cu_shape[0] < 1) {
    invalid(op, format("cu_seqlens_q must have shape [B + 1], got {}", cu_shape.to_string()));
  }
  const std::int64_t sequences = cu_shape[0] - 1;
  const std::int32_t* cu_q = check_metadata(batch.cu_seqlens_q, "cu_seqlens_q", Shape{sequences + 1}, q, op);
  const std::int32_t* cu_k = check_metadata(batch.cu_seqlens_k, "cu_seqlens_k", Shape{sequences + 1}, q, op);
  const std::int64_t longest_q = cu_q ? check_cu_seqlens(cu_q, sequences + 1, q.shape[0], "cu_seqlens_q", op) : q.shape[0];
  const std::int64_t longest_k = cu_k ? check_cu_seqlens(cu_k, sequences + 1, k.shape[0], "cu_seqlens_k", op) : k.shape[0];

  Problem p;
  p.form = Form::Ragged;
  p.batch = sequences;
  p.q_heads = q.shape[1];
  p.kv_heads = k.shape[1];
  p.q_len = length_bound(batch.max_seqlen_q, longest_q, cu_q != nullptr, "max_seqlen_q", "queries", op);
  p.kv_len = length_bound(batch.max_seqlen_k, longest_k, cu_k != nullptr, "max_seqlen_k", "keys", op);
  p.head_dim = q.shape[2];
  p.value_dim = v.shape[2];
  p.total_kv = k.shape[0];
  const TensorView qb = rows_as_batch(q), kb = rows_as_batch(k), vb = rows_as_batch(v);
  finish_problem(p, qb, kb, vb, options, op);

  Call c = descriptor(p, qb, kb, vb, options);
  c.seqs.cu_q = static_cast<const std::int32_t*>(batch.cu_seqlens_q.data);
  c.seqs.cu_k = static_cast<const std::int32_t*>(batch.cu_seqlens_k.data);
  c.seqs.total_q = q.shape[0];
  c.seqs.total_k = k.shape[0];
  flag_host_metadata(c, q, {{&batch.cu_seqlens_q, &c.seqs.host.cu_q}, {&batch.cu_seqlens_k, &c.seqs.host.cu_k}});
  detail::attach_lse(c, q, options, Shape{q.shape[0], q.shape[1]}, {2, 1}, op);
  if (out == nullptr) return c;
  check_inputs_present(q, k, v, op);
  detail::attach_output(c, q, *out, Shape{q.shape[0], q.shape[1], v.shape[2]}, scale, options, op);
  const TensorView ob = rows_as_batch(*out);
  c.out_strides = detail::strides_of(ob);
  c.out_rows_wide = detail::rows_wide(ob);
  return c;
}

Call validate_paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache, const PagedKv& pages,
                    const TensorView* out, float scale, const AttentionOptions& options) {
  const char* op = kPagedOp;
  const bool ragged_q = pages.cu_seqlens_q.has_value();
  check_rank(q, 3, "q", ragged_q ? "[total_q, Hq, D]" : "[B, Hq, D]", op);
  check_rank(k_cache, 4, "k_cache", "[num_pages, page_size, Hkv, D]", op);
  check_rank(v_cache, 4, "v_cache", "[num_pages, page_size, Hkv, Dv]", op);
  check_dtypes(q, k_cache, v_cache, op);
  check_heads(q.shape[1], k_cache.shape[2], v_cache.shape[2], op);
  if (q.shape[2] != k_cache.shape[3]) {
    invalid(op, format("q and k_cache head sizes differ: q {}, k_cache {}", q.shape[2], k_cache.shape[3]));
  }
  if (k_cache.shape[0] != v_cache.shape[0] || k_cache.shape[1] != v_cache.shape[1]) {
    invalid(op, format("k_cache and v_cache pages differ: k_cache {}, v_cache {}", k_cache.shape.to_string(),
                       v_cache.shape.to_string()));
  }
  detail::check_device(k_cache, "k_cache", q, op);
  detail::check_device(v_cache, "v_cache", q, op);
  const std::int64_t num_pages = k_cache.shape[0], page_size = k_cache.shape[1];
  if (page_size < 1) invalid(op, format("page_size (k_cache's dimension 1) must be >= 1, got {}", page_size));

  const Shape& table_shape = pages.block_table.shape;
  if (table_shape.rank() != 2) {
    invalid(op, format("block_table must have rank 2 [B, max_pages], got shape {}", table_shape.to_string()));
  }
  const std::int64_t sequences = table_shape[0], max_pages = table_shape[1];
  const std::int32_t* table = check_metadata(pages.block_table, "block_table", table_shape, q, op);
  const std::int32_t* lengths = check_metadata(pages.seqlens_k, "seqlens_k", Shape{sequences}, q, op);
  const std::int64_t capacity = checked_mul(max_pages, page_size, op, "max_pages * page_size");
  std::int64_t longest_k = capacity;
  if (lengths != nullptr) {
    longest_k = 0;
    for (std::int64_t b = 0; b < sequences; ++b) {
      if (lengths[b] < 0) invalid(op, format("seqlens_k[{}] = {} is negative", b, lengths[b]));
      if (lengths[b] > capacity) {
        invalid(op, format("seqlens_k[{}] = {} exceeds max_pages * page_size = {} * {} = {}", b, lengths[b], max_pages,
                           page_size, capacity));
      }
      longest_k = std::max<std::int64_t>(longest_k, lengths[b]);
    }
  }
  if (table != nullptr) {
    // The pages a sequence reads (all of its row where its length is not known here).
    const std::int64_t s0 = pages.block_table.strides[0], s1 = pages.block_table.strides[1];
    for (std::int64_t b = 0; b < sequences; ++b) {
      const std::int64_t used = lengths != nullptr ? (lengths[b] + page_size - 1) / page_size : max_pages;
      for (std::int64_t j = 0; j < used; ++j) {
        const std::int32_t page = table[b * s0 + j * s1];
        if (page < 0 || page >= num_pages) {
          invalid(op, format("block_table[{}, {}] = {} is outside [0, num_pages = {})", b, j, page, num_pages));
        }
      }
    }
  }

  Problem p;
  p.form = Form::Paged;
  p.batch = sequences;
  p.q_heads = q.shape[1];
  p.kv_heads = k_cache.shape[2];
  p.q_len = 1;
  const std::int32_t* cu_q = nullptr;
  if (ragged_q) {
    check_rows_addressable(q.shape[0], "q", op);
    cu_q = check_metadata(*pages.cu_seqlens_q, "cu_seqlens_q", Shape{sequences + 1}, q, op);
    const std::int64_t longest_q = cu_q ? check_cu_seqlens(cu_q, sequences + 1, q.shape[0], "cu_seqlens_q", op) : q.shape[0];
    p.q_len = length_bound(pages.max_seqlen_q, longest_q, cu_q != nullptr, "max_seqlen_q", "queries", op);
  } else if (q.shape[0] != sequences) {
    invalid(op, format("q has {} sequences but block_table has {}", q.shape[0], sequences));
  }
  p.kv_len = std::min(capacity, length_bound(pages.max_seqlen_k, longest_k, lengths != nullptr, "max_seqlen_k", "keys", op));
  p.head_dim = q.shape[2];
  p.value_dim = v_cache.shape[3];
  p.page_size = page_size;
  const TensorView qb = ragged_q ? rows_as_batch(q) : batch_of_rows(q);
  const TensorView kb = pages_as_batch(k_cache), vb = pages_as_batch(v_cache);
  finish_problem(p, qb, kb, vb, options, op);

  Call c = descriptor(p, qb, kb, vb, options);
  if (ragged_q) {
    c.seqs.cu_q = static_cast<const std::int32_t*>(pages.cu_seqlens_q->data);
    c.seqs.total_q = q.shape[0];
  }
  c.seqs.seqlens_k = static_cast<const std::int32_t*>(pages.seqlens_k.data);
  c.seqs.block_table = static_cast<const std::int32_t*>(pages.block_table.data);
  c.seqs.table_strides[0] = pages.block_table.strides[0];
  c.seqs.table_strides[1] = pages.block_table.strides[1];
  c.seqs.max_pages = max_pages;
  c.seqs.num_pages = num_pages;
  flag_host_metadata(c, q, {{&pages.block_table, &c.seqs.host.block_table}, {&pages.seqlens_k, &c.seqs.host.seqlens_k}});
  if (ragged_q) flag_host_metadata(c, q, {{&*pages.cu_seqlens_q, &c.seqs.host.cu_q}});
  detail::attach_lse(c, q, options, Shape{q.shape[0], q.shape[1]}, ragged_q ? std::initializer_list<int>{2, 1}
                                                                             : std::initializer_list<int>{0, 1}, op);
  if (out == nullptr) return c;
  check_inputs_present(q, k_cache, v_cache, op);
  detail::attach_output(c, q, *out, Shape{q.shape[0], q.shape[1], v_cache.shape[3]}, scale, options, op);
  const TensorView ob = ragged_q ? rows_as_batch(*out) : batch_of_rows(*out);
  c.out_strides = detail::strides_of(ob);
  c.out_rows_wide = detail::rows_wide(ob);
  return c;
}

Merge validate_merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                     const TensorView& lse_b, const TensorView& out, const TensorView& lse) {
  const char* op = kMergeOp;
  if (out_a.shape.rank() < 1) invalid(op, format("out_a must have rank >= 1 [..., Dv], got shape {}", out_a.shape.to_string()));
  const std::vector<std::int64_t> rows(out_a.shape.dims().begin(), out_a.shape.dims().end() - 1);
  const Shape lse_shape(rows);
  for (const auto& [view, name] : {std::pair{&out_a, "out_a"}, {&out_b, "out_b"}, {&out, "out"}}) {
    if (!(view->shape == out_a.shape)) {
      invalid(op, format("{} shape {} must equal out_a's {}", name, view->shape.to_string(), out_a.shape.to_string()));
    }
    detail::check_strides(*view, name, op);
    detail::check_floating(view->dtype, name, op);
    if (view->dtype != out_a.dtype) {
      invalid(op, format("{} dtype {} must equal out_a's {}", name, to_string(view->dtype), to_string(out_a.dtype)));
    }
    detail::check_device(*view, name, out_a, op);
    detail::check_data(*view, name, op);
  }
  for (const auto& [view, name] : {std::pair{&lse_a, "lse_a"}, {&lse_b, "lse_b"}, {&lse, "lse"}}) {
    if (!(view->shape == lse_shape)) {
      invalid(op, format("{} shape {} must be out's without its last dimension, {}", name, view->shape.to_string(),
                         lse_shape.to_string()));
    }
    detail::check_strides(*view, name, op);
    if (view->dtype != DType::Float32) invalid(op, format("{} dtype must be float32, got {}", name, to_string(view->dtype)));
    detail::check_device(*view, name, out_a, op);
    detail::check_data(*view, name, op);
  }
  Merge m;
  m.dtype = out_a.dtype;
  m.rows = rows;
  m.width = out_a.shape[out_a.rank() - 1];
  m.out_a = out_a.data;
  m.out_b = out_b.data;
  m.out = out.data;
  m.out_a_strides = out_a.strides;
  m.out_b_strides = out_b.strides;
  m.out_strides = out.strides;
  m.lse_a = static_cast<const float*>(lse_a.data);
  m.lse_b = static_cast<const float*>(lse_b.data);
  m.lse = static_cast<float*>(lse.data);
  m.lse_a_strides = lse_a.strides;
  m.lse_b_strides = lse_b.strides;
  m.lse_strides = lse.strides;
  return m;
}

}  // namespace heed::call
