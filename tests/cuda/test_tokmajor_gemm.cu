// GPU test of the token-major prefill GEMM (launch_grouped_gemm_tokmajor_sm90) against a host
// double-precision loop of the same formula (docs/design.md): experts with 0, 1, 127, 128, 129,
// 300, 1000 rows (128-row tiles), N and K on and off the tile edges, every epilogue option,
// bf16 / fp16 / fp8 schemes, NaN-poisoned outputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/tolerance.hpp"
#include "cuda/kernels/tokmajor/launch_sm90.hpp"
#include "moekit/error.hpp"

namespace {

using moekit::Activation;
using moekit::DType;
using moekit::Scheme;
using moekit::cuda::GemmEpilogue;
using moekit::cuda::GroupedGemmParams;

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Device copy of a host vector, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : bytes(n) { cuda_ok(cudaMalloc(&ptr, std::max<std::size_t>(n, 16)), "cudaMalloc"); }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
    if (!v.empty()) cuda_ok(cudaMemcpy(ptr, v.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  template <class T>
  std::vector<T> download(std::size_t n) const {
    std::vector<T> v(n);
    if (n) cuda_ok(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return v;
  }
};

float bf16_bits_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t float_to_bf16_bits(float x) {
  __nv_bfloat16 h = __float2bfloat16_rn(x);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
std::uint16_t float_to_f16_bits(float x) {
  __half h = __float2half_rn(x);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float f16_bits_to_float(std::uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}
std::uint8_t float_to_e4m3_bits(float x) {
  __nv_fp8_e4m3 q(x);  // round to nearest even, saturate to +-448
  return q.__x;
}
float e4m3_bits_to_float(std::uint8_t b) {
  __nv_fp8_e4m3 q;
  q.__x = b;
  return static_cast<float>(q);
}

struct Case {
  Scheme scheme = Scheme::kBf16;
  DType act_dtype = DType::kBf16;  // bf16 scheme's element type (kBf16 or kFp16)
  GemmEpilogue epilogue = GemmEpilogue::kGateUpActivation;
  std::vector<int> rows = {0, 1, 127, 128, 129, 300, 1000};
  std::int64_t N = 128;  // intermediate size
  std::int64_t K = 256;  // hidden size
  Activation act = Activation::kSilu;
  bool bias = false;
  DType bias_dtype = DType::kFp32;
  bool weight_on_input = false;
  DType out = DType::kBf16;  // GEMM1: act dtype or fp32; GEMM2: fp32 or act dtype (moekit's y at prefill)
  int top_k = 2;
  int cluster = 0;  // 0: the launcher's default; 1, 2: forced (2 = weight multicast)
  bool dynamic = false;  // pass a zeroed tile counter: the dynamic schedule (clusters of 1)
  bool sorted_weights = false;  // pass the weights by sorted row only (topk_weights null), as run_moe's routing
  std::uint64_t seed = 1;

  std::string name() const {
    std::ostringstream os;
    os << moekit::scheme_name(scheme) << (epilogue == GemmEpilogue::kGateUpActivation ? " gemm1 " : " gemm2 ")
       << "N=" << N << " K=" << K << " act=" << moekit::activation_name(act) << " bias=" << bias
       << " woi=" << weight_on_input << " rows=" << rows.size() << " cluster=" << cluster << " dynamic=" << dynamic;
    return os.str();
  }
};

double activate_ref(double g, double u, Activation a) {
  switch (a) {
    case Activation::kGelu: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))) * u;
    case Activation::kSwigluOai: {
      const double alpha = 1.702, limit = 7.0;
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
      return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
    }
    default: return g / (1.0 + std::exp(-g)) * u;
  }
}

// Runs one case: the path must accept it and match the reference. The raw output (as floats)
// goes to *result when given.
void run_case(const Case& c, std::vector<float>* result = nullptr) {
  SCOPED_TRACE(c.name());
  const bool gate_up = c.epilogue == GemmEpilogue::kGateUpActivation;
  const bool fp8 = c.scheme != Scheme::kBf16;
  const int E = static_cast<int>(c.rows.size());
  const std::int64_t n_out = gate_up ? c.N : c.K;
  const std::int64_t k_dim = gate_up ? c.K : c.N;
  const std::int64_t rows_b = gate_up ? 2 * n_out : n_out;
  const int k = c.top_k;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unif(0.05f, 1.f);

  // Routing: P rows over E experts; slots m*k+j drawn without repetition, ascending per expert.
  std::vector<std::int32_t> offsets(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
  const int P = offsets[E];
  const std::int64_t M = P / k + 2;
  const std::int64_t S = M * k;
  std::vector<std::int32_t> perm(S);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::int64_t max_rows = P + 3;  // a host bound above the real count
  std::vector<std::int32_t> sorted_slots(max_rows, 0);
  for (int e = 0; e < E; ++e) {
    std::sort(perm.begin() + offsets[e], perm.begin() + offsets[e + 1]);
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) sorted_slots[r] = perm[r];
  }
  std::vector<float> topk_weights(S);
  for (auto& w : topk_weights) w = unif(rng);

  // A: GEMM1 gathers token rows of hidden [M, K]; GEMM2 reads sorted rows of inter [P, N].
  const std::int64_t a_rows = gate_up ? M : std::max<std::int64_t>(max_rows, 1);
  const std::int64_t n_groups = (k_dim + 127) / 128, row_blocks = (rows_b + 127) / 128;
  std::vector<float> a_val(a_rows * k_dim);      // dequantized-operand values (what the GPU multiplies)
  std::vector<std::uint8_t> a_bytes(a_rows * k_dim * (fp8 ? 1 : 2));
  std::vector<float> a_scale;                    // fp8: [1] / [a_rows] / [a_rows, n_groups]
  for (std::int64_t i = 0; i < a_rows; ++i) {
    std::vector<float> x(k_dim);
    for (auto& v : x) v = normal(rng);
    if (!fp8) {
      for (std::int64_t j = 0; j < k_dim; ++j) {
        const std::uint16_t b = c.act_dtype == DType::kFp16 ? float_to_f16_bits(x[j]) : float_to_bf16_bits(x[j]);
        std::memcpy(&a_bytes[(i * k_dim + j) * 2], &b, 2);
        a_val[i * k_dim + j] = c.act_dtype == DType::kFp16 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
      }
      continue;
    }
    for (std::int64_t j = 0; j < k_dim; ++j) {
      float s;
      if (c.scheme == Scheme::kFp8PerTensor) s = 4.0f / 448.0f;
      else if (c.scheme == Scheme::kFp8PerChannel) s = (1.0f + (i % 7)) / 448.0f;
      else s = (1.0f + ((i + j / 128) % 5)) / 448.0f;
      const std::uint8_t q = float_to_e4m3_bits(x[j] / s);
      a_bytes[i * k_dim + j] = q;
      a_val[i * k_dim + j] = e4m3_bits_to_float(q);
    }
  }
  if (c.scheme == Scheme::kFp8PerTensor) a_scale = {4.0f / 448.0f};
  if (c.scheme == Scheme::kFp8PerChannel)
    for (std::int64_t i = 0; i < a_rows; ++i) a_scale.push_back((1.0f + (i % 7)) / 448.0f);
  if (c.scheme == Scheme::kFp8Block128)
    for (std::int64_t i = 0; i < a_rows; ++i)
      for (std::int64_t g = 0; g < n_groups; ++g) a_scale.push_back((1.0f + ((i + g) % 5)) / 448.0f);

  // B: [E, rows_b, k_dim] ~ N(0, 1/sqrt(k_dim)); fp8 with scales per expert / row / 128x128 block.
  std::vector<float> b_val(static_cast<std::size_t>(E) * rows_b * k_dim);
  std::vector<std::uint8_t> b_bytes(b_val.size() * (fp8 ? 1 : 2));
  std::vector<float> b_scale;
  if (c.scheme == Scheme::kFp8PerTensor)
    for (int e = 0; e < E; ++e) b_scale.push_back((0.5f + 0.1f * e) / 448.0f);
  if (c.scheme == Scheme::kFp8PerChannel)
    for (std::int64_t i = 0; i < E * rows_b; ++i) b_scale.push_back((0.5f + 0.01f * (i % 50)) / 448.0f);
  if (c.scheme == Scheme::kFp8Block128)
    for (std::int64_t i = 0; i < E * row_blocks * n_groups; ++i) b_scale.push_back((0.5f + 0.1f * (i % 9)) / 448.0f);
  const float wstd = 1.0f / std::sqrt(static_cast<float>(k_dim));
  for (int e = 0; e < E; ++e)
    for (std::int64_t r = 0; r < rows_b; ++r)
      for (std::int64_t j = 0; j < k_dim; ++j) {
        const std::size_t i = (static_cast<std::size_t>(e) * rows_b + r) * k_dim + j;
        const float w = normal(rng) * wstd;
        if (!fp8) {
          const std::uint16_t b = c.act_dtype == DType::kFp16 ? float_to_f16_bits(w) : float_to_bf16_bits(w);
          std::memcpy(&b_bytes[i * 2], &b, 2);
          b_val[i] = c.act_dtype == DType::kFp16 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
          continue;
        }
        float s;
        if (c.scheme == Scheme::kFp8PerTensor) s = b_scale[e];
        else if (c.scheme == Scheme::kFp8PerChannel) s = b_scale[e * rows_b + r];
        else s = b_scale[(e * row_blocks + r / 128) * n_groups + j / 128];
        const std::uint8_t q = float_to_e4m3_bits(w / s);
        b_bytes[i] = q;
        b_val[i] = e4m3_bits_to_float(q);
      }

  // Bias [E, rows_b] (fp32 or bf16 bits), as floats for the reference.
  std::vector<float> bias_val;
  std::vector<std::uint8_t> bias_bytes;
  if (c.bias) {
    bias_val.resize(E * rows_b);
    bias_bytes.resize(E * rows_b * (c.bias_dtype == DType::kFp32 ? 4 : 2));
    for (std::int64_t i = 0; i < E * rows_b; ++i) {
      const float v = 0.5f * normal(rng);
      if (c.bias_dtype == DType::kFp32) {
        std::memcpy(&bias_bytes[i * 4], &v, 4);
        bias_val[i] = v;
      } else {
        const bool f16 = c.bias_dtype == DType::kFp16;
        const std::uint16_t b = f16 ? float_to_f16_bits(v) : float_to_bf16_bits(v);
        std::memcpy(&bias_bytes[i * 2], &b, 2);
        bias_val[i] = f16 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
      }
    }
  }

  // The reference, in double: rows of GEMM1 out [P, N], or slots of GEMM2 out [S, K].
  const std::int64_t out_rows = gate_up ? P : S;
  std::vector<double> ref(out_rows * n_out, std::nan(""));
  auto dot = [&](std::int64_t arow, int e, std::int64_t brow) {
    const float* a = &a_val[arow * k_dim];
    const float* b = &b_val[(static_cast<std::size_t>(e) * rows_b + brow) * k_dim];
    if (c.scheme == Scheme::kBf16) {
      double s = 0;
      for (std::int64_t j = 0; j < k_dim; ++j) s += static_cast<double>(a[j]) * b[j];
      return s;
    }
    if (c.scheme == Scheme::kFp8Block128) {
      double total = 0;
      for (std::int64_t g = 0; g < n_groups; ++g) {
        double s = 0;
        for (std::int64_t j = g * 128; j < std::min(k_dim, g * 128 + 128); ++j) s += static_cast<double>(a[j]) * b[j];
        total += s * a_scale[arow * n_groups + g] * b_scale[(e * row_blocks + brow / 128) * n_groups + g];
      }
      return total;
    }
    double s = 0;
    for (std::int64_t j = 0; j < k_dim; ++j) s += static_cast<double>(a[j]) * b[j];
    const double sa = c.scheme == Scheme::kFp8PerTensor ? a_scale[0] : a_scale[arow];
    const double sb = c.scheme == Scheme::kFp8PerTensor ? b_scale[e] : b_scale[e * rows_b + brow];
    return s * sa * sb;
  };
  for (int e = 0; e < E; ++e) {
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int slot = sorted_slots[r];
      const std::int64_t arow = gate_up ? slot / k : r;
      const double w = topk_weights[slot];
      for (std::int64_t n = 0; n < n_out; ++n) {
        if (gate_up) {
          double g = dot(arow, e, n), u = dot(arow, e, c.N + n);
          if (c.weight_on_input) { g *= w; u *= w; }
          if (c.bias) { g += bias_val[e * rows_b + n]; u += bias_val[e * rows_b + c.N + n]; }
          ref[r * n_out + n] = activate_ref(g, u, c.act);
        } else {
          double v = dot(arow, e, n);
          if (c.bias) v += bias_val[e * rows_b + n];
          if (!c.weight_on_input) v *= w;
          ref[static_cast<std::int64_t>(slot) * n_out + n] = v;
        }
      }
    }
  }

  // Device buffers; outputs poisoned with NaN (all-ones bytes).
  std::vector<float> sorted_w(sorted_slots.size());
  for (std::size_t r = 0; r < sorted_slots.size(); ++r) sorted_w[r] = topk_weights[sorted_slots[r]];
  DeviceBuffer d_off(offsets), d_slots(sorted_slots), d_tw(topk_weights), d_a(a_bytes), d_b(b_bytes);
  DeviceBuffer d_sw(sorted_w);
  DeviceBuffer d_as(a_scale), d_bs(b_scale), d_bias(bias_bytes);
  const DType out_dtype = c.out;
  const std::size_t out_es = out_dtype == DType::kFp32 ? 4 : 2;
  const std::size_t out_elems = static_cast<std::size_t>(gate_up ? max_rows : S) * n_out;
  DeviceBuffer d_out(out_elems * out_es);
  cuda_ok(cudaMemset(d_out.ptr, 0xFF, out_elems * out_es), "cudaMemset");

  GroupedGemmParams p;
  p.scheme = c.scheme;
  p.epilogue = c.epilogue;
  p.num_experts = E;
  p.n_out = n_out;
  p.k_dim = k_dim;
  p.max_rows = max_rows;
  p.row_offsets = static_cast<const std::int32_t*>(d_off.ptr);
  p.sorted_slots = static_cast<const std::int32_t*>(d_slots.ptr);
  p.top_k = k;
  p.a = d_a.ptr;
  p.gather_a_by_token = gate_up;
  p.act_dtype = c.act_dtype;
  p.a_scale = fp8 ? static_cast<const float*>(d_as.ptr) : nullptr;
  p.b = d_b.ptr;
  p.b_scale = fp8 ? static_cast<const float*>(d_bs.ptr) : nullptr;
  p.bias = c.bias ? d_bias.ptr : nullptr;
  p.bias_dtype = c.bias_dtype;
  p.topk_weights = c.sorted_weights ? nullptr : static_cast<const float*>(d_tw.ptr);
  p.sorted_weights = c.sorted_weights ? static_cast<const float*>(d_sw.ptr) : nullptr;
  p.weight_on_input = c.weight_on_input;
  p.activation.kind = c.act;
  p.out = d_out.ptr;
  p.out_dtype = out_dtype;
  DeviceBuffer d_counter(sizeof(std::uint32_t));
  if (c.dynamic) {
    cuda_ok(cudaMemset(d_counter.ptr, 0, sizeof(std::uint32_t)), "cudaMemset");
    p.tile_counter = static_cast<std::uint32_t*>(d_counter.ptr);
  }

  std::string why;
  ASSERT_TRUE(moekit::cuda::can_implement_tokmajor_sm90(p, &why)) << why;
  moekit::cuda::launch_grouped_gemm_tokmajor_sm90(p, nullptr, c.cluster);
  cuda_ok(cudaDeviceSynchronize(), "kernel");
  if (c.dynamic) {
    // The dynamic schedule ran: every CTA took at least one unit (its last, past the end), so the
    // counter moved (it would stay 0 if the launcher had dropped it, e.g. under
    // MOEKIT_TOKMAJOR_SCHEDULE=static).
    EXPECT_GT(d_counter.download<std::uint32_t>(1)[0], 0u) << "the dynamic schedule did not run";
  }

  std::vector<float> got(out_elems);
  if (out_dtype == DType::kFp32) {
    got = d_out.download<float>(out_elems);
  } else {
    const auto bits = d_out.download<std::uint16_t>(out_elems);
    for (std::size_t i = 0; i < out_elems; ++i)
      got[i] = out_dtype == DType::kFp16 ? f16_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
  }

  // Every reference entry written and close; everything else untouched (still NaN).
  double num = 0, den = 0;
  std::int64_t missing = 0, stray = 0;
  for (std::int64_t i = 0; i < out_rows * n_out; ++i) {
    if (std::isnan(ref[i])) {
      if (!std::isnan(got[i])) ++stray;
      continue;
    }
    if (!std::isfinite(got[i])) { ++missing; continue; }
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  for (std::size_t i = out_rows * n_out; i < out_elems; ++i)
    if (!std::isnan(got[i])) ++stray;
  EXPECT_EQ(missing, 0) << "entries left NaN or non-finite";
  EXPECT_EQ(stray, 0) << "entries written outside the routed rows";
  if (den > 0) {
    const double rel = std::sqrt(num / den);
    EXPECT_LE(rel, moekit::testing::tolerance(c.scheme)) << "relative error " << rel;
  }
  if (result) *result = std::move(got);
}

Case gemm1(Scheme s, std::int64_t N, std::int64_t K) {
  Case c;
  c.scheme = s;
  c.N = N;
  c.K = K;
  c.out = s == Scheme::kBf16 ? DType::kBf16 : DType::kFp32;
  return c;
}
Case gemm2(Scheme s, std::int64_t N, std::int64_t K) {
  Case c = gemm1(s, N, K);
  c.epilogue = GemmEpilogue::kBiasWeightScatter;
  c.out = DType::kFp32;
  return c;
}
// Fewer rows for the large shapes: the double-precision host reference is the slow part.
const std::vector<int> kFewRows = {129, 0, 300, 1};

TEST(Sm90TokMajorGemm, Bf16GateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);  // every expert size; N = 96: one partial column tile
  run_case(c);
  c = gemm1(Scheme::kBf16, 768, 2048);
  c.rows = kFewRows;
  c.act = Activation::kGelu;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weight_on_input = true;
  c.seed = 2;
  run_case(c);
  c = gemm1(Scheme::kBf16, 360, 2880);  // N and K off the tile edges
  c.rows = {1, 127, 128};
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.out = DType::kFp32;
  c.seed = 3;
  run_case(c);
  c = gemm1(Scheme::kBf16, 1536, 2048);
  c.rows = {130, 0, 2};
  c.seed = 13;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Bf16ScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kBf16, 96, 256);  // K = 256: one full column tile; k_dim = 96: a K tail
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kBf16, 768, 2048);
  c.rows = kFewRows;
  c.seed = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);  // n_out = 2880: a partial last column tile
  c.rows = {1, 200};
  c.weight_on_input = true;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.seed = 5;
  run_case(c);
  // y in the activation dtype (what moekit's prefill chain asks of this kernel).
  c.out = DType::kBf16;
  c.seed = 6;
  run_case(c);
  c = gemm2(Scheme::kBf16, 96, 2048);
  c.rows = kFewRows;
  c.out = DType::kBf16;
  c.sorted_weights = true;
  c.seed = 7;
  run_case(c);
  // n_out = 262: y rows that are not a multiple of 16 bytes (the epilogue's 4-byte fallback) and
  // a row end inside a staged 16-byte piece, in fp32 and bf16.
  c = gemm2(Scheme::kBf16, 128, 262);
  c.rows = {1, 130, 65};
  c.seed = 8;
  run_case(c);
  c.out = DType::kBf16;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp16MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.out = DType::kFp16;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.bias = true;
  c.bias_dtype = DType::kFp16;
  run_case(c);
  c.out = DType::kFp16;  // y in the activation dtype
  c.seed = 10;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerTensorGateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 768, 2048);
  c.rows = kFewRows;
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 6;
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.rows = {300, 1};
  c.weight_on_input = true;
  c.act = Activation::kGelu;
  c.seed = 7;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerTensorScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 768, 2048);
  c.rows = kFewRows;
  c.weight_on_input = true;
  c.bias = true;
  c.seed = 8;
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 384, 2880);
  c.rows = {129, 3};
  c.bias = true;
  c.out = DType::kBf16;  // y in the activation dtype
  c.seed = 9;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerChannelMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerChannel, 96, 2048);
  c.rows = kFewRows;
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.rows = kFewRows;
  c.seed = 10;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8Block128MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.rows = kFewRows;
  run_case(c);
  c = gemm1(Scheme::kFp8Block128, 192, 2880);  // K tail: 2880 = 22.5 groups; N = 192: up rows mid-block
  c.rows = {1, 127, 128, 129};
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 11;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 2880);  // ragged last column tile of K = 2880
  c.rows = kFewRows;
  c.seed = 12;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 96, 256);  // k_dim = 96: one partial K group
  c.seed = 14;
  run_case(c);
}

TEST(Sm90TokMajorGemm, ManyTokensOnOneExpert) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 4097, 0};  // 33 token tiles, the last with one row
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {2000, 3};
  run_case(c);
}

TEST(Sm90TokMajorGemm, EmptyProblemsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};  // max_rows = 3 > 0 but no expert has rows
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {0};
  run_case(c);
}

TEST(Sm90TokMajorGemm, ManyExperts) {
  SKIP_WITHOUT_SM90();
  // 257 experts (odd, > 256): the tile table and the persistent walk across many small experts.
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows.assign(257, 0);
  for (int e = 0; e < 257; ++e) c.rows[e] = (e * 37) % 150;
  c.top_k = 8;
  run_case(c);
}

TEST(Sm90TokMajorGemm, ClusterSizesMatchReference) {
  SKIP_WITHOUT_SM90();
  // Both cluster sizes on every scheme; token-tile counts 1, 2, 3, 8 per expert (odd: the spare
  // CTA of the last pair only loads its half of the weights).
  for (int cluster : {1, 2}) {
    Case c = gemm1(Scheme::kBf16, 96, 256);
    c.cluster = cluster;
    run_case(c);
    c = gemm2(Scheme::kBf16, 360, 2880);
    c.rows = {1, 300, 0, 129};
    c.bias = true;
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kFp8PerTensor, 768, 2048);
    c.rows = {300, 1};
    c.act = Activation::kSwigluOai;
    c.cluster = cluster;
    run_case(c);
    c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
    c.rows = {129, 1000};
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kFp8Block128, 128, 2048);
    c.rows = kFewRows;
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kBf16, 96, 256);
    c.rows = {0, 0, 0};
    c.cluster = cluster;
    run_case(c);
  }
}

TEST(Sm90TokMajorGemm, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  for (int cluster : {1, 2}) {
    Case c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
    c.rows = kFewRows;
    c.cluster = cluster;
    std::vector<float> first, second;
    run_case(c, &first);
    run_case(c, &second);
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "cluster=" << cluster;
  }
}

TEST(Sm90TokMajorGemm, DynamicScheduleMatchesStaticBitwise) {
  SKIP_WITHOUT_SM90();
  // The dynamic schedule changes which CTA runs a unit, never what a unit computes: every scheme
  // and epilogue matches the reference and the static schedule bit for bit, with token-tile counts
  // 0..8 per expert, K tails, tail tiles of <= 64 rows and more units than CTAs.
  std::vector<Case> cases;
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows.assign(257, 0);
  for (int e = 0; e < 257; ++e) c.rows[e] = (e * 37) % 150;
  c.top_k = 8;
  cases.push_back(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.rows = {1, 300, 0, 129, 1000};
  c.bias = true;
  c.out = DType::kBf16;
  cases.push_back(c);
  c = gemm1(Scheme::kFp8PerTensor, 768, 2048);
  c.rows = {300, 1, 0, 64, 65};
  c.act = Activation::kSwigluOai;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.rows = {129, 1000};
  c.sorted_weights = true;
  cases.push_back(c);
  c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.rows = kFewRows;
  cases.push_back(c);
  c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};
  cases.push_back(c);
  for (Case& k : cases) {
    SCOPED_TRACE(k.name());
    std::vector<float> fixed, taken, again;
    k.cluster = 1;
    k.dynamic = false;
    run_case(k, &fixed);
    k.dynamic = true;
    run_case(k, &taken);
    run_case(k, &again);  // a fresh zeroed counter each launch, as run_moe's routing gives
    ASSERT_EQ(fixed.size(), taken.size());
    ASSERT_EQ(taken.size(), again.size());
    EXPECT_EQ(0, std::memcmp(fixed.data(), taken.data(), fixed.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(taken.data(), again.data(), taken.size() * sizeof(float)));
  }
}

TEST(Sm90TokMajorGemm, DynamicScheduleSmall) {
  SKIP_WITHOUT_SM90();
  // Small enough for compute-sanitizer (memcheck, racecheck: the unit handed from the producer
  // to the consumers through shared memory): both epilogues, an empty expert, a tail tile.
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {1, 129, 0, 64};
  c.cluster = 1;
  c.dynamic = true;
  run_case(c);
  c = gemm2(Scheme::kBf16, 96, 256);
  c.rows = {1, 129, 0, 64};
  c.cluster = 1;
  c.dynamic = true;
  run_case(c);
}

TEST(Sm90TokMajorGemm, DeclinesWhatItCannotRun) {
  // gpt-oss at TP8: fp8 w2 rows of N = 360 bytes are not a multiple of 16 (TMA stride rule).
  GroupedGemmParams p;
  p.scheme = Scheme::kFp8PerTensor;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.num_experts = 4;
  p.n_out = 2880;
  p.k_dim = 360;
  std::string why;
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("16"), std::string::npos) << why;
  // Launching it anyway is an error, not a crash.
  p.max_rows = 8;
  EXPECT_THROW(moekit::cuda::launch_grouped_gemm_tokmajor_sm90(p, nullptr), moekit::Error);
  // fp8_block128 GEMM1 with N % 64 != 0: the up rows of a tile would straddle two scale blocks.
  p.scheme = Scheme::kFp8Block128;
  p.epilogue = GemmEpilogue::kGateUpActivation;
  p.n_out = 96;
  p.k_dim = 256;
  p.max_rows = 0;  // sizes only: no pointers are checked
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("64"), std::string::npos) << why;
  // GEMM2 writes fp32 or the activation dtype, nothing else.
  p.scheme = Scheme::kBf16;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.n_out = 256;
  p.k_dim = 128;
  p.act_dtype = DType::kBf16;
  p.out_dtype = DType::kFp16;
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("activation dtype"), std::string::npos) << why;
  // ... and accepts the activation dtype (the device check comes last: only with a Hopper GPU
  // does the answer become yes; this test also runs in CI, without one).
  p.out_dtype = DType::kBf16;
  if (moekit::cuda_available()) {
    EXPECT_TRUE(moekit::cuda::can_implement_tokmajor_sm90(p, &why)) << why;
  } else {
    EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
    EXPECT_NE(why.find("device"), std::string::npos) << why;
  }
}

}  // namespace
