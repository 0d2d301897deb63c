// Each activation against its hand formula, through the whole op: one expert whose GEMMs are
// chosen so that out[n] = round_act(act(g_n, u_n)) for chosen (g_n, u_n) pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

// Runs the op with hidden = e_0, w13 gate row n = g_n e_0, up row n = u_n e_0, w2 = identity,
// so GEMM1 gives exactly (g_n, u_n) and GEMM2 passes round_act(act(g, u)) through.
std::vector<float> run_pairs(const std::vector<float>& g, const std::vector<float>& u, const ActivationConfig& act,
                             DType dtype = DType::kBf16) {
  const std::int64_t N = static_cast<std::int64_t>(g.size()), K = N;
  auto enc = [&](float x) { return dtype == DType::kFp16 ? float_to_fp16(x) : float_to_bf16(x); };
  std::vector<std::uint16_t> hidden(static_cast<std::size_t>(K), enc(0.0f));
  hidden[0] = enc(1.0f);
  std::vector<std::uint16_t> w13(static_cast<std::size_t>(2 * N * K), enc(0.0f));
  std::vector<std::uint16_t> w2(static_cast<std::size_t>(K * N), enc(0.0f));
  for (std::int64_t n = 0; n < N; ++n) {
    w13[n * K] = enc(g[n]);
    w13[(N + n) * K] = enc(u[n]);
    w2[n * N + n] = enc(1.0f);
  }
  std::int32_t id = 0;
  float weight = 1.0f;
  std::vector<std::uint16_t> out(static_cast<std::size_t>(K));
  FusedExpertsArgs a;
  a.hidden = TensorView::contiguous(hidden.data(), dtype, {1, K});
  a.weights.w13 = TensorView::contiguous(w13.data(), dtype, {1, 2 * N, K});
  a.weights.w2 = TensorView::contiguous(w2.data(), dtype, {1, K, N});
  a.topk_ids = TensorView::contiguous(&id, DType::kInt32, {1, 1});
  a.topk_weights = TensorView::contiguous(&weight, DType::kFp32, {1, 1});
  a.out = TensorView::contiguous(out.data(), dtype, {1, K});
  a.activation = act;
  Options o;
  o.backend = Backend::kCpu;
  fused_experts(a, o);
  std::vector<float> r(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) r[i] = dtype == DType::kFp16 ? fp16_to_float(out[i]) : bf16_to_float(out[i]);
  return r;
}

// One act-dtype rounding step of slack: the op computes in fp32, the formula here in double.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, DType dtype) {
  const double rel = dtype == DType::kFp16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], std::fabs(want[i]) * rel + 1e-30) << "pair " << i;
  }
}

const std::vector<float> kG = {-9.0f, -4.0f, -1.5f, -0.5f, 0.0f, 0.25f, 1.0f, 2.5f, 6.5f, 7.0f, 8.0f, 12.0f};
const std::vector<float> kU = {1.0f, -2.0f, 0.75f, 3.0f, 5.0f, -1.25f, 2.0f, -0.5f, 9.0f, -8.0f, 1.5f, 0.125f};

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(CpuActivation, SiluTimesUp) {
  std::vector<double> want;
  for (std::size_t i = 0; i < kG.size(); ++i) want.push_back(kG[i] * sigmoid(kG[i]) * kU[i]);
  ActivationConfig a;
  a.kind = Activation::kSilu;
  expect_close(run_pairs(kG, kU, a), want, DType::kBf16);
  expect_close(run_pairs(kG, kU, a, DType::kFp16), want, DType::kFp16);
}

TEST(CpuActivation, GeluErfTimesUp) {
  std::vector<double> want;
  for (std::size_t i = 0; i < kG.size(); ++i) want.push_back(0.5 * kG[i] * (1.0 + std::erf(kG[i] / std::sqrt(2.0))) * kU[i]);
  ActivationConfig a;
  a.kind = Activation::kGelu;
  expect_close(run_pairs(kG, kU, a), want, DType::kBf16);
  expect_close(run_pairs(kG, kU, a, DType::kFp16), want, DType::kFp16);
}

// gpt-oss: g clamped above only, u on both sides, then g * sigmoid(alpha g) * (u + 1).
TEST(CpuActivation, SwigluOaiClampsAndOffsetsUp) {
  for (float limit : {7.0f, 3.0f}) {
    for (float alpha : {1.702f, 1.0f}) {
      std::vector<double> want;
      for (std::size_t i = 0; i < kG.size(); ++i) {
        const double g = std::min<double>(kG[i], limit);
        const double u = std::max<double>(-limit, std::min<double>(kU[i], limit));
        want.push_back(g * sigmoid(static_cast<double>(alpha) * g) * (u + 1.0));
      }
      ActivationConfig a;
      a.kind = Activation::kSwigluOai;
      a.alpha = alpha;
      a.limit = limit;
      expect_close(run_pairs(kG, kU, a), want, DType::kBf16);
    }
  }
}

// The clamps must not turn a NaN into the limit (std::fmin would): NaN stays NaN. One pair per
// call, since GEMM2 multiplies every intermediate (0 * NaN is NaN).
TEST(CpuActivation, NaNPassesThroughEveryActivation) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Activation kind : {Activation::kSilu, Activation::kGelu, Activation::kSwigluOai}) {
    ActivationConfig a;
    a.kind = kind;
    EXPECT_TRUE(std::isnan(run_pairs({nan}, {1.0f}, a)[0])) << activation_name(kind);
    EXPECT_TRUE(std::isnan(run_pairs({1.0f}, {nan}, a)[0])) << activation_name(kind);
    EXPECT_TRUE(std::isfinite(run_pairs({20.0f}, {-20.0f}, a)[0])) << activation_name(kind);
  }
}

}  // namespace
}  // namespace moekit::testing
