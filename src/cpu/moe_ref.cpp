// The reference MoE layer (the test oracle): docs/design.md's "Exact numerics" step by step.
// Work is grouped by expert so each weight row is decoded to fp32 once and reused for every
// slot routed there; items write disjoint outputs, so threads never change a bit of the result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../core/backend.hpp"
#include "moekit/error.hpp"
#include "moekit/quant.hpp"
#include "threads.hpp"

namespace moekit::cpu {

namespace {

using i64 = std::int64_t;

// Decoding tables, built once: the weight-row decode is the hot scalar loop of the reference.
struct Tables {
  float e4m3[256];
  std::vector<float> fp16;
  Tables() : fp16(65536) {
    for (int i = 0; i < 256; ++i) e4m3[i] = e4m3_to_float(static_cast<std::uint8_t>(i));
    for (int i = 0; i < 65536; ++i) fp16[static_cast<std::size_t>(i)] = fp16_to_float(static_cast<std::uint16_t>(i));
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

// Row `row` (length n) of a weight array of `dtype` (act dtype or e4m3) as fp32.
void decode_row(const void* base, DType dtype, i64 row, i64 n, float* dst) {
  const Tables& t = tables();
  if (dtype == DType::kFp8E4m3) {
    const std::uint8_t* src = static_cast<const std::uint8_t*>(base) + row * n;
    for (i64 i = 0; i < n; ++i) dst[i] = t.e4m3[src[i]];
  } else if (dtype == DType::kBf16) {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + row * n;
    for (i64 i = 0; i < n; ++i) {
      const std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
      std::memcpy(dst + i, &u, 4);
    }
  } else {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + row * n;
    for (i64 i = 0; i < n; ++i) dst[i] = t.fp16[src[i]];
  }
}

// fp32 dot product with 16 independent partial sums (the compiler turns them into SIMD lanes
// without reassociating anything), reduced in a fixed tree: the same bits on every run.
float dot(const float* a, const float* b, i64 n) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) lane[l] += a[i + l] * b[i + l];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

float dyn_scale(float absmax) { return std::max(absmax / kFp8Max, kMinDynamicScale); }

// NaN-propagating min / clamp (std::fmin would replace a NaN by the limit).
float min_keep_nan(float x, float hi) { return x > hi ? hi : x; }
float clamp_keep_nan(float x, float lo, float hi) { return x > hi ? hi : (x < lo ? lo : x); }

float activate(const ActivationConfig& act, float g, float u) {
  switch (act.kind) {
    case Activation::kSilu: return g / (1.0f + std::exp(-g)) * u;
    case Activation::kGelu: {
      const float kSqrt2 = 1.41421356237309504880f;
      return 0.5f * g * (1.0f + std::erf(g / kSqrt2)) * u;
    }
    case Activation::kSwigluOai: {
      g = min_keep_nan(g, act.limit);
      u = clamp_keep_nan(u, -act.limit, act.limit);
      const float sig = 1.0f / (1.0f + std::exp(-act.alpha * g));
      return g * sig * (u + 1.0f);
    }
  }
  return 0.0f;
}

// Activations of one GEMM's input after the scheme's quantization: rows x cols fp32 values
// (e4m3 values for fp8 schemes) and their scales. scale_stride: 0 = one scale for all rows
// (per tensor), 1 = one per row (per channel), groups = one per row per 128 columns (block).
struct QuantRows {
  i64 cols = 0, groups = 0;
  std::vector<float> value;
  std::vector<float> scale;
  i64 scale_stride = 0;
  const float* row(i64 r) const { return value.data() + r * cols; }
  const float* row_scale(i64 r) const { return scale.data() + r * scale_stride; }
};

// quant(x, s) = e4m3(x * (1/s)), decoded back to fp32 for the dot products.
void quant_range(float* x, i64 n, float s) {
  const float inv = 1.0f / s;
  const Tables& t = tables();
  for (i64 i = 0; i < n; ++i) x[i] = t.e4m3[float_to_e4m3(x[i] * inv)];
}

float absmax(const float* x, i64 n) {
  float a = 0.0f;
  for (i64 i = 0; i < n; ++i) {
    const float v = std::fabs(x[i]);
    a = v > a ? v : a;  // fmax semantics: a NaN never wins (a itself is never NaN)
  }
  return a;
}

// Quantize the rows listed in `rows` (others are left alone) of q.value in place for `scheme`.
// Per tensor takes `tensor_scale` (static, or the dynamic scale the caller computed).
void quantize_rows(Scheme scheme, DType act_dtype, QuantRows& q, const std::vector<i64>& rows, float tensor_scale,
                   int num_threads) {
  const i64 C = q.cols;
  switch (scheme) {
    case Scheme::kBf16:
      q.scale_stride = 0;
      q.scale.assign(1, 1.0f);
      parallel_for(static_cast<i64>(rows.size()), num_threads, [&](i64 i) {
        float* x = q.value.data() + rows[i] * C;
        for (i64 c = 0; c < C; ++c) x[c] = round_to(act_dtype, x[c]);
      });
      return;
    case Scheme::kFp8PerTensor:
      q.scale_stride = 0;
      q.scale.assign(1, tensor_scale);
      parallel_for(static_cast<i64>(rows.size()), num_threads,
                   [&](i64 i) { quant_range(q.value.data() + rows[i] * C, C, tensor_scale); });
      return;
    case Scheme::kFp8PerChannel:
      q.scale_stride = 1;
      q.scale.assign(q.value.size() / std::max<i64>(C, 1), 0.0f);
      parallel_for(static_cast<i64>(rows.size()), num_threads, [&](i64 i) {
        float* x = q.value.data() + rows[i] * C;
        const float s = dyn_scale(absmax(x, C));
        q.scale[rows[i]] = s;
        quant_range(x, C, s);
      });
      return;
    case Scheme::kFp8Block128:
      q.scale_stride = q.groups;
      q.scale.assign(q.value.size() / std::max<i64>(C, 1) * q.groups, 0.0f);
      parallel_for(static_cast<i64>(rows.size()), num_threads, [&](i64 i) {
        float* x = q.value.data() + rows[i] * C;
        for (i64 g = 0; g < q.groups; ++g) {
          const i64 c0 = g * kBlockQuant, n = std::min<i64>(kBlockQuant, C - c0);
          const float s = dyn_scale(absmax(x + c0, n));
          q.scale[rows[i] * q.groups + g] = s;
          quant_range(x + c0, n, s);
        }
      });
      return;
  }
}

// One GEMM output element: activation row `a` (with its scales) times decoded weight row `w`
// (row r of expert e's [R, C] matrix), scaled as the scheme says.
struct WeightScales {
  Scheme scheme;
  const float* scale;  // null for kBf16
  i64 R, C, row_blocks, col_blocks;
};

float gemm_elem(const WeightScales& ws, const float* a, const float* a_scale, const float* w, i64 e, i64 r) {
  switch (ws.scheme) {
    case Scheme::kBf16: return dot(a, w, ws.C);
    case Scheme::kFp8PerTensor: return dot(a, w, ws.C) * a_scale[0] * ws.scale[e];
    case Scheme::kFp8PerChannel: return dot(a, w, ws.C) * a_scale[0] * ws.scale[e * ws.R + r];
    case Scheme::kFp8Block128: {
      const float* wsr = ws.scale + (e * ws.row_blocks + r / kBlockQuant) * ws.col_blocks;
      float acc = 0.0f;
      for (i64 g = 0; g < ws.col_blocks; ++g) {
        const i64 c0 = g * kBlockQuant, n = std::min<i64>(kBlockQuant, ws.C - c0);
        acc += dot(a + c0, w + c0, n) * a_scale[g] * wsr[g];
      }
      return acc;
    }
  }
  return 0.0f;
}

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

// Work is cut into (expert, block of weight rows) items so one hot expert still spreads
// over every thread.
struct Item {
  i64 expert, row0, row1;
  const i64* slots;
  i64 num_slots;
};

std::vector<float> bias_as_float(const void* b, DType dtype, i64 n) {
  std::vector<float> out;
  if (b == nullptr) return out;
  out.resize(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = load_as_float(b, dtype, i);
  return out;
}

}  // namespace

void run_moe(const detail::MoeCall& call) {
  const MoeProblem& p = call.problem;
  const i64 M = p.num_tokens, E = p.num_experts, Eg = p.num_experts_global, k = p.top_k;
  const i64 K = p.hidden_size, N = p.intermediate_size;
  if (M <= 0) return;
  const int threads = call.num_threads;
  const Scheme scheme = p.scheme;
  const DType wdtype = scheme == Scheme::kBf16 ? p.act_dtype : DType::kFp8E4m3;

  // ---- routing (fused_moe) ----
  const std::int32_t* topk_ids = call.topk_ids;
  const float* topk_weights = call.topk_weights;
  std::vector<std::int32_t> ids_store;
  std::vector<float> weights_store;
  if (p.with_routing) {
    detail::RouteCall rc;
    rc.num_tokens = M;
    rc.num_experts = Eg;
    rc.routing = p.routing;
    rc.routing.top_k = static_cast<int>(k);
    rc.logits_dtype = p.logits_dtype;
    rc.router_logits = call.router_logits;
    rc.correction_bias = p.has_correction_bias ? call.correction_bias : nullptr;
    rc.topk_ids = call.topk_ids_out;
    rc.topk_weights = call.topk_weights_out;
    if (rc.topk_ids == nullptr) {
      ids_store.resize(static_cast<std::size_t>(M * k));
      rc.topk_ids = ids_store.data();
    }
    if (rc.topk_weights == nullptr) {
      weights_store.resize(static_cast<std::size_t>(M * k));
      rc.topk_weights = weights_store.data();
    }
    rc.num_threads = threads;
    run_route(rc);
    topk_ids = rc.topk_ids;
    topk_weights = rc.topk_weights;
  }
  if (topk_ids == nullptr || topk_weights == nullptr)
    throw Error(Status::kInternal, "cpu::run_moe: topk_ids / topk_weights missing");

  // ---- slot -> local expert, and each expert's slots in ascending slot order ----
  const i64 P = M * k;
  std::vector<i64> local(static_cast<std::size_t>(P));
  std::vector<i64> count(static_cast<std::size_t>(E) + 1, 0);
  // Ids and map entries are not validated up front (on CUDA they may live on the device): a slot
  // whose id is outside [0, E_global) or whose map entry is outside [0, E) contributes nothing,
  // like -1, and is recorded as a fault unless it is -1 (moekit/faults.hpp): in the process's CPU
  // record, or, in the debug mode, thrown here before anything is computed.
  for (i64 s = 0; s < P; ++s) {
    const i64 id = topk_ids[s];
    i64 e = (id >= 0 && id < Eg) ? id : -1;
    if (e >= 0 && p.has_expert_map) e = call.expert_map[e];
    if (e >= E) e = -1;
    if (e < 0) {
      const Fault f = detail::id_fault(s / k, static_cast<std::int32_t>(s % k), topk_ids[s], Eg,
                                       p.has_expert_map ? call.expert_map : nullptr, E);
      if (f.tensor != FaultTensor::kNone) {
        if (call.debug_faults) detail::throw_fault(f, "MOEKIT_DEBUG_FAULTS: a bad expert id");
        detail::record_cpu_fault(f);
      }
    }
    local[static_cast<std::size_t>(s)] = e < 0 ? -1 : e;
    if (e >= 0) ++count[static_cast<std::size_t>(e) + 1];
  }
  for (i64 e = 0; e < E; ++e) count[e + 1] += count[e];  // count[e]: first entry of expert e
  std::vector<i64> slots(static_cast<std::size_t>(count[E]));
  {
    std::vector<i64> fill(count.begin(), count.end() - 1);
    for (i64 s = 0; s < P; ++s)
      if (local[s] >= 0) slots[static_cast<std::size_t>(fill[local[s]]++)] = s;
  }
  std::vector<i64> local_slots = slots;  // every local slot, by expert
  std::sort(local_slots.begin(), local_slots.end());

  const std::vector<float> b13 = bias_as_float(p.has_bias13 ? call.b13 : nullptr, p.bias_dtype, E * 2 * N);
  const std::vector<float> b2 = bias_as_float(p.has_bias2 ? call.b2 : nullptr, p.bias_dtype, E * K);

  // ---- GEMM1 input: every token's hidden row, quantized once ----
  QuantRows a1;
  a1.cols = K;
  a1.groups = ceil_div(K, kBlockQuant);
  a1.value.resize(static_cast<std::size_t>(M * K));
  parallel_for(M, threads, [&](i64 m) {
    for (i64 c = 0; c < K; ++c) a1.value[static_cast<std::size_t>(m * K + c)] = load_as_float(call.hidden, p.act_dtype, m * K + c);
  });
  float s13 = 1.0f;
  if (scheme == Scheme::kFp8PerTensor)
    s13 = p.static_a13_scale ? call.a13_scale[0] : dyn_scale(absmax(a1.value.data(), M * K));
  {
    std::vector<i64> all_rows(static_cast<std::size_t>(M));
    for (i64 m = 0; m < M; ++m) all_rows[m] = m;
    quantize_rows(scheme, p.act_dtype, a1, all_rows, s13, threads);
  }

  // ---- GEMM1 + activation into h [P, N] (rows of local slots only) ----
  QuantRows h;
  h.cols = N;
  h.groups = ceil_div(N, kBlockQuant);
  h.value.assign(static_cast<std::size_t>(P * N), 0.0f);
  const WeightScales ws13{scheme, call.w13_scale, 2 * N, K, ceil_div(2 * N, kBlockQuant), ceil_div(K, kBlockQuant)};
  constexpr i64 kRowsPerItem1 = 16;  // 16 gate + 16 up rows per item
  std::vector<Item> items;
  for (i64 e = 0; e < E; ++e) {
    const i64 n_slots = count[e + 1] - count[e];
    if (n_slots == 0) continue;
    for (i64 r0 = 0; r0 < N; r0 += kRowsPerItem1)
      items.push_back({e, r0, std::min(N, r0 + kRowsPerItem1), slots.data() + count[e], n_slots});
  }
  parallel_for(static_cast<i64>(items.size()), threads, [&](i64 it) {
    const Item& item = items[static_cast<std::size_t>(it)];
    const i64 e = item.expert;
    std::vector<float> wg(static_cast<std::size_t>(K)), wu(static_cast<std::size_t>(K));
    for (i64 n = item.row0; n < item.row1; ++n) {
      decode_row(call.w13, wdtype, e * 2 * N + n, K, wg.data());
      decode_row(call.w13, wdtype, e * 2 * N + N + n, K, wu.data());
      for (i64 i = 0; i < item.num_slots; ++i) {
        const i64 s = item.slots[i], m = s / k;
        float g = gemm_elem(ws13, a1.row(m), a1.row_scale(m), wg.data(), e, n);
        float u = gemm_elem(ws13, a1.row(m), a1.row_scale(m), wu.data(), e, N + n);
        if (p.apply_router_weight_on_input) {
          g *= topk_weights[s];
          u *= topk_weights[s];
        }
        if (!b13.empty()) {
          g += b13[static_cast<std::size_t>(e * 2 * N + n)];
          u += b13[static_cast<std::size_t>(e * 2 * N + N + n)];
        }
        h.value[static_cast<std::size_t>(s * N + n)] = activate(p.activation, g, u);
      }
    }
  });

  // ---- GEMM2 input: h re-quantized (per tensor needs every local row first: two passes) ----
  float s2 = 1.0f;
  if (scheme == Scheme::kFp8PerTensor) {
    if (p.static_a2_scale) {
      s2 = call.a2_scale[0];
    } else {
      float a = 0.0f;
      for (i64 s : local_slots) a = std::fmax(a, absmax(h.row(s), N));
      s2 = dyn_scale(a);
    }
  }
  quantize_rows(scheme, p.act_dtype, h, local_slots, s2, threads);

  // ---- GEMM2 per token chunk (bounds the fp32 [slots, K] buffer), then the combine ----
  const WeightScales ws2{scheme, call.w2_scale, K, N, ceil_div(K, kBlockQuant), ceil_div(N, kBlockQuant)};
  constexpr i64 kYFloats = i64{16} << 20;  // 64 MB of per-slot GEMM2 results per chunk
  const i64 chunk_tokens = std::max<i64>(1, std::min<i64>(M, kYFloats / std::max<i64>(k * K, 1)));
  std::vector<float> y(static_cast<std::size_t>(chunk_tokens * k * K));
  constexpr i64 kRowsPerItem2 = 32;
  for (i64 m0 = 0; m0 < M; m0 += chunk_tokens) {
    const i64 m1 = std::min(M, m0 + chunk_tokens), s0 = m0 * k, s1 = m1 * k;
    items.clear();
    for (i64 e = 0; e < E; ++e) {
      const i64* b = slots.data() + count[e];
      const i64* end = slots.data() + count[e + 1];
      const i64* lo = std::lower_bound(b, end, s0);
      const i64* hi = std::lower_bound(lo, end, s1);
      if (hi == lo) continue;
      for (i64 r0 = 0; r0 < K; r0 += kRowsPerItem2)
        items.push_back({e, r0, std::min(K, r0 + kRowsPerItem2), lo, hi - lo});
    }
    parallel_for(static_cast<i64>(items.size()), threads, [&](i64 it) {
      const Item& item = items[static_cast<std::size_t>(it)];
      const i64 e = item.expert;
      std::vector<float> w(static_cast<std::size_t>(N));
      for (i64 c = item.row0; c < item.row1; ++c) {
        decode_row(call.w2, wdtype, e * K + c, N, w.data());
        for (i64 i = 0; i < item.num_slots; ++i) {
          const i64 s = item.slots[i];
          float acc = gemm_elem(ws2, h.row(s), h.row_scale(s), w.data(), e, c);
          if (!b2.empty()) acc += b2[static_cast<std::size_t>(e * K + c)];
          if (!p.apply_router_weight_on_input) acc *= topk_weights[s];
          y[static_cast<std::size_t>((s - s0) * K + c)] = acc;
        }
      }
    });
    parallel_for(m1 - m0, threads, [&](i64 i) {
      const i64 m = m0 + i;
      std::vector<float> sum(static_cast<std::size_t>(K), 0.0f);
      for (i64 j = 0; j < k; ++j) {
        const i64 s = m * k + j;
        if (local[s] < 0) continue;
        const float* ys = y.data() + (s - s0) * K;
        for (i64 c = 0; c < K; ++c) sum[c] += ys[c];
      }
      auto* out = static_cast<std::uint16_t*>(call.out) + m * K;
      if (p.act_dtype == DType::kFp16) {
        for (i64 c = 0; c < K; ++c) out[c] = float_to_fp16(sum[c]);
      } else {
        for (i64 c = 0; c < K; ++c) out[c] = float_to_bf16(sum[c]);
      }
    });
  }
}

}  // namespace moekit::cpu
