// The combine kernel: one thread per (token, 16 bytes of y: 4 fp32 or 8 16-bit columns), the k
// slots summed in j order in fp32, slots whose expert is not local skipped (their y rows are
// never written, never read). Deterministic, no atomics. Included by inst/*.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/convert.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/kernels/combine/config.hpp"
#include "cuda/kernels/combine/params.hpp"

namespace moekit::cuda::combine {

// kVec consecutive y values of one row: one 16-byte load when kVec * the element size is 16 (4
// fp32 or 8 bf16 / fp16), else one element. The loaded bits stay packed until the add (16-bit
// y: 4 registers per slot, not 8): fewer registers, more resident threads, more loads in flight.
template <class TY, int kVec>
struct YVec {
  using Raw = std::conditional_t<kVec == 1, TY, uint4>;
  static_assert(kVec == 1 || kVec * sizeof(TY) == 16, "vector loads are 16 bytes");
  // Streamed (read once); non-local slots are predicated off by the caller.
  static __device__ __forceinline__ Raw load(const TY* yr) { return __ldcs(reinterpret_cast<const Raw*>(yr)); }
  static __device__ __forceinline__ Raw zero() { return Raw{}; }
  static __device__ __forceinline__ void add(const Raw& r, float (&acc)[kVec]) {
    if constexpr (kVec == 1) {
      acc[0] += to_float(r);
    } else {
      const TY* e = reinterpret_cast<const TY*>(&r);
#pragma unroll
      for (int t = 0; t < kVec; ++t) acc[t] += to_float(e[t]);
    }
  }
};

template <class TOut, class TY, int kVec>
__global__ void __launch_bounds__(kThreads) combine_sm90_kernel(const __grid_constant__ CombineParams p) {
  // PDL (cuda/common/pdl.cuh): y, topk_ids and out are all touched after the wait. The last kernel
  // of the chain never calls pdl_launch_dependents(): the caller's next kernel, possibly a PDL
  // launch, must not start while `out` is half written, so it launches as these CTAs exit.
  pdl_wait();
  const std::int64_t vecs_per_row = p.hidden_size / kVec;
  const std::int64_t total = p.num_tokens * vecs_per_row;
  TOut* out = static_cast<TOut*>(p.out);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t m = i / vecs_per_row;
    const std::int64_t c = (i - m * vecs_per_row) * kVec;
    float acc[kVec];
#pragma unroll
    for (int t = 0; t < kVec; ++t) acc[t] = 0.f;
    // Slots in batches of kSlotBatch: the batch's ids, then its expert_map entries, then all of
    // its y loads are issued before the first add, so a token costs three memory latencies per
    // batch instead of one chain per slot (at decode the kernel is nothing but these latencies).
    // The adds still run in j order, skipping non-local slots: the sum is the same bits.
    for (int j0 = 0; j0 < p.top_k; j0 += kSlotBatch) {
      int e[kSlotBatch];
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) e[t] = j0 + t < p.top_k ? __ldg(p.topk_ids + m * p.top_k + j0 + t) : -1;
      // Bit t: slot j0 + t dropped with an id other than -1 (a bad id or map entry, or a slot
      // that maps to another rank: record_slot_fault tells them apart).
      unsigned dropped = 0u;
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) {
        const int id = e[t];
        e[t] = (id < 0 || id >= p.num_experts_global) ? -1 : (p.expert_map != nullptr ? __ldg(p.expert_map + id) : id);
        if (e[t] >= p.num_experts) e[t] = -1;
        if (e[t] < 0 && id != -1) dropped |= 1u << t;
      }
      using Y = YVec<TY, kVec>;
      typename Y::Raw v[kSlotBatch];
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) {
        // Non-local slots' y rows are never written: not read either (predicated off).
        v[t] = Y::zero();
        if (e[t] >= 0) v[t] = Y::load(static_cast<const TY*>(p.y) + (m * p.top_k + j0 + t) * p.hidden_size + c);
      }
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t)
        if (e[t] >= 0) Y::add(v[t], acc);
      // Recorded once per row, by its first vector's thread, from the ids in memory: the good
      // path keeps one register for it. (Recording from the registers of the loop above took
      // the kernel from 40 to 70 registers, half the resident threads, and cost 50 % at gpt-oss
      // TP8 fp8 M = 8192, k = 4: ncu 184.9 against 123.5 µs at fb97848.)
      if (dropped != 0u && c == 0 && p.faults != nullptr) {
#pragma unroll 1
        for (int t = 0; t < kSlotBatch; ++t)
          if ((dropped >> t) & 1u)
            record_slot_fault(p.faults, m, j0 + t, __ldg(p.topk_ids + m * p.top_k + j0 + t), p.expert_map,
                              p.num_experts_global, p.num_experts);
      }
    }
    TOut* o = out + m * p.hidden_size + c;
    if constexpr (kVec == 1) {
      o[0] = from_float<TOut>(acc[0]);
    } else {
      // 8 bytes (4 outputs) or 16 bytes (8 outputs) in one store.
      using Store = std::conditional_t<kVec == 4, uint2, uint4>;
      TOut r[kVec];
#pragma unroll
      for (int t = 0; t < kVec; ++t) r[t] = from_float<TOut>(acc[t]);
      *reinterpret_cast<Store*>(o) = *reinterpret_cast<const Store*>(r);
    }
  }
}

// ---- host side of one instantiation (inst/*.cu) ----

template <DType kOut, DType kY, int kVec>
void run_combine_sm90(const CombineParams& p, unsigned grid, void* stream, bool pdl) {
  launch_kernel_pdl(combine_sm90_kernel<element_t<kOut>, element_t<kY>, kVec>, dim3(grid), dim3(kThreads), 0,
                    static_cast<cudaStream_t>(stream), pdl, p);
}

}  // namespace moekit::cuda::combine
