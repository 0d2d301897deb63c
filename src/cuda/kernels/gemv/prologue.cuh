// What both GEMV kernels (kernel_sm90.cuh, kernel_mma_sm90.cuh) do before GEMM1, and their host
// side: every CTA routes the call's slots in its own shared memory and stages the call's token
// rows; the co-residency query and the cooperative launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/gemv/params.hpp"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::gemv {

// A NaN-ignoring absmax over the CTA (every thread's `v`), in every thread. Uses scratch[0..kWarps).
__device__ __forceinline__ float block_absmax(float v, float* scratch) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float a = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) a = fmaxf(a, scratch[w]);
  __syncthreads();  // scratch free again
  return a;
}

// The shared-memory tables a CTA routes the call into.
struct RouteTables {
  int* slot_e;  // [P]: the local expert of every slot, -1 dropped
  int* sorted;  // [P]: slots grouped by touched expert (ascending), slot order inside
  int* ue;      // [P + 1]: touched expert u's id
  int* uoff;    // [P + 2]: touched expert u's first entry in sorted (uoff[U] = placed slots)
  int* cnt;     // [E]: per local expert count, then its cursor
  float* tw;    // [P]: the slots' router weights
};

// Slot `sl`'s local expert from its id (expert_map), or -1: dropped (-1 id or map entry), or a bad
// id or map entry, which CTA 0 records (every CTA sees the same). Both routings call it.
__device__ __forceinline__ int local_expert(const GemvParams& p, int sl, int id) {
  const int E = p.num_experts;
  const int e = id >= 0 && id < p.num_experts_global ? (p.expert_map != nullptr ? p.expert_map[id] : id) : -1;
  if (e >= 0 && e < E) return e;
  if (blockIdx.x == 0) record_slot_fault(p.faults, sl / p.top_k, sl % p.top_k, id, p.expert_map, p.num_experts_global, E);
  return -1;
}

// Every slot's local expert (expert_map; a bad id or map entry is dropped and recorded by CTA 0,
// every CTA sees the same), the per-expert counts, then warp 0's scan: the touched experts in
// ascending order (ue, uoff) and each expert's first place (cnt). Returns U, the touched experts,
// in every thread; ends with a CTA barrier. Each thread's first slot's id and weight are loaded
// before the counts are zeroed. scratch_int[kWarps] holds U.
__device__ __forceinline__ int route_and_scan(const GemvParams& p, const RouteTables& r, int* scratch_int) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int P = p.num_tokens * p.top_k, E = p.num_experts;
  const int id0 = tid < P ? p.topk_ids[tid] : -1;
  const float w0 = tid < P ? p.topk_weights[tid] : 0.0f;
  for (int i = tid; i < E; i += kThreads) r.cnt[i] = 0;
  __syncthreads();
  for (int sl = tid; sl < P; sl += kThreads) {
    const int id = sl == tid ? id0 : p.topk_ids[sl];
    r.tw[sl] = sl == tid ? w0 : p.topk_weights[sl];
    const int e = local_expert(p, sl, id);
    r.slot_e[sl] = e;
    if (e >= 0) atomicAdd(r.cnt + e, 1);
  }
  __syncthreads();
  if (warp == 0) {
    int run_rows = 0, run_u = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int rows = e < E ? r.cnt[e] : 0;
      int rr = rows, f = rows > 0 ? 1 : 0;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int vr = __shfl_up_sync(0xffffffffu, rr, d);
        const int vf = __shfl_up_sync(0xffffffffu, f, d);
        if (lane >= d) {
          rr += vr;
          f += vf;
        }
      }
      if (rows > 0) {
        const int u = run_u + f - 1;
        r.ue[u] = e;
        r.uoff[u] = run_rows + rr - rows;
        r.cnt[e] = run_rows + rr - rows;
      }
      run_rows += __shfl_sync(0xffffffffu, rr, 31);
      run_u += __shfl_sync(0xffffffffu, f, 31);
    }
    if (lane == 0) {
      r.uoff[run_u] = run_rows;
      scratch_int[kWarps] = run_u;
    }
  }
  __syncthreads();
  return scratch_int[kWarps];
}

// Warp 0 only, P <= kWarpRouteSlots (GemvParams::warp_route): the same tables as route_and_scan
// and place_slots (slot_e, tw, ue, uoff, sorted; U in scratch_int[kWarps]) built by one warp from
// registers, lane s holding slot s: no per-expert counts, no scan over E, no CTA barrier (the
// CTA's routing takes three and a warp scan of E / 32 steps; the phase table at TP8 M = 1 measured
// entry to routed 1.57 -> 0.90 us at qwen3-30b bf16, E = 128, and 2.46 -> 1.25 at deepseek-v3,
// E = 256: docs/gemv.md, session 35). A slot's place in `sorted` is the count of placed slots of smaller
// experts plus its rank among its expert's slots (slot order); a touched expert's index is the
// count of touched experts below it. Writes only; the caller's next CTA barrier publishes them.
__device__ __forceinline__ void route_warp(const GemvParams& p, const RouteTables& r, int* scratch_int) {
  const int lane = threadIdx.x & 31;
  const int P = p.num_tokens * p.top_k, E = p.num_experts;
  int e = -1;
  if (lane < P) {
    r.tw[lane] = p.topk_weights[lane];
    e = local_expert(p, lane, p.topk_ids[lane]);
    r.slot_e[lane] = e;
  }
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int rank = __popc(peers & ((1u << lane) - 1u));  // earlier slots of the same expert
  const unsigned placed = __ballot_sync(0xffffffffu, e >= 0);
  const unsigned firsts = __ballot_sync(0xffffffffu, e >= 0 && rank == 0);  // one lane a touched expert
  const int key = e >= 0 ? e : E;  // dropped slots sort after every expert
  int below = 0, ubelow = 0;       // placed slots / touched experts of smaller experts
  for (int s = 0; s < P; ++s) {
    const int ks = __shfl_sync(0xffffffffu, key, s);
    if (ks < key) {
      ++below;
      ubelow += static_cast<int>((firsts >> s) & 1u);
    }
  }
  if (e >= 0) {
    r.sorted[below + rank] = lane;
    if (rank == 0) {
      r.ue[ubelow] = e;
      r.uoff[ubelow] = below;
    }
  }
  if (lane == 0) {
    const int U = __popc(firsts);
    r.uoff[U] = __popc(placed);
    scratch_int[kWarps] = U;
  }
}

// Warp 0 only (after route_and_scan): the stable placement, slots in ascending order 32 at a time,
// lanes with the same expert taking consecutive places in lane order.
__device__ __forceinline__ void place_slots(const RouteTables& r, int P) {
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < P; base += 32) {
    const int sl = base + lane;
    const int e = sl < P ? r.slot_e[sl] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) r.sorted[r.cnt[e] + rank] = sl;
    __syncwarp();
    if (e >= 0 && rank == 0) r.cnt[e] += __popc(peers);
    __syncwarp();
  }
}

// bf16 / fp16: hidden's M rows (K x 2 bytes each) into `region` at `pitch` bytes a row, as one
// cp.async group the caller waits for.
__device__ __forceinline__ void stage_rows_async(const GemvParams& p, std::uint8_t* region, int pitch) {
  const std::uint8_t* hid = static_cast<const std::uint8_t*>(p.hidden);
  const int cpr = p.hidden_size * 2 / 16;  // 16-byte chunks of a row
  const int n16 = p.num_tokens * cpr;
  for (int i = threadIdx.x; i < n16; i += kThreads) {
    const int t = i / cpr, q = i - t * cpr;
    sm90::cp_async_16_zfill(sm90::smem_addr(region + static_cast<std::int64_t>(t) * pitch + q * 16),
                            hid + static_cast<std::int64_t>(i) * 16, 16);
  }
  sm90::cp_async_commit();
}

// A 16-byte chunk of 8 activations: its absmax folded into `a` (NaN-ignoring), and its values
// times `inv` as 8 e4m3 bytes.
template <class ActT>
__device__ __forceinline__ float absmax8(const uint4& raw, float a) {
  const ActT* v = reinterpret_cast<const ActT*>(&raw);
#pragma unroll
  for (int q = 0; q < 8; ++q) a = numerics::fold_absmax(a, to_float(v[q]));
  return a;
}
template <class ActT>
__device__ __forceinline__ uint2 e4m3x8(const uint4& raw, float inv) {
  const ActT* v = reinterpret_cast<const ActT*>(&raw);
  return make_uint2(numerics::e4m3x4(make_float4(to_float(v[0]), to_float(v[1]), to_float(v[2]), to_float(v[3])), inv),
                    numerics::e4m3x4(make_float4(to_float(v[4]), to_float(v[5]), to_float(v[6]), to_float(v[7])), inv));
}

// fp8: a thread's first kHiddenAhead 16-byte chunks of hidden's M rows (chunk tid + i kThreads),
// loaded before the routing (p.hidden_early) so that the dynamic activation scale's pass over
// hidden does not start its DRAM round trip after the routing's (bf16 / fp16 copy the rows during
// the routing); zeros past the rows and when off. The loads also bring the lines into the caches
// the staging pass reads them from.
template <class ActT>
__device__ __forceinline__ void load_hidden_ahead(const GemvParams& p, uint4 (&hx)[kHiddenAhead]) {
  const ActT* x = static_cast<const ActT*>(p.hidden);
  const int n8 = p.num_tokens * (p.hidden_size / 8);
#pragma unroll
  for (int i = 0; i < kHiddenAhead; ++i) {
    const int c = threadIdx.x + i * kThreads;
    hx[i] = p.hidden_early != 0 && c < n8 ? *reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(c) * 8)
                                          : make_uint4(0u, 0u, 0u, 0u);
  }
}

// fp8: the activation scale (static, or from the absmax of the whole hidden: the chunks of `hx`,
// then the rest), then hidden's M rows as e4m3 into `region` at `pitch` bytes a row (K % 16 == 0).
// Returns the scale; ends before a CTA barrier the caller places.
template <class ActT>
__device__ __forceinline__ float activation_scale(const GemvParams& p, float* scratch, const uint4 (&hx)[kHiddenAhead]) {
  if (p.a13_scale != nullptr) return p.a13_scale[0];
  const ActT* x = static_cast<const ActT*>(p.hidden);
  const int n8 = p.num_tokens * (p.hidden_size / 8);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kHiddenAhead; ++i) a = absmax8<ActT>(hx[i], a);  // zeros add nothing
  for (int i = threadIdx.x + (p.hidden_early != 0 ? kHiddenAhead * kThreads : 0); i < n8; i += kThreads)
    a = absmax8<ActT>(*reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(i) * 8), a);
  return numerics::dynamic_scale(block_absmax(a, scratch));
}

template <class ActT>
__device__ __forceinline__ float stage_rows_e4m3(const GemvParams& p, std::uint8_t* region, int pitch, float* scratch,
                                                 const uint4 (&hx)[kHiddenAhead]) {
  const int tid = threadIdx.x;
  const ActT* x = static_cast<const ActT*>(p.hidden);
  const int c8 = p.hidden_size / 8;  // 8-element chunks of a row
  const int n8 = p.num_tokens * c8;
  const float xscale = activation_scale<ActT>(p, scratch, hx);
  const float inv = 1.0f / xscale;
  for (int i = tid; i < n8; i += kThreads) {
    const uint2 q = e4m3x8<ActT>(*reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(i) * 8), inv);
    const int t = i / c8, q8 = i - t * c8;
    *reinterpret_cast<uint2*>(region + static_cast<std::int64_t>(t) * pitch + q8 * 8) = q;
  }
  return xscale;
}

// The QGMMA GEMM1's B operand (kernel_mma_sm90.cuh, GemvMma<.., kQg>): all kQgTokens token rows
// (the call's M <= kQgTokens, zeros past M and past K) as one K-major wgmma tile without swizzle,
// 32-byte K steps of kQgStepBytes: step j of token t's row at byte j * kQgStepBytes + (t / 8) * 256
// + (t % 8) * 16 within its two 128-byte core-matrix halves (K bytes 0-15 of the step, then 16-31:
// LBO 128, SBO 256). The K order inside each 64-byte k-block is the one a lane's 16-byte weight
// load feeds the instruction (qg_offset): the step s (0, 1) of k-block kb holds, at k-position
// 4c + j (c = 0..3, j = 0..3), byte 16c + 8s + j of the block and, at 16 + 4c + j, byte
// 16c + 8s + 4 + j. Returns the activation scale; ends before a CTA barrier the caller places.
// Byte offset of bytes [8 q8, 8 q8 + 4) (h = 0) or [8 q8 + 4, 8 q8 + 8) (h = 1) of token t's row.
__device__ __forceinline__ int qg_offset(int t, int q8, int h) {
  const int kb = q8 >> 3, c = (q8 & 7) >> 1, s = q8 & 1;
  return (2 * kb + s) * kQgStepBytes + h * 128 + (t >> 3) * 256 + (t & 7) * 16 + c * 4;
}

template <class ActT>
__device__ __forceinline__ float stage_rows_e4m3_qg(const GemvParams& p, std::uint8_t* tile, float* scratch,
                                                    const uint4 (&hx)[kHiddenAhead]) {
  const ActT* x = static_cast<const ActT*>(p.hidden);
  const int c8 = p.hidden_size / 8;          // 8-element chunks of a row
  const int kb8 = (c8 + 7) / 8 * 8;          // the same, to the end of the last 64-byte k-block
  const float xscale = activation_scale<ActT>(p, scratch, hx);
  const float inv = 1.0f / xscale;
  for (int i = threadIdx.x; i < kQgTokens * kb8; i += kThreads) {
    const int t = i / kb8, q8 = i - t * kb8;
    uint2 q = make_uint2(0u, 0u);
    if (t < p.num_tokens && q8 < c8)
      q = e4m3x8<ActT>(*reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(t) * p.hidden_size + q8 * 8), inv);
    *reinterpret_cast<std::uint32_t*>(tile + qg_offset(t, q8, 0)) = q.x;
    *reinterpret_cast<std::uint32_t*>(tile + qg_offset(t, q8, 1)) = q.y;
  }
  sm90::fence_proxy_async_shared_cta();  // wgmma reads the tile through the async proxy
  return xscale;
}

// fp8_per_channel: hidden's M rows as e4m3 into `region` at `pitch` bytes a row (K % 16 == 0),
// each with its own dynamic scale (the absmax of the row, as the reference's per-token scale),
// which goes to row_scale[m]. A warp a row. Ends before a CTA barrier the caller places.
template <class ActT>
__device__ __forceinline__ void stage_rows_e4m3_per_row(const GemvParams& p, std::uint8_t* region, int pitch,
                                                        float* row_scale) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c8 = p.hidden_size / 8;  // 8-element chunks of a row
  for (int m = warp; m < p.num_tokens; m += kWarps) {
    const ActT* x = static_cast<const ActT*>(p.hidden) + static_cast<std::int64_t>(m) * p.hidden_size;
    float a = 0.0f;
    for (int i = lane; i < c8; i += 32) a = absmax8<ActT>(*reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(i) * 8), a);
    const float scale = numerics::dynamic_scale(warp_max(a));
    if (lane == 0) row_scale[m] = scale;
    const float inv = 1.0f / scale;
    for (int i = lane; i < c8; i += 32)
      *reinterpret_cast<uint2*>(region + static_cast<std::int64_t>(m) * pitch + i * 8) =
          e4m3x8<ActT>(*reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(i) * 8), inv);
  }
}

// ---- host side ----

// CTAs of `kernel` that can be resident at once on `device` (occupancy x SMs at the opt-in
// shared-memory maximum, which every layout can_implement admits stays under), cached per device
// in `cached` (0: not computed yet; -1: none can be resident); 0 when none can.
template <class Kernel>
int coresident_ctas(Kernel* kernel, int device, std::atomic<int> (&cached)[64]) {
  if (device >= 0 && device < 64) {
    const int v = cached[device].load(std::memory_order_acquire);
    if (v != 0) return v > 0 ? v : 0;
  }
  int bytes = 0, sms = 0, per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes));
  const int v = per_sm * sms;
  if (device >= 0 && device < 64) cached[device].store(v > 0 ? v : -1, std::memory_order_release);
  return v;
}

// The cooperative launch of `kernel`: `grid` CTAs of kThreads, p.smem.bytes of shared memory.
template <class Kernel>
void launch_cooperative(Kernel* kernel, const GemvParams& p, int grid, void* stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(p.smem.bytes);
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

}  // namespace moekit::cuda::gemv
