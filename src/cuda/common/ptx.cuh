// The PTX building blocks below every Hopper kernel, each written once: shared-window addresses,
// mbarriers (CTA and cluster scope), fences, thread-block clusters (rank, mapa, barrier,
// st.async), named barriers, setmaxnreg and the gpu-scope acquire/release counter operations.
// TMA loads are in tma.cuh, cp.async in cp_async.cuh, wgmma in wgmma.cuh, mma.sync in mma.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moekit::cuda::sm90 {

#if defined(__CUDACC__)

// The 32-bit shared-window address of a generic pointer into shared memory (what every
// shared-memory operand of mbarrier, cp.async, TMA, ldmatrix and wgmma descriptors takes).
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Starts bringing the 128-byte line holding `p` (global memory) into L2 and returns at once:
// a later load of it waits on L2, not on HBM.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Starts bringing `bytes` (a multiple of 16) of global memory from the 16-byte aligned `p` into L2
// through the TMA engine and returns (sm_90 bulk prefetch). Issued from the routing launch of the
// TP8 chains, each MB of it added ~2.5-4 us to the call (docs/perf.md, session 26);
// moekit-launch-floor --only-prefetch measures it against line prefetches (prefetch_l2).
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// A 16-byte load of read-only global data that this SM reads once (weights): not kept in L1.
__device__ __forceinline__ uint4 ld_stream_16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The same for 8 bytes (rows that are 8-byte but not 16-byte aligned).
__device__ __forceinline__ uint2 ld_stream_8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// ---- mbarrier ----
__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Blocks until the phase of `bar` with the given parity has completed. A fresh barrier is in
// phase 0; waiting on parity 1 returns at once (the "previous" phase counts as complete), which
// is how producers pass their first round over the empty barriers.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// The same wait with acquire at cluster scope: what peers of the cluster wrote (st.async, or
// plain stores released by their arrival) is visible once it returns.
__device__ __forceinline__ void mbar_wait_cluster(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Adds `bytes` to the barrier's expected transaction count without arriving.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrive on a barrier of another CTA of the cluster (address from map_to_rank), releasing this
// thread's earlier accesses at cluster scope. ptxas emits MEMBAR.ALL.CTA + MEMBAR.ALL.GPU before
// the arrival (it waits for every outstanding memory access of the thread, global stores too).
__device__ __forceinline__ void mbar_arrive_cluster(std::uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
// The same arrival with the default semantics (release at CTA scope; no fence in the SASS): for a
// peer that only needs to know this CTA is past its reads of its own shared memory, e.g. a
// consumer handing a buffer back to the cluster CTA that writes into it (as CUTLASS's ClusterBarrier
// does for multicast stages).
__device__ __forceinline__ void mbar_arrive_remote(std::uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// ---- fences ----
// After mbar_init, before any other thread (or cluster peer) uses the barriers.
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA,
// wgmma reading what st.shared wrote).
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- thread-block clusters ----
__device__ __forceinline__ std::uint32_t cluster_ctarank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The address of the same shared-memory location in cluster CTA `rank` (shared::cluster window).
__device__ __forceinline__ std::uint32_t map_to_rank(std::uint32_t addr, std::uint32_t rank) {
  std::uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// All threads of all CTAs of the cluster (release / acquire: barrier initialization and
// shared-memory state before it are visible to the peers after it).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The two halves of cluster_sync_all, for a barrier split around independent work: every thread
// of the CTA arrives (release), and a thread that arrived waits (acquire) before it relies on the
// peers' state before their arrival. Exited threads do not hold the barrier up.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// All threads of all CTAs of the cluster, execution order only (relaxed arrive): for callers
// that publish barrier initialization with fence_mbarrier_init_cluster and data through
// barriers' tx counts, so no cluster-wide memory fence is needed.
__device__ __forceinline__ void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
// Asynchronous 4-byte store into another CTA's shared memory that completes 4 bytes of the
// transaction count of that CTA's barrier `cluster_bar` (no fence needed: the receiver sees the
// data once it observes the barrier phase, as with TMA).
__device__ __forceinline__ void st_async_f32(std::uint32_t cluster_addr, float v, std::uint32_t cluster_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(cluster_addr),
               "f"(v), "r"(cluster_bar)
               : "memory");
}

// Plain 4-byte loads and stores of another CTA's shared memory (address from map_to_rank); order
// them with a cluster-scope release / acquire (fence_acq_rel_cluster, mbar_arrive_cluster,
// mbar_wait_cluster).
__device__ __forceinline__ float ld_cluster_f32(std::uint32_t cluster_addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_cluster_f32(std::uint32_t cluster_addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_addr), "f"(v) : "memory");
}
// 8 and 16 bytes the same way (STAS: no fence; the receiver's barrier phase carries the data);
// the address 8- / 16-byte aligned.
__device__ __forceinline__ void st_async_v2_b32(std::uint32_t cluster_addr, std::uint32_t v0, std::uint32_t v1,
                                                std::uint32_t cluster_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(cluster_addr),
               "r"(v0), "r"(v1), "r"(cluster_bar)
               : "memory");
}
__device__ __forceinline__ void st_async_v4_b32(std::uint32_t cluster_addr, std::uint32_t v0, std::uint32_t v1,
                                                std::uint32_t v2, std::uint32_t v3, std::uint32_t cluster_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   cluster_addr),
               "r"(v0), "r"(v1), "r"(v2), "r"(v3), "r"(cluster_bar)
               : "memory");
}
__device__ __forceinline__ void fence_acq_rel_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }

// ---- CTA-level barriers and register budgets ----
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on named barrier `id` without waiting (the threads that bar.sync on it wait for this
// one's shared-memory writes before it).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Register budget of the calling warpgroup (sm_90a); every warp of the warpgroup must execute it.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---- gpu-scope counters in global memory (grid-wide producer / consumer hand-offs) ----
__device__ __forceinline__ std::uint32_t ld_acquire_gpu(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add_gpu(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ std::uint32_t atom_add_acq_rel_gpu(std::uint32_t* p, std::uint32_t v) {
  std::uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// ---- special registers (profiling aids) ----
__device__ __forceinline__ std::uint64_t globaltimer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ std::uint32_t smid() {
  std::uint32_t v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}

#endif  // __CUDACC__

}  // namespace moekit::cuda::sm90
