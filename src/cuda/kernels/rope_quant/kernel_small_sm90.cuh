// The latency-first inv_rope_fp8_quant kernel (config.hpp InvRopeQuantSmallConfig), for small T:
// one warp per (token, head) row, one row a warp, no loop and no shared memory, so a call is one
// short dependent chain: the position and the row's 1 KB are loaded together (the row does not
// depend on the position), then the lane's cos/sin (two 16-byte loads: cos[i..i+3], sin[i..i+3]),
// then the register kernel's math (kernel_sm90.cuh quantize_row: the same bytes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {

// Row r = blockIdx.x * kWarps + warp of the token-major order r = t * H + h (the warps of a CTA
// share a token's position and cos/sin row where H > 1). Rows past T * H exit at once.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kWarps * 32)
    inv_rope_quant_small_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kChunks = kD / 256;
  static_assert(kD == 512, "zero_padding_all_heads and the cos/sin lanes assume 512 channels");
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;

  // 32-bit row indices (the launcher: T * H < 2^31), so no 64-bit division precedes the loads.
  const unsigned H = static_cast<unsigned>(p.num_heads);
  const unsigned r = blockIdx.x * Cfg::kWarps + static_cast<unsigned>(warp);  // warp-uniform
  if (r >= static_cast<unsigned>(p.num_tokens) * H) return;
  const std::int64_t t = r / H;
  const int h = static_cast<int>(r - static_cast<unsigned>(t) * H);
  const int g = h / p.heads_per_group, hh = h % p.heads_per_group;
  const int nope = kD - p.rope_dim, half = p.rope_dim >> 1;
  const int c_last = (lane + 32 * (kChunks - 1)) * 8;

  // 1. The two independent loads at once: the position and the row.
  const std::int64_t pos = __ldg(p.positions + t * p.pos_stride);
  const std::uint16_t* row = p.o + t * p.o_stride_t + h * p.o_stride_h;
  uint4 x[kChunks];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) x[m] = __ldcs(reinterpret_cast<const uint4*>(row + (lane + 32 * m) * 8));

  // 2. The one dependent load: the lane's 4 cos and 4 sin values, two 16-byte loads when the
  // cache rows allow (rope_dim % 8 == 0: a chunk is all rotated or not, its cos index a multiple
  // of 4; 16-byte aligned rows and halves), else load_cos_sin's eight 4-byte loads.
  const bool ok = pos >= 0 && pos < p.max_pos;
  const bool vec = (p.rope_dim & 7) == 0 && (p.cache_stride & 3) == 0 &&
                   (reinterpret_cast<std::uintptr_t>(p.cos_sin) & 15) == 0;  // warp-uniform
  float cs[8] = {1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (vec) {
    if (ok && c_last >= nope) {
      const float* c = p.cos_sin + pos * p.cache_stride + ((c_last - nope) >> 1);
      const float4 cv = __ldg(reinterpret_cast<const float4*>(c));
      const float4 sv = __ldg(reinterpret_cast<const float4*>(c + half));
      cs[0] = cv.x, cs[1] = cv.y, cs[2] = cv.z, cs[3] = cv.w;
      cs[4] = sv.x, cs[5] = sv.y, cs[6] = sv.z, cs[7] = sv.w;
    }
  } else {
    load_cos_sin(p, pos, c_last, nope, half, cs);
  }
  // Padded token rows of the scales, by the first warp (row 0 always exists), while the loads fly.
  if (r == 0) zero_padding_all_heads(p, lane, 32);

  // 3. The math (chunk 0, which holds no rotated channel, before the last chunk's rotation).
  quantize_row<kD, true>(p, x, cs, ok, t, g, hh, nope, lane);
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
void run_inv_rope_quant_small_sm90(const InvRopeQuantParams& p, unsigned blocks, void* stream) {
  inv_rope_quant_small_sm90_kernel<Cfg><<<blocks, Cfg::kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda
