// The expert table of the persistent TMA + wgmma GEMM kernels (swapab/, tokmajor/) in shared
// memory: the row offsets and the per-expert prefix of work units that their schedules search.
#pragma once

#include "cuda/common/warp.cuh"

namespace moekit::cuda::gemm_common {

// Every thread of the CTA (kThreads), after the PDL wait (the row offsets are the routing
// kernel's output): copies p.row_offsets[0..E] (E = p.num_experts) to off[0..E]; the copy is
// complete for every thread when it returns.
template <int kThreads, class P>
__device__ __forceinline__ void load_expert_offsets(const P& p, int E, int* off) {
  for (int i = threadIdx.x; i <= E; i += kThreads) off[i] = p.row_offsets[i];
  __syncthreads();
}

// The expert of work unit w: false when w >= prefix[E] (no such unit); otherwise true with e =
// the last expert whose prefix is <= w (prefix from MOEKIT_BUILD_EXPERT_PREFIX; empty experts share
// their successor's prefix, so e has rows).
__device__ __forceinline__ bool find_expert(int w, const int* prefix, int E, int& e) {
  if (w >= prefix[E]) return false;
  int lo = 0, hi = E;  // invariant: prefix[lo] <= w < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= w) lo = mid; else hi = mid;
  }
  e = lo;
  return true;
}

// The same, trying `hint` first (the expert of the caller's previous unit): consecutive units are
// mostly one expert's, so two independent shared loads replace the binary search's ~log2(E)
// dependent ones (token-major's K-short GEMM2 runs a search a unit in every producer thread and
// consumer warp: ~20 % of its warp samples, session 32). `hint` becomes the expert found.
__device__ __forceinline__ bool find_expert_from(int w, const int* prefix, int E, int& hint) {
  if (hint >= 0 && hint < E && prefix[hint] <= w && w < prefix[hint + 1]) return true;
  return find_expert(w, prefix, E, hint);
}

}  // namespace moekit::cuda::gemm_common

// Every thread of the CTA, after load_expert_offsets: warp 0 builds prefix[e] = the work units of
// the experts before e (prefix[0] = 0, prefix[E] = all units), where `units` is the family's
// count, an expression of `rows` (the expert's rows, >= 0), `e_` (the expert) and the kernel's variables. Lane l
// owns a contiguous run of ceil(E / 32) experts: it sums their units, one warp scan gives the
// run's first prefix, and it writes the run's prefixes (the units computed again: no local
// array). One scan for any E, where a scan per 32 experts (until session 41) put E / 32 shuffle
// chains in series: ~1 us of the token-major kernels' table phase at E = 256 (the phase timer).
// The prefix is complete for every thread when it ends.
// A statement macro, not a function: nvcc compiles it exactly as the same lines written in the
// kernel, while an inlined function (its locals, its lambda) changes the register numbering of
// the kernel's PTX and so ptxas's instruction order in the hot loops.
#define MOEKIT_BUILD_EXPERT_PREFIX(E, off, prefix, rows, units)       \
  if (threadIdx.x < 32) {                                             \
    const int lane_ = threadIdx.x;                                    \
    const int per_ = ((E) + 31) / 32;                                 \
    const int lo_ = min((E), lane_ * per_);                           \
    const int hi_ = min((E), lo_ + per_);                             \
    int sum_ = 0;                                                     \
    for (int e_ = lo_; e_ < hi_; ++e_) {                              \
      const int rows = max(0, (off)[e_ + 1] - (off)[e_]);             \
      sum_ += (units);                                                \
    }                                                                 \
    int acc_ = ::moekit::cuda::warp_inclusive_sum(sum_, lane_) - sum_; \
    if (lane_ == 0) (prefix)[0] = 0;                                  \
    for (int e_ = lo_; e_ < hi_; ++e_) {                              \
      const int rows = max(0, (off)[e_ + 1] - (off)[e_]);             \
      acc_ += (units);                                                \
      (prefix)[e_ + 1] = acc_;                                        \
    }                                                                 \
  }                                                                   \
  __syncthreads()

// The same table 32 experts a step (a warp scan per step, the carry in series): what every family
// built until session 41, kept for Swap-AB, whose kernels took 5-6 more registers with the one-scan
// form (GEMM1 225 -> 230, e4m3) and ran 1-2 % slower at gpt-oss TP8 and TP1 (same-run A/B,
// bench/results/2026-12-04-cb22b16-h200-*), where E <= 128 gives at most 4 steps.
#define MOEKIT_BUILD_EXPERT_PREFIX_STEPPED(E, off, prefix, rows, units) \
  if (threadIdx.x < 32) {                                             \
    const int lane_ = threadIdx.x;                                    \
    int running_ = 0;                                                 \
    if (lane_ == 0) (prefix)[0] = 0;                                  \
    for (int e0_ = 0; e0_ < (E); e0_ += 32) {                         \
      const int e_ = e0_ + lane_;                                     \
      int n_ = 0;                                                     \
      if (e_ < (E)) {                                                 \
        const int rows = max(0, (off)[e_ + 1] - (off)[e_]);           \
        n_ = (units);                                                 \
      }                                                               \
      n_ = ::moekit::cuda::warp_inclusive_sum(n_, lane_);             \
      if (e_ < (E)) (prefix)[e_ + 1] = running_ + n_;                 \
      running_ += __shfl_sync(0xffffffffu, n_, 31);                   \
    }                                                                 \
  }                                                                   \
  __syncthreads()
