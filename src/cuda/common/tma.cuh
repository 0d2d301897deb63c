// TMA (cp.async.bulk.tensor) tile loads completing on an mbarrier, plain and multicast to a
// cluster, the tensormap prefetch, and the host-side lookup of cuTensorMapEncodeTiled. Includes
// the rest of the PTX layer (ptx.cuh: mbarrier, fences, cluster; cp_async.cuh) that TMA
// pipelines use with it.
#pragma once

#include <cuda.h>  // CUtensorMap and the encode signature (header only: no -lcuda)
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/ptx.cuh"

namespace moekit::cuda::sm90 {

// cuTensorMapEncodeTiled through the runtime's driver entry point: no -lcuda at link time.
// nullptr when the driver does not provide it.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                   CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult qres{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &qres);
    if (err != cudaSuccess || qres != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

#if defined(__CUDACC__)

// One TMA tile load of a 3D map at element coordinates (c0 innermost); completes the box's
// bytes (out-of-bounds parts zero-filled and counted) on `bar`.
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// The same with an L2 cache policy (cp_async.cuh's createpolicy_evict_first: a weight stream read
// once, so it does not push out of L2 what is read again: token rows, ids, code).
__device__ __forceinline__ void tma_load_3d_hint(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                                 int c1, int c2, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(policy)
      : "memory");
}

// The same box multicast to the CTAs of the cluster in `cta_mask`: it lands at the same
// shared-memory offset in each and completes its bytes on the barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_load_3d_multicast(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar,
                                                      int c0, int c1, int c2, std::uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

#endif  // __CUDACC__

}  // namespace moekit::cuda::sm90
