// Device-side number conversions shared by the non-GEMM kernels: activation dtypes to and from
// fp32 (round to nearest even) and fp32 to e4m3 (RNE, saturating to +-448, NaN stays NaN),
// matching moekit/quant.hpp's host conversions bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace moekit::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// fp32 -> T, round to nearest even (fp16 overflows to inf, as float_to_fp16 does).
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Two floats -> two e4m3 bytes (a in the low byte), cvt.rn.satfinite: +-inf -> +-448, NaN -> 0x7f.
__device__ __forceinline__ std::uint16_t e4m3x2(float a, float b) {
  return static_cast<std::uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ std::uint8_t e4m3(float a) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

// A float absmax that ignores NaN (fmaxf returns the non-NaN operand).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace moekit::cuda
