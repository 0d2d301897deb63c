// The reference router: softmax_topk, sigmoid_grouped_topk (DeepSeek-V3) and topk_softmax
// (gpt-oss), exactly as docs/design.md states them, threaded over tokens.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "../core/backend.hpp"
#include "moekit/error.hpp"
#include "moekit/quant.hpp"
#include "threads.hpp"

namespace moekit::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN scores select as -inf, so a NaN never wins and the comparison stays a strict weak order.
inline float select_key(float x) { return std::isnan(x) ? kNegInf : x; }

// The `k` best of `candidates` by key, descending; equal keys keep the lower id first.
void top_k(const std::vector<float>& key, std::vector<int>& candidates, int k, int* out) {
  auto better = [&](int a, int b) { return key[a] > key[b] || (key[a] == key[b] && a < b); };
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), better);
  std::copy(candidates.begin(), candidates.begin() + k, out);
}

struct Scratch {
  std::vector<float> a, b, key, group_key;
  std::vector<int> ids, groups;
};

void route_softmax_topk(const float* logits, int E, const RoutingConfig& r, Scratch& s, int* ids, float* w) {
  float mx = kNegInf;
  for (int e = 0; e < E; ++e) mx = std::fmax(mx, logits[e]);  // fmax: a NaN logit does not hide the max
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) {
    s.a[e] = std::exp(logits[e] - mx);
    sum += s.a[e];
  }
  for (int e = 0; e < E; ++e) {
    s.a[e] = s.a[e] / sum;
    s.key[e] = select_key(s.a[e]);
  }
  s.ids.resize(E);
  std::iota(s.ids.begin(), s.ids.end(), 0);
  top_k(s.key, s.ids, r.top_k, ids);
  float total = 0.0f;
  for (int j = 0; j < r.top_k; ++j) total += s.a[ids[j]];
  for (int j = 0; j < r.top_k; ++j) w[j] = r.renormalize ? s.a[ids[j]] / total : s.a[ids[j]];
}

void route_sigmoid_grouped(const float* logits, const float* bias, int E, const RoutingConfig& r, Scratch& s,
                           int* ids, float* w) {
  for (int e = 0; e < E; ++e) {
    s.a[e] = 1.0f / (1.0f + std::exp(-logits[e]));                 // unbiased score: the weight
    s.b[e] = bias != nullptr ? s.a[e] + bias[e] : s.a[e];          // biased score: the choice
    s.key[e] = select_key(s.b[e]);
  }
  const int G = r.num_groups, per_group = E / G;
  // Group score: the sum of the group's two largest biased scores (one if it has one expert).
  for (int g = 0; g < G; ++g) {
    float top1 = kNegInf, top2 = kNegInf;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      const float v = s.key[e];
      if (v > top1) {
        top2 = top1;
        top1 = v;
      } else if (v > top2) {
        top2 = v;
      }
    }
    // -inf keys: ">" never lets them in, but a group of all -inf still scores -inf.
    s.group_key[g] = select_key(per_group >= 2 ? top1 + top2 : top1);
  }
  s.groups.resize(G);
  std::iota(s.groups.begin(), s.groups.end(), 0);
  std::vector<int> kept(static_cast<std::size_t>(r.topk_groups));
  top_k(s.group_key, s.groups, r.topk_groups, kept.data());
  std::sort(kept.begin(), kept.end());
  s.ids.clear();
  for (int g : kept)
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) s.ids.push_back(e);
  top_k(s.key, s.ids, r.top_k, ids);
  float total = 0.0f;
  for (int j = 0; j < r.top_k; ++j) total += s.a[ids[j]];
  for (int j = 0; j < r.top_k; ++j) {
    const float v = r.renormalize ? s.a[ids[j]] / total : s.a[ids[j]];
    w[j] = v * r.routed_scaling_factor;
  }
}

void route_topk_softmax(const float* logits, int E, const RoutingConfig& r, Scratch& s, int* ids, float* w) {
  for (int e = 0; e < E; ++e) s.key[e] = select_key(logits[e]);
  s.ids.resize(E);
  std::iota(s.ids.begin(), s.ids.end(), 0);
  top_k(s.key, s.ids, r.top_k, ids);
  float mx = kNegInf;
  for (int j = 0; j < r.top_k; ++j) mx = std::fmax(mx, logits[ids[j]]);
  float sum = 0.0f;
  for (int j = 0; j < r.top_k; ++j) {
    w[j] = std::exp(logits[ids[j]] - mx);
    sum += w[j];
  }
  for (int j = 0; j < r.top_k; ++j) w[j] = w[j] / sum;
}

void check_config(const detail::RouteCall& call) {
  const RoutingConfig& r = call.routing;
  const std::int64_t E = call.num_experts;
  if (r.top_k < 1 || r.top_k > E)
    throw Error(Status::kInvalidArgument, "routing.top_k = " + std::to_string(r.top_k) + " must be in [1, E=" +
                                              std::to_string(E) + "]");
  if (r.method == RoutingMethod::kSigmoidGroupedTopk) {
    if (r.num_groups < 1 || E % r.num_groups != 0)
      throw Error(Status::kInvalidArgument, "routing.num_groups = " + std::to_string(r.num_groups) +
                                                " must divide E=" + std::to_string(E));
    if (r.topk_groups < 1 || r.topk_groups > r.num_groups)
      throw Error(Status::kInvalidArgument, "routing.topk_groups = " + std::to_string(r.topk_groups) +
                                                " must be in [1, num_groups=" + std::to_string(r.num_groups) + "]");
    const std::int64_t eligible = static_cast<std::int64_t>(r.topk_groups) * (E / r.num_groups);
    if (r.top_k > eligible)
      throw Error(Status::kInvalidArgument, "routing.top_k = " + std::to_string(r.top_k) + " exceeds the " +
                                                std::to_string(eligible) + " experts of the topk_groups kept groups");
  }
}

}  // namespace

void run_route(const detail::RouteCall& call) {
  const std::int64_t M = call.num_tokens;
  if (M <= 0) return;
  check_config(call);
  const int E = static_cast<int>(call.num_experts), k = call.routing.top_k;
  constexpr std::int64_t kTokensPerItem = 32;
  const std::int64_t items = (M + kTokensPerItem - 1) / kTokensPerItem;
  parallel_for(items, call.num_threads, [&](std::int64_t item) {
    Scratch s;
    s.a.resize(E);
    s.b.resize(E);
    s.key.resize(E);
    s.group_key.resize(static_cast<std::size_t>(std::max(call.routing.num_groups, 1)));
    std::vector<float> logits(static_cast<std::size_t>(E));
    std::vector<int> ids(static_cast<std::size_t>(k));
    const std::int64_t m1 = std::min(M, (item + 1) * kTokensPerItem);
    for (std::int64_t m = item * kTokensPerItem; m < m1; ++m) {
      for (int e = 0; e < E; ++e) logits[e] = load_as_float(call.router_logits, call.logits_dtype, m * E + e);
      float* w = call.topk_weights + m * k;
      switch (call.routing.method) {
        case RoutingMethod::kSoftmaxTopk: route_softmax_topk(logits.data(), E, call.routing, s, ids.data(), w); break;
        case RoutingMethod::kSigmoidGroupedTopk:
          route_sigmoid_grouped(logits.data(), call.correction_bias, E, call.routing, s, ids.data(), w);
          break;
        case RoutingMethod::kTopkSoftmax: route_topk_softmax(logits.data(), E, call.routing, s, ids.data(), w); break;
      }
      for (int j = 0; j < k; ++j) call.topk_ids[m * k + j] = ids[j];
    }
  });
}

}  // namespace moekit::cpu
