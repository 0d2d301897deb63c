// The streaming inv_rope_fp8_quant kernel (config.hpp InvRopeQuantStreamConfig), for large T: the
// data movement moekit-launch-floor measured at 4.0 TB/s for this read / write mix on the H200
// (a persistent grid, a warp a pair of rows, 16-byte register loads straight from global memory,
// no shared memory), with the bulk kernel's consumer math (kernel_bulk_sm90.cuh quantize_lane:
// ~185 SASS instructions a row, the same float operations, so the same bytes).
//
// Warp w of W walks pairs q = w, w + W, ... of the token-major row order r = t * H + h (pair q:
// rows 2q, 2q + 1, lane row (l >> 2) & 1 of the consumer layout). Each iteration first issues the
// next pair's loads (its rows and positions), then waits for this pair's cos / sin (issued at the
// end of the previous iteration, once that pair's position had landed), quantizes and stores, and
// issues the next pair's cos / sin: a warp keeps the next pair's 2 KB in flight through its math,
// and the position -> cos/sin chain costs one latency an iteration that the SM's other warps cover.
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

  // A pair's loads for this lane: its main chunks, tail channels and its row's position (rows past
  // T * H, the odd last one, read row TH - 1 and store nothing).
  struct Rows {
    uint4 a0, a1, c0, c1;
    uint2 tw;
    long long pos;
  };
  auto load = [&](int q, Rows& x) {
    const int r = min(2 * q + rb, TH - 1);
    const int t = static_cast<int>(static_cast<unsigned>(r) / static_cast<unsigned>(H)), h = r - t * H;
    const std::uint8_t* row = reinterpret_cast<const std::uint8_t*>(p.o + static_cast<std::int64_t>(t) * p.o_stride_t +
                                                                    static_cast<std::int64_t>(h) * p.o_stride_h);
    x.pos = __ldg(p.positions + static_cast<std::int64_t>(t) * p.pos_stride);
    x.a0 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 32 * jj));
    x.a1 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 32 * jj + 16));
    x.c0 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 128 + 32 * jj));
    x.c1 = __ldg(reinterpret_cast<const uint4*>(row + 256 * b + 128 + 32 * jj + 16));
    x.tw = __ldg(reinterpret_cast<const uint2*>(row + 896 + 8 * ti));
  };
  // The cos / sin of the lane's two tail pairs (identity where not rotated or out of the cache).
  auto load_cs = [&](const Rows& x, float2& cv, float2& sv) {
    cv = make_float2(1.0f, 1.0f);
    sv = make_float2(0.0f, 0.0f);
    if (x.pos >= 0 && x.pos < p.max_pos && ci >= 0) {
      const float* c = p.cos_sin + x.pos * p.cache_stride;
      cv = __ldg(reinterpret_cast<const float2*>(c + ci));
      sv = __ldg(reinterpret_cast<const float2*>(c + half + ci));
    }
  };

  int q = static_cast<int>(blockIdx.x) * Cfg::kWarps + warp;
  Rows cur, nxt;
  float2 cv, sv;
  if (q < npairs) {
    load(q, cur);
    load_cs(cur, cv, sv);
  }
  for (; q < npairs; q += W) {
    const int qn = q + W;
    if (qn < npairs) load(qn, nxt);
    const int r = 2 * q + rb;
    const bool valid = r < TH;
    const int t = static_cast<int>(static_cast<unsigned>(min(r, TH - 1)) / static_cast<unsigned>(H));
    const int h = min(r, TH - 1) - t * H;
    const bool ok = cur.pos >= 0 && cur.pos < p.max_pos;
    quantize_lane(p, cur.a0, cur.a1, cur.c0, cur.c1, cur.tw, cv, sv, ci, ok, valid, t, h, lane);
    if (qn < npairs) {
      cur = nxt;
      load_cs(cur, cv, sv);
    }
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
