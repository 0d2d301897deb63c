// The per-tensor quantization of a small tensor with a dynamic scale in one CTA (absmax, then
// the e4m3 values), its form split over a few CTAs that each take the whole absmax themselves,
// and the vector loads and stores the quant kernels share. Included by the quant kernels
// (kernel_sm90.cuh) and by the routing kernel, whose launch hosts this work on extra CTAs
// (RoutingParams::quant_ctas): all give bitwise the same scale and bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::quant {

// kVec elements from p (aligned to kVec * sizeof(T) when kVec is 4 or 8).
template <int kVec, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    v[0] = to_float(p[0]);
  } else if constexpr (kVec == 8) {
    static_assert(sizeof(T) == 2, "8-element vectors: bf16 / fp16 (one 16-byte load)");
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_float(h[i]);
  } else if constexpr (sizeof(T) == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_float(h[i]);
  }
}

template <int kVec>
__device__ __forceinline__ void store_q(std::uint8_t* q, const float (&v)[kVec], float inv) {
  if constexpr (kVec == 1) {
    q[0] = numerics::e4m3(v[0] * inv);
  } else {
    const std::uint32_t lo = numerics::e4m3x2(v[0] * inv, v[1] * inv);
    const std::uint32_t hi = numerics::e4m3x2(v[2] * inv, v[3] * inv);
    *reinterpret_cast<std::uint32_t*>(q) = lo | (hi << 16);
  }
}

// This thread's fold of |x| over x[0, n_vec * kVec) (fmaxf from 0, NaN-ignoring), kBatch loads a
// thread in flight before it uses one (the time is load latency).
template <class T, int kVec, int kThreads>
__device__ __forceinline__ float fold_tensor_absmax(const T* x, std::int64_t n_vec) {
  constexpr int kBatch = 8;
  float amax = 0.f;
  for (std::int64_t i0 = threadIdx.x; i0 < n_vec; i0 += kThreads * kBatch) {
    float v[kBatch][kVec];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(b) * kThreads;
      if (i < n_vec) {
        load_vec<kVec>(x + i * kVec, v[b]);
      } else {
#pragma unroll
        for (int t = 0; t < kVec; ++t) v[b][t] = 0.f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int t = 0; t < kVec; ++t) amax = numerics::fold_absmax(amax, v[b][t]);
    }
  }
  return amax;
}

// One CTA of kThreads (all of them call it): the absmax of x[0, n_vec * kVec) (fmaxf from 0), its
// scale to *scale, then q = e4m3(x / scale). The max is order-free, so the scale is the same for
// any kThreads and equals the two-pass (atomicMax) path's. A thread keeps kBatch loads in flight
// before it uses one: the time is load latency (up to 8 rounds at 256 threads and 32 K elements).
template <class T, int kVec, int kThreads>
__device__ __forceinline__ void quantize_tensor_one_cta(const T* x, std::int64_t n_vec, std::uint8_t* q,
                                                        float* scale) {
  constexpr int kBatch = 8;
  __shared__ float s_scale;
  const float amax = fold_tensor_absmax<T, kVec, kThreads>(x, n_vec);
  numerics::block_absmax<kThreads>(amax, [&](float a) {
    s_scale = numerics::dynamic_scale(a);
    scale[0] = s_scale;
  });
  __syncthreads();
  const float inv = 1.0f / s_scale;
  for (std::int64_t i0 = threadIdx.x; i0 < n_vec; i0 += kThreads * kBatch) {
    float v[kBatch][kVec];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(b) * kThreads;
      if (i < n_vec) load_vec<kVec>(x + i * kVec, v[b]);  // L1/L2 hits: this CTA read it just above
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(b) * kThreads;
      if (i < n_vec) store_q<kVec>(q + i * kVec, v[b], inv);
    }
  }
}

// Part `part` of `parts` CTAs of kThreads (all of them call it) of the same per-tensor dynamic
// quantization of x[0, n_vec * 4) (bf16 / fp16, 8-byte aligned): every part takes the absmax of
// the whole tensor itself (16-byte loads where x is 16-byte aligned and n_vec even; the max is
// order-free, so every part gets the same scale as quantize_tensor_one_cta), part 0 writes it to
// *scale, and each part quantizes its own contiguous share of the 4-element vectors, with
// quantize_tensor_one_cta's conversion: the same bytes. No part waits for another, so the parts
// need no co-residency and no counter; the price is that each reads the whole tensor (from L2
// after the first), which the caller bounds (routing_quant_ctas: the routing launch hosts it).
template <class T, int kThreads>
__device__ __forceinline__ void quantize_tensor_part(const T* x, std::int64_t n_vec, std::uint8_t* q, float* scale,
                                                     int part, int parts) {
  __shared__ float s_scale;
  const bool wide = (reinterpret_cast<std::uintptr_t>(x) & 15u) == 0 && n_vec % 2 == 0;
  const float amax = wide ? fold_tensor_absmax<T, 8, kThreads>(x, n_vec / 2) : fold_tensor_absmax<T, 4, kThreads>(x, n_vec);
  numerics::block_absmax<kThreads>(amax, [&](float a) {
    s_scale = numerics::dynamic_scale(a);
    if (part == 0) scale[0] = s_scale;
  });
  __syncthreads();
  const float inv = 1.0f / s_scale;
  const std::int64_t lo = n_vec * part / parts, hi = n_vec * (part + 1) / parts;
  constexpr int kBatch = 8;  // loads in flight before the first store (x and q may alias for the compiler)
  for (std::int64_t i0 = lo + threadIdx.x; i0 < hi; i0 += kThreads * kBatch) {
    float v[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(b) * kThreads;
      if (i < hi) load_vec<4>(x + i * 4, v[b]);  // L1 / L2 hits: this CTA read it just above
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(b) * kThreads;
      if (i < hi) store_q<4>(q + i * 4, v[b], inv);
    }
  }
}

}  // namespace moekit::cuda::quant
