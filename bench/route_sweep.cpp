// Times every CPU route on the shapes around the planner's thresholds and prints, per shape,
// each route's time, the route the planner picks and how far it is from the fastest. The
// thresholds in src/plan/cpu_tables.hpp cite this tool's output.
//
//   heed_route_sweep [--reps N]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "heed/heed.hpp"

namespace {

struct Shape {
  std::int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
  bool causal;
};

double seconds_for(const heed::TensorView& q, const heed::TensorView& k, const heed::TensorView& v,
                   heed::TensorView& out, const heed::AttentionOptions& options, int reps) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.shape[3]));
  heed::attention(q, k, v, out, scale, options);
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    heed::attention(q, k, v, out, scale, options);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void sweep(const Shape& s, int reps) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto random = [&](std::int64_t count) {
    std::vector<float> data(static_cast<std::size_t>(count));
    for (float& x : data) x = normal(rng);
    return data;
  };
  auto q_data = random(s.batch * s.q_heads * s.q_len * s.head_dim);
  auto k_data = random(s.batch * s.kv_heads * s.kv_len * s.head_dim);
  auto v_data = random(s.batch * s.kv_heads * s.kv_len * s.head_dim);
  std::vector<float> out_data(q_data.size());
  heed::TensorView q(q_data.data(), heed::DType::Float32, {s.batch, s.q_heads, s.q_len, s.head_dim});
  heed::TensorView k(k_data.data(), heed::DType::Float32, {s.batch, s.kv_heads, s.kv_len, s.head_dim});
  heed::TensorView v(v_data.data(), heed::DType::Float32, {s.batch, s.kv_heads, s.kv_len, s.head_dim});
  heed::TensorView out(out_data.data(), heed::DType::Float32, {s.batch, s.q_heads, s.q_len, s.head_dim});
  heed::AttentionOptions options;
  options.causal = s.causal;
  const std::string picked = heed::route_name(heed::plan_attention(q, k, v, options).kernel);
  std::printf("B %lld Hq %lld Hkv %lld Lq %5lld Lk %5lld D %3lld %-6s |", static_cast<long long>(s.batch),
              static_cast<long long>(s.q_heads), static_cast<long long>(s.kv_heads),
              static_cast<long long>(s.q_len), static_cast<long long>(s.kv_len),
              static_cast<long long>(s.head_dim), s.causal ? "causal" : "");
  double best = 1e30, picked_time = 0;
  std::string best_name;
  for (auto [choice, name] : {std::pair{heed::RouteChoice::Vector, "vector"}, {heed::RouteChoice::Tiled, "tiled"},
                              {heed::RouteChoice::Composed, "composed"}}) {
    options.route = choice;
    const double time = seconds_for(q, k, v, out, options, reps);
    std::printf(" %s %8.3f ms", name, time * 1e3);
    if (time < best) best = time, best_name = name;
    if (picked == name) picked_time = time;
  }
  std::printf(" | picks %s (%.2fx the fastest, %s)\n", picked.c_str(), picked_time / best, best_name.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  if (argc == 3 && std::strcmp(argv[1], "--reps") == 0) reps = std::max(1, std::atoi(argv[2]));
  std::printf("# median of %d runs per route; threads: HEED_NUM_THREADS or all cores\n", reps);
  // Prefill around kComposedMaxKeys.
  for (std::int64_t length : {8, 16, 32, 64, 96, 128, 192, 256, 512}) {
    for (std::int64_t head_dim : {64, 128}) sweep({4, 8, 8, length, length, head_dim, false}, reps);
  }
  // Decode-like rows per key head (group x Lq) around kVectorMaxRows, 4096 keys.
  for (std::int64_t q_len : {1, 2, 4, 8, 16}) sweep({1, 32, 8, q_len, 4096, 128, true}, reps);
  return 0;
}
