// cp.async (sm_80+) for shared-memory pipelines: 16/8/4-byte copies that zero-fill when the
// source size is 0 (predicated-off loads at tile edges), commit / wait groups, the arrival on an
// mbarrier once a thread's copies have landed, and the 1D bulk copy (cp.async.bulk, sm_90).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace moekit::cuda::sm90 {

#if defined(__CUDACC__)

// 16 bytes, bypassing L1 (.cg); src_bytes is 16 or 0 (0: no global read, the 16 bytes are zeroed).
__device__ __forceinline__ void cp_async_16_zfill(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 8 and 4 bytes (.ca: .cg takes 16 only), for rows whose pitch is not a multiple of 16 bytes.
__device__ __forceinline__ void cp_async_8_zfill(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_4_zfill(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Predicated forms (the copy is issued only where `pred`; no branch, so a run of them stays one
// basic block): 16 bytes bypassing L1, 8 and 4 bytes through L1.
__device__ __forceinline__ void cp_async_16_if(bool pred, std::uint32_t dst, const void* src) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16;\n}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<int>(pred))
      : "memory");
}
__device__ __forceinline__ void cp_async_8_if(bool pred, std::uint32_t dst, const void* src) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.ca.shared.global [%0], [%1], 8;\n}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<int>(pred))
      : "memory");
}
__device__ __forceinline__ void cp_async_4_if(bool pred, std::uint32_t dst, const void* src) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.ca.shared.global [%0], [%1], 4;\n}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<int>(pred))
      : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Wait until at most kPending committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all_groups() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Arrives on `bar` once this thread's earlier cp.asyncs have landed; .noinc: the arrival is one
// of those the barrier was initialized with.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// cp.async.bulk (sm_90, the TMA engine's 1D form): `bytes` (a multiple of 16; src and dst 16-byte
// aligned) from global into this CTA's shared memory, completing as transaction bytes on the
// mbarrier `bar` (whose phase expects them through mbar_arrive_expect_tx). One instruction a row,
// whatever its size: what a streaming kernel issues instead of a cp.async per 16 bytes a lane.
__device__ __forceinline__ void bulk_copy_g2s(std::uint32_t dst, const void* src, std::uint32_t bytes, std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// The same with an L2 cache policy (createpolicy_evict_first: data read once, so it does not
// push out what is read again).
__device__ __forceinline__ void bulk_copy_g2s_hint(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                                   std::uint32_t bar, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ std::uint64_t createpolicy_evict_first() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

#endif  // __CUDACC__

}  // namespace moekit::cuda::sm90
