// The register inv_rope_fp8_quant kernel (and the per-element operations that the pipelined one,
// kernel_pipe_sm90.cuh, shares): one warp per (token, head) row of kHeadDim bf16 channels.
// Loads (16-byte, streaming) -> inverse rotation of the last rope_dim channels in float64 ->
// per-128-channel absmax by half-warp shuffles -> power-of-two scale -> e4m3 bytes (8-byte
// stores) and the scales in the token-fastest layout. The math is docs/rope_quant.md's; the CPU
// reference (src/cpu/rope_quant_ref.cpp) does the same float operations, so they agree bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/numerics/quant.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {
namespace rope_quant {

// bf16 bits -> fp32 (exact).
__device__ __forceinline__ float bf16_lo(std::uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(std::uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The biased exponent E of scale = 2^ceil(log2(amax / 448)) (scale bits = E << 23): amax is
// floored at 1e-10 and clamped at FLT_MAX (Inf saturates), so amax * fl(1/448) is a normal
// float in [2^-43, 2^120) and E in [85, 247]. fl(1/448) = (1/448)(1 + 0.375 * 2^-23): the
// product never crosses a power of two that exact division would not (docs/rope_quant.md).
__device__ __forceinline__ std::uint32_t scale_exponent(float amax) {
  amax = fminf(fmaxf(amax, 1e-10f), FLT_MAX);
  const std::uint32_t bits = __float_as_uint(__fmul_rn(amax, 1.0f / 448.0f));
  return (bits >> 23) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
}

// max |y[j]| of 8 values as a tree of depth 3 instead of a chain of 8 dependent FMNMX (the
// chain was the longest latency in a row's math): max is exact and order-free, and fmaxf drops a
// NaN operand, so the value is the chain's; the one difference, 8 NaNs giving NaN here where a
// chain seeded with 0 gives 0, meets scale_exponent's floor (1e-10) either way: the same exponent.
__device__ __forceinline__ float absmax8(const float (&y)[8]) {
  const float a = fmaxf(fabsf(y[0]), fabsf(y[1])), b = fmaxf(fabsf(y[2]), fabsf(y[3]));
  const float c = fmaxf(fabsf(y[4]), fabsf(y[5])), d = fmaxf(fabsf(y[6]), fabsf(y[7]));
  return fmaxf(fmaxf(a, b), fmaxf(c, d));
}

// y[e], y[o] of one rotated pair: float64 with exact products (bf16 x fp32 fits in 53 bits), one
// rounding to double, one to fp32; the CPU reference writes the same two lines with std::fma.
__device__ __forceinline__ void inverse_rotate(float& ye, float& yo, float c, float s) {
  const double xe = ye, xo = yo, cv = c, sv = s;
  ye = __double2float_rn(__fma_rn(xe, cv, __dmul_rn(xo, sv)));
  yo = __double2float_rn(__fma_rn(xo, cv, -__dmul_rn(xe, sv)));
}

// cos / sin of the 4 pairs of the chunk at channel c_last (identity where a pair is not rotated,
// and for a position outside the cache, whose row is never read).
__device__ __forceinline__ void load_cos_sin(const InvRopeQuantParams& p, std::int64_t pos, int c_last, int nope,
                                             int half, float (&cs)[8]) {
  const bool ok = pos >= 0 && pos < p.max_pos;
  const float* c = p.cos_sin + (ok ? pos : 0) * p.cache_stride;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int e = c_last + 2 * k;
    const int i = (e - nope) >> 1;
    cs[k] = ok && e >= nope ? __ldg(c + i) : 1.0f;
    cs[4 + k] = ok && e >= nope ? __ldg(c + half + i) : 0.0f;
  }
}

// Padded token rows [T, Tp) of this head's scale columns get 0 (block x == 0 of each head).
template <int kBlocksPerHead>
__device__ __forceinline__ void zero_padding(const InvRopeQuantParams& p, int g, int hh) {
  const int pad = static_cast<int>(p.scale_rows - p.num_tokens);  // 0..3
  const int cols = p.packed_ue8m0 ? kBlocksPerHead / 4 : kBlocksPerHead;
  if (pad <= 0 || static_cast<int>(threadIdx.x) >= cols * pad) return;
  const int col = hh * cols + static_cast<int>(threadIdx.x) / pad;
  const std::int64_t t = p.num_tokens + static_cast<int>(threadIdx.x) % pad;
  const std::int64_t at = g * p.s_stride_g + col * p.s_stride_b + t;
  if (p.packed_ue8m0)
    static_cast<std::uint32_t*>(p.scale)[at] = 0u;
  else
    static_cast<float*>(p.scale)[at] = 0.0f;
}

// Padded token rows [T, Tp) of every head's scale columns get 0: threads tid, tid + nthreads, ...
// of one CTA (the kernels whose CTAs do not each own one head).
__device__ __forceinline__ void zero_padding_all_heads(const InvRopeQuantParams& p, int tid, int nthreads) {
  constexpr int kBlocksPerHead = 4;  // kD = 512
  const int pad = static_cast<int>(p.scale_rows - p.num_tokens);  // 0..3
  const int cols = p.packed_ue8m0 ? kBlocksPerHead / 4 : kBlocksPerHead;
  for (int i = tid; i < p.num_heads * cols * pad; i += nthreads) {
    const int h = i / (cols * pad), rem = i % (cols * pad);
    const int g = h / p.heads_per_group, hh = h % p.heads_per_group;
    const std::int64_t at = g * p.s_stride_g + (hh * cols + rem / pad) * p.s_stride_b + p.num_tokens + rem % pad;
    if (p.packed_ue8m0)
      static_cast<std::uint32_t*>(p.scale)[at] = 0u;
    else
      static_cast<float*>(p.scale)[at] = 0.0f;
  }
}

// One (token, head) row, the math of docs/rope_quant.md shared by both kernels: x = the lane's
// kD/256 16-byte chunks (chunk m = channels (lane + 32m) * 8 ..+8), cs = cos[4] then sin[4] of the
// lane's last-chunk pairs (read only where a pair is rotated), ok = the position lies in the
// cache (else a NaN row). Rotate in float64 -> absmax per 128-channel block (half-warp) ->
// power-of-two scale -> e4m3 (8-byte stores) and the scales, token-fastest. Warp-uniform: every
// lane of the warp calls it for the same row.
// kRotateLate (the latency-first kernel): the last chunk's rotation right before its own math, so
// chunk 0's math and stores need not wait for the cos/sin loads; otherwise (the register kernel,
// whose two rows a warp would spill) all rotations first.
template <int kD, bool kRotateLate = false>
__device__ __forceinline__ void quantize_row(const InvRopeQuantParams& p, const uint4 (&x)[kD / 256],
                                             const float (&cs)[8], bool ok, std::int64_t t, int g, int hh,
                                             int nope, int lane) {
  constexpr int kChunks = kD / 256;
  constexpr int kBlocksPerHead = kD / 128;
  const int c_last = (lane + 32 * (kChunks - 1)) * 8;
  float y[kChunks][8];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) {
    const std::uint32_t w[4] = {x[m].x, x[m].y, x[m].z, x[m].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      y[m][2 * k] = bf16_lo(w[k]);
      y[m][2 * k + 1] = bf16_hi(w[k]);
    }
  }
  if constexpr (!kRotateLate) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c_last + 2 * k >= nope) inverse_rotate(y[kChunks - 1][2 * k], y[kChunks - 1][2 * k + 1], cs[k], cs[4 + k]);
  }

  std::uint8_t* qrow = p.q + g * p.q_stride_g + t * p.q_stride_t + hh * kD;
  std::uint32_t E[kChunks];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) {
    if (kRotateLate && m == kChunks - 1) {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (c_last + 2 * k >= nope) inverse_rotate(y[m][2 * k], y[m][2 * k + 1], cs[k], cs[4 + k]);
    }
    float a = absmax8(y[m]);  // fmaxf: a NaN never wins
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));  // half-warp = block
    E[m] = scale_exponent(a);
    const float inv = __uint_as_float((254u - E[m]) << 23);  // 1 / scale, exact
    std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float v0 = y[m][2 * k] * inv, v1 = y[m][2 * k + 1] * inv;  // exact (powers of two)
      v0 = v0 == v0 ? v0 : __uint_as_float(0x7fffffffu);        // any NaN -> +NaN -> 0x7f
      v1 = v1 == v1 ? v1 : __uint_as_float(0x7fffffffu);
      // RNE, satfinite: +-Inf -> +-448
      packed[k >> 1] |= static_cast<std::uint32_t>(numerics::e4m3x2(v0, v1)) << (16 * (k & 1));
    }
    uint2 out;
    out.x = ok ? packed[0] : 0x7f7f7f7fu;
    out.y = ok ? packed[1] : 0x7f7f7f7fu;
    *reinterpret_cast<uint2*>(qrow + (lane + 32 * m) * 8) = out;
  }

  // Scales: lane 0 holds blocks 2m, lane 16 blocks 2m + 1 (after the xor-reduction every lane
  // of a half-warp has its block's value).
  const std::int64_t sbase = g * p.s_stride_g + t;
  if (p.packed_ue8m0) {
#pragma unroll
    for (int wd = 0; wd < kChunks / 2; ++wd) {
      const std::uint32_t e0 = E[2 * wd], e2 = E[2 * wd + 1];
      const std::uint32_t e1 = __shfl_sync(0xffffffffu, e0, 16), e3 = __shfl_sync(0xffffffffu, e2, 16);
      if (lane == 0) {
        const std::uint32_t word = ok ? (e0 | (e1 << 8) | (e2 << 16) | (e3 << 24)) : 0xffffffffu;
        static_cast<std::uint32_t*>(p.scale)[sbase + (hh * (kBlocksPerHead / 4) + wd) * p.s_stride_b] = word;
      }
    }
  } else if ((lane & 15) == 0) {
#pragma unroll
    for (int m = 0; m < kChunks; ++m) {
      const int b = hh * kBlocksPerHead + 2 * m + (lane >> 4);
      static_cast<float*>(p.scale)[sbase + b * p.s_stride_b] = ok ? __uint_as_float(E[m] << 23) : __uint_as_float(0x7fffffffu);
    }
  }
}

}  // namespace rope_quant

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kWarps * 32, Cfg::kMinBlocksPerSm)
    inv_rope_quant_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kChunks = kD / 256;         // 8-channel chunks per lane: chunk c = lane + 32m
  constexpr int kBlocksPerHead = kD / 128;  // block of chunk c = c / 16 = 2m + lane / 16
  constexpr int kRows = Cfg::kRowsPerWarp;
  constexpr int kWarps = Cfg::kWarps;
  constexpr bool kPrefetch = Cfg::kPrefetchCs;
  static_assert(kD % 512 == 0, "a head packs whole UE8M0 words (4 blocks of 128)");

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int h = static_cast<int>(blockIdx.y);
  const int g = h / p.heads_per_group, hh = h % p.heads_per_group;
  const int nope = kD - p.rope_dim, half = p.rope_dim >> 1;
  if (blockIdx.x == 0) zero_padding<kBlocksPerHead>(p, g, hh);

  // Token of row r: 8 consecutive tokens per step (warp-uniform, so every shuffle below has the
  // whole warp).
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * (kWarps * kRows) + warp;
  // Rotated channels lie in each lane's last chunk (can_implement: rope_dim <= 256).
  const int c_last = (lane + 32 * (kChunks - 1)) * 8;

  // 1. Every load of every row first: the positions, the 16-byte chunks, then cos/sin.
  std::int64_t pos[kRows];
  uint4 x[kRows][kChunks];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t t = t0 + r * kWarps;
    pos[r] = -1;
    if (t < p.num_tokens) {
      pos[r] = __ldg(p.positions + t * p.pos_stride);
      const std::uint16_t* row = p.o + t * p.o_stride_t + h * p.o_stride_h;
#pragma unroll
      for (int m = 0; m < kChunks; ++m) x[r][m] = __ldcs(reinterpret_cast<const uint4*>(row + (lane + 32 * m) * 8));
    }
  }
  // cos / sin of the lane's last-chunk pairs, for every row now (kPrefetchCs: one more dependent
  // load overlapped across rows, 8 registers a row) or for each row when it is processed.
  float cs[kPrefetch ? kRows : 1][8];
  if constexpr (kPrefetch) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) load_cos_sin(p, pos[r], c_last, nope, half, cs[r]);
  }

  // 2. Per row: rotate, absmax per block, scale, quantize, store.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t t = t0 + r * kWarps;
    if (t >= p.num_tokens) break;  // warp-uniform; later rows are further out
    const bool ok = pos[r] >= 0 && pos[r] < p.max_pos;
    if constexpr (!kPrefetch) load_cos_sin(p, pos[r], c_last, nope, half, cs[0]);
    quantize_row<kD>(p, x[r], cs[kPrefetch ? r : 0], ok, t, g, hh, nope, lane);
  }
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
void run_inv_rope_quant_sm90(const InvRopeQuantParams& p, unsigned blocks_x, void* stream) {
  const dim3 grid(blocks_x, static_cast<unsigned>(p.num_heads));
  inv_rope_quant_sm90_kernel<Cfg><<<grid, Cfg::kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda
