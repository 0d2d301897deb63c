// Activation quantization kernels (docs/design.md "Activation quantization"): absmax ignores NaN
// (fmaxf from 0), scale = max(absmax / 448, kMinDynamicScale), q = e4m3(x * (1 / scale)) with
// RNE + satfinite. Per-tensor absmax: float bits of non-negative values combined by atomicMax,
// which is order-free and so deterministic. Rows may be bounded by a device count (the
// intermediate has offsets[E] live rows). Included by inst/*.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/kernels/quant/config.hpp"
#include "cuda/kernels/quant/one_cta.cuh"  // load_vec, store_q, quantize_tensor_one_cta
#include "cuda/kernels/quant/params.hpp"
#include "cuda/numerics/quant.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda::quant {

__device__ __forceinline__ std::int64_t live_rows(const QuantParams& p) {
  if (p.rows_dev == nullptr) return p.rows;
  const std::int64_t r = __ldg(p.rows_dev);
  return r < p.rows ? (r < 0 ? 0 : r) : p.rows;
}

// PDL (cuda/common/pdl.cuh), first thing in every quant kernel: these kernels have no prologue
// worth overlapping, and everything they touch is the chain's (x, the row count, the absmax word
// routing zeroed, q and scale). Their dependents (GEMM1 / GEMM2, or pass 2 after pass 1) may
// launch as soon as this grid is resident: their TMA / mbarrier prologues overlap it.
__device__ __forceinline__ void pdl_wait_then_trigger() {
  pdl_wait();
  pdl_launch_dependents();
}

// Per tensor, pass 1: absmax of the live rows into *p.absmax.
template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) absmax_tensor_sm90_kernel(const __grid_constant__ QuantParams p) {
  pdl_wait_then_trigger();
  const T* x = static_cast<const T*>(p.x);
  const std::int64_t n_vec = live_rows(p) * p.cols / kVec;
  float amax = 0.f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; i < n_vec;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    float v[kVec];
    load_vec<kVec>(x + i * kVec, v);
#pragma unroll
    for (int t = 0; t < kVec; ++t) amax = numerics::fold_absmax(amax, v[t]);
  }
  numerics::block_absmax<kThreads>(amax, [&](float a) {
    // a >= 0 and never NaN here, so its bits order like the values.
    if (a > 0.f) atomicMax(p.absmax, __float_as_uint(a));
  });
}

// The max of the routing launch's absmax partials (QuantParams::absmax_partials), in every thread:
// each warp reduces them itself (fmaxf, order-free: the same value as the atomicMax word).
__device__ __forceinline__ float partials_absmax(const QuantParams& p) {
  float a = 0.f;
  for (int i = threadIdx.x & 31; i < p.num_partials; i += 32) a = fmaxf(a, p.absmax_partials[i]);
  return warp_max(a);
}

// Per tensor, pass 2 (or the only pass: a static scale, an absmax word GEMM1's epilogue
// completed, QuantParams::absmax_ready, or the routing launch's absmax partials).
template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) quant_tensor_sm90_kernel(const __grid_constant__ QuantParams p) {
  pdl_wait_then_trigger();
  const T* x = static_cast<const T*>(p.x);
  const float s = p.static_scale != nullptr      ? __ldg(p.static_scale)
                  : p.absmax_partials != nullptr ? numerics::dynamic_scale(partials_absmax(p))
                                                 : numerics::dynamic_scale(__uint_as_float(*p.absmax));
  const float inv = 1.0f / s;
  if (blockIdx.x == 0 && threadIdx.x == 0) p.scale[0] = s;
  const std::int64_t n_vec = live_rows(p) * p.cols / kVec;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; i < n_vec;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    float v[kVec];
    load_vec<kVec>(x + i * kVec, v);
    store_q<kVec>(p.q + i * kVec, v, inv);
  }
}

// Per tensor with a dynamic scale, small tensors (decode): absmax and quantization in one CTA,
// one launch instead of two. The block-wide max is the same value the atomicMax path computes
// (max is order-free), so both give bitwise the same scale.
template <class T, int kVec>
__global__ void __launch_bounds__(kSmallTensorThreads) quant_tensor_small_sm90_kernel(const __grid_constant__ QuantParams p) {
  pdl_wait_then_trigger();
  quantize_tensor_one_cta<T, kVec, kSmallTensorThreads>(static_cast<const T*>(p.x), live_rows(p) * p.cols / kVec, p.q,
                                                         p.scale);
}

// Per row: one warp per row, two passes over the row (the second hits L1/L2).
template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) quant_row_sm90_kernel(const __grid_constant__ QuantParams p) {
  pdl_wait_then_trigger();
  const int lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= live_rows(p)) return;
  const T* x = static_cast<const T*>(p.x) + row * p.cols;
  std::uint8_t* q = p.q + row * p.cols;
  float amax = 0.f;
  for (std::int64_t c = static_cast<std::int64_t>(lane) * kVec; c < p.cols; c += 32 * kVec) {
    float v[kVec];
    load_vec<kVec>(x + c, v);
#pragma unroll
    for (int t = 0; t < kVec; ++t) amax = numerics::fold_absmax(amax, v[t]);
  }
  const float s = numerics::dynamic_scale(warp_max(amax));
  const float inv = 1.0f / s;
  if (lane == 0) p.scale[row] = s;
  for (std::int64_t c = static_cast<std::int64_t>(lane) * kVec; c < p.cols; c += 32 * kVec) {
    float v[kVec];
    load_vec<kVec>(x + c, v);
    store_q<kVec>(q + c, v, inv);
  }
}

// 1x128 groups: one warp per (row, group); lane l owns columns 128g + [4l, 4l+4) (kVec 4) or
// 128g + l + 32i (kVec 1). cols % kVec == 0, so a vector is wholly inside or outside the row.
template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) quant_group_sm90_kernel(const __grid_constant__ QuantParams p) {
  pdl_wait_then_trigger();
  const int lane = threadIdx.x & 31;
  const std::int64_t groups = (p.cols + kBlockQuant - 1) / kBlockQuant;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t row = item / groups, g = item % groups;
  if (row >= live_rows(p)) return;
  const T* x = static_cast<const T*>(p.x) + row * p.cols;
  std::uint8_t* q = p.q + row * p.cols;
  constexpr int kIters = 4 / kVec;
  float v[kIters][kVec];
  bool in[kIters];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const std::int64_t c = g * kBlockQuant + (kVec == 4 ? lane * 4 : lane + 32 * i);
    in[i] = c < p.cols;
    if (in[i]) {
      load_vec<kVec>(x + c, v[i]);
#pragma unroll
      for (int t = 0; t < kVec; ++t) amax = numerics::fold_absmax(amax, v[i][t]);
    }
  }
  const float s = numerics::dynamic_scale(warp_max(amax));
  const float inv = 1.0f / s;
  if (lane == 0) p.scale[row * groups + g] = s;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const std::int64_t c = g * kBlockQuant + (kVec == 4 ? lane * 4 : lane + 32 * i);
    if (in[i]) store_q<kVec>(q + c, v[i], inv);
  }
}

// ---- host side of one instantiation (inst/*.cu) ----

template <DType kX, int kVec>
void run_quant_sm90(QuantKernel kernel, const QuantParams& p, unsigned grid, void* stream, bool pdl) {
  using T = element_t<kX>;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (kernel) {
    case QuantKernel::kAbsmaxTensor:
      launch_kernel_pdl(absmax_tensor_sm90_kernel<T, kVec>, dim3(grid), dim3(kThreads), 0, s, pdl, p);
      return;
    case QuantKernel::kQuantTensor:
      launch_kernel_pdl(quant_tensor_sm90_kernel<T, kVec>, dim3(grid), dim3(kThreads), 0, s, pdl, p);
      return;
    case QuantKernel::kQuantTensorSmall:
      launch_kernel_pdl(quant_tensor_small_sm90_kernel<T, kVec>, dim3(grid), dim3(kSmallTensorThreads), 0, s, pdl, p);
      return;
    case QuantKernel::kQuantRow:
      launch_kernel_pdl(quant_row_sm90_kernel<T, kVec>, dim3(grid), dim3(kThreads), 0, s, pdl, p);
      return;
    case QuantKernel::kQuantGroup:
      launch_kernel_pdl(quant_group_sm90_kernel<T, kVec>, dim3(grid), dim3(kThreads), 0, s, pdl, p);
      return;
  }
  throw Error(Status::kInternal, "run_quant_sm90: unknown kernel");
}

}  // namespace moekit::cuda::quant
