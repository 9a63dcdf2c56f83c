#include "support/problem.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "cpu/reference/oracle.hpp"

namespace heed::test {

const char* to_string(MaskKind kind) {
  switch (kind) {
    case MaskKind::None: return "none";
    case MaskKind::Bool2D: return "bool2d";
    case MaskKind::Bool4D: return "bool4d";
    case MaskKind::BoolExpanded: return "bool_expanded";
    case MaskKind::Additive: return "additive";
    case MaskKind::KeyPadding: return "key_padding";
  }
  return "unknown";
}

double CaseSpec::oracle_cost() const {
  return static_cast<double>(batch) * static_cast<double>(q_heads) * static_cast<double>(q_len) *
         static_cast<double>(kv_len) * static_cast<double>(head_dim + value_dim);
}

namespace {

std::uint64_t seed_of(const std::string& name) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Row-major linear index of (a, b, c, d) in a rank-4 shape.
std::int64_t linear(const Shape& s, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

Tensor make_mask(const CaseSpec& spec, std::mt19937_64& rng) {
  const std::int64_t B = spec.batch, H = spec.q_heads, Lq = spec.q_len, Lk = spec.kv_len;
  switch (spec.mask) {
    case MaskKind::Bool2D: {
      Tensor mask(Shape{Lq, Lk}, DType::Bool, spec.mask_layout);
      mask.fill_random(rng);
      for (std::int64_t i = 2; i < Lq; i += 5)
        for (std::int64_t j = 0; j < Lk; ++j) mask.set(i * Lk + j, 0.0);
      return mask;
    }
    case MaskKind::Bool4D: {
      Tensor mask(Shape{B, H, Lq, Lk}, DType::Bool, spec.mask_layout);
      mask.fill_random(rng);
      if (B > 0 && H > 0)
        for (std::int64_t i = 2; i < Lq; i += 5)
          for (std::int64_t j = 0; j < Lk; ++j) mask.set(linear(mask.view().shape, 0, 0, i, j), 0.0);
      return mask;
    }
    case MaskKind::BoolExpanded: {
      Tensor mask(Shape{B, 1, Lq, Lk}, DType::Bool);
      mask.fill_random(rng);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 2; i < Lq; i += 5)
          for (std::int64_t j = 0; j < Lk; ++j) mask.set(linear(mask.view().shape, b, 0, i, j), 0.0);
      TensorView& view = mask.view();
      view.shape = Shape{B, H, Lq, Lk};
      view.strides[1] = 0;
      return mask;
    }
    case MaskKind::Additive: {
      Tensor mask(Shape{1, H, Lq, Lk}, spec.mask_dtype, spec.mask_layout);
      std::normal_distribution<double> normal(0.0, 1.0);
      std::bernoulli_distribution hidden(0.2);
      const double negative_infinity = -std::numeric_limits<double>::infinity();
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < Lq; ++i)
          for (std::int64_t j = 0; j < Lk; ++j) {
            const double value = (i % 7 == 3 || hidden(rng)) ? negative_infinity : normal(rng);
            mask.set(linear(mask.view().shape, 0, h, i, j), value);
          }
      return mask;
    }
    case MaskKind::KeyPadding: {
      Tensor mask(Shape{B, 1, 1, Lk}, DType::Bool);
      for (std::int64_t b = 0; b < B; ++b) {
        std::int64_t valid = std::max<std::int64_t>(1, Lk * (B - b) / (B + 1));
        if (B >= 2 && b == B - 1) valid = 0;
        for (std::int64_t j = 0; j < Lk; ++j) mask.set(b * Lk + j, j < valid ? 1.0 : 0.0);
      }
      return mask;
    }
    case MaskKind::None: break;
  }
  return Tensor(Shape{0}, DType::Bool);
}

}  // namespace

Problem::Problem(const CaseSpec& spec)
    : spec_(spec),
      q_(spec.q_shape(), spec.dtype, spec.q_layout.value_or(spec.layout)),
      k_(spec.k_shape(), spec.dtype, spec.layout),
      v_(spec.v_shape(), spec.dtype, spec.layout),
      out_(spec.out_shape(), spec.dtype, spec.out_layout) {
  std::mt19937_64 rng(seed_of(spec.name));
  q_.fill_random(rng, spec.input_stddev);
  k_.fill_random(rng, spec.input_stddev);
  v_.fill_random(rng);
  if (spec.nan_query && spec.q_len > 0 && spec.head_dim > 0) {
    q_.set(std::min<std::int64_t>(1, spec.q_len - 1) * spec.head_dim, std::numeric_limits<double>::quiet_NaN());
  }
  options_.causal = spec.causal;
  options_.window = spec.window;
  options_.softcap = spec.softcap;
  options_.max_score_bytes = spec.max_score_bytes;
  options_.max_scratch_bytes = spec.max_scratch_bytes;
  options_.route = spec.route;
  if (spec.mask != MaskKind::None) {
    mask_.emplace(make_mask(spec, rng));
    options_.mask = mask_->view();
  }
  if (spec.sinks) {
    // Logits near log(Lk), so that exp(sink) weighs as much as the keys do.
    sinks_.emplace(Shape{spec.q_heads}, spec.sink_dtype, spec.sinks_layout);
    std::normal_distribution<double> sink_logit(std::log(static_cast<double>(std::max<std::int64_t>(spec.kv_len, 1))), 1.5);
    for (std::int64_t h = 0; h < spec.q_heads; ++h) sinks_->set(h, sink_logit(rng));
    options_.sinks = sinks_->view();
  }
  scale_ = static_cast<float>(spec.scale != 0 ? spec.scale
                                              : 1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
}

AttentionPlan Problem::plan() const {
  return plan_attention(q_.view(), k_.view(), v_.view(), options_);
}

void Problem::run() {
  out_.poison();
  out_before_ = out_.storage();
  attention(q_.view(), k_.view(), v_.view(), out_.view(), scale_, options_);
}

std::vector<double> Problem::reference() const {
  return reference::attention(q_.view(), k_.view(), v_.view(), scale_, options_);
}

std::unique_ptr<Problem> make_problem(const CaseSpec& spec) { return std::make_unique<Problem>(spec); }

std::vector<Dispatch> dispatches() {
  std::vector<Dispatch> parsed;
  for (const auto& [key, count] : profile::entries()) {
    Dispatch dispatch;
    dispatch.count = count;
    const auto bracket = key.find(" [");
    dispatch.name = key.substr(0, bracket);
    if (bracket != std::string::npos) {
      long long x = -1, y = -1, z = -1;
      if (std::sscanf(key.c_str() + bracket, " [%lld, %lld, %lld]", &x, &y, &z) == 3) {
        dispatch.x = x;
        dispatch.y = y;
        dispatch.z = z;
      }
    }
    parsed.push_back(dispatch);
  }
  return parsed;
}

}  // namespace heed::test
