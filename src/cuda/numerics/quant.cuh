// fp8 (e4m3) quantization as every kernel does it (docs/design.md): the absmax rule, the
// dynamic-scale rule s = max(absmax / 448, kMinDynamicScale), q = e4m3(x * (1 / s)) with the
// RNE, saturating conversion (+-inf -> +-448, NaN stays NaN), matching moekit/quant.hpp's host
// conversion bit for bit. The CPU reference (src/core/quant.cpp, src/cpu/) writes the same rule independently.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/convert.cuh"  // warp_max
#include "moekit/problem.hpp"       // kFp8Max, kMinDynamicScale

namespace moekit::cuda::numerics {

// The scale of a tensor / row / 128-group whose absolute maximum is `absmax` (NaN-free, >= 0).
__device__ __forceinline__ float dynamic_scale(float absmax) { return fmaxf(absmax / kFp8Max, kMinDynamicScale); }

// The absmax rule: |x| folded in with fmaxf from 0, so a NaN never wins (fmaxf returns the other
// operand) and +-inf counts as inf. The quant kernels and GEMM1's epilogue (out_absmax) fold the
// same values with it, so they agree bit for bit.
__device__ __forceinline__ float fold_absmax(float amax, float x) { return fmaxf(amax, fabsf(x)); }

// Four values folded in, x then y then z then w.
__device__ __forceinline__ float fold_absmax4(float amax, const float4& v) {
  return fold_absmax(fold_absmax(fold_absmax(fold_absmax(amax, v.x), v.y), v.z), v.w);
}

// A warp's absmaxes (every lane calls it, lanes converged) into a per-tensor word of float bits
// that was zeroed before the chain: non-negative, NaN-free floats order like their bits, and a max
// is order-free, so the word ends the same whichever warps fold in and in what order.
__device__ __forceinline__ void warp_absmax_to_word(std::uint32_t* word, float amax) {
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0 && amax > 0.f) atomicMax(word, __float_as_uint(amax));
}

// The absmax of the thread values `amax` over a CTA of kBlockThreads (fmaxf: a NaN never wins),
// handed to `done` in thread 0. Every thread of the CTA calls it (one __syncthreads).
template <int kBlockThreads, class Done>
__device__ __forceinline__ void block_absmax(float amax, Done&& done) {
  __shared__ float partial[kBlockThreads / 32];
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    amax = threadIdx.x < kBlockThreads / 32 ? partial[threadIdx.x] : 0.f;
    amax = warp_max(amax);
    if (threadIdx.x == 0) done(amax);
  }
}

// Two floats -> two e4m3 bytes (a in the low byte), cvt.rn.satfinite: +-inf -> +-448, NaN -> 0x7f.
__device__ __forceinline__ std::uint16_t e4m3x2(float a, float b) {
  return static_cast<std::uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}
// Four floats times `inv` -> four e4m3 bytes in a word (v.x in the low byte), as e4m3x2.
__device__ __forceinline__ std::uint32_t e4m3x4(const float4& v, float inv) {
  return static_cast<std::uint32_t>(e4m3x2(v.x * inv, v.y * inv)) |
         (static_cast<std::uint32_t>(e4m3x2(v.z * inv, v.w * inv)) << 16);
}
// Two e4m3 bytes (the low byte first, as e4m3x2 packs them) -> two floats, exactly.
__device__ __forceinline__ float2 e4m3x2_to_float2(std::uint16_t pair) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
}
__device__ __forceinline__ std::uint8_t e4m3(float a) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace moekit::cuda::numerics
