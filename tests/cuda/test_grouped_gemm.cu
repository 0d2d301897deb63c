// GPU tests of the sm_90 grouped expert GEMMs (src/cuda/kernels/mma/): small random
// problems for every scheme and both epilogues against a double-precision host loop of
// docs/design.md's formulas, with NaN-poisoned outputs (every owned element must be written,
// nothing else may be). Skipped without an sm_90 GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/tolerance.hpp"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/kernels/mma/launch_sm90.hpp"
#include "moekit/error.hpp"

namespace {

using moekit::Activation;
using moekit::DType;
using moekit::Scheme;
using moekit::cuda::GemmEpilogue;
using moekit::cuda::GroupedGemmParams;

// ---- host number formats (exact, RNE) ----
std::uint16_t bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float bf16_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
std::uint16_t fp16_bits(float x) {
  const __half h = __float2half_rn(x);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float fp16_value(std::uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}
float e4m3_value(std::uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float x = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (v & 0x80) ? -x : x;
}
std::uint16_t act_bits(DType dtype, float x) { return dtype == DType::kFp16 ? fp16_bits(x) : bf16_bits(x); }
float act_value(DType dtype, std::uint16_t b) { return dtype == DType::kFp16 ? fp16_value(b) : bf16_value(b); }

struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  void upload(const void* src, std::size_t n) {
    bytes = n;
    if (n == 0) return;
    ASSERT_EQ(cudaMalloc(&ptr, n), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ptr, src, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <class T>
  void upload(const std::vector<T>& v) {
    upload(v.data(), v.size() * sizeof(T));
  }
};

// One grouped GEMM problem.
struct Spec {
  Scheme scheme = Scheme::kBf16;
  DType act_dtype = DType::kBf16;  // bf16 scheme's operand dtype
  GemmEpilogue epilogue = GemmEpilogue::kGateUpActivation;
  std::vector<int> rows;           // rows per expert (slots routed to it)
  std::int64_t n_out = 96, k_dim = 256;
  int top_k = 2;
  int extra_rows = 5;              // max_rows = sum(rows) + extra_rows (a loose host bound)
  bool weight_on_input = false;
  bool bias = false;
  DType bias_dtype = DType::kFp32;
  Activation activation = Activation::kSilu;
  DType out_dtype = DType::kFp32;  // GEMM1 output dtype
  int nan_a_row = -1;              // A row whose first element is NaN (a token for GEMM1)
  std::uint64_t seed = 1;
};

struct Result {
  std::vector<float> out;          // device output as float
  std::vector<std::uint8_t> raw;   // device output bytes
  std::vector<double> ref;         // reference (NaN where the reference is NaN)
  std::vector<char> owned;         // element written by the kernel
  std::int64_t out_rows = 0, out_cols = 0;
};

double activation_ref(Activation kind, double g, double u) {
  switch (kind) {
    case Activation::kGelu: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))) * u;
    case Activation::kSwigluOai: {
      const double limit = 7.0, alpha = 1.702;
      g = limit < g ? limit : g;
      u = u < -limit ? -limit : (limit < u ? limit : u);
      return g * (1.0 / (1.0 + std::exp(-alpha * g))) * (u + 1.0);
    }
    default: return g / (1.0 + std::exp(-g)) * u;
  }
}

// Builds the problem, runs it (optionally twice / through a CUDA graph), computes the reference.
void run(const Spec& s, Result& res, bool check_graph = false) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const bool gemm1 = s.epilogue == GemmEpilogue::kGateUpActivation;
  const bool fp8 = s.scheme != Scheme::kBf16;
  const int E = static_cast<int>(s.rows.size());
  std::vector<std::int32_t> offsets(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + s.rows[e];
  const int P = offsets[E];
  const std::int64_t max_rows = P + s.extra_rows;
  const int k = s.top_k;
  const std::int64_t M = P / k + 2;  // tokens: some slots stay unrouted
  const std::int64_t N = s.n_out, KD = s.k_dim;
  const std::int64_t rows_b = gemm1 ? 2 * N : N;

  // Slots: a random subset of [0, M*k), grouped by expert, ascending inside an expert.
  std::vector<std::int32_t> perm(M * k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int32_t> slots(max_rows, 0);
  for (int e = 0; e < E; ++e) {
    std::sort(perm.begin() + offsets[e], perm.begin() + offsets[e + 1]);
    std::copy(perm.begin() + offsets[e], perm.begin() + offsets[e + 1], slots.begin() + offsets[e]);
  }
  std::vector<float> topk_w(M * k);
  for (auto& w : topk_w) w = 0.1f + 0.9f * uni(rng);

  // Operands: A [a_rows, KD], B [E, rows_b, KD]; float copies hold the exact values.
  const std::int64_t a_rows = gemm1 ? M : max_rows;
  std::vector<std::uint16_t> a16, b16;
  std::vector<std::uint8_t> a8, b8;
  std::vector<float> af(a_rows * KD), bf(E * rows_b * KD);
  auto random_e4m3 = [&]() -> std::uint8_t {
    if (uni(rng) < 0.1f) return 0;
    const int sign = uni(rng) < 0.5f ? 0x80 : 0;
    const int e = 4 + static_cast<int>(uni(rng) * 6) % 6;  // 2^-3 .. 2^2
    const int m = static_cast<int>(uni(rng) * 8) & 7;
    return static_cast<std::uint8_t>(sign | (e << 3) | m);
  };
  if (fp8) {
    a8.resize(af.size());
    b8.resize(bf.size());
    for (std::size_t i = 0; i < a8.size(); ++i) af[i] = e4m3_value(a8[i] = random_e4m3());
    for (std::size_t i = 0; i < b8.size(); ++i) bf[i] = e4m3_value(b8[i] = random_e4m3());
    if (s.nan_a_row >= 0) af[s.nan_a_row * KD] = e4m3_value(a8[s.nan_a_row * KD] = 0x7f);
  } else {
    a16.resize(af.size());
    b16.resize(bf.size());
    for (std::size_t i = 0; i < a16.size(); ++i)
      af[i] = act_value(s.act_dtype, a16[i] = act_bits(s.act_dtype, normal(rng)));
    const float wscale = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(KD, 1)));
    for (std::size_t i = 0; i < b16.size(); ++i)
      bf[i] = act_value(s.act_dtype, b16[i] = act_bits(s.act_dtype, normal(rng) * wscale));
    if (s.nan_a_row >= 0) {
      a16[s.nan_a_row * KD] = act_bits(s.act_dtype, std::numeric_limits<float>::quiet_NaN());
      af[s.nan_a_row * KD] = std::numeric_limits<float>::quiet_NaN();
    }
  }

  // Scales (fp8).
  const std::int64_t G = (KD + 127) / 128, NB = (rows_b + 127) / 128;
  std::vector<float> a_scale, b_scale;
  auto rand_scale = [&]() { return (0.5f + uni(rng)) / (8.0f * std::sqrt(static_cast<float>(KD))); };
  switch (s.scheme) {
    case Scheme::kFp8PerTensor: a_scale.resize(1); b_scale.resize(E); break;
    case Scheme::kFp8PerChannel: a_scale.resize(a_rows); b_scale.resize(E * rows_b); break;
    case Scheme::kFp8Block128: a_scale.resize(a_rows * G); b_scale.resize(E * NB * G); break;
    default: break;
  }
  for (auto& x : a_scale) x = 0.5f + uni(rng);
  for (auto& x : b_scale) x = rand_scale();

  // Bias [E, rows_b].
  std::vector<std::uint8_t> bias_raw;
  std::vector<float> bias_f;
  if (s.bias) {
    const std::size_t esz = s.bias_dtype == DType::kFp32 ? 4 : 2;
    bias_raw.resize(E * rows_b * esz);
    bias_f.resize(E * rows_b);
    for (std::int64_t i = 0; i < E * rows_b; ++i) {
      const float v = 0.5f * normal(rng);
      if (s.bias_dtype == DType::kFp32) {
        bias_f[i] = v;
        std::memcpy(&bias_raw[i * 4], &v, 4);
      } else {
        const std::uint16_t b = act_bits(s.bias_dtype, v);
        bias_f[i] = act_value(s.bias_dtype, b);
        std::memcpy(&bias_raw[i * 2], &b, 2);
      }
    }
  }

  // ---- reference ----
  const DType out_dtype = gemm1 ? s.out_dtype : DType::kFp32;
  const std::size_t out_esz = out_dtype == DType::kFp32 ? 4 : 2;
  res.out_rows = gemm1 ? max_rows : M * k;
  res.out_cols = N;
  const std::int64_t out_elems = res.out_rows * res.out_cols;
  res.ref.assign(out_elems, 0.0);
  res.owned.assign(out_elems, 0);
  std::vector<double> acc(rows_b);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int slot = slots[r];
      const std::int64_t arow = gemm1 ? slot / k : r;
      const float* a = &af[arow * KD];
      for (std::int64_t nb = 0; nb < rows_b; ++nb) {
        const float* b = &bf[(e * rows_b + nb) * KD];
        double v = 0.0;
        if (s.scheme == Scheme::kFp8Block128) {
          for (std::int64_t g = 0; g < G; ++g) {
            double part = 0.0;
            for (std::int64_t c = g * 128; c < std::min(KD, (g + 1) * 128); ++c) part += double(a[c]) * b[c];
            v += part * a_scale[arow * G + g] * b_scale[(e * NB + nb / 128) * G + g];
          }
        } else {
          for (std::int64_t c = 0; c < KD; ++c) v += double(a[c]) * b[c];
          if (s.scheme == Scheme::kFp8PerTensor) v *= double(a_scale[0]) * b_scale[e];
          if (s.scheme == Scheme::kFp8PerChannel) v *= double(a_scale[arow]) * b_scale[e * rows_b + nb];
        }
        acc[nb] = v;
      }
      const double w = topk_w[slot];
      for (std::int64_t n = 0; n < N; ++n) {
        double v;
        std::int64_t o;
        if (gemm1) {
          double g = acc[n], u = acc[N + n];
          if (s.weight_on_input) {
            g *= w;
            u *= w;
          }
          if (s.bias) {
            g += bias_f[e * rows_b + n];
            u += bias_f[e * rows_b + N + n];
          }
          v = activation_ref(s.activation, g, u);
          o = static_cast<std::int64_t>(r) * N + n;
        } else {
          v = acc[n];
          if (s.bias) v += bias_f[e * rows_b + n];
          if (!s.weight_on_input) v *= w;
          o = static_cast<std::int64_t>(slot) * N + n;
        }
        res.ref[o] = v;
        res.owned[o] = 1;
      }
    }

  // ---- device ----
  DeviceBuffer d_off, d_slots, d_w, d_a, d_b, d_as, d_bs, d_bias, d_out;
  d_off.upload(offsets);
  d_slots.upload(slots);
  d_w.upload(topk_w);
  if (fp8) {
    d_a.upload(a8);
    d_b.upload(b8);
  } else {
    d_a.upload(a16);
    d_b.upload(b16);
  }
  d_as.upload(a_scale);
  d_bs.upload(b_scale);
  d_bias.upload(bias_raw);
  std::vector<std::uint8_t> poison(out_elems * out_esz, 0xff);  // 0xff.. is NaN in fp32, bf16, fp16
  d_out.upload(poison);

  GroupedGemmParams p;
  p.scheme = s.scheme;
  p.epilogue = s.epilogue;
  p.num_experts = E;
  p.n_out = N;
  p.k_dim = KD;
  p.max_rows = max_rows;
  p.row_offsets = static_cast<const std::int32_t*>(d_off.ptr);
  p.sorted_slots = static_cast<const std::int32_t*>(d_slots.ptr);
  p.top_k = k;
  p.a = d_a.ptr;
  p.gather_a_by_token = gemm1;
  p.act_dtype = s.act_dtype;
  p.a_scale = static_cast<const float*>(d_as.ptr);
  p.b = d_b.ptr;
  p.b_scale = static_cast<const float*>(d_bs.ptr);
  p.bias = s.bias ? d_bias.ptr : nullptr;
  p.bias_dtype = s.bias_dtype;
  p.topk_weights = static_cast<const float*>(d_w.ptr);
  p.weight_on_input = s.weight_on_input;
  p.activation.kind = s.activation;
  p.out = d_out.ptr;
  p.out_dtype = out_dtype;

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  moekit::cuda::launch_grouped_gemm(p, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  res.raw.resize(poison.size());
  CUDA_OK(cudaMemcpy(res.raw.data(), d_out.ptr, res.raw.size(), cudaMemcpyDeviceToHost));

  if (check_graph) {
    // Replay through a CUDA graph into a re-poisoned buffer: bitwise equal to the eager run.
    CUDA_OK(cudaMemcpy(d_out.ptr, poison.data(), poison.size(), cudaMemcpyHostToDevice));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    moekit::cuda::launch_grouped_gemm(p, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<std::uint8_t> replay(poison.size());
    CUDA_OK(cudaMemcpy(replay.data(), d_out.ptr, replay.size(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(replay == res.raw) << "CUDA-graph replay differs from the eager run";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  CUDA_OK(cudaStreamDestroy(stream));

  res.out.resize(out_elems);
  for (std::int64_t i = 0; i < out_elems; ++i) {
    if (out_dtype == DType::kFp32) {
      std::memcpy(&res.out[i], &res.raw[i * 4], 4);
    } else {
      std::uint16_t b;
      std::memcpy(&b, &res.raw[i * 2], 2);
      res.out[i] = act_value(out_dtype, b);
    }
  }
}

// Owned elements match the reference (relative Frobenius error and an elementwise bound, NaN
// exactly where the reference is NaN); every other element still holds the poison bytes.
void expect_matches(const Spec& s, const Result& res) {
  const double tol = moekit::testing::tolerance(s.scheme);
  const std::size_t esz = res.raw.size() / std::max<std::size_t>(res.out.size(), 1);
  double ref_sq = 0.0, n_ref = 0.0;
  for (std::size_t i = 0; i < res.ref.size(); ++i)
    if (res.owned[i] && !std::isnan(res.ref[i])) {
      ref_sq += res.ref[i] * res.ref[i];
      n_ref += 1.0;
    }
  const double rms = n_ref > 0 ? std::sqrt(ref_sq / n_ref) : 0.0;
  double err_sq = 0.0;
  int bad = 0;
  for (std::size_t i = 0; i < res.ref.size(); ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) / res.out_cols, col = static_cast<std::int64_t>(i) % res.out_cols;
    if (!res.owned[i]) {
      const bool poisoned = std::all_of(res.raw.begin() + i * esz, res.raw.begin() + (i + 1) * esz,
                                        [](std::uint8_t b) { return b == 0xff; });
      if (!poisoned && bad++ < 10) ADD_FAILURE() << "element [" << row << ", " << col << "] is not owned but was written";
      continue;
    }
    const double r = res.ref[i], d = res.out[i];
    if (std::isnan(r)) {
      if (!std::isnan(d) && bad++ < 10) ADD_FAILURE() << "[" << row << ", " << col << "] = " << d << ", expected NaN";
      continue;
    }
    if (!std::isfinite(d)) {
      if (bad++ < 10) ADD_FAILURE() << "[" << row << ", " << col << "] = " << d << ", expected " << r;
      continue;
    }
    err_sq += (d - r) * (d - r);
    if (std::abs(d - r) > tol * (std::abs(r) + rms) && bad++ < 10)
      ADD_FAILURE() << "[" << row << ", " << col << "] = " << d << ", expected " << r << " (rms " << rms << ")";
  }
  if (ref_sq > 0) EXPECT_LE(std::sqrt(err_sq / ref_sq), tol);
  EXPECT_EQ(bad, 0);
}

Spec gate_up(Scheme scheme, std::int64_t N, std::int64_t K, Activation act, DType out) {
  Spec s;
  s.scheme = scheme;
  s.epilogue = GemmEpilogue::kGateUpActivation;
  s.rows = {0, 1, 7, 65, 130, 0, 3};
  s.n_out = N;
  s.k_dim = K;
  s.activation = act;
  s.out_dtype = out;
  return s;
}

Spec down(Scheme scheme, std::int64_t K_out, std::int64_t N_in) {
  Spec s;
  s.scheme = scheme;
  s.epilogue = GemmEpilogue::kBiasWeightScatter;
  s.rows = {0, 1, 7, 65, 130, 0, 3};
  s.n_out = K_out;
  s.k_dim = N_in;
  return s;
}

void check(const Spec& s, bool graph = false) {
  Result res;
  run(s, res, graph);
  if (::testing::Test::HasFatalFailure()) return;
  expect_matches(s, res);
}

// ---------------------------------------------------------------------------------------------

TEST(Sm90GroupedGemm, Bf16GateUpSiluMatchesReference) {
  SKIP_WITHOUT_SM90();
  check(gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16));
}

TEST(Sm90GroupedGemm, Fp16GateUpGeluBiasMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 72, 200, Activation::kGelu, DType::kFp16);
  s.act_dtype = DType::kFp16;
  s.bias = true;
  s.bias_dtype = DType::kFp16;
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpSwigluOaiWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 136, 264, Activation::kSwigluOai, DType::kBf16);
  s.bias = true;
  s.bias_dtype = DType::kBf16;
  s.weight_on_input = true;
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpFp32OutLargeKMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 7168, Activation::kSilu, DType::kFp32);
  s.rows = {1, 65, 0};
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpManyExpertsMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 64, 128, Activation::kSilu, DType::kBf16);
  s.rows.clear();
  std::mt19937 rng(7);
  for (int e = 0; e < 77; ++e) s.rows.push_back(static_cast<int>(rng() % 5 == 0 ? 0 : rng() % 70));
  check(s);
}

TEST(Sm90GroupedGemm, Bf16DownScatterBiasMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kBf16, 200, 96);
  s.bias = true;
  check(s, /*graph=*/true);
}

TEST(Sm90GroupedGemm, Bf16DownScatterWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kBf16, 130, 136);
  s.weight_on_input = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerTensorGateUpSiluMatchesReference) {
  SKIP_WITHOUT_SM90();
  check(gate_up(Scheme::kFp8PerTensor, 96, 384, Activation::kSilu, DType::kFp32));
}

TEST(Sm90GroupedGemm, Fp8PerChannelGateUpGeluWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kFp8PerChannel, 104, 272, Activation::kGelu, DType::kFp32);
  s.weight_on_input = true;
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8Block128GateUpSiluN360MatchesReference) {
  SKIP_WITHOUT_SM90();
  // N = 360: the up rows N + n straddle 128-row scale blocks; K = 392: a partial last group.
  Spec s = gate_up(Scheme::kFp8Block128, 360, 392, Activation::kSilu, DType::kFp32);
  s.bias = true;
  s.bias_dtype = DType::kBf16;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8Block128GateUpSwigluOaiK2880MatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kFp8Block128, 96, 2880, Activation::kSwigluOai, DType::kFp32);
  s.rows = {1, 65, 0, 2};
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerTensorDownScatterPitch360MatchesReference) {
  SKIP_WITHOUT_SM90();
  check(down(Scheme::kFp8PerTensor, 256, 360), /*graph=*/true);  // 360-byte rows: 8-byte loads
}

TEST(Sm90GroupedGemm, Fp8Block128DownScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kFp8Block128, 200, 360);
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerChannelDownScatterPitch108MatchesReference) {
  SKIP_WITHOUT_SM90();
  check(down(Scheme::kFp8PerChannel, 64, 108));  // 108-byte rows: 4-byte loads
}

TEST(Sm90GroupedGemm, NanInOneTokenStaysInItsRows) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16);
  s.nan_a_row = 3;
  check(s);
  Spec f = gate_up(Scheme::kFp8Block128, 96, 256, Activation::kSilu, DType::kFp32);
  f.nan_a_row = 5;
  check(f);
  Spec d = down(Scheme::kFp8PerChannel, 128, 96);
  d.nan_a_row = 70;
  check(d);
}

TEST(Sm90GroupedGemm, EmptyExpertsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16);
  s.rows = {0, 0, 0};
  s.extra_rows = 10;
  check(s);
  Spec d = down(Scheme::kFp8Block128, 128, 256);
  d.rows = {0, 0};
  d.extra_rows = 3;
  check(d);
}

// Argument checks run before any CUDA call: no GPU needed.
TEST(Sm90GroupedGemm, RejectsBadArguments) {
  static std::int32_t offsets[2] = {0, 1};
  static float scale = 1.f;
  static std::uint8_t data[64];
  GroupedGemmParams good;
  good.num_experts = 1;
  good.n_out = 8;
  good.k_dim = 16;
  good.max_rows = 1;
  good.row_offsets = offsets;
  good.sorted_slots = offsets;
  good.a = data;
  good.b = data;
  good.topk_weights = &scale;
  good.out = data;
  good.out_dtype = DType::kBf16;

  auto expect_status = [](const GroupedGemmParams& p, moekit::Status status) {
    try {
      moekit::cuda::launch_grouped_gemm(p, nullptr);
      ADD_FAILURE() << "no error";
    } catch (const moekit::Error& e) {
      EXPECT_EQ(e.status(), status) << e.what();
    }
  };
  GroupedGemmParams p = good;
  p.n_out = 7;
  expect_status(p, moekit::Status::kNotSupported);
  p = good;
  p.act_dtype = DType::kFp32;
  expect_status(p, moekit::Status::kInvalidArgument);
  p = good;
  p.scheme = Scheme::kFp8Block128;
  expect_status(p, moekit::Status::kInvalidArgument);  // no scales
  p = good;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  expect_status(p, moekit::Status::kInvalidArgument);  // bf16 out for GEMM2
  p = good;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.out_dtype = DType::kFp32;
  p.sorted_slots = nullptr;
  expect_status(p, moekit::Status::kInvalidArgument);
  p = good;
  p.scheme = Scheme::kFp8PerTensor;
  p.a_scale = &scale;
  p.b_scale = &scale;
  p.k_dim = 6;  // 6-byte fp8 rows
  expect_status(p, moekit::Status::kNotSupported);
  p = good;
  p.num_experts = 0;
  expect_status(p, moekit::Status::kInvalidArgument);
  // Nothing to do is not an error, whatever the pointers.
  GroupedGemmParams empty;
  empty.num_experts = 4;
  EXPECT_NO_THROW(moekit::cuda::launch_grouped_gemm(empty, nullptr));
}

}  // namespace
