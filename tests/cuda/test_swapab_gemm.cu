// GPU test of the Swap-AB decode GEMM (launch_grouped_gemm_swapab_sm90) against a host
// double-precision loop of the same formula (docs/design.md), on small random grouped problems:
// experts with 0, 1, 5, 33, 64, 100 rows, ragged N and K, every epilogue option, NaN-poisoned outputs;
// short K (GEMM2 at TP8) over many experts with several tiles per work item, router weights in
// sorted order (sorted_weights) or by slot.
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
#include "core/path_router.hpp"
#include "cuda/kernels/swapab/launch_sm90.hpp"
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
  std::vector<int> rows = {0, 1, 5, 33, 64, 100};
  std::int64_t N = 128;  // intermediate size
  std::int64_t K = 256;  // hidden size
  Activation act = Activation::kSilu;
  bool bias = false;
  DType bias_dtype = DType::kFp32;
  bool weight_on_input = false;
  DType gemm1_out = DType::kBf16;  // GEMM1 out dtype (GEMM2 is always fp32)
  int top_k = 2;
  int split_k = 0;  // 0: the router's choice; 1, 2, 4, 8: forced cluster split-K
  int tiles_per_item = 0;  // 0: the launcher's choice; 1..16: forced tiles per work item
  // Router weights: 0 = topk_weights only (by slot); 1 = topk_weights and sorted_weights (as the
  // backend passes them); 2 = sorted_weights only.
  int weights = 0;
  std::uint64_t seed = 1;

  std::string name() const {
    std::ostringstream os;
    os << moekit::scheme_name(scheme) << (epilogue == GemmEpilogue::kGateUpActivation ? " gemm1 " : " gemm2 ")
       << "N=" << N << " K=" << K << " act=" << moekit::activation_name(act) << " bias=" << bias
       << " woi=" << weight_on_input << " split_k=" << split_k << " tiles_per_item=" << tiles_per_item
       << " weights=" << weights << " E=" << rows.size();
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
  // sorted_weights[r] = topk_weights[sorted_slots[r]] for the P routed rows; NaN past them (never
  // read).
  std::vector<float> sorted_weights(max_rows, std::nanf(""));
  for (int r = 0; r < P; ++r) sorted_weights[r] = topk_weights[sorted_slots[r]];

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
        const std::uint16_t b = float_to_bf16_bits(v);
        std::memcpy(&bias_bytes[i * 2], &b, 2);
        bias_val[i] = bf16_bits_to_float(b);
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
  DeviceBuffer d_off(offsets), d_slots(sorted_slots), d_tw(topk_weights), d_sw(sorted_weights), d_a(a_bytes), d_b(b_bytes);
  DeviceBuffer d_as(a_scale), d_bs(b_scale), d_bias(bias_bytes);
  const DType out_dtype = gate_up ? c.gemm1_out : DType::kFp32;
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
  p.topk_weights = c.weights == 2 ? nullptr : static_cast<const float*>(d_tw.ptr);
  p.sorted_weights = c.weights == 0 ? nullptr : static_cast<const float*>(d_sw.ptr);
  p.weight_on_input = c.weight_on_input;
  p.activation.kind = c.act;
  p.out = d_out.ptr;
  p.out_dtype = out_dtype;

  std::string why;
  ASSERT_TRUE(moekit::cuda::can_implement_swapab_sm90(p, &why)) << why;
  // split_k 0: the router's choice (the launcher takes a split, it does not choose one).
  int split_k = c.split_k;
  if (split_k == 0) {
    int dev = 0, sms = 0;
    cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
    cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sm count");
    const std::int64_t k_stages = (p.k_dim * (fp8 ? 1 : 2) + 127) / 128;
    split_k = moekit::detail::choose_swapab_split(moekit::detail::swapab_max_items(p.n_out, p.num_experts, p.max_rows),
                                                  sms, k_stages);
  }
  moekit::cuda::launch_grouped_gemm_swapab_sm90(p, nullptr, split_k, c.tiles_per_item);
  cuda_ok(cudaDeviceSynchronize(), "kernel");

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
  c.gemm1_out = s == Scheme::kBf16 ? DType::kBf16 : DType::kFp32;
  return c;
}
Case gemm2(Scheme s, std::int64_t N, std::int64_t K) {
  Case c = gemm1(s, N, K);
  c.epilogue = GemmEpilogue::kBiasWeightScatter;
  return c;
}

TEST(Sm90SwapAbGemm, Bf16GateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kBf16, 128, 2048);
  c.act = Activation::kGelu;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weight_on_input = true;
  c.seed = 2;
  run_case(c);
  c = gemm1(Scheme::kBf16, 360, 2880);
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.gemm1_out = DType::kFp32;
  c.seed = 3;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Bf16ScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kBf16, 96, 256);
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 2048);
  c.seed = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.weight_on_input = true;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.seed = 5;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp16MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.gemm1_out = DType::kFp16;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.bias = true;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerTensorGateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 6;
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.weight_on_input = true;
  c.act = Activation::kGelu;
  c.seed = 7;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerTensorScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 128, 2048);
  c.weight_on_input = true;
  c.bias = true;
  c.seed = 8;
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 384, 2880);
  c.bias = true;
  c.seed = 9;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerChannelMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerChannel, 96, 2048);
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.seed = 10;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8Block128MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  run_case(c);
  c = gemm1(Scheme::kFp8Block128, 256, 2880);  // K tail: 2880 = 22.5 groups
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 11;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 2880);  // ragged last 64-row tile of K = 2880
  c.seed = 12;
  run_case(c);
}

TEST(Sm90SwapAbGemm, ManyTokensOnOneExpert) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 300, 0};  // 5 chunks of 64 tokens, the last partial
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {200, 3};
  run_case(c);
}

TEST(Sm90SwapAbGemm, EmptyProblemsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};  // max_rows = 3 > 0 but no expert has rows
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {0};
  run_case(c);
}

TEST(Sm90SwapAbGemm, SplitKMatchesReference) {
  SKIP_WITHOUT_SM90();
  for (int split : {1, 2, 4, 8}) {
    Case c = gemm1(Scheme::kBf16, 128, 2048);
    c.split_k = split;
    c.bias = true;
    run_case(c);
    c = gemm2(Scheme::kFp8PerTensor, 96, 256);  // 2 K stages: ranks >= 2 have no K work at S = 4, 8
    c.split_k = split;
    run_case(c);
  }
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.split_k = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.split_k = 8;
  c.weight_on_input = true;
  run_case(c);
  c = gemm1(Scheme::kFp8PerChannel, 360, 2880);
  c.split_k = 2;
  c.act = Activation::kSwigluOai;
  run_case(c);
}

TEST(Sm90SwapAbGemm, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  for (int split : {1, 4}) {
    Case c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
    c.split_k = split;
    std::vector<float> first, second;
    run_case(c, &first);
    run_case(c, &second);
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "split_k=" << split;
  }
}

// E experts with 0..64 rows each (about one in eight empty), from a fixed seed.
std::vector<int> ragged_rows(int E, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> count(1, 64);
  std::vector<int> rows(E);
  for (int e = 0; e < E; ++e) rows[e] = (rng() % 8 == 0) ? 0 : count(rng);
  rows[0] = 1;
  rows[E - 1] = 64;
  return rows;
}

// GEMM2 at TP8: k_dim = N/8 of 96..360 elements (1 to 6 K stages), many experts with 1..64
// tokens each, several 64-row tiles per work item (auto and forced), router weights by slot or
// in sorted order.
TEST(Sm90SwapAbGemm, ShortKManyExpertsMatchesReference) {
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 20;
  for (std::int64_t n : {96, 192, 256, 360}) {
    for (int tiles : {0, 1, 3, 8}) {
      Case c = gemm2(Scheme::kBf16, n, 512);  // 8 output tiles of 64 rows
      c.rows = ragged_rows(40, seed);
      c.tiles_per_item = tiles;
      c.weights = static_cast<int>(seed % 3);
      c.bias = tiles == 3;
      c.seed = seed++;
      run_case(c);
    }
  }
  // fp8 per tensor (rows of N bytes: 360 is not a multiple of 16, declined).
  for (std::int64_t n : {96, 192, 256}) {
    for (int tiles : {0, 1, 5, 16}) {
      Case c = gemm2(Scheme::kFp8PerTensor, n, 576);  // 9 tiles: the last group is short at T = 5
      c.rows = ragged_rows(33, seed);
      c.tiles_per_item = tiles;
      c.weights = static_cast<int>(seed % 3);
      c.weight_on_input = tiles == 5;
      c.seed = seed++;
      run_case(c);
    }
  }
  // The other schemes with several tiles per item.
  Case c = gemm2(Scheme::kFp8PerChannel, 128, 512);
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 4;
  c.weights = 1;
  c.seed = seed++;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 640);
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 3;
  c.weights = 2;
  c.seed = seed++;
  run_case(c);
  c = gemm2(Scheme::kBf16, 192, 512);
  c.act_dtype = DType::kFp16;
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 2;
  c.weights = 1;
  c.seed = seed++;
  run_case(c);
}

// GEMM1 with several tiles per work item: every scheme, weight_on_input (the routed weight
// multiplies the accumulators), split-K with T > 1 (ranks without K stages included).
TEST(Sm90SwapAbGemm, TilesPerItemMatchesReference) {
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 40;
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    for (int weights : {0, 1, 2}) {
      Case c = gemm1(scheme, 320, 256);  // 5 tiles: T = 2 leaves a short last group
      c.rows = ragged_rows(20, seed);
      c.tiles_per_item = 2 + weights;
      c.weights = weights;
      c.weight_on_input = weights != 0 || scheme == Scheme::kFp8PerTensor;
      c.bias = weights == 1;
      c.act = weights == 2 ? Activation::kSwigluOai : Activation::kSilu;
      c.seed = seed++;
      run_case(c);
    }
  }
  for (int split : {2, 4, 8}) {
    Case c = gemm1(Scheme::kBf16, 256, 2048);
    c.split_k = split;
    c.tiles_per_item = 3;
    c.weights = 1;
    c.seed = seed++;
    run_case(c);
    c = gemm2(Scheme::kFp8PerTensor, 96, 512);  // 1 K stage: ranks >= 1 have no K work
    c.rows = ragged_rows(16, seed);
    c.split_k = split;
    c.tiles_per_item = 4;
    c.weights = split == 4 ? 2 : 1;
    c.seed = seed++;
    run_case(c);
  }
}

// Tiles per item and the source of the router weights change which CTA computes a tile and
// where the weight is read from, never the arithmetic: the outputs are bitwise equal.
TEST(Sm90SwapAbGemm, TilesPerItemAndSortedWeightsBitwiseEqual) {
  SKIP_WITHOUT_SM90();
  for (Case base : {gemm2(Scheme::kBf16, 256, 512), gemm2(Scheme::kFp8PerTensor, 192, 640),
                    gemm1(Scheme::kFp8PerTensor, 320, 512)}) {
    base.rows = ragged_rows(24, 77);
    base.weight_on_input = base.epilogue == GemmEpilogue::kGateUpActivation;
    base.gemm1_out = DType::kFp32;
    std::vector<float> first;
    run_case(base, &first);  // T = auto, weights by slot
    for (int tiles : {1, 2, 7}) {
      for (int weights : {1, 2}) {
        Case c = base;
        c.tiles_per_item = tiles;
        c.weights = weights;
        std::vector<float> got;
        run_case(c, &got);
        ASSERT_EQ(first.size(), got.size());
        EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)))
            << c.name() << ": differs bitwise from T = auto with weights by slot";
      }
    }
  }
}

TEST(Sm90SwapAbGemm, DeclinesUnalignedFp8Pitch) {
  // gpt-oss at TP8: fp8 w2 rows of N = 360 bytes are not a multiple of 16 (TMA stride rule).
  GroupedGemmParams p;
  p.scheme = Scheme::kFp8PerTensor;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.num_experts = 4;
  p.n_out = 2880;
  p.k_dim = 360;
  std::string why;
  EXPECT_FALSE(moekit::cuda::can_implement_swapab_sm90(p, &why));
  EXPECT_NE(why.find("16"), std::string::npos) << why;
  // Launching it anyway is an error, not a crash.
  p.max_rows = 8;
  EXPECT_THROW(moekit::cuda::launch_grouped_gemm_swapab_sm90(p, nullptr), moekit::Error);
}

}  // namespace
