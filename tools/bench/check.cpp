// moekit-bench's correctness check (--check, on by default): the CPU reference on the sampled
// tokens and the experts they touch, compared row by row with the output a runner measured.
// Shared by both runners; only the copy of an expert's tensors differs (memcpy / cudaMemcpy).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench.hpp"
#include "tolerance.hpp"  // tests/common: the one per-scheme tolerance of moekit's tests

namespace moekit::bench {

std::vector<std::int64_t> check_sample(std::int64_t M, std::int64_t k, std::int64_t K, std::int64_t N,
                                       double budget) {
  std::vector<std::int64_t> rows;
  if (M <= 0) return rows;
  const double per_token = static_cast<double>(k) * static_cast<double>(K) * static_cast<double>(N);
  std::int64_t S = M;
  if (static_cast<double>(M) * per_token > budget)
    S = std::min(M, std::max(kCheckMinTokens, static_cast<std::int64_t>(budget / std::max(per_token, 1.0))));
  rows.reserve(static_cast<std::size_t>(S));
  if (S == M) {
    for (std::int64_t m = 0; m < M; ++m) rows.push_back(m);
    return rows;
  }
  // Evenly spaced, first and last included: the last token sits in the last (partial) tile.
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t m = S == 1 ? 0 : (i * (M - 1)) / (S - 1);
    if (rows.empty() || rows.back() != m) rows.push_back(m);
  }
  return rows;
}

double max_row_rel_err(const float* got, const float* ref, std::int64_t rows, std::int64_t cols) {
  double worst = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double num = 0.0, den = 0.0;
    bool bad = false;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float g = got[r * cols + c], f = ref[r * cols + c];
      if (!std::isfinite(f)) continue;  // NaN/inf in the reference: that entry is not judged
      if (!std::isfinite(g)) {
        bad = true;
        break;
      }
      const double d = static_cast<double>(g) - static_cast<double>(f);
      num += d * d;
      den += static_cast<double>(f) * static_cast<double>(f);
    }
    const double e = bad ? INFINITY : den == 0.0 ? (num == 0.0 ? 0.0 : INFINITY) : std::sqrt(num / den);
    if (!(e <= worst)) worst = e;  // NaN-safe max
  }
  return worst;
}

double check_tolerance(Scheme scheme, bool subset_of_per_tensor) {
  // A checked token is one row of the output: the tests' per-row bound (tests/common/tolerance.hpp).
  const double tol = moekit::testing::tolerance_of(scheme).row;
  // fp8_per_tensor with dynamic scales on a token subset: GEMM2's input scale is the absmax of
  // the sampled rows' intermediate, not of all rows, so the reference re-quantizes on another
  // grid (e4m3: up to 2^-4 relative per element). Measured on the CPU backend (the reference
  // against itself on 2 sampled tokens, qwen3-30b and gpt-oss TP8, M = 5 and 64, 2026-12-01):
  // max_rel_err 3.4e-2 to 3.9e-2, where per_channel and block128 (per-token scales) give 0. The
  // bound leaves room for the GPU's own rounding flips and still fails a zeroed row (1.0) or a
  // dropped slot of k = 8 (~0.35).
  return subset_of_per_tensor ? std::max(0.1, tol) : tol;
}

CheckResult check_rows(const ExpertSource& src, const HostCall& call, const std::vector<std::int64_t>& sample,
                       int threads) {
  const MoeProblem& p = src.problem;
  const std::int64_t M = call.M, E = p.num_experts, k = p.top_k, K = p.hidden_size, N = p.intermediate_size;
  const std::int64_t S = static_cast<std::int64_t>(sample.size());
  const bool fp8 = p.scheme != Scheme::kBf16;
  CheckResult res;
  res.tokens = S;
  res.tol = check_tolerance(p.scheme, p.scheme == Scheme::kFp8PerTensor && S < M);
  if (S == 0) {
    res.max_rel_err = 0.0;
    res.passed = true;
    return res;
  }

  // The experts the sampled tokens touch, renumbered 0..U-1 (untouched experts add nothing).
  std::vector<std::int32_t> local(static_cast<std::size_t>(E), -1);
  std::vector<std::int64_t> experts;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(S * k));
  std::vector<float> wts(static_cast<std::size_t>(S * k));
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = call.ids[sample[i] * k + j];
      std::int32_t l = -1;
      if (e >= 0 && e < E) {
        if (local[e] < 0) {
          local[e] = static_cast<std::int32_t>(experts.size());
          experts.push_back(e);
        }
        l = local[e];
      }
      // An id out of range stays out of range for the reference (U is its E): it refuses it.
      ids[i * k + j] = l >= 0 ? l : static_cast<std::int32_t>(E + 1);
      wts[i * k + j] = call.weights[sample[i] * k + j];
    }
  const std::int64_t U = std::max<std::int64_t>(1, static_cast<std::int64_t>(experts.size()));
  const std::size_t eb = fp8 ? 1 : 2;
  const std::size_t per13 = static_cast<std::size_t>(2 * N * K) * eb, per2 = static_cast<std::size_t>(K * N) * eb;
  const std::int64_t s13_per = fp8 ? src.s13_numel / E : 0, s2_per = fp8 ? src.s2_numel / E : 0;
  std::vector<std::uint8_t> w13(per13 * U, 0), w2(per2 * U, 0);
  std::vector<float> s13(static_cast<std::size_t>(s13_per * U), 1.0f), s2(static_cast<std::size_t>(s2_per * U), 1.0f);
  std::vector<std::uint16_t> b13, b2;
  if (src.b13) {
    b13.assign(static_cast<std::size_t>(2 * N * U), 0);
    b2.assign(static_cast<std::size_t>(K * U), 0);
  }
  for (std::size_t u = 0; u < experts.size(); ++u) {
    const std::int64_t e = experts[u];
    src.copy(w13.data() + u * per13, static_cast<const std::uint8_t*>(src.w13) + e * per13, per13);
    src.copy(w2.data() + u * per2, static_cast<const std::uint8_t*>(src.w2) + e * per2, per2);
    if (fp8) {
      src.copy(s13.data() + u * s13_per, static_cast<const float*>(src.s13) + e * s13_per, s13_per * 4);
      src.copy(s2.data() + u * s2_per, static_cast<const float*>(src.s2) + e * s2_per, s2_per * 4);
    }
    if (src.b13) {
      src.copy(b13.data() + u * 2 * N, static_cast<const std::uint16_t*>(src.b13) + e * 2 * N, 2 * N * 2);
      src.copy(b2.data() + u * K, static_cast<const std::uint16_t*>(src.b2) + e * K, K * 2);
    }
  }
  std::vector<std::uint16_t> hidden(static_cast<std::size_t>(S * K)), ref(static_cast<std::size_t>(S * K));
  for (std::int64_t i = 0; i < S; ++i)
    std::memcpy(hidden.data() + i * K, call.hidden + sample[i] * K, static_cast<std::size_t>(K) * 2);

  const DType wt = fp8 ? DType::kFp8E4m3 : DType::kBf16;
  std::vector<std::int64_t> s13_shape = src.s13_shape, s2_shape = src.s2_shape;
  if (fp8) s13_shape[0] = s2_shape[0] = U;
  FusedExpertsArgs a;
  a.scheme = p.scheme;
  a.activation = p.activation;
  a.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {S, K});
  a.weights.w13 = TensorView::contiguous(w13.data(), wt, {U, 2 * N, K});
  a.weights.w2 = TensorView::contiguous(w2.data(), wt, {U, K, N});
  if (fp8) {
    a.weights.w13_scale = TensorView::contiguous(s13.data(), DType::kFp32, s13_shape.data(),
                                                 static_cast<int>(s13_shape.size()));
    a.weights.w2_scale = TensorView::contiguous(s2.data(), DType::kFp32, s2_shape.data(),
                                                static_cast<int>(s2_shape.size()));
  }
  if (src.b13) {
    a.weights.b13 = TensorView::contiguous(b13.data(), DType::kBf16, {U, 2 * N});
    a.weights.b2 = TensorView::contiguous(b2.data(), DType::kBf16, {U, K});
  }
  // fp8_per_tensor's dynamic activation scale is the absmax of the whole hidden tensor: on a
  // subset, give the reference that value (its own formula, over all M rows) as a static scale.
  float a13 = 0.0f;
  if (p.scheme == Scheme::kFp8PerTensor && S < M) {
    float amax = 0.0f;
    for (std::int64_t i = 0; i < M * K; ++i) amax = std::fmax(amax, std::fabs(bf16_to_float(call.hidden[i])));
    a13 = std::max(amax / kFp8Max, kMinDynamicScale);
    a.a13_scale = TensorView::contiguous(&a13, DType::kFp32, {1});
  }
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {S, k});
  a.topk_weights = TensorView::contiguous(wts.data(), DType::kFp32, {S, k});
  a.out = TensorView::contiguous(ref.data(), DType::kBf16, {S, K});
  Options o;
  o.backend = Backend::kCpu;
  o.num_threads = threads;
  fused_experts(a, o);

  std::vector<float> g(static_cast<std::size_t>(S * K)), r(static_cast<std::size_t>(S * K));
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t c = 0; c < K; ++c) {
      g[i * K + c] = bf16_to_float(call.out[sample[i] * K + c]);
      r[i * K + c] = bf16_to_float(ref[i * K + c]);
    }
  // A self-test of the check and of the exit status (tools/bench/CMakeLists.txt): the last
  // checked token's output read as zeros must fail.
  if (const char* t = std::getenv("MOEKIT_BENCH_CHECK_SELFTEST"); t != nullptr && std::strcmp(t, "zero_last_row") == 0)
    std::fill(g.end() - K, g.end(), 0.0f);
  res.max_rel_err = max_row_rel_err(g.data(), r.data(), S, K);
  res.passed = res.max_rel_err <= res.tol;
  return res;
}

void record_check(Row& row, const CheckResult& c) {
  row.check_ran = true;
  row.max_rel_err = c.max_rel_err;
  row.check_tokens = c.tokens;
  row.check_tol = c.tol;
  row.check_passed = c.passed;
}

void record_check_error(Row& row, const std::string& what) {
  row.check_ran = true;
  row.check_passed = false;
  row.note += (row.note.empty() ? "" : "; ") + std::string("the check could not run: ") + what;
}

}  // namespace moekit::bench
