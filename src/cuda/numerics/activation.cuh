// The gated activations of docs/design.md on one GEMM1 row pair (gate g, up u), in fp32, for
// every kernel: silu(g)*u, gelu(g)*u (erf form) and gpt-oss swiglu_oai(g, u; alpha, limit).
// The CPU reference (src/cpu/) writes the same formulas independently, to catch a slip here.
#pragma once

#include <cuda_runtime.h>

#include "moekit/problem.hpp"  // moekit::Activation

namespace moekit::cuda::numerics {

// How a kernel rounds the exponential, the division and GELU's erf argument. The formulas are
// the same; the three spellings are the ones the kernels had before they shared this header and
// are kept so every kernel's output stays bit-identical (aligning them changes last bits of
// some results and is a separate, GPU-validated change):
//  - kIeee: expf, IEEE division, erf(g / sqrt 2) (fused single pass, mma.sync path);
//  - kIeeeRsqrt2: expf, IEEE division, erf(g * (1 / sqrt 2)) (Swap-AB);
//  - kFast: __expf (2 + 1.17|x| ulp) and __fdividef (2 ulp), ~1e-6 relative for |x| <= 10, far
//    below the bf16 / fp8 rounding that follows, and ~4x fewer instructions; erf(g * (1 / sqrt 2))
//    (token-major, whose epilogue is on the critical path at prefill). A saturated exponential
//    still gives the limit (x / inf = 0);
//  - kFastFtz: kFast with the exponential's input and result flushed to zero (ex2.approx.ftz): one
//    MUFU.EX2 where kFast's non-flushing ex2 adds a range test and two scalings. The same results
//    wherever an exponential feeds 1 + e (silu, swiglu_oai): e below 2^-126 adds nothing to 1 in
//    fp32, flushed or not, and a subnormal argument gives e = 1 either way (the per-expert MLP
//    kernel, whose activation runs as cold code once a unit).
enum class ActMath : int { kIeee, kIeeeRsqrt2, kFast, kFastFtz };

template <ActMath kMath>
__device__ __forceinline__ float act_exp(float x) {
  if constexpr (kMath == ActMath::kFastFtz) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));  // __expf's x log2(e)
    return r;
  } else if constexpr (kMath == ActMath::kFast) {
    return __expf(x);
  } else {
    return expf(x);
  }
}
template <ActMath kMath>
__device__ __forceinline__ float act_div(float a, float b) {
  if constexpr (kMath == ActMath::kFast || kMath == ActMath::kFastFtz) return __fdividef(a, b);
  else return a / b;
}
template <ActMath kMath>
__device__ __forceinline__ float gelu_erf_arg(float g) {
  if constexpr (kMath == ActMath::kIeee) return g / 1.41421356237309504880f;
  else return g * 0.70710678118654752f;
}

// silu(g) * u = g / (1 + e^-g) * u.
template <ActMath kMath>
__device__ __forceinline__ float silu_mul(float g, float u) {
  return act_div<kMath>(g, 1.0f + act_exp<kMath>(-g)) * u;
}

// gelu(g) * u = 0.5 g (1 + erf(g / sqrt 2)) * u.
template <ActMath kMath>
__device__ __forceinline__ float gelu_mul(float g, float u) {
  return 0.5f * g * (1.0f + erff(gelu_erf_arg<kMath>(g))) * u;
}

// gpt-oss: g = min(g, limit), u = clamp(u, -limit, limit), g * sigmoid(alpha g) * (u + 1). The
// min / clamp are comparisons that keep a NaN input NaN (as std::min / std::clamp in the
// reference), unlike fminf.
// Scalar: float, or const float& where alpha and limit are read in place from the kernel's
// parameters (the mma path's ActivationConfig; the SASS of each kernel stays what it was).
template <ActMath kMath, class Scalar = float>
__device__ __forceinline__ float swiglu_oai(float g, float u, Scalar alpha, Scalar limit) {
  g = (limit < g) ? limit : g;
  u = (u < -limit) ? -limit : ((limit < u) ? limit : u);
  return g * act_div<kMath>(1.0f, 1.0f + act_exp<kMath>(-alpha * g)) * (u + 1.0f);
}

// The activation chosen at run time.
template <ActMath kMath>
__device__ __forceinline__ float activate(Activation kind, float g, float u, float alpha, float limit) {
  switch (kind) {
    case Activation::kGelu: return gelu_mul<kMath>(g, u);
    case Activation::kSwigluOai: return swiglu_oai<kMath>(g, u, alpha, limit);
    default: return silu_mul<kMath>(g, u);
  }
}

// The activation of an ActivationConfig (alpha and limit read only by swiglu_oai).
template <ActMath kMath>
__device__ __forceinline__ float activate(const ActivationConfig& act, float g, float u) {
  switch (act.kind) {
    case Activation::kGelu: return gelu_mul<kMath>(g, u);
    case Activation::kSwigluOai: return swiglu_oai<kMath, const float&>(g, u, act.alpha, act.limit);
    default: return silu_mul<kMath>(g, u);
  }
}

// The activation chosen at compile time.
template <ActMath kMath, Activation kKind>
__device__ __forceinline__ float activate(float g, float u, float alpha, float limit) {
  if constexpr (kKind == Activation::kGelu) return gelu_mul<kMath>(g, u);
  else if constexpr (kKind == Activation::kSwigluOai) return swiglu_oai<kMath>(g, u, alpha, limit);
  else return silu_mul<kMath>(g, u);
}

}  // namespace moekit::cuda::numerics
