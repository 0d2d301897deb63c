// A grouped GEMM test problem on the host (no CUDA): the case (GemmCase), its inputs drawn from
// the case's seed (routing, operands quantized per scheme with known scales, bias) and the
// double-precision reference of docs/design.md's formula (GemmHostData), and a one-entry cache of
// the last case's data (cached_gemm_host_data). tests/common/gemm_harness.hpp launches a kernel on
// them and checks its output; the bitwise tests run the same case three to eight times, and at
// their largest shapes drawing the inputs and the reference took 3.6 s a run, nearly all of those
// tests' time (docs/perf.md "Session 52"), so a run of the case just drawn reuses them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/gemm_common/params.hpp"  // GemmEpilogue (host-only)
#include "moekit/moekit.hpp"

namespace moekit::testing {

using cuda::GemmEpilogue;

/// One grouped GEMM problem. GEMM1 (kGateUpActivation): B = w13 [E, 2N, K], output [rows, N];
/// GEMM2 (kBiasWeightScatter): B = w2 [E, K, N], output [M*k slots, K].
struct GemmCase {
  Scheme scheme = Scheme::kBf16;
  DType act_dtype = DType::kBf16;       // bf16 scheme's operand dtype (kBf16 or kFp16)
  GemmEpilogue epilogue = GemmEpilogue::kGateUpActivation;
  std::vector<int> rows = {0, 1, 5, 33, 64, 100};  // rows (slots) per expert
  std::int64_t N = 128;                 // intermediate size
  std::int64_t K = 256;                 // hidden size
  Activation act = Activation::kSilu;
  bool bias = false;
  DType bias_dtype = DType::kFp32;
  bool weight_on_input = false;
  DType out_dtype = DType::kBf16;       // GEMM1: act dtype or fp32; GEMM2: fp32 (token-major: or act dtype)
  int top_k = 2;
  int extra_rows = 3;                   // max_rows = sum(rows) + extra_rows (a loose host bound)
  // Router weights: 0 = topk_weights only (by slot); 1 = topk_weights and sorted_weights (as the
  // backend passes them); 2 = sorted_weights only.
  int weights = 0;
  std::int64_t nan_a_row = -1;          // an A row (a token for GEMM1) whose first element is NaN
  bool graph_replay = false;            // also replay the launch through a CUDA graph: bitwise equal
  bool tile_counter = false;            // pass a zeroed tile counter (token-major's dynamic schedule)
  // The launch may leave the tile counter at 0: the static K-short GEMM2 (kshort/) runs a call
  // token-major would have given its dynamic schedule, and takes no unit from the counter.
  bool counter_unused = false;
  // Pass a zeroed absmax word (GroupedGemmParams::out_absmax; GEMM1 of fp8_per_tensor, fp32 out):
  // it must end as the float bits of the absmax of the owned rows as stored (NaN skipped).
  bool out_absmax = false;
  // GEMM1 on the token-major kernel: the routing in the kernel (GroupedGemmParams::route). The
  // kernel gets the case's routing as ids instead of row_offsets / sorted_slots (then poisoned); a
  // slot no expert has is -1 (masked), or with route_map the global id E (map entry -1: an expert
  // on another rank); the first such slot carries route_bad: 0 nothing more, 1 the bad id E + 3,
  // 2 (route_map) the id E + 1 whose map entry E + 7 is out of range. The offsets, sorted slots
  // and sorted router weights the kernel writes must equal the host's (rows past the routed ones
  // untouched), and the fault record must name the bad slot, or be empty. Needs max_rows >= the
  // slots (extra_rows).
  bool route = false;
  bool route_map = false;  // ids are global: E + 2 of them through an expert_map (identity below E)
  int route_bad = 1;
  std::uint64_t seed = 1;

  bool gate_up() const { return epilogue == GemmEpilogue::kGateUpActivation; }
  /// Every field the inputs and the reference depend on (GemmHostData); not the launch's options
  /// (out_dtype, weights, graph_replay, tile_counter, counter_unused, out_absmax, route*).
  std::string data_key() const {
    std::ostringstream os;
    os << static_cast<int>(scheme) << ' ' << static_cast<int>(act_dtype) << ' ' << static_cast<int>(epilogue) << ' '
       << N << ' ' << K << ' ' << static_cast<int>(act) << ' ' << bias << ' ' << static_cast<int>(bias_dtype) << ' '
       << weight_on_input << ' ' << top_k << ' ' << extra_rows << ' ' << nan_a_row << ' ' << seed << " rows";
    for (int r : rows) os << ' ' << r;
    return os.str();
  }
  std::string describe() const {
    std::ostringstream os;
    os << scheme_name(scheme) << (gate_up() ? " gemm1 " : " gemm2 ") << "N=" << N << " K=" << K
       << " act_dtype=" << dtype_name(act_dtype) << " act=" << activation_name(act) << " bias=" << bias << "("
       << dtype_name(bias_dtype) << ") woi=" << weight_on_input << " out=" << dtype_name(out_dtype)
       << " k=" << top_k << " weights=" << weights << " E=" << rows.size() << " nan_a_row=" << nan_a_row
       << " out_absmax=" << out_absmax << " route=" << route << " route_map=" << route_map << " route_bad=" << route_bad
       << " seed=" << seed;
    return os.str();
  }
};

inline double gemm_activation_ref(double g, double u, Activation a) {
  switch (a) {
    case Activation::kGelu: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))) * u;
    case Activation::kSwigluOai: {
      const double alpha = 1.702, limit = 7.0;
      g = g > limit ? limit : g;  // NaN stays NaN
      u = u < -limit ? -limit : (u > limit ? limit : u);
      return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
    }
    default: return g / (1.0 + std::exp(-g)) * u;
  }
}

namespace gemm_detail {
inline std::uint16_t act_bits(DType dt, float x) { return dt == DType::kFp16 ? float_to_fp16(x) : float_to_bf16(x); }
inline float act_value(DType dt, std::uint16_t b) { return dt == DType::kFp16 ? fp16_to_float(b) : bf16_to_float(b); }
}  // namespace gemm_detail

/// The host side of one case: the inputs as the kernel gets them (bytes, scales, tables) and the
/// reference. Everything here is a function of the fields GemmCase::data_key() names.
struct GemmHostData {
  std::int64_t P = 0;         // routed rows (slots with an expert)
  std::int64_t M = 0;         // tokens
  std::int64_t S = 0;         // slots, M * top_k
  std::int64_t max_rows = 0;  // P + extra_rows
  std::int64_t out_rows = 0;  // rows of the output: max(max_rows, 1) for GEMM1, S for GEMM2
  std::vector<std::int32_t> offsets, sorted_slots;
  std::vector<float> topk_weights, sorted_weights;
  std::vector<std::uint8_t> a_bytes, b_bytes, bias_bytes;
  std::vector<float> a_scale, b_scale;
  std::vector<double> ref;  // [out_rows, n_out]; rows not owned are 0
  std::vector<char> owned;  // [out_rows]: the rows the launch must write
};

/// Draws `c`'s inputs from its seed and computes the reference (seconds at the largest cases).
inline std::shared_ptr<const GemmHostData> make_gemm_host_data(const GemmCase& c) {
  using gemm_detail::act_bits;
  using gemm_detail::act_value;
  auto hp = std::make_shared<GemmHostData>();
  GemmHostData& h = *hp;
  const bool gate_up = c.gate_up();
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
  std::vector<std::int32_t>& offsets = h.offsets;
  offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
  const std::int64_t P = h.P = offsets[E];
  const std::int64_t M = h.M = P / k + 2;
  const std::int64_t S = h.S = M * k;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(S));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::int64_t max_rows = h.max_rows = P + c.extra_rows;
  std::vector<std::int32_t>& sorted_slots = h.sorted_slots;
  sorted_slots.assign(static_cast<std::size_t>(std::max<std::int64_t>(max_rows, 1)), 0);
  for (int e = 0; e < E; ++e) {
    std::sort(perm.begin() + offsets[e], perm.begin() + offsets[e + 1]);
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) sorted_slots[r] = perm[r];
  }
  std::vector<float>& topk_weights = h.topk_weights;
  topk_weights.resize(static_cast<std::size_t>(S));
  for (auto& w : topk_weights) w = unif(rng);
  // sorted_weights[r] = topk_weights[sorted_slots[r]] for the P routed rows; NaN past them (never read).
  std::vector<float>& sorted_weights = h.sorted_weights;
  sorted_weights.assign(sorted_slots.size(), std::nanf(""));
  for (std::int64_t r = 0; r < P; ++r) sorted_weights[r] = topk_weights[sorted_slots[r]];

  // A: GEMM1 gathers token rows of hidden [M, K]; GEMM2 reads sorted rows of inter [max_rows, N].
  // fp8 operands are quantized with known scales (per tensor / per row / per 1x128 group).
  const std::int64_t a_rows = gate_up ? M : std::max<std::int64_t>(max_rows, 1);
  const std::int64_t n_groups = (k_dim + 127) / 128, row_blocks = (rows_b + 127) / 128;
  std::vector<float> a_val(static_cast<std::size_t>(a_rows * k_dim));  // what the GPU multiplies
  std::vector<std::uint8_t>& a_bytes = h.a_bytes;
  a_bytes.resize(a_val.size() * (fp8 ? 1 : 2));
  std::vector<float>& a_scale = h.a_scale;
  auto a_scale_of = [&](std::int64_t i, std::int64_t j) {
    if (c.scheme == Scheme::kFp8PerTensor) return 4.0f / 448.0f;
    if (c.scheme == Scheme::kFp8PerChannel) return (1.0f + static_cast<float>(i % 7)) / 448.0f;
    return (1.0f + static_cast<float>((i + j / 128) % 5)) / 448.0f;
  };
  for (std::int64_t i = 0; i < a_rows; ++i)
    for (std::int64_t j = 0; j < k_dim; ++j) {
      const std::size_t idx = static_cast<std::size_t>(i * k_dim + j);
      float x = normal(rng);
      if (i == c.nan_a_row && j == 0) x = std::nanf("");
      if (!fp8) {
        const std::uint16_t b = act_bits(c.act_dtype, x);
        std::memcpy(&a_bytes[idx * 2], &b, 2);
        a_val[idx] = act_value(c.act_dtype, b);
      } else {
        const std::uint8_t q = float_to_e4m3(x / a_scale_of(i, j));  // NaN -> 0x7f
        a_bytes[idx] = q;
        a_val[idx] = e4m3_to_float(q);
      }
    }
  if (c.scheme == Scheme::kFp8PerTensor) a_scale = {a_scale_of(0, 0)};
  if (c.scheme == Scheme::kFp8PerChannel)
    for (std::int64_t i = 0; i < a_rows; ++i) a_scale.push_back(a_scale_of(i, 0));
  if (c.scheme == Scheme::kFp8Block128)
    for (std::int64_t i = 0; i < a_rows; ++i)
      for (std::int64_t g = 0; g < n_groups; ++g) a_scale.push_back(a_scale_of(i, g * 128));

  // B: [E, rows_b, k_dim] ~ N(0, 1/sqrt(k_dim)); fp8 with scales per expert / row / 128x128 block.
  std::vector<float> b_val(static_cast<std::size_t>(E) * rows_b * k_dim);
  std::vector<std::uint8_t>& b_bytes = h.b_bytes;
  b_bytes.resize(b_val.size() * (fp8 ? 1 : 2));
  std::vector<float>& b_scale = h.b_scale;
  if (c.scheme == Scheme::kFp8PerTensor)
    for (int e = 0; e < E; ++e) b_scale.push_back((0.5f + 0.1f * static_cast<float>(e % 10)) / 448.0f);
  if (c.scheme == Scheme::kFp8PerChannel)
    for (std::int64_t i = 0; i < E * rows_b; ++i)
      b_scale.push_back((0.5f + 0.01f * static_cast<float>(i % 50)) / 448.0f);
  if (c.scheme == Scheme::kFp8Block128)
    for (std::int64_t i = 0; i < E * row_blocks * n_groups; ++i)
      b_scale.push_back((0.5f + 0.1f * static_cast<float>(i % 9)) / 448.0f);
  const float wstd = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(k_dim, 1)));
  for (int e = 0; e < E; ++e)
    for (std::int64_t r = 0; r < rows_b; ++r)
      for (std::int64_t j = 0; j < k_dim; ++j) {
        const std::size_t i = (static_cast<std::size_t>(e) * rows_b + r) * k_dim + j;
        const float w = normal(rng) * wstd;
        if (!fp8) {
          const std::uint16_t b = act_bits(c.act_dtype, w);
          std::memcpy(&b_bytes[i * 2], &b, 2);
          b_val[i] = act_value(c.act_dtype, b);
          continue;
        }
        float s;
        if (c.scheme == Scheme::kFp8PerTensor) s = b_scale[e];
        else if (c.scheme == Scheme::kFp8PerChannel) s = b_scale[e * rows_b + r];
        else s = b_scale[(e * row_blocks + r / 128) * n_groups + j / 128];
        const std::uint8_t q = float_to_e4m3(w / s);
        b_bytes[i] = q;
        b_val[i] = e4m3_to_float(q);
      }

  // Bias [E, rows_b] (fp32, bf16 or fp16), as floats for the reference.
  std::vector<float> bias_val;
  std::vector<std::uint8_t>& bias_bytes = h.bias_bytes;
  if (c.bias) {
    bias_val.resize(static_cast<std::size_t>(E * rows_b));
    bias_bytes.resize(bias_val.size() * (c.bias_dtype == DType::kFp32 ? 4 : 2));
    for (std::size_t i = 0; i < bias_val.size(); ++i) {
      const float v = 0.5f * normal(rng);
      if (c.bias_dtype == DType::kFp32) {
        std::memcpy(&bias_bytes[i * 4], &v, 4);
        bias_val[i] = v;
      } else {
        const std::uint16_t b = act_bits(c.bias_dtype, v);
        std::memcpy(&bias_bytes[i * 2], &b, 2);
        bias_val[i] = act_value(c.bias_dtype, b);
      }
    }
  }

  // The reference, in double: rows of GEMM1 out [max_rows, N] (rows [0, P) owned), or slots of
  // GEMM2 out [S, K] (the routed slots owned). Unowned rows must keep the poison.
  const std::int64_t out_rows = h.out_rows = gate_up ? std::max<std::int64_t>(max_rows, 1) : S;
  std::vector<double>& ref = h.ref;
  ref.assign(static_cast<std::size_t>(out_rows * n_out), 0.0);
  std::vector<char>& owned = h.owned;
  owned.assign(static_cast<std::size_t>(out_rows), 0);
  auto dot = [&](std::int64_t arow, int e, std::int64_t brow) {
    const float* a = &a_val[static_cast<std::size_t>(arow * k_dim)];
    const float* b = &b_val[(static_cast<std::size_t>(e) * rows_b + brow) * k_dim];
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
    if (c.scheme == Scheme::kFp8PerTensor) s *= static_cast<double>(a_scale[0]) * b_scale[e];
    if (c.scheme == Scheme::kFp8PerChannel) s *= static_cast<double>(a_scale[arow]) * b_scale[e * rows_b + brow];
    return s;
  };
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int slot = sorted_slots[r];
      const std::int64_t arow = gate_up ? slot / k : r;
      const std::int64_t orow = gate_up ? r : slot;
      const double w = topk_weights[slot];
      owned[orow] = 1;
      for (std::int64_t n = 0; n < n_out; ++n) {
        double v;
        if (gate_up) {
          double g = dot(arow, e, n), u = dot(arow, e, c.N + n);
          if (c.weight_on_input) {
            g *= w;
            u *= w;
          }
          if (c.bias) {
            g += bias_val[e * rows_b + n];
            u += bias_val[e * rows_b + c.N + n];
          }
          v = gemm_activation_ref(g, u, c.act);
        } else {
          v = dot(arow, e, n);
          if (c.bias) v += bias_val[e * rows_b + n];
          if (!c.weight_on_input) v *= w;
        }
        ref[static_cast<std::size_t>(orow * n_out + n)] = v;
      }
    }
  return hp;
}

/// make_gemm_host_data(c), reused while the next call asks for the same data_key(): one entry (the
/// largest case's data is ~250 MB), so a test that runs each case several times in a row draws it
/// once. The data is const and a pure function of the key, so a reused entry equals a fresh draw.
inline std::shared_ptr<const GemmHostData> cached_gemm_host_data(const GemmCase& c) {
  static std::string key;
  static std::shared_ptr<const GemmHostData> data;
  std::string want = c.data_key();
  if (data == nullptr || want != key) {
    data.reset();  // the old entry's memory goes before the new one is drawn
    data = make_gemm_host_data(c);
    key = std::move(want);
  }
  return data;
}

}  // namespace moekit::testing
