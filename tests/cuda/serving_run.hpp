#pragma once
// The serving grids' case and its run on the device (cuda_serving_test.cpp on the vector route,
// cuda_serving_tiled_test.cpp on the tiled one): the inputs built from a case, the float64
// serving oracle's result, the metadata uploaded as an engine keeps it, and the call. The pages
// no sequence reads and the unread tails of read pages hold NaN.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference/serving_oracle.hpp"
#include "cuda/device_tensor.hpp"
#include "heed/heed.hpp"
#include "support/serving.hpp"
#include "support/support.hpp"

namespace heed::test {

inline bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

inline bool on_hopper() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the gpu tests need one"

struct ServingCase {
  std::string name;
  bool paged = false;
  std::vector<std::int64_t> q_lens, kv_lens;
  bool decode = false;  // paged: q [B, Hq, D], one query per sequence (q_lens all 1)
  std::int64_t page_size = 16;
  std::int64_t q_heads = 4, kv_heads = 2, head_dim = 64, value_dim = 64;
  bool causal = false;
  std::optional<std::int64_t> window;
  bool sinks = false;
  std::optional<float> softcap;
  bool head_major = false;        // ragged: q, k, v stored [H, total, E]; paged: pages [Hkv, page_size, E]
  std::int64_t shared_pages = 0;  // paged: sequences b > 0 begin with sequence 0's first pages
  std::int64_t table_pad = 0;     // paged: block-table rows this many entries apart beyond max_pages
  bool empty_rows = false;        // some rows see no key
  bool wgmma = false;             // tiled: runs the wgmma kernel on Hopper without lse
  DType dtype = DType::Float16;
};

inline void PrintTo(const ServingCase& c, std::ostream* os) { *os << c.name; }

// Each shape once per dtype, the dtype's short name appended to the case's.
inline std::vector<ServingCase> in_dtypes(const std::vector<ServingCase>& shapes, const std::vector<DType>& dtypes) {
  std::vector<ServingCase> out;
  for (const ServingCase& shape : shapes) {
    for (DType dtype : dtypes) {
      ServingCase c = shape;
      c.name += std::string("_") + short_name(dtype);
      c.dtype = dtype;
      out.push_back(c);
    }
  }
  return out;
}

// One case's inputs on the device, its oracle result and its call on `route`.
struct ServingRun {
  const ServingCase& c;
  std::mt19937_64 rng;
  std::int64_t rows = 0;
  float scale = 1.0f;
  AttentionOptions options;
  std::optional<Tensor> sinks;
  std::unique_ptr<DeviceTensor> q, k, v, cu_q, cu_k, table, seqlens, sinks_device;
  std::optional<IntTensor> cu_q_host, cu_k_host, table_host, seqlens_host;
  reference::AttentionResult ref;
  PageAssignment pages;  // paged

  ServingRun(const ServingCase& sc, RouteChoice route) : c(sc), rng(seed_of(sc.name)) {
    scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    options.causal = c.causal;
    options.window = c.window;
    options.softcap = c.softcap;
    options.route = route;
    c.paged ? build_paged() : build_ragged();
  }

  void add_sinks(std::int64_t typical_keys) {
    if (!c.sinks) return;
    sinks.emplace(sink_logits(c.q_heads, typical_keys, rng));
    options.sinks = sinks->view();
  }
  AttentionOptions device_options() const {
    AttentionOptions o = options;
    if (sinks_device) o.sinks = sinks_device->view();
    return o;
  }

  void build_ragged() {
    const std::int64_t total_q = sum(c.q_lens), total_k = sum(c.kv_lens);
    rows = total_q;
    const Tensor qh = filled(Shape{total_q, c.q_heads, c.head_dim}, c.dtype, Layout::Contiguous, c.head_major, rng, 1.5);
    const Tensor kh = filled(Shape{total_k, c.kv_heads, c.head_dim}, c.dtype, Layout::Contiguous, c.head_major, rng, 1.5);
    const Tensor vh = filled(Shape{total_k, c.kv_heads, c.value_dim}, c.dtype, Layout::Contiguous, c.head_major, rng, 1.0);
    cu_q_host.emplace(Shape{static_cast<std::int64_t>(c.q_lens.size()) + 1}, cumulative(c.q_lens));
    cu_k_host.emplace(Shape{static_cast<std::int64_t>(c.kv_lens.size()) + 1}, cumulative(c.kv_lens));
    add_sinks(total_k / std::max<std::int64_t>(total_q, 1));
    ref = reference::attention_varlen(qh.view(), kh.view(), vh.view(), cu_q_host->view(), cu_k_host->view(), scale,
                                      options);
    upload(qh, kh, vh);
    cu_q = std::make_unique<DeviceTensor>(cu_q_host->view());
    cu_k = std::make_unique<DeviceTensor>(cu_k_host->view());
  }

  void build_paged() {
    const auto batch = static_cast<std::int64_t>(c.kv_lens.size());
    pages = assign_pages(c.kv_lens, c.page_size, c.shared_pages, rng);
    Tensor kh = filled(Shape{pages.num_pages, c.page_size, c.kv_heads, c.head_dim}, c.dtype, Layout::Contiguous,
                       c.head_major, rng, 1.5);
    Tensor vh = filled(Shape{pages.num_pages, c.page_size, c.kv_heads, c.value_dim}, c.dtype, Layout::Contiguous,
                       c.head_major, rng, 1.0);
    poison_unread_pages(kh, pages);
    poison_unread_pages(vh, pages);
    poison_page_tails(kh, pages, c.kv_lens);
    poison_page_tails(vh, pages, c.kv_lens);
    table_host.emplace(Shape{batch, pages.max_pages}, pages.table, c.table_pad);
    seqlens_host.emplace(Shape{batch}, c.kv_lens);
    rows = c.decode ? batch : sum(c.q_lens);
    std::optional<TensorView> cu_view;
    if (!c.decode) {
      cu_q_host.emplace(Shape{batch + 1}, cumulative(c.q_lens));
      cu_view = cu_q_host->view();
    }
    const Tensor qh = filled(Shape{rows, c.q_heads, c.head_dim}, c.dtype, Layout::Contiguous, false, rng, 1.5);
    add_sinks(sum(c.kv_lens) / batch);
    ref = reference::attention_paged(qh.view(), kh.view(), vh.view(), table_host->view(), seqlens_host->view(),
                                     cu_view, scale, options);
    upload(qh, kh, vh);
    table = std::make_unique<DeviceTensor>(table_host->view());
    seqlens = std::make_unique<DeviceTensor>(seqlens_host->view());
    if (cu_q_host) cu_q = std::make_unique<DeviceTensor>(cu_q_host->view());
  }

  void upload(const Tensor& qh, const Tensor& kh, const Tensor& vh) {
    q = std::make_unique<DeviceTensor>(qh);
    k = std::make_unique<DeviceTensor>(kh);
    v = std::make_unique<DeviceTensor>(vh);
    if (sinks) sinks_device = std::make_unique<DeviceTensor>(*sinks);
  }

  std::int64_t longest(const std::vector<std::int64_t>& lengths) const {
    return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  }

  AttentionPlan plan(const AttentionOptions& o) const {
    if (!c.paged) return plan_attention_varlen(q->view(), k->view(), v->view(), ragged(), o);
    return plan_attention_paged(q->view(), k->view(), v->view(), paged(), o);
  }
  void run(TensorView& out, const AttentionOptions& o) const {
    if (!c.paged) return attention_varlen(q->view(), k->view(), v->view(), ragged(), out, scale, o);
    attention_paged(q->view(), k->view(), v->view(), paged(), out, scale, o);
  }
  // Device-resident metadata needs its bounds given.
  RaggedBatch ragged() const {
    return RaggedBatch{cu_q->view(), cu_k->view(), longest(c.q_lens), longest(c.kv_lens)};
  }
  PagedKv paged() const {
    PagedKv kv{table->view(), seqlens->view(), std::nullopt, c.decode ? 1 : longest(c.q_lens), longest(c.kv_lens)};
    if (cu_q) kv.cu_seqlens_q = cu_q->view();
    return kv;
  }
};

}  // namespace heed::test
