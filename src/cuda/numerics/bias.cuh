// The epilogue bias (b13 / b2 of gpt-oss) as every kernel reads it: its dtype encoding in the
// kernels' params and the load of one element as fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "moekit/tensor.hpp"  // DType

namespace moekit::cuda::numerics {

// The bias dtype in kernel params (an int field): none, or fp32 / bf16 / fp16 elements.
enum BiasType : int { kBiasNone = 0, kBiasF32 = 1, kBiasBf16 = 2, kBiasF16 = 3 };

// Validation allows fp32, bf16 and fp16 biases; anything else reads as fp32.
constexpr BiasType bias_type_of(bool present, DType dtype) {
  return !present                ? kBiasNone
         : dtype == DType::kBf16 ? kBiasBf16
         : dtype == DType::kFp16 ? kBiasF16
                                 : kBiasF32;
}

#if defined(__CUDACC__)
// bias[i] as fp32; 0 for kBiasNone (callers skip the load when there is no bias).
__device__ __forceinline__ float load_bias(const void* bias, int type, std::int64_t i) {
  switch (type) {
    case kBiasF32: return static_cast<const float*>(bias)[i];
    case kBiasBf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[i]);
    case kBiasF16: return __half2float(static_cast<const __half*>(bias)[i]);
    default: return 0.0f;
  }
}
// The same for a bias whose dtype is given as DType (GroupedGemmParams::bias_dtype).
__device__ __forceinline__ float load_bias(const void* bias, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kBf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[i]);
    case DType::kFp16: return __half2float(static_cast<const __half*>(bias)[i]);
    default: return static_cast<const float*>(bias)[i];
  }
}
#endif

}  // namespace moekit::cuda::numerics
