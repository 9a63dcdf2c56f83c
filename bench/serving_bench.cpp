// The serving forms on the CPU against the dense call doing the same work, measured in one run:
// paged decode against dense decode (bytes of K and V read per second) at several page sizes, and
// ragged prefill against one dense call per sequence (FLOPs over real tokens per second). Prints
// the CPU's ceilings measured in the same run first.
//
//   heed_serving_bench [--reps N]   (N: rounds of each comparison; default 21)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "heed/heed.hpp"

namespace {

using heed::DType;
using heed::Shape;
using heed::TensorView;

constexpr std::int64_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128;

std::vector<std::uint16_t> random_bf16(std::int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> data(static_cast<std::size_t>(count));
  for (auto& x : data) x = heed::float_to_bfloat16_bits(normal(rng));
  return data;
}

// Seconds of one call.
double seconds_of(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// One form of the decode cache and its call.
struct DecodeForm {
  const char* name;
  std::vector<std::uint16_t> k, v;
  std::vector<std::int32_t> table, lengths;
  std::function<void()> call;
};

// B sequences of `keys` keys each, one query per sequence: dense [B, Hkv, Lk, D] caches, the same
// keys as [B, Lk, Hkv, D] (a paged cache's row order), then in shuffled pages of each size. The
// forms are timed round by round, one call each in turn, and each ratio is the median over rounds
// of that round's dense time over the form's: memory bandwidth here drifts between runs by more
// than the forms differ, and a paired ratio cancels the drift.
void paged_decode(std::int64_t batch, std::int64_t keys, int reps) {
  std::mt19937 rng(11);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  auto q = random_bf16(batch * kQHeads * kHeadDim, rng);
  auto k = random_bf16(batch * kKvHeads * keys * kHeadDim, rng);
  auto v = random_bf16(batch * kKvHeads * keys * kHeadDim, rng);
  std::vector<std::uint16_t> out(q.size());
  const double bytes = 2.0 * static_cast<double>(k.size()) * 2;
  const bool explain = std::getenv("HEED_BENCH_EXPLAIN") != nullptr;
  TensorView qd(q.data(), DType::BFloat16, Shape{batch, kQHeads, 1, kHeadDim});
  TensorView kd(k.data(), DType::BFloat16, Shape{batch, kKvHeads, keys, kHeadDim});
  TensorView vd(v.data(), DType::BFloat16, Shape{batch, kKvHeads, keys, kHeadDim});
  TensorView od(out.data(), DType::BFloat16, Shape{batch, kQHeads, 1, kHeadDim});
  std::vector<DecodeForm> forms;
  forms.reserve(5);
  forms.push_back({"dense", {}, {}, {}, {}, [&] { heed::attention(qd, kd, vd, od, scale, {}); }});
  {
    DecodeForm& f = forms.emplace_back(DecodeForm{"dense [B, Lk, Hkv, D]", std::vector<std::uint16_t>(k.size()),
                                                  std::vector<std::uint16_t>(v.size()), {}, {}, {}});
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < kKvHeads; ++h) {
        for (std::int64_t j = 0; j < keys; ++j) {
          const std::int64_t from = ((b * kKvHeads + h) * keys + j) * kHeadDim, to = ((b * keys + j) * kKvHeads + h) * kHeadDim;
          std::memcpy(&f.k[static_cast<std::size_t>(to)], &k[static_cast<std::size_t>(from)], kHeadDim * 2);
          std::memcpy(&f.v[static_cast<std::size_t>(to)], &v[static_cast<std::size_t>(from)], kHeadDim * 2);
        }
      }
    }
    const std::vector<std::int64_t> strides{keys * kKvHeads * kHeadDim, kHeadDim, kKvHeads * kHeadDim, 1};
    const TensorView ks(f.k.data(), DType::BFloat16, Shape{batch, kKvHeads, keys, kHeadDim}, strides);
    const TensorView vs(f.v.data(), DType::BFloat16, Shape{batch, kKvHeads, keys, kHeadDim}, strides);
    if (explain) std::printf("%s\n", heed::plan_attention(qd, ks, vs, {}).explain().c_str());
    f.call = [&, ks, vs] { heed::attention(qd, ks, vs, od, scale, {}); };
  }
  static const char* const kPageNames[] = {"page size   1", "page size  16", "page size 128"};
  const std::int64_t page_sizes[] = {1, 16, 128};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t page_size = page_sizes[i];
    const std::int64_t pages_per_sequence = keys / page_size, pages = batch * pages_per_sequence;
    DecodeForm& f = forms.emplace_back(DecodeForm{kPageNames[i], std::vector<std::uint16_t>(k.size()),
                                                  std::vector<std::uint16_t>(v.size()),
                                                  std::vector<std::int32_t>(static_cast<std::size_t>(pages)),
                                                  std::vector<std::int32_t>(static_cast<std::size_t>(batch),
                                                                            static_cast<std::int32_t>(keys)),
                                                  {}});
    std::iota(f.table.begin(), f.table.end(), 0);
    std::shuffle(f.table.begin(), f.table.end(), rng);
    // The cache [pages, page_size, Hkv, D]: page table[b, p] holds keys p·page_size.. of sequence b.
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t j = 0; j < keys; ++j) {
        const std::int64_t page = f.table[static_cast<std::size_t>(b * pages_per_sequence + j / page_size)];
        for (std::int64_t h = 0; h < kKvHeads; ++h) {
          const std::int64_t from = ((b * kKvHeads + h) * keys + j) * kHeadDim;
          const std::int64_t to = ((page * page_size + j % page_size) * kKvHeads + h) * kHeadDim;
          std::memcpy(&f.k[static_cast<std::size_t>(to)], &k[static_cast<std::size_t>(from)], kHeadDim * 2);
          std::memcpy(&f.v[static_cast<std::size_t>(to)], &v[static_cast<std::size_t>(from)], kHeadDim * 2);
        }
      }
    }
    heed::PagedKv paged;
    paged.block_table = TensorView(f.table.data(), DType::Int32, Shape{batch, pages_per_sequence});
    paged.seqlens_k = TensorView(f.lengths.data(), DType::Int32, Shape{batch});
    const TensorView qp(q.data(), DType::BFloat16, Shape{batch, kQHeads, kHeadDim});
    const TensorView kp(f.k.data(), DType::BFloat16, Shape{pages, page_size, kKvHeads, kHeadDim});
    const TensorView vp(f.v.data(), DType::BFloat16, Shape{pages, page_size, kKvHeads, kHeadDim});
    TensorView op(out.data(), DType::BFloat16, Shape{batch, kQHeads, kHeadDim});
    if (explain) std::printf("%s\n", heed::plan_attention_paged(qp, kp, vp, paged, {}).explain().c_str());
    f.call = [&, paged, qp, kp, vp, op]() mutable { heed::attention_paged(qp, kp, vp, paged, op, scale, {}); };
  }
  // A warm-up call each, then `reps` rounds of one call per form.
  std::vector<std::vector<double>> times(forms.size());
  for (auto& f : forms) f.call();
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t i = 0; i < forms.size(); ++i) times[i].push_back(seconds_of(forms[i].call));
  }
  std::printf("paged decode B %lld x %lld keys, Hq %lld / Hkv %lld, D %lld, bf16 (%d rounds, medians)\n",
              static_cast<long long>(batch), static_cast<long long>(keys), static_cast<long long>(kQHeads),
              static_cast<long long>(kKvHeads), static_cast<long long>(kHeadDim), reps);
  for (std::size_t i = 0; i < forms.size(); ++i) {
    const double seconds = median(times[i]);
    std::printf("  %-22s %8.3f ms  %6.1f GB/s", forms[i].name, seconds * 1e3, bytes / seconds * 1e-9);
    if (i == 0) {
      std::printf("\n");
      continue;
    }
    std::vector<double> ratios;
    for (int rep = 0; rep < reps; ++rep) ratios.push_back(times[0][rep] / times[i][rep]);
    std::sort(ratios.begin(), ratios.end());
    std::printf("  / dense %.3f (rounds' quartiles %.3f-%.3f)\n", ratios[ratios.size() / 2], ratios[ratios.size() / 4],
                ratios[ratios.size() * 3 / 4]);
  }
}

// Sequences of lengths uniform in [shortest, longest] (Lq = Lk each), as one ragged call against
// one dense call per sequence.
void ragged_prefill(int sequences, std::int64_t shortest, std::int64_t longest, bool causal, int reps) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> length(shortest, longest);
  std::vector<std::int32_t> cu{0};
  double flops = 0;
  for (int b = 0; b < sequences; ++b) {
    const std::int64_t l = length(rng);
    cu.push_back(cu.back() + static_cast<std::int32_t>(l));
    const double pairs = causal ? 0.5 * static_cast<double>(l) * static_cast<double>(l + 1) : static_cast<double>(l * l);
    flops += 4.0 * kQHeads * kHeadDim * pairs;
  }
  const std::int64_t total = cu.back();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  auto q = random_bf16(total * kQHeads * kHeadDim, rng);
  auto k = random_bf16(total * kKvHeads * kHeadDim, rng);
  auto v = random_bf16(total * kKvHeads * kHeadDim, rng);
  std::vector<std::uint16_t> out(q.size());
  heed::AttentionOptions options;
  options.causal = causal;
  const TensorView cu_view(cu.data(), DType::Int32, Shape{sequences + 1});
  heed::RaggedBatch batch;
  batch.cu_seqlens_q = batch.cu_seqlens_k = cu_view;
  TensorView qr(q.data(), DType::BFloat16, Shape{total, kQHeads, kHeadDim});
  TensorView kr(k.data(), DType::BFloat16, Shape{total, kKvHeads, kHeadDim});
  TensorView vr(v.data(), DType::BFloat16, Shape{total, kKvHeads, kHeadDim});
  TensorView orr(out.data(), DType::BFloat16, Shape{total, kQHeads, kHeadDim});
  const std::function<void()> ragged_call = [&] { heed::attention_varlen(qr, kr, vr, batch, orr, scale, options); };
  // Each sequence a dense [1, H, L, D] view of the same rows.
  const std::function<void()> dense_call = [&] {
    for (int b = 0; b < sequences; ++b) {
      const std::int64_t first = cu[static_cast<std::size_t>(b)], l = cu[static_cast<std::size_t>(b) + 1] - first;
      const auto view = [&](std::vector<std::uint16_t>& data, std::int64_t heads) {
        return TensorView(data.data() + first * heads * kHeadDim, DType::BFloat16, Shape{1, heads, l, kHeadDim},
                          {0, kHeadDim, heads * kHeadDim, 1});
      };
      TensorView o = view(out, kQHeads);
      heed::attention(view(q, kQHeads), view(k, kKvHeads), view(v, kKvHeads), o, scale, options);
    }
  };
  // Round by round, as paged decode: each round's ratio pairs calls made moments apart (the order
  // alternating between rounds), so that the machine's drift cancels.
  ragged_call();
  dense_call();
  std::vector<double> ragged_times, dense_times, ratios;
  for (int rep = 0; rep < reps; ++rep) {
    const bool ragged_first = rep % 2 == 0;
    const double first = seconds_of(ragged_first ? ragged_call : dense_call);
    const double second = seconds_of(ragged_first ? dense_call : ragged_call);
    ragged_times.push_back(ragged_first ? first : second);
    dense_times.push_back(ragged_first ? second : first);
    ratios.push_back(dense_times.back() / ragged_times.back());
  }
  const double ragged = median(ragged_times), dense = median(dense_times);
  std::sort(ratios.begin(), ratios.end());
  std::printf("ragged prefill %d sequences of %lld-%lld (%lld rows), %s, Hq %lld / Hkv %lld, D %lld, bf16\n",
              sequences, static_cast<long long>(shortest), static_cast<long long>(longest),
              static_cast<long long>(total), causal ? "causal" : "not causal", static_cast<long long>(kQHeads),
              static_cast<long long>(kKvHeads), static_cast<long long>(kHeadDim));
  std::printf("  dense, one call per sequence %8.3f ms  %7.1f GFLOP/s\n", dense * 1e3, flops / dense * 1e-9);
  std::printf("  ragged, one call             %8.3f ms  %7.1f GFLOP/s  ragged / dense %.3f (rounds' quartiles "
              "%.3f-%.3f)\n",
              ragged * 1e3, flops / ragged * 1e-9, ratios[ratios.size() / 2], ratios[ratios.size() / 4],
              ratios[ratios.size() * 3 / 4]);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: heed_serving_bench [--reps N]\n");
      return 2;
    }
  }
  const heed::CpuCeilings ceilings = heed::measure_cpu_ceilings();
  std::printf("CPU: %d threads, %s; FMA peak %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, AMX %.1f GFLOP/s, copy %.1f GB/s, "
              "read %.1f GB/s\n",
              ceilings.threads, ceilings.isa, ceilings.fma_gflops, ceilings.dot_bf16_gflops, ceilings.amx_gflops,
              ceilings.copy_gbytes, ceilings.read_gbytes);
  paged_decode(4, 8192, reps);
  for (bool causal : {false, true}) ragged_prefill(8, 128, 1024, causal, reps);
  return 0;
}
