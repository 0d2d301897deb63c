// The combine's per-slot load and add (YVec): one slot's y values, loaded packed and added to the
// token's fp32 sum (kernel_sm90.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/convert.cuh"

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

}  // namespace moekit::cuda::combine
