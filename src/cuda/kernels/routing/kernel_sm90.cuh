// The routing + permutation kernels (docs/design.md step 1). Routing: one warp per token, the
// token's E_global scores in a shared-memory row, top-k by k rounds of a warp argmax (ties -> lower
// id). Permutation: counts by shared atomics, then a stable scatter in chunks of 1024 slots
// (per-warp match_any ranks + per-warp counts). Up to kPermuteMultiCtaMinSlots slots one
// persistent CTA does it all (fused_moe routes in the same CTA up to kFusedRouteMaxTokens tokens,
// on a grid before it above); past that a count grid (routing its own tokens first) and a scatter
// grid split the slots into contiguous chunks. Included by inst/routing_sm90.cu alone (the scatter
// kernel is not a template: a second includer would define it twice).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/kernels/quant/one_cta.cuh"  // quantize_tensor_one_cta
#include "cuda/kernels/routing/config.hpp"
#include "cuda/kernels/routing/params.hpp"
#include "cuda/numerics/quant.cuh"  // fold_absmax, block_absmax
#include "cuda/numerics/topk.cuh"

namespace moekit::cuda::routing {

// One warp routes token m (cuda/numerics/topk.cuh); `srow` is this warp's shared row of E_global
// floats.
template <class TLogit>
__device__ void route_token(const RoutingParams& p, std::int64_t m, float* srow, int lane) {
  const int k = p.top_k;
  const TLogit* lrow = static_cast<const TLogit*>(p.logits) + m * static_cast<std::int64_t>(p.num_experts_global);
  numerics::route_token_warp(
      p.routing, p.num_experts_global, k, [&](int e) { return to_float(lrow[e]); },
      [&](int e) { return p.correction_bias != nullptr ? __ldg(p.correction_bias + e) : 0.f; }, srow,
      p.topk_ids_out + m * k, p.topk_weights_out + m * k, lane);
}

// The local expert of a slot, -1 when dropped. `record`: report a bad id / map entry (the counting
// pass does, once per slot; the scatter pass sees the same slots again and does not).
__device__ __forceinline__ int local_expert(const RoutingParams& p, std::int64_t slot, bool record = false) {
  const int id = __ldcg(p.topk_ids + slot);
  if (id < 0 || id >= p.num_experts_global) {
    if (record) record_id_fault(p.faults, slot / p.top_k, static_cast<int>(slot % p.top_k), id, p.num_experts_global);
    return -1;
  }
  const int e = p.expert_map != nullptr ? __ldg(p.expert_map + id) : id;
  if (e >= 0 && e < p.num_experts) return e;
  if (record) record_map_fault(p.faults, slot / p.top_k, static_cast<int>(slot % p.top_k), id, e, p.num_experts);
  return -1;
}

// The permutation's shared memory: warp_cnt[warps][E] (uint16, chunk-relative), running[E],
// chunk_tot[E].
struct PermuteSmem {
  std::uint16_t* warp_cnt;
  int* running;
  int* chunk_tot;
};

template <int kWarps>
__device__ __forceinline__ PermuteSmem permute_smem(unsigned char* smem, int E) {
  PermuteSmem sm;
  sm.warp_cnt = reinterpret_cast<std::uint16_t*>(smem);
  sm.running = reinterpret_cast<int*>(smem + static_cast<std::size_t>(kWarps) * E * 2 + 16 - (kWarps * E * 2) % 16);
  sm.chunk_tot = sm.running + E;
  return sm;
}

// counts[e] <- the slots of [s0, s1) whose local expert is e (order-free shared atomics). The
// CTA's threads all call it; it ends with a barrier.
template <int kNumThreads>
__device__ __forceinline__ void count_slots(const RoutingParams& p, std::int64_t s0, std::int64_t s1, int* counts) {
  const int tid = threadIdx.x;
  for (int e = tid; e < p.num_experts; e += kNumThreads) counts[e] = 0;
  __syncthreads();
  for (std::int64_t s = s0 + tid; s < s1; s += kNumThreads) {
    const int e = local_expert(p, s, /*record=*/true);
    if (e >= 0) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
}

// Warp 0 alone: running[0..E) <- its exclusive prefix sum; each lane owns a contiguous run of
// experts. Also into offsets[0..E] (offsets[E] = the sum) when write_offsets.
__device__ __forceinline__ void scan_expert_counts(int* running, int E, std::int32_t* offsets, bool write_offsets,
                                                   int lane) {
  const int per = (E + 31) / 32;
  const int lo = min(E, lane * per), hi = min(E, lo + per);
  int local = 0;
  for (int e = lo; e < hi; ++e) local += running[e];
  const int incl = warp_inclusive_sum(local, lane);
  int acc = incl - local;
  for (int e = lo; e < hi; ++e) {
    const int c = running[e];
    running[e] = acc;
    if (write_offsets) offsets[e] = acc;
    acc += c;
  }
  if (lane == 31 && write_offsets) offsets[E] = incl;
}

// Stable scatter of the slots [s0, s1), kNumThreads slots per chunk: per-warp match_any ranks +
// per-warp counts order a chunk's slots of one expert by slot index. On entry (after a barrier)
// sm.running[e] is the sorted row of expert e's first slot in [s0, s1); warp_cnt and chunk_tot
// are scratch. The CTA's threads all call it.
template <int kNumThreads>
__device__ void scatter_slots(const RoutingParams& p, std::int64_t s0, std::int64_t s1, const PermuteSmem& sm) {
  constexpr int kThreads = kNumThreads;
  constexpr int kWarps = kNumThreads / 32;
  const int E = p.num_experts;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  std::uint16_t* warp_cnt = sm.warp_cnt;
  int* running = sm.running;
  int* chunk_tot = sm.chunk_tot;
  const unsigned lt_mask = (1u << lane) - 1u;
  for (std::int64_t c0 = s0; c0 < s1; c0 += kThreads) {
    if (c0 != s0) {
      for (int e = tid; e < E; e += kThreads) running[e] += chunk_tot[e];
    }
    for (int i = tid; i < kWarps * E; i += kThreads) warp_cnt[i] = 0;
    __syncthreads();
    const std::int64_t s = c0 + tid;
    const int e = s < s1 ? local_expert(p, s) : -1;
    // The slot's router weight for sorted_weights, loaded here so that its latency overlaps the
    // chunk's counting. Plain load: when routing ran in this launch, this CTA's own threads wrote
    // the weights (ordered by the __syncthreads before the permutation); no read-only path.
    // (The scatter launch reads weights its predecessor wrote: ordered by pdl_wait.)
    const bool with_weight = e >= 0 && p.sorted_weights != nullptr && p.topk_weights != nullptr;
    const float weight = with_weight ? p.topk_weights[s] : 0.f;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & lt_mask);
    if (e >= 0 && rank == 0) warp_cnt[warp * E + e] = static_cast<std::uint16_t>(__popc(peers));
    __syncthreads();
    for (int x = tid; x < E; x += kThreads) {
      int acc = 0;
      for (int w = 0; w < kWarps; ++w) {
        const int c = warp_cnt[w * E + x];
        warp_cnt[w * E + x] = static_cast<std::uint16_t>(acc);
        acc += c;
      }
      chunk_tot[x] = acc;
    }
    __syncthreads();
    if (e >= 0) {
      const int pos = running[e] + warp_cnt[warp * E + e] + rank;
      p.sorted_slots[pos] = static_cast<std::int32_t>(s);
      if (with_weight) p.sorted_weights[pos] = weight;
    }
    __syncthreads();
  }
}

// The whole permutation in a single CTA of kNumThreads (up to kPermuteMultiCtaMinSlots slots).
template <int kNumThreads>
__device__ void build_permutation(const RoutingParams& p, unsigned char* smem) {
  const PermuteSmem sm = permute_smem<kNumThreads / 32>(smem, p.num_experts);
  const std::int64_t P = p.num_tokens * p.top_k;
  // Pass 1: counts per local expert; warp 0 prefix-sums them to expert_offsets.
  count_slots<kNumThreads>(p, 0, P, sm.running);
  if (threadIdx.x < 32) scan_expert_counts(sm.running, p.num_experts, p.expert_offsets, true, threadIdx.x);
  __syncthreads();
  // Pass 2: stable scatter, kNumThreads slots per chunk.
  scatter_slots<kNumThreads>(p, 0, P, sm);
}

// Absmax CTA b of a routing launch (RoutingParams::absmax_ctas): |x| folded with fmaxf from 0
// (numerics::fold_absmax: a NaN never wins, +-inf counts) over elements b * kNumThreads + t, with
// a stride of absmax_ctas * kNumThreads (in 16-byte vectors of 8 when x is 16-byte aligned), then
// the CTA's max to absmax_partials[b]. bf16 / fp16 bits: |x| is the bits without the sign.
template <int kNumThreads>
__device__ void hidden_absmax_partial(const RoutingParams& p, int b) {
  const std::uint16_t* x = static_cast<const std::uint16_t*>(p.absmax_x);
  const bool bf16 = p.absmax_x_dtype == DType::kBf16;
  auto abs_of = [bf16](std::uint32_t h) {
    h &= 0x7fffu;
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(h)))
                : __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  };
  const std::int64_t n = p.absmax_elems;
  const std::int64_t stride = static_cast<std::int64_t>(p.absmax_ctas) * kNumThreads;
  const std::int64_t first = static_cast<std::int64_t>(b) * kNumThreads + threadIdx.x;
  float amax = 0.f;
  std::int64_t tail = 0;  // elements before it went as vectors
  if ((reinterpret_cast<std::uintptr_t>(x) & 15u) == 0) {
    const std::int64_t nv = n / 8;
    for (std::int64_t i = first; i < nv; i += stride) {
      const uint4 u = *reinterpret_cast<const uint4*>(x + 8 * i);
      const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        amax = numerics::fold_absmax(amax, abs_of(w[j] & 0xffffu));
        amax = numerics::fold_absmax(amax, abs_of(w[j] >> 16));
      }
    }
    tail = nv * 8;
  }
  for (std::int64_t i = tail + first; i < n; i += stride) amax = numerics::fold_absmax(amax, abs_of(x[i]));
  numerics::block_absmax<kNumThreads>(amax, [&](float a) { p.absmax_partials[b] = a; });
}

// The quantization CTA of a routing launch (RoutingParams::quant_cta): all of hidden, as the
// one-CTA quantization launch does it (the same scale and bytes; 4 elements a load).
template <int kNumThreads>
__device__ void quantize_hidden(const RoutingParams& p) {
  const std::int64_t n_vec = p.absmax_elems / 4;
  if (p.absmax_x_dtype == DType::kBf16)
    quant::quantize_tensor_one_cta<__nv_bfloat16, 4, kNumThreads>(static_cast<const __nv_bfloat16*>(p.absmax_x), n_vec,
                                                                   p.quant_q, p.quant_scale);
  else
    quant::quantize_tensor_one_cta<__half, 4, kNumThreads>(static_cast<const __half*>(p.absmax_x), n_vec, p.quant_q,
                                                            p.quant_scale);
}

// kRoute false: the permutation-only instantiation, compiled without the routing (route_token: every
// routing method, about half the kernel's code); the host runs calls without routing on it
// (run_routing_sm90's permute_only: fused_experts calls, the permute launch after a routing launch),
// TLogit then unused (float). The same code on the permutation's path, so the same tables.
template <class TLogit, int kNumThreads, bool kRoute = true>
__global__ void __launch_bounds__(kNumThreads, 1) routing_sm90_kernel(const __grid_constant__ RoutingParams p) {
  constexpr int kWarps = kNumThreads / 32;
  extern __shared__ __align__(16) unsigned char smem[];
  // PDL (cuda/common/pdl.cuh): every global access follows the wait. The call's first launch
  // has no programmatic dependency (the wait returns at once); the permute launch of a two-launch
  // call reads the routing launch's topk_ids. Dependents (the permute launch, quant, GEMM1) may
  // launch right away: their prologues overlap this kernel, and they wait for it to complete.
  // Not when this is the last kernel of the chain (route only: moekit::route).
  pdl_wait();
  if (p.pdl_trigger) pdl_launch_dependents();
  // The last absmax_ctas CTAs take hidden's absmax (fp8_per_tensor, dynamic scale) and nothing
  // else; or the last CTA quantizes all of a small hidden (quant_cta).
  const int routing_ctas = static_cast<int>(gridDim.x) - p.absmax_ctas - (p.quant_cta ? 1 : 0);
  if (static_cast<int>(blockIdx.x) >= routing_ctas) {
    if (p.quant_cta)
      quantize_hidden<kNumThreads>(p);
    else
      hidden_absmax_partial<kNumThreads>(p, static_cast<int>(blockIdx.x) - routing_ctas);
    return;
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < p.num_zero_words) p.zero_words[threadIdx.x] = 0u;
  if (kRoute && p.route) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* srow = reinterpret_cast<float*>(smem) + static_cast<std::size_t>(warp) * p.num_experts_global;
    const std::int64_t stride = static_cast<std::int64_t>(routing_ctas) * kWarps;
    for (std::int64_t m = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; m < p.num_tokens; m += stride)
      route_token<TLogit>(p, m, srow, lane);
  }
  if (p.permute) {
    __syncthreads();  // routing's global writes (topk_ids) are visible to the whole CTA after this
    build_permutation<kNumThreads>(p, smem);
  }
}

// Multi-CTA permutation, launch 1 (num_chunks CTAs, then absmax_ctas): CTA c routes its own
// tokens when `route` (one warp per token, as routing_sm90_kernel), then counts their slots per
// local expert into chunk_counts[c][E]. Block 0 zeroes the counter words. The CTAs past
// num_chunks take hidden's absmax partials, as the one-CTA launch's do (RoutingParams::
// absmax_ctas). Shared memory: the routing rows, then counts[E] in the same bytes.
// kRoute false: without the routing, as routing_sm90_kernel's.
template <class TLogit, bool kRoute = true>
__global__ void __launch_bounds__(kThreads, 1) permute_count_sm90_kernel(const __grid_constant__ RoutingParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  // PDL: the call's first launch (no programmatic dependency: the wait returns at once); the
  // scatter launch may start right away and waits for this grid to complete.
  pdl_wait();
  if (p.pdl_trigger) pdl_launch_dependents();
  if (static_cast<int>(blockIdx.x) >= p.num_chunks) {
    hidden_absmax_partial<kThreads>(p, static_cast<int>(blockIdx.x) - p.num_chunks);
    return;
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < p.num_zero_words) p.zero_words[threadIdx.x] = 0u;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.x) * p.chunk_tokens;
  const std::int64_t m1 = m0 + p.chunk_tokens < p.num_tokens ? m0 + p.chunk_tokens : p.num_tokens;
  if (kRoute && p.route) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* srow = reinterpret_cast<float*>(smem) + static_cast<std::size_t>(warp) * p.num_experts_global;
    for (std::int64_t m = m0 + warp; m < m1; m += kWarps) route_token<TLogit>(p, m, srow, lane);
    __syncthreads();  // the chunk's topk_ids are visible to the CTA; the counts reuse srow's bytes
  }
  int* counts = reinterpret_cast<int*>(smem);
  count_slots<kThreads>(p, m0 * p.top_k, m1 * p.top_k, counts);
  std::int32_t* row = p.chunk_counts + static_cast<std::int64_t>(blockIdx.x) * p.num_experts;
  for (int e = threadIdx.x; e < p.num_experts; e += kThreads) row[e] = counts[e];
}

// Multi-CTA permutation, launch 2 (ceil(num_chunks / chunks_per_scatter) CTAs): CTA b sums the
// count table into each expert's total and its own prefix (the expert's slots in the chunks
// before its first), scans the totals (CTA 0 writes expert_offsets; every CTA gets the same
// offsets) and scatters its chunks' slots as the one-CTA kernel does, starting each expert at
// offset + prefix: the same rows, bit for bit.
__global__ void __launch_bounds__(kThreads, 1) permute_scatter_sm90_kernel(const __grid_constant__ RoutingParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  // PDL: reads the count launch's chunk_counts (and its routing's topk_ids / weights).
  pdl_wait();
  if (p.pdl_trigger) pdl_launch_dependents();
  const int E = p.num_experts;
  const int tid = threadIdx.x;
  const PermuteSmem sm = permute_smem<kWarps>(smem, E);
  for (int e = tid; e < E; e += kThreads) {
    sm.running[e] = 0;
    sm.chunk_tot[e] = 0;
  }
  __syncthreads();
  const int first = static_cast<int>(blockIdx.x) * p.chunks_per_scatter;
  const int last = min(p.num_chunks, first + p.chunks_per_scatter);
  // Totals into running, the earlier chunks' counts into chunk_tot. Groups of E threads split the
  // chunks (each group reads whole rows, coalesced); integer atomics, so the sums are order-free.
  // kBatch predicated loads in flight per thread before any is added: the table read is L2
  // latency, not bandwidth (a loop with an exit per row would wait for every load in turn).
  // Read-only path: the count launch wrote the table and has completed (pdl_wait).
  constexpr int kBatch = 8;
  const int groups = E < kThreads ? kThreads / max(E, 1) : 1;
  for (int i = tid; i < groups * E; i += kThreads) {
    const int e = i % E, g = i / E;
    int tot = 0, pre = 0;
    for (int c0 = g; c0 < p.num_chunks; c0 += kBatch * groups) {
      int v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int c = c0 + u * groups;
        v[u] = c < p.num_chunks ? __ldg(p.chunk_counts + static_cast<std::int64_t>(c) * E + e) : 0;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        tot += v[u];
        pre += c0 + u * groups < first ? v[u] : 0;
      }
    }
    if (tot != 0) atomicAdd(&sm.running[e], tot);
    if (pre != 0) atomicAdd(&sm.chunk_tot[e], pre);
  }
  __syncthreads();
  if (tid < 32) scan_expert_counts(sm.running, E, p.expert_offsets, blockIdx.x == 0, tid);
  __syncthreads();
  for (int e = tid; e < E; e += kThreads) sm.running[e] += sm.chunk_tot[e];
  __syncthreads();
  const std::int64_t P = p.num_tokens * p.top_k;
  const std::int64_t chunk_slots = p.chunk_tokens * p.top_k;
  const std::int64_t s0 = first * chunk_slots;
  const std::int64_t s1 = last * chunk_slots < P ? last * chunk_slots : P;
  scatter_slots<kThreads>(p, s0, s1, sm);
}

// ---- host side of one instantiation (inst/*.cu) ----

// Launches `kernel` with `smem` bytes of dynamic shared memory (opting in past 48 KiB).
inline void launch_routing_kernel(void (*kernel)(RoutingParams), const RoutingParams& p, std::size_t smem, int grid,
                                  int threads, void* stream, bool pdl) {
  if (smem > 48 * 1024)
    MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  launch_kernel_pdl(kernel, dim3(grid), dim3(threads), smem, static_cast<cudaStream_t>(stream), pdl, p);
}

template <DType kLogits, int kNumThreads>
void run_routing_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl, bool permute_only) {
  if (permute_only)
    launch_routing_kernel(routing_sm90_kernel<float, kNumThreads, false>, p, smem, grid, kNumThreads, stream, pdl);
  else
    launch_routing_kernel(routing_sm90_kernel<element_t<kLogits>, kNumThreads>, p, smem, grid, kNumThreads, stream, pdl);
}

template <DType kLogits>
void run_permute_count_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl,
                            bool permute_only) {
  if (permute_only)
    launch_routing_kernel(permute_count_sm90_kernel<float, false>, p, smem, grid, kThreads, stream, pdl);
  else
    launch_routing_kernel(permute_count_sm90_kernel<element_t<kLogits>>, p, smem, grid, kThreads, stream, pdl);
}

}  // namespace moekit::cuda::routing
