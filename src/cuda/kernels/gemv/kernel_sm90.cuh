// The GEMV decode kernel (sm_90a): a whole decode-sized MoE call in one cooperative launch, on
// the CUDA cores, every SM streaming its share of the weights (docs/gemv.md).
//
//   0. every CTA stages the call's token rows in shared memory (bf16 / fp16: cp.async; fp8: the
//      activation scale, static or the absmax of the whole hidden, then e4m3 rows) and routes the
//      call's M*k slots itself: the local expert of every slot, the touched experts in ascending
//      order and their slots in slot order. CTA 0 records bad ids and map entries;
//   1. GEMM1: the (touched expert, column) pairs, U*N of them, are split evenly over the CTAs;
//      a warp takes a pair, streams its gate row and its up row once and dots them with every
//      token the expert has (16-byte loads, fp32 FMAs in a fixed order, a butterfly sum), then
//      applies the router weight (on input), the bias and the activation and writes h[slot][col]
//      (fp32) to the workspace;
//   2. one grid-wide barrier (cooperative_groups; the launch is cooperative): every h exists;
//   3. GEMM2 + combine: CTA j owns the output columns [K*j/G, K*(j+1)/G) of every token. It
//      stages every slot's h in shared memory, rounded to the activation dtype (or quantized to
//      e4m3 with the static scale or the absmax of every h, which each CTA takes from the h it
//      stages: no grid-wide reduction), and runs a warp per
//      (token, owned column): the k slots' w2 row chunks spread over the lanes, each chunk's dot
//      times its slot's coefficient (fp8 scales, router weight on output) into one fp32
//      accumulator, a butterfly sum, the slots' b2 terms in slot order, rounded once into `out`.
//      A token with no local slot gets zeros.
//
// No allocation, no host synchronization, nothing zeroed before the launch (the barrier is the
// launch's own), CUDA-graph capturable. Every sum has a fixed order that does not depend on the
// grid: bitwise reproducible run to run.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/gemv/params.hpp"
#include "cuda/kernels/gemv/prologue.cuh"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::gemv {

struct E4m3 {};  // the e4m3 weight / staged-activation element

template <Operand kOp> struct OperandTypes;
template <> struct OperandTypes<Operand::kBf16> { using W = __nv_bfloat16; using Act = __nv_bfloat16; };
template <> struct OperandTypes<Operand::kF16> { using W = __half; using Act = __half; };
template <> struct OperandTypes<Operand::kE4m3Bf16> { using W = E4m3; using Act = __nv_bfloat16; };
template <> struct OperandTypes<Operand::kE4m3F16> { using W = E4m3; using Act = __half; };

// 16 bytes of elements of type W as floats (exact: every bf16, fp16 and e4m3 value is a float).
template <class W> struct Chunk;
template <> struct Chunk<__nv_bfloat16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void to_floats(const uint4& r, float (&v)[8]) {
    const std::uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
template <> struct Chunk<__half> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void to_floats(const uint4& r, float (&v)[8]) {
    const std::uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};
template <> struct Chunk<E4m3> {
  static constexpr int kElems = 16;
  static __device__ __forceinline__ void to_floats(const uint4& r, float (&v)[16]) {
    const std::uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 f = numerics::e4m3x2_to_float2(static_cast<std::uint16_t>(w[i / 2] >> (16 * (i % 2))));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};

// kFast: GEMM2's one-round form (launch_sm90.cu takes it where a call's tasks have one round of
// loads and a warp has two or more columns of a token: deepseek-v3 and qwen3-235b TP8); the
// plain instantiation keeps the general loop alone, whose code measured 13-26 % slower with both
// forms in one kernel (build 773e548, H200).
// GEMM1's finish of one (slot, intermediate column c of expert e), both GEMV kernels: the router
// weight when it goes on the input, b13's gate and up terms, the activation. gv / uv arrive
// dequantized (the fp8 scales are each kernel's).
__device__ __forceinline__ float gemm1_finish(const GemvParams& p, const float* tw, int slot, int e, std::int64_t N, int c,
                                              float gv, float uv) {
  if (p.weight_on_input) {
    gv *= tw[slot];
    uv *= tw[slot];
  }
  if (p.b13 != nullptr) {
    const std::int64_t idx[2] = {static_cast<std::int64_t>(e) * 2 * N + c, static_cast<std::int64_t>(e) * 2 * N + N + c};
    const bool live[2] = {true, true};
    float b[2];
    numerics::load_bias_gather<2>(p.b13, p.bias_type, idx, live, b);
    gv += b[0];
    uv += b[1];
  }
  return numerics::activate<numerics::ActMath::kIeeeRsqrt2>(p.act, gv, uv);
}

// GEMM2's b2 terms of (token t, output column r), both GEMV kernels: acc plus each local slot's
// b2[e][r] (times its router weight unless that went on the input), in slot order; the loads four
// slots at a time, issued together.
__device__ __forceinline__ float add_b2_terms(const GemvParams& p, float acc, int t, std::int64_t r, const int* slot_e,
                                              const float* tw) {
  const int k = p.top_k;
  const std::int64_t K = p.hidden_size;
  for (int j0 = 0; j0 < k; j0 += 4) {
    std::int64_t idx[4];
    bool live[4];
    int e[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      e[i] = j0 + i < k ? slot_e[t * k + j0 + i] : -1;
      live[i] = e[i] >= 0;
      idx[i] = static_cast<std::int64_t>(live[i] ? e[i] : 0) * K + r;
    }
    float b[4];
    numerics::load_bias_gather<4>(p.b2, p.bias_type, idx, live, b);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (live[i]) acc += p.weight_on_input ? b[i] : b[i] * tw[t * k + j0 + i];
  }
  return acc;
}

template <Operand kOp, bool kFast = false>
struct Gemv {
  using W = typename OperandTypes<kOp>::W;
  using ActT = typename OperandTypes<kOp>::Act;
  static constexpr bool kFp8 = std::is_same<W, E4m3>::value;
  static constexpr int kEs = kFp8 ? 1 : 2;           // bytes of a weight element
  static constexpr int kE = Chunk<W>::kElems;        // elements per 16-byte chunk
  static constexpr int kTokGroup = 4;                // tokens one pass of a GEMM1 pair dots
  static constexpr int kUnroll = 4;                  // 16-byte chunks per row a lane loads ahead
  static constexpr int kLoadsAhead = 8;              // 16-byte w2 loads a GEMM2 lane issues at once
  // The one-round form (kFast): a task's k x N chunks within 32 x kAhead, two tasks in flight a
  // warp (e4m3 chunks hold 16 weights: half as many cover the same rows, and fit the registers).
  static constexpr int kAhead = one_round_chunks_per_lane(kEs);

  // GEMM1 of one (expert, column) pair for nt <= TB tokens: g[t], u[t] (the butterfly sum: every
  // lane holds the totals). wg, wu: the gate and up rows; tok[t]: the token's staged row.
  template <int TB>
  static __device__ __forceinline__ void pair_dot(const std::uint8_t* wg, const std::uint8_t* wu,
                                                  const std::uint8_t* xs, std::int64_t row_bytes, const int (&tok)[TB],
                                                  int nt, int chunks, float (&g)[TB], float (&u)[TB]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < TB; ++t) g[t] = u[t] = 0.0f;
    for (int base = 0; base < chunks; base += 32 * kUnroll) {
      uint4 a[kUnroll], b[kUnroll];
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int q = base + i * 32 + lane;
        if (q < chunks) {
          a[i] = sm90::ld_stream_16(wg + static_cast<std::int64_t>(q) * 16);
          b[i] = sm90::ld_stream_16(wu + static_cast<std::int64_t>(q) * 16);
        }
      }
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int q = base + i * 32 + lane;
        if (q >= chunks) continue;
        float fa[kE], fb[kE];
        Chunk<W>::to_floats(a[i], fa);
        Chunk<W>::to_floats(b[i], fb);
#pragma unroll
        for (int t = 0; t < TB; ++t) {
          if (t >= nt) continue;
          float fx[kE];
          Chunk<W>::to_floats(*reinterpret_cast<const uint4*>(xs + tok[t] * row_bytes + static_cast<std::int64_t>(q) * 16),
                              fx);
#pragma unroll
          for (int e = 0; e < kE; ++e) {
            g[t] = fmaf(fa[e], fx[e], g[t]);
            u[t] = fmaf(fb[e], fx[e], u[t]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nt) {
        g[t] = warp_sum(g[t]);
        u[t] = warp_sum(u[t]);
      }
    }
  }

  // GEMM2: one 16-byte chunk of a w2 row dotted with its slot's staged h (hp: the chunk's kE
  // values), scaled by the slot's coefficient (*coef, read after the dot), into acc (fixed order).
  static __device__ __forceinline__ float chunk_dot(const uint4& w, const float* hp, const float* coef, float acc) {
    float fw[kE];
    Chunk<W>::to_floats(w, fw);
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; e += 4) {
      const float4 h4 = *reinterpret_cast<const float4*>(hp + e);
      d = fmaf(fw[e], h4.x, d);
      d = fmaf(fw[e + 1], h4.y, d);
      d = fmaf(fw[e + 2], h4.z, d);
      d = fmaf(fw[e + 3], h4.w, d);
    }
    return fmaf(d, *coef, acc);
  }

  // GEMM2's task end (token t, output column r): the butterfly sum of the lanes' partial sums, then
  // lane 0 adds the slots' b2 terms in slot order and rounds once into out.
  static __device__ __forceinline__ void finish_task(const GemvParams& p, float acc, int t, int r, const int* slot_e,
                                                     const float* tw) {
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) != 0) return;
    const std::int64_t K = p.hidden_size;
    if (p.b2 != nullptr) acc = add_b2_terms(p, acc, t, r, slot_e, tw);
    static_cast<ActT*>(p.out)[static_cast<std::int64_t>(t) * K + r] = from_float<ActT>(acc);
  }

  // One pair for the tokens sorted[b .. b+nt) (nt <= TB): dots, then lane t finalizes token t's
  // h: fp8 dequantization, router weight on input, bias, activation; h to the workspace.
  template <int TB>
  static __device__ __forceinline__ void pair(const GemvParams& p, const std::uint8_t* region, const int* sorted,
                                              const float* tw, int e, int c, int b, int nt, float xscale) {
    const int lane = threadIdx.x & 31;
    const std::int64_t K = p.hidden_size, N = p.inter_size;
    const std::int64_t row_bytes = K * kEs;
    const std::uint8_t* w13 = static_cast<const std::uint8_t*>(p.w13);
    const std::uint8_t* wg = w13 + (static_cast<std::int64_t>(e) * 2 * N + c) * row_bytes;
    const std::uint8_t* wu = wg + N * row_bytes;
    int tok[TB];
#pragma unroll
    for (int t = 0; t < TB; ++t) tok[t] = t < nt ? sorted[b + t] / p.top_k : 0;
    float g[TB], u[TB];
    pair_dot<TB>(wg, wu, region, row_bytes, tok, nt, static_cast<int>(row_bytes / 16), g, u);
    const float ws = kFp8 ? xscale * p.w13_scale[e] : 1.0f;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t >= nt || lane != t) continue;
      const int slot = sorted[b + t];
      float gv = g[t], uv = u[t];
      if (kFp8) {
        gv *= ws;
        uv *= ws;
      }
      const float h = gemm1_finish(p, tw, slot, e, N, c, gv, uv);
      p.h_buf[static_cast<std::int64_t>(slot) * N + c] = h;
    }
  }

  static __device__ void run(const GemvParams& p, std::uint8_t* smem) {
    namespace cg = cooperative_groups;
    const SmemLayout& L = p.smem;
    int* slot_e = reinterpret_cast<int*>(smem + L.slot_e_off);
    int* sorted = reinterpret_cast<int*>(smem + L.sorted_off);
    int* ue = reinterpret_cast<int*>(smem + L.ue_off);
    int* uoff = reinterpret_cast<int*>(smem + L.uoff_off);
    int* cnt = reinterpret_cast<int*>(smem + L.cnt_off);
    float* scratch = reinterpret_cast<float*>(smem + L.scratch_off);
    float* tw = scratch + 32;              // [kMaxSlots]: the slots' router weights
    float* coef = scratch + 32 + kMaxSlots;  // [kMaxSlots]: the slots' GEMM2 coefficients
    std::uint8_t* region = smem + L.region_off;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int M = p.num_tokens, k = p.top_k, P = M * k;
    const std::int64_t K = p.hidden_size, N = p.inter_size;
    const std::int64_t row_bytes = K * kEs;  // a w13 row and a staged token row
    const int G = static_cast<int>(gridDim.x), j = static_cast<int>(blockIdx.x);
    std::uint64_t* stamps = (p.phases != nullptr && j < p.phase_ctas && tid == 0)
                                ? p.phases + static_cast<std::int64_t>(j) * kPhaseWords : nullptr;
    auto stamp = [stamps](int w) {
      if (stamps != nullptr) stamps[w] = sm90::globaltimer_ns();
    };
    stamp(kPhaseEntry);

    // ---- 0a. the token rows into shared memory (bf16 / fp16), or hidden's first chunks into
    // registers (fp8), in flight during the routing ----
    uint4 hx[kHiddenAhead];
    if constexpr (!kFp8) stage_rows_async(p, region, static_cast<int>(row_bytes));
    else load_hidden_ahead<ActT>(p, hx);

    // ---- 0b. routing (prologue.cuh): every slot's local expert, the touched experts, their slots;
    // by warp 0 alone where the call has few slots (route_warp), the other warps going on ----
    const RouteTables rt{slot_e, sorted, ue, uoff, cnt, tw};
    if (p.warp_route != 0 && P <= kWarpRouteSlots) {
      if (warp == 0) route_warp(p, rt, reinterpret_cast<int*>(scratch));
    } else {
      route_and_scan(p, rt, reinterpret_cast<int*>(scratch));
      if (warp == 0) place_slots(rt, P);
    }

    // ---- 0c. fp8: the activation scale, then the token rows as e4m3 ----
    float xscale = 1.0f;
    if constexpr (kFp8) {
      xscale = stage_rows_e4m3<ActT>(p, region, static_cast<int>(row_bytes), scratch, hx);
    } else {
      sm90::cp_async_wait_all_groups();
    }
    __syncthreads();  // token rows staged, slots placed
    stamp(kPhaseRouted);
    const int U = reinterpret_cast<const int*>(scratch)[kWarps];  // touched experts
    const std::int64_t Q = static_cast<std::int64_t>(U) * N;      // GEMM1 pairs of the call
    const std::int64_t q0 = Q * j / G, q1 = Q * (j + 1) / G;
    const int r0 = static_cast<int>(K * j / G), r1 = static_cast<int>(K * (j + 1) / G);  // owned columns
    const std::uint8_t* w2 = static_cast<const std::uint8_t*>(p.w2);
    const std::int64_t w2_row = N * kEs;

    // ---- 1. GEMM1: this CTA's pairs, one warp a pair ----
    for (std::int64_t q = q0 + warp; q < q1; q += kWarps) {
      const int u = static_cast<int>(q / N);
      const int c = static_cast<int>(q % N);
      const int e = ue[u];
      const int b = uoff[u], T = uoff[u + 1] - b;
      for (int t0 = 0; t0 < T; t0 += kTokGroup) {
        const int nt = min(kTokGroup, T - t0);
        if (nt == 1) pair<1>(p, region, sorted, tw, e, c, b + t0, nt, xscale);
        else if (nt == 2) pair<2>(p, region, sorted, tw, e, c, b + t0, nt, xscale);
        else pair<4>(p, region, sorted, tw, e, c, b + t0, nt, xscale);
      }
    }
    stamp(kPhaseGemm1);

    // ---- 2. every h of the call exists (the launch is cooperative: its own barrier) ----
    cg::this_grid().sync();
    stamp(kPhaseBarrier);

    // ---- 3. GEMM2 + combine over this CTA's columns ----
    // Every placed slot's h, as GEMM2 takes it, into the region (the token rows are no longer
    // read): rounded to the activation dtype, or fp8 through e4m3 with the static scale or the
    // dynamic one. The dynamic scale is the absmax of every h of the call: every CTA stages all of
    // them here anyway, so it folds them as they arrive (raw into the region), reduces over the CTA
    // and quantizes its own words in place; the same max (order-free) as a grid-wide reduction
    // would give, without one more round trip after the barrier.
    float* hs = reinterpret_cast<float*>(region);
    float4* hs4 = reinterpret_cast<float4*>(hs);
    const float4* hb4 = reinterpret_cast<const float4*>(p.h_buf);
    const std::int64_t n4 = static_cast<std::int64_t>(P) * N / 4;  // N % 8 == 0
    auto placed = [&](std::int64_t i) { return slot_e[static_cast<int>(i * 4 / N)] >= 0; };
    float hscale = 1.0f;
    if constexpr (kFp8) {
      auto to_e4m3 = [](float4 v, float inv) {
        const float2 fa = numerics::e4m3x2_to_float2(numerics::e4m3x2(v.x * inv, v.y * inv));
        const float2 fb = numerics::e4m3x2_to_float2(numerics::e4m3x2(v.z * inv, v.w * inv));
        return make_float4(fa.x, fa.y, fb.x, fb.y);
      };
      if (p.a2_scale != nullptr) {
        hscale = p.a2_scale[0];
        const float inv = 1.0f / hscale;
        for (std::int64_t i = tid; i < n4; i += kThreads)
          if (placed(i)) hs4[i] = to_e4m3(__ldcg(hb4 + i), inv);
      } else {
        float a = 0.0f;
        for (std::int64_t i = tid; i < n4; i += kThreads) {
          if (!placed(i)) continue;
          const float4 v = __ldcg(hb4 + i);
          a = numerics::fold_absmax4(a, v);
          hs4[i] = v;
        }
        hscale = numerics::dynamic_scale(block_absmax(a, scratch));
        const float inv = 1.0f / hscale;
        for (std::int64_t i = tid; i < n4; i += kThreads)  // this thread's own words: no barrier
          if (placed(i)) hs4[i] = to_e4m3(hs4[i], inv);
      }
    } else {
      for (std::int64_t i = tid; i < n4; i += kThreads) {
        if (!placed(i)) continue;
        const float4 v = __ldcg(hb4 + i);
        hs4[i] = make_float4(to_float(from_float<ActT>(v.x)), to_float(from_float<ActT>(v.y)),
                             to_float(from_float<ActT>(v.z)), to_float(from_float<ActT>(v.w)));
      }
    }
    // Each slot's GEMM2 coefficient: the fp8 scales, and the router weight unless it went in.
    for (int sl = tid; sl < P; sl += kThreads) {
      const int e = slot_e[sl];
      const float scale = kFp8 && e >= 0 ? hscale * p.w2_scale[e] : 1.0f;
      coef[sl] = e < 0 ? 0.0f : (p.weight_on_input ? scale : scale * tw[sl]);
    }
    __syncthreads();
    stamp(kPhaseStaged);

    // Tasks (token t, owned column r), one warp each: the task's (slot j, 16-byte chunk q) loads,
    // k x (N * es / 16) of them, are spread over the lanes, kLoadsAhead per lane in flight before
    // the first FMA (whatever k and N: 2 slots of 224 chunks for mixtral TP8, 8 of 12 for
    // qwen3-30b TP8). A chunk's dot is scaled by its slot's coefficient (the fp8 scales and the
    // router weight on output) and added to one accumulator in a fixed order; the butterfly sums
    // the lanes; lane 0 adds the slots' b2 terms in slot order.
    const int C2 = static_cast<int>(N * kEs / 16);  // 16-byte chunks of a w2 row
    const int total = k * C2;
    const int R = r1 - r0;
    const int tasks = M * R;
    if constexpr (kFast) {
      static_assert(32 * kAhead <= 256, "sq packs a chunk index below 256");
      if (total > 32 * kAhead) __trap();  // the host never launches it so (gemv_fast_gemm2): loud, not wrong
      // The one-round form (total <= 32 kAhead; the host checks). A lane's chunks idx = 32 i + lane
      // (slot jj = idx / C2, chunk qq) are the same for every task of a token, so their slots and
      // row addresses are set once a token (set_token) instead of per chunk and task, and the next
      // task's loads go out before this task's FMAs when it has the same token: two tasks' loads in
      // flight a warp. The same sums in the same order as the general loop below.
      int sq[kAhead];                  // slot * 256 + qq (qq < C2 <= 256 here), -1: no chunk
      const std::uint8_t* ga[kAhead];  // the chunk in w2 row 0 of its slot's expert
      auto set_token = [&](int t) {
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
          const int idx = i * 32 + lane;
          const int jj = idx / C2, qq = idx - jj * C2;
          const int e = idx < total ? slot_e[t * k + jj] : -1;
          sq[i] = e >= 0 ? (t * k + jj) * 256 + qq : -1;
          ga[i] = w2 + static_cast<std::int64_t>(e >= 0 ? e : 0) * K * w2_row + qq * 16;
        }
      };
      auto load = [&](uint4 (&wv)[kAhead], int r) {
#pragma unroll
        for (int i = 0; i < kAhead; ++i)
          if (sq[i] >= 0) wv[i] = sm90::ld_stream_16(ga[i] + r * w2_row);
      };
      uint4 cur[kAhead], nxt[kAhead];
      if (warp < tasks) {
        set_token(warp / R);
        load(cur, r0 + warp % R);
      }
      for (int task = warp; task < tasks; task += kWarps) {
        const int t = task / R, r = r0 + task % R;
        const int next = task + kWarps;
        const bool ahead = next < tasks && next / R == t;
        if (ahead) load(nxt, r0 + next % R);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
          if (sq[i] < 0) continue;
          const int slot = sq[i] >> 8, qq = sq[i] & 255;
          acc = chunk_dot(cur[i], hs + static_cast<std::int64_t>(slot) * N + qq * kE, coef + slot, acc);
        }
        finish_task(p, acc, t, r, slot_e, tw);
        if (next < tasks && !ahead) {  // the next task is another token's
          set_token(next / R);
          load(nxt, r0 + next % R);
        }
#pragma unroll
        for (int i = 0; i < kAhead; ++i) cur[i] = nxt[i];
      }
    } else {
      for (int task = warp; task < tasks; task += kWarps) {
        const int t = task / R;
        const int r = r0 + task % R;
        const int* se = slot_e + t * k;
        float acc = 0.0f;
        for (int base = 0; base < total; base += 32 * kLoadsAhead) {
          uint4 wv[kLoadsAhead];
          int ei[kLoadsAhead];
#pragma unroll
          for (int i = 0; i < kLoadsAhead; ++i) {
            const int idx = base + i * 32 + lane;
            const int jj = idx / C2, qq = idx - jj * C2;
            ei[i] = idx < total ? se[jj] : -1;
            if (ei[i] >= 0)
              wv[i] = sm90::ld_stream_16(w2 + (static_cast<std::int64_t>(ei[i]) * K + r) * w2_row +
                                         static_cast<std::int64_t>(qq) * 16);
          }
#pragma unroll
          for (int i = 0; i < kLoadsAhead; ++i) {
            if (ei[i] < 0) continue;
            const int idx = base + i * 32 + lane;
            const int jj = idx / C2, qq = idx - jj * C2;
            acc = chunk_dot(wv[i], hs + static_cast<std::int64_t>(t * k + jj) * N + qq * kE, coef + t * k + jj, acc);
          }
        }
        finish_task(p, acc, t, r, slot_e, tw);
      }
    }
    if (p.phases != nullptr && j < p.phase_ctas) {
      __syncthreads();  // thread 0 stamps when every warp is done
      stamp(kPhaseExit);
    }
  }
};

template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  Gemv<kOp>::run(p, smem_raw);
#endif
}

// GEMM2's one-round form (Gemv<kOp, true>; launch_sm90.cu says where it runs).
template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_fast_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  Gemv<kOp, true>::run(p, smem_raw);
#endif
}

// ---- host side of one instantiation (inst/*.cu) ----

template <Operand kOp>
int gemv_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_sm90_kernel<kOp>, p, grid, stream);
}

template <Operand kOp>
int gemv_fast_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_fast_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_fast_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_fast_sm90_kernel<kOp>, p, grid, stream);
}

}  // namespace moekit::cuda::gemv
