// fp8 (e4m3) quantization as every kernel does it (docs/design.md): the dynamic-scale rule
// s = max(absmax / 448, kMinDynamicScale), q = e4m3(x * (1 / s)) with the RNE, saturating
// conversion (+-inf -> +-448, NaN stays NaN), matching moekit/quant.hpp's host conversion bit
// for bit. The CPU reference (src/core/quant.cpp, src/cpu/) writes the same rule independently.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "moekit/problem.hpp"  // kFp8Max, kMinDynamicScale

namespace moekit::cuda::numerics {

// The scale of a tensor / row / 128-group whose absolute maximum is `absmax` (NaN-free, >= 0).
__device__ __forceinline__ float dynamic_scale(float absmax) { return fmaxf(absmax / kFp8Max, kMinDynamicScale); }

// Two floats -> two e4m3 bytes (a in the low byte), cvt.rn.satfinite: +-inf -> +-448, NaN -> 0x7f.
__device__ __forceinline__ std::uint16_t e4m3x2(float a, float b) {
  return static_cast<std::uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ std::uint8_t e4m3(float a) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace moekit::cuda::numerics
