// The streaming inv_rope_fp8_quant kernel (config.hpp InvRopeQuantStreamConfig; forced only,
// MOEKIT_ROPE_KERNEL=stream): moekit-launch-floor's read + write stream of this mix (4.0 TB/s at
// T = 16384 on the H200: a persistent grid, a warp a pair of rows, 16-byte register loads straight
// from global memory, no shared memory) with the bulk kernel's consumer math
// (kernel_bulk_sm90.cuh quantize_lane: the same float operations, so the same bytes).
//
// Warp w of W walks pairs q = w, w + W, ... of the token-major row order r = t * H + h (pair q:
// rows 2q, 2q + 1; lane row (l >> 2) & 1 of the consumer layout). No load waits on one issued in
// the same iteration: at pair q the warp issues pair q + 2W's position and pair q + W's cos / sin
// (from q + W's position, issued an iteration ago), quantizes pair q (its rows issued two
// iterations ago, its cos / sin one), then issues pair q + 2W's rows into the registers pair q
// freed. (aba14d5's version issued a pair's cos / sin right before its math, one latency an
// iteration: 130 us at V4-Pro T = 16384, against pipe4's 122.5; docs/rope_quant.md.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/kernels/rope_quant/kernel_bulk_sm90.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kWarps * 32, Cfg::kMinBlocksPerSm)
    inv_rope_quant_stream_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  static_assert(Cfg::kHeadDim == 512 && Cfg::kMaxRopeDim == 64, "the consumer layout: tail = channels 448..511");
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int jj = lane & 3, rb = (lane >> 2) & 1, b = lane >> 3;
  const int ti = jj + 4 * b;
  const int half = p.rope_dim >> 1;
  const int ci = tail_cos_index(p.rope_dim, ti);
  const int H = p.num_heads;
  const int TH = static_cast<int>(p.num_tokens) * H;  // < 2^31 (launcher)
  const int npairs = (TH + 1) / 2;
  const int W = static_cast<int>(gridDim.x) * Cfg::kWarps;

  // This lane's row of pair q (rows past T * H, the odd last one, read row TH - 1 and store nothing).
  auto row_of = [&](int q, int& t, int& h) {
    const int r = min(2 * q + rb, TH - 1);
    t = static_cast<int>(static_cast<unsigned>(r) / static_cast<unsigned>(H));
    h = r - t * H;
  };
  struct Rows {
    uint4 a0, a1, c0, c1;
    uint2 tw;
  };
  auto load_rows = [&](int q, Rows& x) {
    int t, h;
    row_of(q, t, h);
    const std::uint8_t* row = reinterpret_cast<const std::uint8_t*>(p.o + static_cast<std::int64_t>(t) * p.o_stride_t +
                                                                    static_cast<std::int64_t>(h) * p.o_stride_h);
    x.a0 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 32 * jj));
    x.a1 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 32 * jj + 16));
    x.c0 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 128 + 32 * jj));
    x.c1 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 128 + 32 * jj + 16));
    x.tw = __ldg(reinterpret_cast<const uint2*>(row + 896 + 8 * ti));
  };
  auto load_pos = [&](int q) {
    int t, h;
    row_of(q, t, h);
    return __ldg(p.positions + static_cast<std::int64_t>(t) * p.pos_stride);
  };
  // The cos / sin of the lane's two tail pairs (identity where not rotated or out of the cache).
  auto load_cs = [&](long long pos, float2& cv, float2& sv) {
    cv = make_float2(1.0f, 1.0f);
    sv = make_float2(0.0f, 0.0f);
    if (pos >= 0 && pos < p.max_pos && ci >= 0) {
      const float* c = p.cos_sin + pos * p.cache_stride;
      cv = __ldg(reinterpret_cast<const float2*>(c + ci));
      sv = __ldg(reinterpret_cast<const float2*>(c + half + ci));
    }
  };

  int q = static_cast<int>(blockIdx.x) * Cfg::kWarps + warp;
  // In flight before the loop: pair q's rows, position and cos / sin; pair q + W's rows and
  // position. (A warp's first pair waits for position -> cos / sin once.)
  Rows cur{}, nxt{};
  long long pos_cur = -1, pos_nxt = -1;
  float2 cv, sv, cv_nxt = make_float2(1.0f, 1.0f), sv_nxt = make_float2(0.0f, 0.0f);
  if (q < npairs) {
    pos_cur = load_pos(q);
    load_rows(q, cur);
    if (q + W < npairs) {
      pos_nxt = load_pos(q + W);
      load_rows(q + W, nxt);
    }
    load_cs(pos_cur, cv, sv);
  }
  for (; q < npairs; q += W) {
    const int qn = q + W, qnn = q + 2 * W;
    long long pos_nn = -1;
    if (qnn < npairs) pos_nn = load_pos(qnn);
    if (qn < npairs) load_cs(pos_nxt, cv_nxt, sv_nxt);
    int t, h;
    row_of(q, t, h);
    const bool valid = 2 * q + rb < TH;
    const bool ok = pos_cur >= 0 && pos_cur < p.max_pos;
    quantize_lane(p, cur.a0, cur.a1, cur.c0, cur.c1, cur.tw, cv, sv, ci, ok, valid, t, h, lane);
    cur = nxt;
    pos_cur = pos_nxt;
    cv = cv_nxt;
    sv = sv_nxt;
    pos_nxt = pos_nn;
    if (qnn < npairs) load_rows(qnn, nxt);
  }
  // Padded token rows [T, Tp) of the scales: CTA 0, after its rows.
  if (blockIdx.x == 0) zero_padding_all_heads(p, static_cast<int>(threadIdx.x), Cfg::kWarps * 32);
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
void run_inv_rope_quant_stream_sm90(const InvRopeQuantParams& p, int blocks, void* stream) {
  inv_rope_quant_stream_sm90_kernel<Cfg><<<blocks, Cfg::kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
int inv_rope_quant_stream_ctas_per_sm() {
  const void* fn = reinterpret_cast<const void*>(&inv_rope_quant_stream_sm90_kernel<Cfg>);
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 0));  // all L1
  int per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, Cfg::kWarps * 32, 0));
  return per_sm;
}

}  // namespace moekit::cuda
