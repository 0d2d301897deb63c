// The per-tensor quantization of a small tensor with a dynamic scale in one CTA (absmax, then
// the e4m3 values), and the vector loads and stores the quant kernels share. Included by the
// quant kernels (kernel_sm90.cuh) and by the routing kernel, whose launch hosts this work on an
// extra CTA at decode (RoutingParams::quant_cta): both give bitwise the same scale and bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::quant {

// kVec elements from p (aligned to kVec * sizeof(T) when kVec == 4).
template <int kVec, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    v[0] = to_float(p[0]);
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

// One CTA of kThreads (all of them call it): the absmax of x[0, n_vec * kVec) (fmaxf from 0), its
// scale to *scale, then q = e4m3(x / scale). The max is order-free, so the scale is the same for
// any kThreads and equals the two-pass (atomicMax) path's. A thread keeps kBatch loads in flight
// before it uses one: the time is load latency (up to 8 rounds at 256 threads and 32 K elements).
template <class T, int kVec, int kThreads>
__device__ __forceinline__ void quantize_tensor_one_cta(const T* x, std::int64_t n_vec, std::uint8_t* q,
                                                        float* scale) {
  constexpr int kBatch = 8;
  __shared__ float s_scale;
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

}  // namespace moekit::cuda::quant
