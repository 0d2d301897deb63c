// The half-warp inv_rope_fp8_quant kernel (config.hpp InvRopeQuantHalf): the pipelined
// kernel's persistent grid and per-lane cp.async ring (kernel_pipe_sm90.cuh), with a row per
// half-warp instead of a warp, so that one warp instruction serves two rows. The pipelined kernel
// issues ~300 SASS instructions a row and is bound by them (Nsight Compute: 0.70 issued a
// scheduler a cycle at 69 % of DRAM bandwidth); here the per-row work that does not grow with the
// channels (ring bookkeeping, addresses, positions, block reductions, scales) is paid once per two
// rows, and the four block absmaxes of a row take one reduce-scatter (5 shuffles) instead of
// 4 shuffles each. The same float operations per element as the other kernels (kernel_sm90.cuh:
// inverse_rotate, absmax8, scale_exponent, e4m3x2; canonical_nan_bytes), so the same bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/kernels/rope_quant/kernel_pipe_sm90.cuh"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {
namespace rope_quant {

// A half-warp's lane layout of a 512-channel row: lane s (0..15) holds chunks s + 16m, m = 0..3
// (8 channels = 16 bytes each), so chunk s + 16m lies in block m and every block is the 16 lanes'
// m-th chunk; a load or store instruction of the half covers 256 contiguous bytes of the row.
// The last 64 channels (the rotated ones for rope_dim <= 64) are chunk s + 48 of lanes 8..15:
// 4 pairs each. A half's ring: every slot is written and read by the same lane (as the pipelined
// kernel's), so cp.async.wait_group alone orders them; cos/sin and position slots exist for the
// rotating lanes (8..15) only.
template <int kStages>
struct HalfRing {
  static constexpr int kCsLanes = 8;
  uint4 data[kStages][64];                 // [stage][16-byte chunk]: the row's 1 KB, as in global
  float cs[kStages][kCsLanes][8];          // [stage][lane - 8]: cos of its 4 pairs, then their sin
  long long pos[2 * kStages][kCsLanes];    // [ring of 2 kStages][lane - 8]: positions[t]
};

// The four block absmaxes a[m] of a half's row, reduced over its 16 lanes at once
// (reduce-scatter): after the xor-8 step a lane keeps two blocks (bit 3 of the lane: blocks 0, 1
// or 2, 3), after xor-4 one (bit 2), then xor-2 and xor-1 complete it. Returns the maximum of
// block 2 (s >> 3) + ((s >> 2) & 1), for s = the lane in its half. fmaxf drops NaNs, so any
// order gives the same maximum (absmax8's note).
__device__ __forceinline__ float half_block_absmax(const float (&a)[4], int s) {
  const bool hi8 = (s & 8) != 0, hi4 = (s & 4) != 0;
  float k0 = hi8 ? a[2] : a[0], k1 = hi8 ? a[3] : a[1];
  const float s0 = hi8 ? a[0] : a[2], s1 = hi8 ? a[1] : a[3];
  k0 = fmaxf(k0, __shfl_xor_sync(0xffffffffu, s0, 8));
  k1 = fmaxf(k1, __shfl_xor_sync(0xffffffffu, s1, 8));
  float keep = hi4 ? k1 : k0;
  const float send = hi4 ? k0 : k1;
  keep = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, 4));
  keep = fmaxf(keep, __shfl_xor_sync(0xffffffffu, keep, 2));
  keep = fmaxf(keep, __shfl_xor_sync(0xffffffffu, keep, 1));
  return keep;
}

// One half's row: x[m] = chunk s + 16m, cs = cos[4] then sin[4] of a rotating lane's pairs (read
// only where a pair is rotated), ok = the row's position lies in the cache (else a NaN row),
// live = the row exists (its stores run); qrow = the row's e4m3 bytes, scol = its scale column
// of block 0 at token 0 (fp32 layout: block m at scol + m * s_stride_b; packed: the word), t = its
// token. Warp-uniform: both halves call it (the shuffles stay inside each half).
__device__ __forceinline__ void quantize_row_half(const InvRopeQuantParams& p, const uint4 (&x)[4], const float (&cs)[8],
                                                  bool ok, bool live, std::uint8_t* qrow, std::uint32_t* scol,
                                                  std::int64_t t, int nope, int lane) {
  const int s = lane & 15;
  float y[4][8];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const std::uint32_t w[4] = {x[m].x, x[m].y, x[m].z, x[m].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      y[m][2 * k] = bf16_lo(w[k]);
      y[m][2 * k + 1] = bf16_hi(w[k]);
    }
  }
  // Chunk s + 48 of lanes 8..15 holds channels 8 (s + 48) ..+8: pair k rotated where its even
  // channel is >= nope.
  if (s >= 8) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (8 * (s + 48) + 2 * k >= nope) inverse_rotate(y[3][2 * k], y[3][2 * k + 1], cs[k], cs[4 + k]);
  }
  float a[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) a[m] = absmax8(y[m]);  // fmaxf: a NaN never wins
  const std::uint32_t Eown = scale_exponent(half_block_absmax(a, s));
  const int base = lane & 16;
  std::uint32_t E[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) E[m] = __shfl_sync(0xffffffffu, Eown, base | (4 * m));
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float inv = __uint_as_float((254u - E[m]) << 23);  // 1 / scale, exact
    std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k)  // exact products (powers of two); RNE, satfinite: +-Inf -> +-448
      packed[k >> 1] |= static_cast<std::uint32_t>(numerics::e4m3x2(y[m][2 * k] * inv, y[m][2 * k + 1] * inv)) << (16 * (k & 1));
    const std::uint32_t lo = ok ? canonical_nan_bytes(packed[0]) : 0x7f7f7f7fu;
    const std::uint32_t hi = ok ? canonical_nan_bytes(packed[1]) : 0x7f7f7f7fu;
    if (live) *reinterpret_cast<uint2*>(qrow + (s + 16 * m) * 8) = make_uint2(lo, hi);
  }
  // Scales: fp32, the lane holding block (s >> 2) writes it (lanes 0, 4, 8, 12); packed, lane 0.
  // A NaN row gets the NaN 0x7fffffff (fp32) / 0xffffffff (packed).
  if (live) {
    if (p.packed_ue8m0) {
      if (s == 0) scol[t] = ok ? (E[0] | (E[1] << 8) | (E[2] << 16) | (E[3] << 24)) : 0xffffffffu;
    } else if ((s & 3) == 0) {
      scol[(s >> 2) * p.s_stride_b + t] = ok ? Eown << 23 : 0x7fffffffu;
    }
  }
}

}  // namespace rope_quant

// The ring and its group schedule are the pipelined kernel's (kernel_pipe_sm90.cuh), per half:
// group G_i, committed at iteration i, holds the data of row i + S - 1, the cos/sin of row
// i + S - 2 and the position of row i + 2S - 2 of each half; cp.async.wait_group(S - 3) at
// iteration j completes row j's data and cos/sin and row j + S - 2's position.
//
// The grid: persistent, V = 2 x warps half-warps, a multiple of H (launch_sm90.cu), so half
// v = 2 x warp + (lane >> 4) keeps head h = v % H and walks tokens t0 = v / H, t0 + V / H, ...
// (rows v + j V of the token-major order r = t H + h). The two halves of a warp may run out of
// tokens one iteration apart (odd H): the loop runs while either has a row, the other's copies
// and stores off.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kWarps * 32, Cfg::kMinBlocksPerSm)
    inv_rope_quant_half_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  using namespace sm90;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kS = Cfg::kStages;
  constexpr int kWarps = Cfg::kWarps;
  constexpr int kBlocksPerHead = kD / 128;
  static_assert(kD == 512 && Cfg::kMaxRopeDim == 64, "the rotated pairs are chunks 56..63 (lanes 8..15 of a half)");
  __shared__ HalfRing<kS> rings[2 * kWarps];

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int s = lane & 15, half = lane >> 4;
  HalfRing<kS>& sm = rings[2 * warp + half];
  const int H = p.num_heads, T = static_cast<int>(p.num_tokens);
  const int nope = kD - p.rope_dim, hr = p.rope_dim >> 1;
  const bool cs_lane = s >= 8;
  const int cl = cs_lane ? s - 8 : 0;            // cos/sin and position slot of a rotating lane
  const int i0 = (8 * (s + 48) - nope) / 2;      // cos index of its first pair (< 0: not rotated)
  const std::uint32_t data0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.data[0][0]));
  const std::uint32_t cs0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.cs[0][cl][0]));
  const std::uint32_t pos0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.pos[0][cl]));
  constexpr std::uint32_t kDataStage = sizeof(sm.data[0]), kCsStage = sizeof(sm.cs[0]), kPosStage = sizeof(sm.pos[0]);

  // Padded token rows [T, Tp) of every head's scale columns get 0 (CTA 0).
  if (blockIdx.x == 0) zero_padding_all_heads(p, static_cast<int>(threadIdx.x), kWarps * 32);

  const int v = (static_cast<int>(blockIdx.x) * kWarps + warp) * 2 + half;
  const int h = v % H, t0 = v / H, dt = static_cast<int>(gridDim.x) * kWarps * 2 / H;
  const int g = h / p.heads_per_group, hh = h % p.heads_per_group;
  const std::int64_t o_step = static_cast<std::int64_t>(dt) * p.o_stride_t * 2;  // bytes
  const std::int64_t pos_step = static_cast<std::int64_t>(dt) * p.pos_stride;
  const std::int64_t q_step = static_cast<std::int64_t>(dt) * p.q_stride_t;
  int td = t0, tp = t0, tc = t0, tq = t0;
  const char* od = reinterpret_cast<const char*>(p.o + static_cast<std::int64_t>(t0) * p.o_stride_t + h * p.o_stride_h) + 16 * s;
  const std::int64_t* pp = p.positions + static_cast<std::int64_t>(t0) * p.pos_stride;
  std::uint8_t* qp = p.q + g * p.q_stride_g + static_cast<std::int64_t>(t0) * p.q_stride_t + hh * kD;
  std::uint32_t* const scol = static_cast<std::uint32_t*>(p.scale) + g * p.s_stride_g +
                              (p.packed_ue8m0 ? hh : hh * kBlocksPerHead) * p.s_stride_b;

  // Predicated copies, no branches; an address whose predicate is off is never dereferenced.
  auto issue_data = [&](int j) {
    const std::uint32_t dst = data0 + (j & (kS - 1)) * kDataStage + 16 * s;
#pragma unroll
    for (int m = 0; m < 4; ++m) cp_async_16_if(td < T, dst + 256 * m, od + 256 * m);
    td += dt;
    od += o_step;
  };
  auto issue_pos = [&](int j) {
    cp_async_8_if(cs_lane && tp < T, pos0 + (j & (2 * kS - 1)) * kPosStage, pp);
    tp += dt;
    pp += pos_step;
  };
  // Needs row j's position landed (the group schedule); a lane's slot of a row past T holds a
  // stale position, read but not used.
  auto issue_cs = [&](int j) {
    const long long pos = cs_lane ? sm.pos[j & (2 * kS - 1)][cl] : -1;  // lane-private slots only
    const bool go = cs_lane && tc < T && pos >= 0 && pos < p.max_pos;
    const float* c = p.cos_sin + pos * p.cache_stride + i0;
    const std::uint32_t dst = cs0 + (j & (kS - 1)) * kCsStage;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      cp_async_4_if(go && i0 + k >= 0, dst + 4 * k, c + k);
      cp_async_4_if(go && i0 + k >= 0, dst + 16 + 4 * k, c + hr + k);
    }
    tc += dt;
  };

  ring_prologue<kS>(issue_pos, issue_data, issue_cs);
  for (int j = 0; __any_sync(0xffffffffu, tq < T); ++j) {  // warp-uniform: every shuffle has the whole warp
    ring_step<kS>(j, issue_pos, issue_data, issue_cs);

    const int st = j & (kS - 1);
    uint4 x[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) x[m] = sm.data[st][s + 16 * m];
    const bool live = tq < T;
    // The row's position from its half's lane 15 (a rotating lane: it loaded it).
    long long pos = cs_lane ? sm.pos[j & (2 * kS - 1)][cl] : 0;
    pos = __shfl_sync(0xffffffffu, pos, (lane & 16) | 15);
    const bool ok = pos >= 0 && pos < p.max_pos;
    float cs[8] = {1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (ok && cs_lane) {
      // The floats of a pair that is not rotated were never written, and are not used.
#pragma unroll
      for (int k = 0; k < 8; ++k) cs[k] = sm.cs[st][cl][k];
    }
    quantize_row_half(p, x, cs, ok, live, qp, scol, tq, nope, lane);
    tq += dt;
    qp += q_step;
  }
  cp_async_wait_all_groups();  // nothing lands in shared memory after the CTA exits
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
void run_inv_rope_quant_half_sm90(const InvRopeQuantParams& p, int blocks, void* stream) {
  inv_rope_quant_half_sm90_kernel<Cfg><<<blocks, Cfg::kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
int inv_rope_quant_half_ctas_per_sm() {
  const void* fn = reinterpret_cast<const void*>(&inv_rope_quant_half_sm90_kernel<Cfg>);
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  int per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, Cfg::kWarps * 32, 0));
  return per_sm;
}

}  // namespace moekit::cuda
