// Random MoE cases for the CPU suite, the CUDA suite and the benchmark: a cheap counter-based
// PRNG (so preset-sized weights are made in seconds, threaded over experts, and every tensor
// depends only on the seed), host views for the calls, and the comparison metric.
#include "common/moe_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

namespace moekit::testing {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream of approximately N(0,1) values: each 64-bit draw gives four 16-bit uniforms whose
// centred sum (Irwin-Hall, variance 1/3) is scaled to variance 1. Bounded by +-3.47.
class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream) : state_(splitmix64(seed * 0x100000001b3ull ^ splitmix64(stream))) {}
  std::uint64_t next() { return splitmix64(state_++); }
  float normal() {
    const std::uint64_t r = next();
    const float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
    return (sum * (1.0f / 65536.0f) - 2.0f + 2.0f / 65536.0f) * 1.7320508f;
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t state_;
};

// Stream ids: one per tensor (and per expert for weights), so tensors are independent of
// each other and of the thread that made them.
enum : std::uint64_t { kHidden = 1, kLogits, kBias, kB13, kB2, kRouting, kW13 = 1000, kW2 = 1u << 30 };

std::uint16_t to_act(float x, DType dtype) { return dtype == DType::kFp16 ? float_to_fp16(x) : float_to_bf16(x); }

template <class Fn>
void for_each_parallel(std::int64_t n, Fn fn) {
  const int threads = static_cast<int>(std::min<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()), n));
  if (threads <= 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::int64_t i = t; i < n; i += threads) fn(i);
    });
  for (auto& th : pool) th.join();
}

// Random weights [E, R, C] with std `stddev`, quantized one expert at a time (scales are per
// expert or finer, so this equals quantizing the whole tensor) to bound the fp32 scratch.
QuantizedWeights make_weights(std::int64_t E, std::int64_t R, std::int64_t C, float stddev, Scheme scheme,
                              DType act_dtype, std::uint64_t seed, std::uint64_t stream) {
  QuantizedWeights q;
  q.dtype = scheme == Scheme::kBf16 ? act_dtype : DType::kFp8E4m3;
  q.shape = {E, R, C};
  const std::size_t esize = dtype_size(q.dtype);
  const std::int64_t per_expert = R * C;
  q.data.resize(static_cast<std::size_t>(E * per_expert) * esize);
  std::vector<QuantizedWeights> parts(static_cast<std::size_t>(E));
  for_each_parallel(E, [&](std::int64_t e) {
    Rng rng(seed, stream + static_cast<std::uint64_t>(e));
    std::vector<float> w(static_cast<std::size_t>(per_expert));
    for (float& v : w) v = rng.normal() * stddev;
    QuantizedWeights one = quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {1, R, C}), scheme, act_dtype);
    std::memcpy(q.data.data() + static_cast<std::size_t>(e * per_expert) * esize, one.data.data(), one.data.size());
    parts[static_cast<std::size_t>(e)].scale = std::move(one.scale);
    if (e == 0) parts[0].scale_shape = one.scale_shape;
  });
  if (scheme != Scheme::kBf16) {
    std::vector<std::int64_t> shape = E > 0 ? parts[0].scale_shape : std::vector<std::int64_t>{1};
    shape[0] = E;
    q.scale_shape = shape;
    for (auto& part : parts) q.scale.insert(q.scale.end(), part.scale.begin(), part.scale.end());
  }
  return q;
}

}  // namespace

std::string CaseSpec::name() const {
  std::ostringstream s;
  s << "M=" << M << " E=" << E << " k=" << k << " K=" << K << " N=" << N << " " << scheme_name(scheme) << " "
    << activation_name(activation.kind);
  if (act_dtype != DType::kBf16) s << " " << dtype_name(act_dtype);
  if (pattern == RoutingPattern::kAllToOne) s << " all_to_one";
  if (pattern == RoutingPattern::kSkewed) s << " skewed";
  if (pattern == RoutingPattern::kDuplicates) s << " duplicates";
  if (pattern == RoutingPattern::kFromLogits && routing.method != RoutingMethod::kSoftmaxTopk)
    s << " " << routing_method_name(routing.method);
  if (bias) s << " bias";
  if (expert_map) s << " expert_map";
  if (weight_on_input) s << " weight_on_input";
  if (static_scales) s << " static_scales";
  s << " seed=" << seed;
  return s.str();
}

FusedExpertsArgs MoeCase::host_args(void* out) const {
  const CaseSpec& s = spec;
  FusedExpertsArgs a;
  a.hidden = TensorView::contiguous(hidden.data(), s.act_dtype, {s.M, s.K});
  a.weights.w13 = w13.view();
  a.weights.w2 = w2.view();
  a.weights.w13_scale = w13.scale_view();
  a.weights.w2_scale = w2.scale_view();
  if (s.bias) {  // a test may drop one of the two (an emptied vector): the call then has the other only
    if (!b13.empty()) a.weights.b13 = TensorView::contiguous(b13.data(), s.act_dtype, {s.E, 2 * s.N});
    if (!b2.empty()) a.weights.b2 = TensorView::contiguous(b2.data(), s.act_dtype, {s.E, s.K});
  }
  a.topk_ids = TensorView::contiguous(topk_ids.data(), DType::kInt32, {s.M, s.k});
  a.topk_weights = TensorView::contiguous(topk_weights.data(), DType::kFp32, {s.M, s.k});
  a.out = TensorView::contiguous(out, s.act_dtype, {s.M, s.K});
  a.scheme = s.scheme;
  a.activation = s.activation;
  if (s.static_scales && s.scheme == Scheme::kFp8PerTensor) {
    a.a13_scale = TensorView::contiguous(&a13_scale, DType::kFp32, {1});
    a.a2_scale = TensorView::contiguous(&a2_scale, DType::kFp32, {1});
  }
  if (s.expert_map) a.expert_map = TensorView::contiguous(expert_map.data(), DType::kInt32, {E_global});
  a.apply_router_weight_on_input = s.weight_on_input;
  return a;
}

MoeCase make_case(const CaseSpec& spec_in) {
  MoeCase c;
  c.spec = spec_in;
  CaseSpec& s = c.spec;
  s.routing.top_k = static_cast<int>(s.k);
  c.E_global = s.expert_map ? 2 * s.E : s.E;
  const std::int64_t Eg = c.E_global;

  {
    Rng rng(s.seed, kHidden);
    c.hidden.resize(static_cast<std::size_t>(s.M * s.K));
    float amax = 0.0f;
    for (auto& v : c.hidden) {
      v = to_act(rng.normal(), s.act_dtype);
      amax = std::max(amax, std::fabs(s.act_dtype == DType::kFp16 ? fp16_to_float(v) : bf16_to_float(v)));
    }
    // Static scales: a13 covers hidden exactly; a2 is a fixed guess of the intermediate's
    // range (|silu(g) * u| with g, u ~ N(0,1) rarely passes 16).
    c.a13_scale = std::max(amax / kFp8Max, kMinDynamicScale);
    c.a2_scale = 16.0f / kFp8Max;
  }
  {
    Rng rng(s.seed, kLogits);
    c.router_logits.resize(static_cast<std::size_t>(s.M * Eg));
    for (auto& v : c.router_logits) v = rng.normal();
  }
  if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
    Rng rng(s.seed, kBias);
    c.correction_bias.resize(static_cast<std::size_t>(Eg));
    for (auto& v : c.correction_bias) v = 0.1f * rng.normal();
  }
  const float sk = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(s.K, 1)));
  const float sn = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(s.N, 1)));
  c.w13 = make_weights(s.E, 2 * s.N, s.K, sk, s.scheme, s.act_dtype, s.seed, kW13);
  c.w2 = make_weights(s.E, s.K, s.N, sn, s.scheme, s.act_dtype, s.seed, kW2);
  if (s.bias) {
    Rng r13(s.seed, kB13), r2(s.seed, kB2);
    c.b13.resize(static_cast<std::size_t>(s.E * 2 * s.N));
    c.b2.resize(static_cast<std::size_t>(s.E * s.K));
    for (auto& v : c.b13) v = to_act(0.2f * r13.normal(), s.act_dtype);
    for (auto& v : c.b2) v = to_act(0.2f * r2.normal(), s.act_dtype);
  }
  if (s.expert_map) {
    c.expert_map.resize(static_cast<std::size_t>(Eg));
    for (std::int64_t g = 0; g < Eg; ++g) c.expert_map[g] = (g % 2 == 0) ? static_cast<std::int32_t>(g / 2) : -1;
  }

  c.topk_ids.resize(static_cast<std::size_t>(s.M * s.k));
  c.topk_weights.resize(static_cast<std::size_t>(s.M * s.k));
  // Given-routing patterns: k distinct ids per token with random positive weights summing to 1.
  auto random_weights = [&](Rng& rng, std::int64_t m) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < s.k; ++j) sum += (c.topk_weights[m * s.k + j] = 0.1f + rng.uniform());
    for (std::int64_t j = 0; j < s.k; ++j) c.topk_weights[m * s.k + j] /= sum;
  };
  // Token m's k slots: k distinct ids of [0, n) (partial Fisher-Yates).
  std::vector<std::int32_t> pool;
  auto distinct_ids = [&](Rng& rng, std::int64_t m, std::int64_t n) {
    pool.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) pool[i] = static_cast<std::int32_t>(i);
    for (std::int64_t j = 0; j < s.k; ++j) {
      std::swap(pool[j], pool[j + rng.below(n - j)]);
      c.topk_ids[m * s.k + j] = pool[j];
    }
  };
  const std::int64_t half = std::max<std::int64_t>(s.k, Eg / 2);
  if (s.pattern == RoutingPattern::kAllToOne) {
    Rng rng(s.seed, kRouting);
    for (std::int64_t m = 0; m < s.M; ++m) {
      for (std::int64_t j = 0; j < s.k; ++j)
        c.topk_ids[m * s.k + j] = static_cast<std::int32_t>((s.hot_expert + j) % Eg);
      random_weights(rng, m);
    }
  } else if (s.pattern == RoutingPattern::kSkewed && half < Eg) {
    // Ids drawn from the first half of the experts only: the second half gets no tokens.
    Rng rng(s.seed, kRouting);
    for (std::int64_t m = 0; m < s.M; ++m) {
      distinct_ids(rng, m, half);
      random_weights(rng, m);
    }
  } else if (s.pattern == RoutingPattern::kDuplicates && s.k >= 2) {
    // k distinct ids, then on even tokens slot 1 repeats slot 0's expert: both slots go through
    // that expert, each with its own weight (what vLLM's fused_experts does with such ids).
    Rng rng(s.seed, kRouting);
    for (std::int64_t m = 0; m < s.M; ++m) {
      distinct_ids(rng, m, Eg);
      if (m % 2 == 0) c.topk_ids[m * s.k + 1] = c.topk_ids[m * s.k];
      random_weights(rng, m);
    }
  } else if (s.M > 0) {
    RouteArgs r;
    r.router_logits = TensorView::contiguous(c.router_logits.data(), DType::kFp32, {s.M, Eg});
    r.routing = s.routing;
    if (!c.correction_bias.empty())
      r.e_score_correction_bias = TensorView::contiguous(c.correction_bias.data(), DType::kFp32, {Eg});
    r.topk_ids = TensorView::contiguous(c.topk_ids.data(), DType::kInt32, {s.M, s.k});
    r.topk_weights = TensorView::contiguous(c.topk_weights.data(), DType::kFp32, {s.M, s.k});
    Options o;
    o.backend = Backend::kCpu;
    route(r, o);
  }
  return c;
}

std::vector<float> reference_output(const MoeCase& c) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(c.spec.M * c.spec.K));
  Options o;
  o.backend = Backend::kCpu;
  fused_experts(c.host_args(out.data()), o);
  return to_float(out, c.spec.act_dtype);
}

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    diff += d * d;
    norm += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (norm == 0.0) return std::sqrt(diff);  // all-zero reference: the absolute error
  return std::sqrt(diff / norm);
}

std::vector<float> to_float(const std::vector<std::uint16_t>& bits, DType dtype) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i)
    out[i] = dtype == DType::kFp16 ? fp16_to_float(bits[i]) : bf16_to_float(bits[i]);
  return out;
}

}  // namespace moekit::testing
