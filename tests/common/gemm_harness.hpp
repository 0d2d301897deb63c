// The one test harness of the grouped expert GEMM kernels (mma.sync grouped_gemm, Swap-AB,
// token-major: the same GroupedGemmParams contract): a random grouped problem (experts with the
// given row counts, slots drawn without repetition and ascending per expert, operands quantized
// per scheme with known scales), a double-precision loop of docs/design.md's formula, the launch
// through a kernel-specific callback on NaN-poisoned output, and the check: every owned row
// against the reference with the shared comparator (tests/common/compare.hpp), every other
// element still holding its poison bytes, optionally a CUDA-graph replay equal to the eager run
// and the epilogue's absmax word (out_absmax) equal to the absmax of what it stored.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/kernel_api.hpp"
#include "common/tolerance.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {

using cuda::GemmEpilogue;
using cuda::GroupedGemmParams;

/// The current device's fault record (for a launcher's params), and moekit::take_fault of it.
inline cuda::FaultRecord* kernel_fault_record() {
  int dev = 0;
  EXPECT_EQ(cudaSuccess, cudaGetDevice(&dev));
  return cuda::device_fault_record(dev);
}
inline bool take_kernel_fault(Fault* f) {
  Options o;
  o.backend = Backend::kCuda;
  return take_fault(f, o);
}
inline void clear_kernel_faults() { (void)take_kernel_fault(nullptr); }

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

/// What a run gave: the output as floats and bytes, and the tile counter after the launch.
struct GemmRun {
  std::vector<float> out;
  std::vector<std::uint8_t> raw;
  std::uint32_t counter = 0;
  std::uint32_t absmax = 0;  // the out_absmax word after the launch (0 without out_absmax)
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

/// Builds `c`, launches it with `launch(params, stream)` (which may ASSERT; a fatal failure
/// stops the run), checks the output and returns it (in *result when given).
template <class Launch>
void run_gemm_case(const GemmCase& c, Launch&& launch, GemmRun* result = nullptr) {
  using gemm_detail::act_bits;
  using gemm_detail::act_value;
  SCOPED_TRACE(c.describe());
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
  std::vector<std::int32_t> offsets(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
  const std::int64_t P = offsets[E];
  const std::int64_t M = P / k + 2;
  const std::int64_t S = M * k;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(S));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::int64_t max_rows = P + c.extra_rows;
  std::vector<std::int32_t> sorted_slots(static_cast<std::size_t>(std::max<std::int64_t>(max_rows, 1)), 0);
  for (int e = 0; e < E; ++e) {
    std::sort(perm.begin() + offsets[e], perm.begin() + offsets[e + 1]);
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) sorted_slots[r] = perm[r];
  }
  std::vector<float> topk_weights(static_cast<std::size_t>(S));
  for (auto& w : topk_weights) w = unif(rng);
  // sorted_weights[r] = topk_weights[sorted_slots[r]] for the P routed rows; NaN past them (never read).
  std::vector<float> sorted_weights(sorted_slots.size(), std::nanf(""));
  for (std::int64_t r = 0; r < P; ++r) sorted_weights[r] = topk_weights[sorted_slots[r]];

  // A: GEMM1 gathers token rows of hidden [M, K]; GEMM2 reads sorted rows of inter [max_rows, N].
  // fp8 operands are quantized with known scales (per tensor / per row / per 1x128 group).
  const std::int64_t a_rows = gate_up ? M : std::max<std::int64_t>(max_rows, 1);
  const std::int64_t n_groups = (k_dim + 127) / 128, row_blocks = (rows_b + 127) / 128;
  std::vector<float> a_val(static_cast<std::size_t>(a_rows * k_dim));  // what the GPU multiplies
  std::vector<std::uint8_t> a_bytes(a_val.size() * (fp8 ? 1 : 2));
  std::vector<float> a_scale;
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
  std::vector<std::uint8_t> b_bytes(b_val.size() * (fp8 ? 1 : 2));
  std::vector<float> b_scale;
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
  std::vector<std::uint8_t> bias_bytes;
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
  const std::int64_t out_rows = gate_up ? std::max<std::int64_t>(max_rows, 1) : S;
  std::vector<double> ref(static_cast<std::size_t>(out_rows * n_out), 0.0);
  std::vector<char> owned(static_cast<std::size_t>(out_rows), 0);
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

  // Device buffers; the output poisoned with 0xff bytes (NaN in fp32, bf16 and fp16).
  DeviceArena arena;
  const DType out_dtype = c.out_dtype;
  const std::size_t out_es = dtype_size(out_dtype);
  const std::size_t out_bytes = static_cast<std::size_t>(out_rows * n_out) * out_es;
  void* d_out = arena.alloc(out_bytes);
  CUDA_OK(cudaMemset(d_out, 0xff, out_bytes));
  std::uint32_t* d_counter = arena.upload(std::vector<std::uint32_t>(1, 0u));
  std::uint32_t* d_absmax = arena.upload(std::vector<std::uint32_t>(1, 0u));

  GroupedGemmParams p;
  p.scheme = c.scheme;
  p.epilogue = c.epilogue;
  p.num_experts = E;
  p.n_out = n_out;
  p.k_dim = k_dim;
  p.max_rows = max_rows;
  p.row_offsets = arena.upload(offsets);
  p.sorted_slots = arena.upload(sorted_slots);
  p.top_k = k;
  p.a = arena.upload(a_bytes);
  p.gather_a_by_token = gate_up;
  p.act_dtype = c.act_dtype;
  p.a_scale = fp8 ? arena.upload(a_scale) : nullptr;
  p.b = arena.upload(b_bytes);
  p.b_scale = fp8 ? arena.upload(b_scale) : nullptr;
  p.bias = c.bias ? static_cast<const void*>(arena.upload(bias_bytes)) : nullptr;
  p.bias_dtype = c.bias_dtype;
  p.topk_weights = c.weights == 2 ? nullptr : arena.upload(topk_weights);
  p.sorted_weights = c.weights == 0 ? nullptr : arena.upload(sorted_weights);
  p.weight_on_input = c.weight_on_input;
  p.activation.kind = c.act;
  p.out = d_out;
  p.out_dtype = out_dtype;
  if (c.tile_counter) p.tile_counter = d_counter;
  if (c.out_absmax) p.out_absmax = d_absmax;
  // The routing in the kernel (c.route): its tables poisoned (0xff) before the launch.
  std::int32_t* d_off_out = nullptr;
  std::int32_t* d_slots_out = nullptr;
  float* d_wts_out = nullptr;
  std::int64_t bad_slot = -1;
  if (c.route) {
    EXPECT_GE(max_rows, S) << "a routed case needs extra_rows >= its unrouted slots";
    if (max_rows < S) return;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(S), -1);
    for (int e = 0; e < E; ++e)
      for (int r = offsets[e]; r < offsets[e + 1]; ++r) ids[static_cast<std::size_t>(sorted_slots[r])] = e;
    std::vector<std::int32_t> map;  // route_map: global id g -> g below E, -1 for E and E + 1
    if (c.route_map) {
      map.assign(static_cast<std::size_t>(E + 2), -1);
      for (int e = 0; e < E; ++e) map[static_cast<std::size_t>(e)] = e;
      for (auto& id : ids)
        if (id < 0) id = E;  // remote
    }
    for (std::int64_t sl = 0; sl < S && bad_slot < 0; ++sl)
      if (ids[static_cast<std::size_t>(sl)] < 0 || ids[static_cast<std::size_t>(sl)] >= E) bad_slot = sl;
    if (bad_slot >= 0 && c.route_bad == 1) ids[static_cast<std::size_t>(bad_slot)] = E + 3;
    if (bad_slot >= 0 && c.route_bad == 2) {
      EXPECT_TRUE(c.route_map) << "route_bad = 2 needs route_map";
      ids[static_cast<std::size_t>(bad_slot)] = E + 1;
      map[static_cast<std::size_t>(E + 1)] = E + 7;
    }
    if (c.route_bad == 0) bad_slot = -1;
    d_off_out = static_cast<std::int32_t*>(arena.alloc((E + 1) * 4));
    d_slots_out = static_cast<std::int32_t*>(arena.alloc(static_cast<std::size_t>(S) * 4));
    d_wts_out = static_cast<float*>(arena.alloc(static_cast<std::size_t>(S) * 4));
    CUDA_OK(cudaMemset(d_off_out, 0xff, (E + 1) * 4));
    CUDA_OK(cudaMemset(d_slots_out, 0xff, static_cast<std::size_t>(S) * 4));
    CUDA_OK(cudaMemset(d_wts_out, 0xff, static_cast<std::size_t>(S) * 4));
    // Unread in route mode: poisoned, so that a read of them shows.
    std::int32_t* poisoned_off = static_cast<std::int32_t*>(arena.alloc((E + 1) * 4));
    std::int32_t* poisoned_slots = static_cast<std::int32_t*>(arena.alloc(sorted_slots.size() * 4));
    CUDA_OK(cudaMemset(poisoned_off, 0xff, (E + 1) * 4));
    CUDA_OK(cudaMemset(poisoned_slots, 0xff, sorted_slots.size() * 4));
    p.row_offsets = poisoned_off;
    p.sorted_slots = poisoned_slots;
    p.sorted_weights = nullptr;
    p.route.ids = arena.upload(ids);
    p.route.expert_map = c.route_map ? arena.upload(map) : nullptr;
    p.route.experts_global = c.route_map ? E + 2 : E;
    p.route.slots = S;
    p.route.offsets_out = d_off_out;
    p.route.sorted_slots_out = d_slots_out;
    p.route.sorted_weights_out = p.topk_weights != nullptr ? d_wts_out : nullptr;
    p.route.faults = kernel_fault_record();
    clear_kernel_faults();
  }

  cudaStream_t stream = nullptr;
  if (c.graph_replay) CUDA_OK(cudaStreamCreate(&stream));
  launch(p, stream);
  if (::testing::Test::HasFatalFailure()) return;
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaGetLastError());
  GemmRun run;
  run.raw = download<std::uint8_t>(d_out, out_bytes);
  run.counter = download<std::uint32_t>(d_counter, 1)[0];
  run.absmax = download<std::uint32_t>(d_absmax, 1)[0];
  if (c.route) {
    // The tables GEMM2 would read: exactly the host's (the routing launch's stable order).
    EXPECT_TRUE(download<std::int32_t>(d_off_out, E + 1) == offsets) << "route: the expert offsets differ";
    const std::vector<std::int32_t> slots_got = download<std::int32_t>(d_slots_out, static_cast<std::size_t>(S));
    const std::vector<float> wts_got = download<float>(d_wts_out, static_cast<std::size_t>(S));
    // Rows past the routed ones keep the poison (slot -1, weight bytes 0xff), as do all the
    // weights when the kernel is given no weights to copy.
    const float poison_wt = [] {
      float f;
      std::uint32_t b = 0xffffffffu;
      std::memcpy(&f, &b, 4);
      return f;
    }();
    std::int64_t wrong = 0;
    for (std::int64_t r = 0; r < S; ++r) {
      const std::size_t i = static_cast<std::size_t>(r);
      const bool routed = r < P;
      const std::int32_t want_slot = routed ? sorted_slots[i] : -1;
      const float want_wt = routed && p.topk_weights != nullptr ? sorted_weights[i] : poison_wt;
      const bool slot_ok = slots_got[i] == want_slot;
      const bool wt_ok = std::memcmp(&wts_got[i], &want_wt, 4) == 0;
      if ((!slot_ok || !wt_ok) && wrong++ < 5)
        ADD_FAILURE() << "route: sorted row " << r << " slot " << slots_got[i] << " (want " << want_slot << ")"
                      << (wt_ok ? "" : ", its router weight differs");
    }
    EXPECT_EQ(wrong, 0) << "route: sorted rows differ";
    Fault f;
    const bool faulted = take_kernel_fault(&f);
    if (bad_slot >= 0) {
      EXPECT_TRUE(faulted) << "route: the bad entry at slot " << bad_slot << " was not recorded";
      if (faulted) {
        EXPECT_EQ(f.tensor, c.route_bad == 1 ? FaultTensor::kTopkIds : FaultTensor::kExpertMap);
        EXPECT_EQ(f.row, bad_slot / k);
        EXPECT_EQ(f.slot, bad_slot % k);
        EXPECT_EQ(f.value, c.route_bad == 1 ? E + 3 : E + 7);
        if (c.route_bad == 2) EXPECT_EQ(f.expert, E + 1);
        EXPECT_EQ(f.bound, c.route_bad == 1 && c.route_map ? E + 2 : E);
      }
    } else {
      EXPECT_FALSE(faulted) << "route: a fault without a bad id: " << f.to_string();
    }
  }
  if (c.tile_counter && !c.counter_unused) {
    // The dynamic schedule ran: every CTA took at least one unit (its last, past the end), so the
    // counter moved (it would stay 0 if the launcher had dropped it).
    EXPECT_GT(run.counter, 0u) << "the dynamic schedule did not run";
  }

  if (c.graph_replay) {
    // Replay through a CUDA graph into a re-poisoned buffer, twice: bitwise equal to the eager run.
    CUDA_OK(cudaMemsetAsync(d_out, 0xff, out_bytes, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    // A dynamic schedule's counter is zeroed before every launch, as moekit's chain does (its
    // routing kernel or a memset), so each replay hands out every unit again.
    if (c.tile_counter) CUDA_OK(cudaMemsetAsync(d_counter, 0, sizeof(std::uint32_t), stream));
    launch(p, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(download<std::uint8_t>(d_out, out_bytes) == run.raw) << "CUDA-graph replay differs from the eager run";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }

  run.out.resize(static_cast<std::size_t>(out_rows * n_out));
  for (std::size_t i = 0; i < run.out.size(); ++i) {
    if (out_dtype == DType::kFp32) {
      std::memcpy(&run.out[i], &run.raw[i * 4], 4);
    } else {
      std::uint16_t b;
      std::memcpy(&b, &run.raw[i * 2], 2);
      run.out[i] = act_value(out_dtype, b);
    }
  }

  // Owned rows: row by row against the reference (NaN exactly where the reference is NaN);
  // every other element still holds the poison bytes.
  const Comparison cmp = compare_rows(run.out, ref, n_out, gemm_tolerance(c.scheme), owned);
  EXPECT_TRUE(cmp.ok) << cmp.message;
  std::int64_t stray = 0;
  for (std::int64_t r = 0; r < out_rows; ++r) {
    if (owned[r]) continue;
    for (std::int64_t n = 0; n < n_out; ++n) {
      const std::size_t i = static_cast<std::size_t>(r * n_out + n);
      const bool poisoned = std::all_of(run.raw.begin() + i * out_es, run.raw.begin() + (i + 1) * out_es,
                                        [](std::uint8_t b) { return b == 0xff; });
      if (!poisoned && stray++ < 5) ADD_FAILURE() << "element [" << r << ", " << n << "] is not owned but was written";
    }
  }
  EXPECT_EQ(stray, 0) << "elements written outside the routed rows";
  if (c.out_absmax) {
    // The absmax of the eager run's owned rows as stored (std::fmax skips NaN, as the kernels'
    // fmaxf does): the word must hold exactly its bits, a value the kernel computed but did not
    // store (a tail row or column) folded in would show as a larger word. A graph replay folds
    // the same values again, which leaves a max unchanged.
    float want = 0.0f;
    for (std::int64_t r = 0; r < out_rows; ++r)
      if (owned[r])
        for (std::int64_t n = 0; n < n_out; ++n) want = std::fmax(want, std::fabs(run.out[static_cast<std::size_t>(r * n_out + n)]));
    std::uint32_t want_bits = 0;
    std::memcpy(&want_bits, &want, 4);
    float got = 0.0f;
    std::memcpy(&got, &run.absmax, 4);
    EXPECT_EQ(run.absmax, want_bits) << "out_absmax word " << got << " (0x" << std::hex << run.absmax
                                     << "), absmax of the stored rows " << want << " (0x" << want_bits << ")";
  }
  if (result != nullptr) *result = std::move(run);
}

}  // namespace moekit::testing
