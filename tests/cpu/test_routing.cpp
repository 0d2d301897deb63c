// The reference router on hand-computed cases: softmax_topk (with and without renormalize),
// DeepSeek's grouped sigmoid routing (bias, groups, scaling), gpt-oss topk_softmax, ties, NaN,
// bf16 logits, odd expert counts and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

struct Routed {
  std::vector<std::int32_t> ids;
  std::vector<float> w;
};

Routed run_route(const std::vector<float>& logits, std::int64_t M, std::int64_t E, const RoutingConfig& r,
                 const std::vector<float>& bias = {}, int threads = 0) {
  Routed out;
  out.ids.assign(static_cast<std::size_t>(M * r.top_k), -7);
  out.w.assign(static_cast<std::size_t>(M * r.top_k), -7.0f);
  RouteArgs a;
  a.router_logits = TensorView::contiguous(logits.data(), DType::kFp32, {M, E});
  a.routing = r;
  if (!bias.empty()) a.e_score_correction_bias = TensorView::contiguous(bias.data(), DType::kFp32, {E});
  a.topk_ids = TensorView::contiguous(out.ids.data(), DType::kInt32, {M, r.top_k});
  a.topk_weights = TensorView::contiguous(out.w.data(), DType::kFp32, {M, r.top_k});
  Options o;
  o.backend = Backend::kCpu;
  o.num_threads = threads;
  route(a, o);
  return out;
}

RoutingConfig softmax_cfg(int k, bool renorm) {
  RoutingConfig r;
  r.method = RoutingMethod::kSoftmaxTopk;
  r.top_k = k;
  r.renormalize = renorm;
  return r;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(CpuRouting, SoftmaxTopkHandComputed) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  Routed r = run_route(logits, 1, 4, softmax_cfg(2, false));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{2, 1}));
  EXPECT_NEAR(r.w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.w[1], std::exp(2.0) / z, 1e-6);

  r = run_route(logits, 1, 4, softmax_cfg(2, true));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{2, 1}));
  EXPECT_NEAR(r.w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(r.w[1], std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
}

TEST(CpuRouting, TiesPickLowerExpertId) {
  Routed r = run_route(std::vector<float>(6, 0.5f), 1, 6, softmax_cfg(3, false));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{0, 1, 2}));
  for (float w : r.w) EXPECT_NEAR(w, 1.0 / 6.0, 1e-7);

  r = run_route({1.0f, 5.0f, 2.0f, 5.0f, 5.0f}, 1, 5, softmax_cfg(2, true));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 3}));
  EXPECT_EQ(r.w[0], r.w[1]);
  EXPECT_NEAR(r.w[0], 0.5, 1e-7);

  RoutingConfig t;
  t.method = RoutingMethod::kTopkSoftmax;
  t.top_k = 3;
  t.renormalize = false;
  r = run_route({2.0f, 7.0f, 2.0f, 7.0f, 2.0f}, 1, 5, t);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 3, 0}));
}

TEST(CpuRouting, TopkSoftmaxHandComputed) {
  RoutingConfig t;
  t.method = RoutingMethod::kTopkSoftmax;
  t.top_k = 2;
  t.renormalize = false;
  Routed r = run_route({1.0f, 3.0f, 2.0f, 0.0f, -4.0f, 1.0f, 1.5f, 6.0f}, 2, 4, t);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 2, 3, 2}));
  const double e = std::exp(1.0);
  EXPECT_NEAR(r.w[0], e / (e + 1.0), 1e-6);
  EXPECT_NEAR(r.w[1], 1.0 / (e + 1.0), 1e-6);
  const double d = std::exp(-4.5);
  EXPECT_NEAR(r.w[2], 1.0 / (1.0 + d), 1e-6);
  EXPECT_NEAR(r.w[3], d / (1.0 + d), 1e-6);
}

// E = 8 in 4 groups of 2, keep 2 groups, k = 3. Expert 3 has the second highest score but its
// group loses on the top-2 sum; expert 7 has the highest score but the bias pushes it down.
TEST(CpuRouting, SigmoidGroupedTopkHandComputed) {
  const std::vector<float> logits = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 0.4f, -2.0f, 3.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f};
  RoutingConfig g;
  g.method = RoutingMethod::kSigmoidGroupedTopk;
  g.top_k = 3;
  g.num_groups = 4;
  g.topk_groups = 2;
  g.routed_scaling_factor = 2.5f;
  g.renormalize = true;
  Routed r = run_route(logits, 1, 8, g, bias);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 4, 5}));
  const double s1 = sigmoid(1.0), s4 = sigmoid(0.5), s5 = sigmoid(0.4), sum = s1 + s4 + s5;
  EXPECT_NEAR(r.w[0], s1 / sum * 2.5, 1e-6);
  EXPECT_NEAR(r.w[1], s4 / sum * 2.5, 1e-6);
  EXPECT_NEAR(r.w[2], s5 / sum * 2.5, 1e-6);

  g.renormalize = false;
  r = run_route(logits, 1, 8, g, bias);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 4, 5}));
  EXPECT_NEAR(r.w[0], s1 * 2.5, 1e-6);
  EXPECT_NEAR(r.w[2], s5 * 2.5, 1e-6);

  // Without the bias expert 7 wins and takes group 3 in with it (group sum 0.95 + 0.12 = 1.07
  // loses to group 0's 1.23 and group 2's 1.22, but 7 is then out: the group decides first).
  g.renormalize = true;
  r = run_route(logits, 1, 8, g);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 4, 5}));
  // Lift group 3's partner so the group wins: now 7 (the best) and 6 come in.
  std::vector<float> l2 = logits;
  l2[6] = 1.5f;
  r = run_route(l2, 1, 8, g);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{7, 6, 1}));
}

TEST(CpuRouting, SigmoidGroupedTiesKeepLowerGroups) {
  RoutingConfig g;
  g.method = RoutingMethod::kSigmoidGroupedTopk;
  g.top_k = 3;
  g.num_groups = 4;
  g.topk_groups = 2;
  Routed r = run_route(std::vector<float>(8, 0.25f), 1, 8, g);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{0, 1, 2}));
  for (float w : r.w) EXPECT_NEAR(w, 1.0 / 3.0, 1e-7);
}

TEST(CpuRouting, SigmoidGroupedSingleExpertGroups) {
  // Groups of one expert: the group score is that expert's biased score.
  RoutingConfig g;
  g.method = RoutingMethod::kSigmoidGroupedTopk;
  g.top_k = 2;
  g.num_groups = 4;
  g.topk_groups = 2;
  g.renormalize = false;
  Routed r = run_route({0.1f, 0.9f, -0.3f, 0.7f}, 1, 4, g);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 3}));
  EXPECT_NEAR(r.w[0], sigmoid(0.9), 1e-6);
  EXPECT_NEAR(r.w[1], sigmoid(0.7), 1e-6);
}

TEST(CpuRouting, NaNLogitsSelectLastAndStayInTheirRow) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  RoutingConfig t;
  t.method = RoutingMethod::kTopkSoftmax;
  t.top_k = 2;
  t.renormalize = false;
  Routed r = run_route({nan, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f}, 2, 4, t);
  EXPECT_EQ(r.ids[0], 3);
  EXPECT_EQ(r.ids[1], 2);
  EXPECT_TRUE(std::isfinite(r.w[0]) && std::isfinite(r.w[1]));
  EXPECT_EQ(r.w[0], r.w[2]);
  EXPECT_EQ(r.w[1], r.w[3]);

  // softmax_topk: the NaN poisons its token's normalization, never the other token's.
  r = run_route({nan, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f}, 2, 4, softmax_cfg(2, true));
  EXPECT_TRUE(std::isnan(r.w[0]) && std::isnan(r.w[1]));
  for (std::int32_t id : r.ids) EXPECT_TRUE(id >= 0 && id < 4);
  EXPECT_EQ(r.ids[2], 3);
  EXPECT_EQ(r.ids[3], 2);
  EXPECT_TRUE(std::isfinite(r.w[2]) && std::isfinite(r.w[3]));
}

TEST(CpuRouting, Bf16LogitsReadAsFloat) {
  std::vector<float> f = {0.1f, -1.3f, 2.7f, 0.9f, 1.1f, -0.2f};
  std::vector<std::uint16_t> b(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    b[i] = float_to_bf16(f[i]);
    f[i] = bf16_to_float(b[i]);
  }
  std::vector<std::int32_t> ids(2);
  std::vector<float> w(2);
  RouteArgs a;
  a.router_logits = TensorView::contiguous(b.data(), DType::kBf16, {1, 6});
  a.routing = softmax_cfg(2, true);
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {1, 2});
  a.topk_weights = TensorView::contiguous(w.data(), DType::kFp32, {1, 2});
  Options o;
  o.backend = Backend::kCpu;
  route(a, o);
  Routed ref = run_route(f, 1, 6, softmax_cfg(2, true));
  EXPECT_EQ(ids, ref.ids);
  EXPECT_EQ(w, ref.w);
}

// Random logits at odd expert counts: ids are the top-k of the logits in descending order,
// weights descending and matching a double-precision recomputation.
TEST(CpuRouting, OddExpertCountsMatchDoublePrecision) {
  for (std::int64_t E : {72, 160, 257}) {
    const std::int64_t M = 9;
    std::vector<float> logits(static_cast<std::size_t>(M * E));
    std::uint32_t st = static_cast<std::uint32_t>(E);
    for (float& v : logits) {
      st = st * 1664525u + 1013904223u;
      v = static_cast<float>(st >> 8) / 16777216.0f * 8.0f - 4.0f;
    }
    for (RoutingMethod method : {RoutingMethod::kSoftmaxTopk, RoutingMethod::kTopkSoftmax}) {
      RoutingConfig r = softmax_cfg(8, true);
      r.method = method;
      if (method == RoutingMethod::kTopkSoftmax) r.renormalize = false;
      Routed got = run_route(logits, M, E, r);
      for (std::int64_t m = 0; m < M; ++m) {
        const float* l = logits.data() + m * E;
        std::vector<int> order(static_cast<std::size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
        double top_sum = 0.0, all_sum = 0.0, mx = l[order[0]];
        for (int j = 0; j < 8; ++j) top_sum += std::exp(l[order[j]] - mx);
        for (std::int64_t e = 0; e < E; ++e) all_sum += std::exp(l[e] - mx);
        (void)all_sum;
        for (int j = 0; j < 8; ++j) {
          ASSERT_EQ(got.ids[m * 8 + j], order[j]) << "E=" << E << " m=" << m << " j=" << j;
          EXPECT_NEAR(got.w[m * 8 + j], std::exp(l[order[j]] - mx) / top_sum, 1e-6);
          if (j > 0) EXPECT_LE(got.w[m * 8 + j], got.w[m * 8 + j - 1]);
        }
      }
    }
  }
}

// DeepSeek-style grouped routing at E = 160 and 256 against a double-precision version.
TEST(CpuRouting, SigmoidGroupedMatchesDoublePrecision) {
  for (std::int64_t E : {160, 256}) {
    const std::int64_t M = 7, G = 8, kept = 4, k = 8;
    std::vector<float> logits(static_cast<std::size_t>(M * E)), bias(static_cast<std::size_t>(E));
    std::uint32_t st = 99u + static_cast<std::uint32_t>(E);
    auto next = [&] {
      st = st * 1664525u + 1013904223u;
      return static_cast<float>(st >> 8) / 16777216.0f;
    };
    for (float& v : logits) v = next() * 6.0f - 3.0f;
    for (float& v : bias) v = next() * 0.2f - 0.1f;
    RoutingConfig g;
    g.method = RoutingMethod::kSigmoidGroupedTopk;
    g.top_k = static_cast<int>(k);
    g.num_groups = static_cast<int>(G);
    g.topk_groups = static_cast<int>(kept);
    g.routed_scaling_factor = 2.5f;
    Routed got = run_route(logits, M, E, g, bias);
    const std::int64_t per = E / G;
    for (std::int64_t m = 0; m < M; ++m) {
      std::vector<double> s(static_cast<std::size_t>(E)), b(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e) {
        s[e] = sigmoid(logits[m * E + e]);
        b[e] = s[e] + bias[e];
      }
      std::vector<std::pair<double, int>> groups;
      for (std::int64_t gi = 0; gi < G; ++gi) {
        std::vector<double> v(b.begin() + gi * per, b.begin() + (gi + 1) * per);
        std::sort(v.rbegin(), v.rend());
        groups.push_back({-(v[0] + v[1]), static_cast<int>(gi)});
      }
      std::sort(groups.begin(), groups.end());
      std::vector<int> cand;
      for (std::int64_t i = 0; i < kept; ++i)
        for (std::int64_t e = groups[i].second * per; e < (groups[i].second + 1) * per; ++e) cand.push_back(static_cast<int>(e));
      std::sort(cand.begin(), cand.end());
      std::stable_sort(cand.begin(), cand.end(), [&](int x, int y) { return b[x] > b[y]; });
      double sum = 0.0;
      for (std::int64_t j = 0; j < k; ++j) sum += s[cand[j]];
      for (std::int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(got.ids[m * k + j], cand[j]) << "E=" << E << " m=" << m << " j=" << j;
        EXPECT_NEAR(got.w[m * k + j], s[cand[j]] / sum * 2.5, 1e-5);
      }
    }
  }
}

TEST(CpuRouting, KEqualsEAndThreadCountsAgree) {
  const std::int64_t M = 100, E = 6;
  std::vector<float> logits(static_cast<std::size_t>(M * E));
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.7f * static_cast<float>(i));
  Routed one = run_route(logits, M, E, softmax_cfg(6, true), {}, 1);
  Routed two = run_route(logits, M, E, softmax_cfg(6, true), {}, 2);
  Routed three = run_route(logits, M, E, softmax_cfg(6, true), {}, 3);
  EXPECT_EQ(one.ids, two.ids);
  EXPECT_EQ(one.w, two.w);
  EXPECT_EQ(one.ids, three.ids);
  EXPECT_EQ(one.w, three.w);
  for (std::int64_t m = 0; m < M; ++m) {
    std::vector<std::int32_t> ids(one.ids.begin() + m * E, one.ids.begin() + (m + 1) * E);
    std::sort(ids.begin(), ids.end());
    for (int e = 0; e < E; ++e) EXPECT_EQ(ids[e], e);
    double sum = 0.0;
    for (int j = 0; j < E; ++j) sum += one.w[m * E + j];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(CpuRouting, ZeroTokensIsANoOp) {
  std::vector<float> logits;
  Routed r = run_route(logits, 0, 8, softmax_cfg(2, true));
  EXPECT_TRUE(r.ids.empty());
}

}  // namespace
}  // namespace moekit::testing
