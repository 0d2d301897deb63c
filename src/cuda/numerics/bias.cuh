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
// kN elements at once: out[i] = bias[idx[i]] where live[i], else 0. The dtype is dispatched
// once, outside the loop, and the raw elements are all loaded before any is converted, so the kN
// loads issue back to back and their latencies overlap (a dtype switch per element, or a
// conversion right after each load, waited for each load in turn: token-major GEMM2 at gpt-oss
// spent ~19 us a tile in such loads, H200, 2026-12-02).
template <int kN>
__device__ __forceinline__ void load_bias_gather(const void* bias, int type, const std::int64_t (&idx)[kN],
                                                 const bool (&live)[kN], float (&out)[kN]) {
  if (type == kBiasBf16 || type == kBiasF16) {
    const unsigned short* b = static_cast<const unsigned short*>(bias);
    unsigned short raw[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) raw[i] = live[i] ? b[idx[i]] : static_cast<unsigned short>(0);
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+h"(raw[i]));
#pragma unroll
    for (int i = 0; i < kN; ++i)
      out[i] = type == kBiasBf16 ? __uint_as_float(static_cast<unsigned>(raw[i]) << 16)
                                 : __half2float(__ushort_as_half(raw[i]));
  } else if (type == kBiasF32) {
    const float* b = static_cast<const float*>(bias);
#pragma unroll
    for (int i = 0; i < kN; ++i) out[i] = live[i] ? b[idx[i]] : 0.0f;
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(out[i]));
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) out[i] = 0.0f;
  }
}

// The same for columns col(i) = first + (i / kRun) * kStride + i % kRun (runs of kRun
// consecutive columns kStride apart) of the row starting at element `base`, live where
// col(i) < limit.
template <int kN, int kRun, int kStride>
__device__ __forceinline__ void load_bias_run(const void* bias, int type, std::int64_t base, std::int64_t first,
                                              std::int64_t limit, float (&out)[kN]) {
  std::int64_t idx[kN];
  bool live[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const std::int64_t c = first + (i / kRun) * kStride + i % kRun;
    idx[i] = base + c;
    live[i] = c < limit;
  }
  load_bias_gather<kN>(bias, type, idx, live, out);
}

// One element's raw bits as fp32: a 16-bit element in the low half of `raw`, or an fp32 element's
// word; for a caller that copied the elements as words (cp.async) and converts them later.
__device__ __forceinline__ float bias_from_raw(int type, std::uint32_t raw) {
  return type == kBiasBf16  ? __uint_as_float(raw << 16)
         : type == kBiasF16 ? __half2float(__ushort_as_half(static_cast<unsigned short>(raw)))
                            : __uint_as_float(raw);
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
