// Device code of the single-launch fused MoE path (sm_90a): one persistent CTA per SM runs, for
// the call's few tokens, the routing from logits (fused_moe) and the permutation (both
// redundantly in every CTA, in shared memory: no grid sync), GEMM1 + activation,
// GEMM2 + bias + router weight and the deterministic combine, with per-group completion
// counters between the stages instead of kernel boundaries.
//
// Work items, numbered GEMM1 first, then GEMM2:
//   GEMM1 item (group g, tile t, split s): `rows1` weight rows of w13[e] (rows1/2 gate rows
//     n0.. and the matching up rows N+n0..) times the group's <= 16 tokens over K bytes
//     [s*range, (s+1)*range). Swap-AB: weights are mma.sync's M side (A, row-major from the
//     stage), tokens its n side (B, from the token buffer).
//   GEMM2 item (group g, tile t, split s): rows2 rows of w2[e] (output columns k0..) times the
//     group's intermediate rows over N.
// A group is (local expert, chunk of <= 16 of its slots). With split > 1, every split writes
// its fp32 partial sums to the workspace and the last of them (atomic ticket) adds them in
// split order (deterministic) and runs the epilogue. GEMM1's epilogue writes the fp32
// intermediate [sorted row, N] and release-increments grp_done[g] (and gemm1_all); GEMM2's
// waits (acquire) on grp_done[g] == tiles1 (per-tensor dynamic scale: gemm1_all == G * tiles1,
// the absmax then being final), writes y[slot, tile cols] and increments comb[t]; the CTA that
// brings comb[t] to G sums y over each token's local slots in j order and writes out.
//
// Scales: the token operand of an item is staged (converted / quantized) into shared memory at
// the item's start: bf16/fp16 as is, fp8 as e4m3(x * (1/s)) with s per tensor (every CTA
// computes absmax(hidden) itself; the intermediate's from a global atomicMax), per token row
// (from the full row) or per 128-group (block128: the group's partial sums are scaled per
// stage, each warp's 128-byte segment being one group). Other scales apply in the epilogue.
// The intermediate is kept in fp32 and re-quantized by the GEMM2 items that read it.
//
// ==== Synchronization protocol (read this before touching any counter) ====
//
// Who writes what. The workspace slices of ONE launch (config.hpp FusedWorkspace):
//   inter [sorted row, N] fp32  written by GEMM1 epilogues (the last split of (g, tile)), read by
//                               the GEMM2 items of group g (every tile, every split);
//   part1 / part2               written by every split of a (g, tile), read by its last split;
//   y [slot, K] fp32            written by the GEMM2 epilogue of (g, tile) for g's slots, read
//                               by the combining CTA of that tile;
//   out [M, K]                  written by the combining CTA of each tile, never read.
// Inputs (hidden, weights, scales, routing) are never written by the launch; only they may be
// read through the non-coherent path (__ldg, cp.async). Every buffer above is read with
// ld.global.cg (__ldcg) after an acquire, never with __ldg / ld.global.nc / const __restrict__.
// Counters (uint32, head of the workspace):
//   grp_done[g]      += 1 (red.release.gpu) per finished GEMM1 (g, tile); the GEMM2 items of g
//                    wait (ld.acquire.gpu) for >= tiles1;
//   counters[0]      gemm1_all: += 1 per finished GEMM1 (g, tile), after counters[1] (atomicMax
//                    of the intermediate's |max|), per-tensor dynamic a2 only; GEMM2 items then
//                    wait for G * tiles1 and read the final max;
//   t1/t2_ticket[g, tile]  atom.acq_rel ticket of the splits of one (g, tile): the split that
//                    draws S-1 adds the partial sums in split order (deterministic), runs the
//                    epilogue and stores 0 back (the ticket has no other user in this launch);
//   comb[tile]       atom.acq_rel ticket of the G GEMM2 epilogues of one K tile: the one that
//                    draws G-1 combines the tile (y summed over j in order) and stores 0 back;
//   counters[2]      exit ticket: the CTA that draws grid-1 is the last one out; every other CTA
//                    has finished all its items, so it stores 0 to grp_done[0, G), counters[0..2].
// Release side: all threads store (st.global.cg / plain), __syncthreads, then thread 0 does
// __threadfence + red.release.gpu / atom.acq_rel (cumulative: publishes the whole CTA's stores).
// Acquire side: thread 0 spins with ld.acquire.gpu (or draws the ticket with atom.acq_rel), then
// __syncthreads (and __threadfence on the ticket paths), then all threads read with __ldcg.
//
// Deadlock freedom. CTA b runs items b, b + grid, b + 2 grid, ... in increasing order. Only
// GEMM2 items wait, and only on GEMM1 items, whose numbers are all smaller. Take the smallest
// unfinished item: its CTA has finished every smaller item of its own, so it is running this one
// PROVIDED THE CTA IS RESIDENT; a GEMM1 item never waits; for a GEMM2 item every GEMM1 item
// (smaller) is finished, so its wait ends. Hence some item always progresses. (Split tickets, the
// combine ticket and the exit ticket never wait.) Residency is the launcher's job: the grid is at
// most occupancy x SMs (computed once per device) and the launch is cooperative
// (cudaLaunchAttributeCooperative), so the driver makes the whole grid co-resident or fails the
// launch. A plain <<<>>> launch of <= one CTA per SM is NOT enough: a concurrent kernel (another
// stream of this process, a second fused launch, another MPS client) can hold SMs while part of
// this grid waits for them, and the resident CTAs then spin forever on items the others owe.
//
// Counters return to zero for the next launch. Every counter this launch touches is stored
// back to 0 by its last user (tickets) or by the last CTA out (grp_done[0, G), counters[0..2]),
// each after the final increment of that counter in this launch. Kernel completion orders those
// stores before the next launch on the stream (eager or graph node alike), so a launch that ran
// to completion leaves every counter zero for the next launch of the same problem shape (the
// counter area grows with M: fused_workspace_layout puts `inter` right after it, so a larger-M
// launch's counters overlap a smaller-M launch's intermediate). The
// default launcher still zeroes the counters with a cudaMemsetAsync before each launch
// (FusedMoeParams::zero_counters: the workspace may hold other paths' data there, and a launch
// killed half-way leaves them dirty); zero_counters = false relies on the kernel's reset alone.
// Graph replays are safe because a replay is the same launch (same grid, same workspace)
// ordered after the previous one on its stream. Two launches that may overlap (two streams, two
// graphs replayed concurrently) must use different workspaces, as every moekit call must, and
// the workspace's first contents must be ordered before the launch on ITS stream (a legacy
// default-stream cudaMemset is not ordered before a non-blocking stream's work).
//
// Debug aids, compile-time and off by default (no code when off): MOEKIT_FUSED_SPIN_LIMIT > 0
// ends a wait that spins more than that many times with a printf naming the counter (a hang
// becomes a wrong result and a message);
// MOEKIT_FUSED_PHASE_TIMER=1 records per-CTA %globaltimer stamps (docs/fused_moe.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/kernels/fused_moe/config.hpp"
#include "cuda/kernels/fused_moe/params.hpp"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"
#include "cuda/numerics/topk.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda::fused_moe {

// ---- synchronization helpers (gpu scope; the counter operations are in cuda/common/ptx.cuh) ----
// One thread spins until *p >= target; the caller follows with __syncthreads.
__device__ __forceinline__ void spin_until(const std::uint32_t* p, std::uint32_t target) {
#if MOEKIT_FUSED_SPIN_LIMIT > 0
  // Debug builds: a wait that outlasts any legitimate one (the whole launch is microseconds)
  // is a protocol bug or a non-resident CTA. Say which counter and give up waiting: the launch
  // then completes (with wrong results, which the tests catch) instead of hanging, and the
  // message is flushed at the next synchronization (a __trap would lose it with the context).
  for (unsigned long long n = 0;; ++n) {
    const std::uint32_t v = sm90::ld_acquire_gpu(p);
    if (v >= target) break;
    if (n >= static_cast<unsigned long long>(MOEKIT_FUSED_SPIN_LIMIT)) {
      printf("moekit fused MoE: CTA %d (of %d) gave up after %llu spins on counter %p = %u < %u\n",
             static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), n, static_cast<const void*>(p), v, target);
      break;
    }
    __nanosleep(40);
  }
#else
  while (sm90::ld_acquire_gpu(p) < target) __nanosleep(40);
#endif
}

// 8 activation-dtype values (16 bytes) as fp32.
__device__ __forceinline__ void unpack8(uint4 v, bool fp16, float (&x)[8]) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (fp16) {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      x[2 * i] = __low2float(h);
      x[2 * i + 1] = __high2float(h);
    } else {
      const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[i]);
      x[2 * i] = __low2float(h);
      x[2 * i + 1] = __high2float(h);
    }
  }
}

// 8 fp32 -> the operand bytes at dst: 16 bytes of bf16/fp16 (RNE) or 8 bytes of e4m3
// (quant(x, s) = e4m3(x * inv)).
template <Operand kOp>
__device__ __forceinline__ void store_operand8(std::uint8_t* dst, const float (&x)[8], float inv) {
  if constexpr (kOp == Operand::kE4m3) {
    uint2 q;
    q.x = static_cast<std::uint32_t>(numerics::e4m3x2(x[0] * inv, x[1] * inv)) |
          (static_cast<std::uint32_t>(numerics::e4m3x2(x[2] * inv, x[3] * inv)) << 16);
    q.y = static_cast<std::uint32_t>(numerics::e4m3x2(x[4] * inv, x[5] * inv)) |
          (static_cast<std::uint32_t>(numerics::e4m3x2(x[6] * inv, x[7] * inv)) << 16);
    *reinterpret_cast<uint2*>(dst) = q;
  } else {
    uint4 q;
    std::uint32_t* w = reinterpret_cast<std::uint32_t*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kOp == Operand::kF16) {
        const __half2 h = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
        w[i] = *reinterpret_cast<const std::uint32_t*>(&h);
      } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
        w[i] = *reinterpret_cast<const std::uint32_t*>(&h);
      }
    }
    *reinterpret_cast<uint4*>(dst) = q;
  }
}

// A work item, decoded from its number (every thread decodes it the same way).
struct Item {
  int gemm;   // 1 or 2; 0: past the end
  int g;      // group (local expert x chunk of <= 16 slots)
  int e;      // local expert
  int row0;   // first sorted row of the group
  int cnt;    // slots of the group, 1..16
  int tile;
  int split;
  int kb;     // first reduction byte of the split
  int nst;    // pipeline stages of the item
};

struct Tables {
  const int* off;    // [E+1] first sorted row of each local expert
  const int* gbase;  // [E+1] first group of each local expert; gbase[E] = G
  int G;             // groups
  int n1;            // GEMM1 items
  int total;         // all items
};

template <int kEb>
__device__ __forceinline__ Item decode_item(const FusedArgs& a, const Tables& T, int i) {
  Item it{};
  if (i >= T.total) return it;
  const bool first = i < T.n1;
  const GemmTiling& t = first ? a.t1 : a.t2;
  if (!first) i -= T.n1;
  it.gemm = first ? 1 : 2;
  const int per_group = t.tiles * t.split;
  it.g = i / per_group;
  const int rem = i - it.g * per_group;
  it.tile = rem / t.split;
  it.split = rem - it.tile * t.split;
  // Expert: the last e with gbase[e] <= g (experts without slots have gbase[e] == gbase[e+1]).
  int lo = 0, hi = a.E;  // gbase[lo] <= g < gbase[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (T.gbase[mid] <= it.g) lo = mid; else hi = mid;
  }
  it.e = lo;
  it.row0 = T.off[lo] + kMaxTok * (it.g - T.gbase[lo]);
  it.cnt = min(kMaxTok, T.off[lo + 1] - it.row0);
  const int row_bytes = (first ? a.K : a.N) * kEb;
  it.kb = it.split * t.range_bytes;
  const int skb = t.stage_k_bytes();
  const int bytes = min(t.range_bytes, row_bytes - it.kb);
  it.nst = (bytes + skb - 1) / skb;
  return it;
}

// In-place exclusive scan of arr[0, n) (n <= 4 * kThreads); arr[n] = total. All threads call it.
__device__ __forceinline__ void block_exclusive_scan(int* arr, int n, int* scratch) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int v[4], sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = tid * 4 + i;
    v[i] = j < n ? arr[j] : 0;
    sum += v[i];
  }
  const int incl = warp_inclusive_sum(sum, lane);
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int x = lane < kWarps ? scratch[lane] : 0;
    const int y = warp_inclusive_sum(x, lane);
    if (lane < kWarps) scratch[lane] = y - x;
    if (lane == kWarps - 1) scratch[kWarps] = y;
  }
  __syncthreads();
  int run = scratch[warp] + incl - sum;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = tid * 4 + i;
    if (j < n) arr[j] = run;
    run += v[i];
  }
  if (tid == 0) arr[n] = scratch[kWarps];
  __syncthreads();
}

// Max over the CTA of a non-negative float (NaN-free inputs: fmaxf dropped them).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// Routing from logits: cuda/numerics/topk.cuh, one warp per token into shared memory.
__device__ __forceinline__ float load_logit(const FusedArgs& a, std::int64_t i) {
  return a.logits_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a.logits)[i])
                       : static_cast<const float*>(a.logits)[i];
}

template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) fused_moe_sm90_kernel(const __grid_constant__ FusedArgs a) {
  constexpr int kEb = kOp == Operand::kE4m3 ? 1 : 2;  // operand bytes per element
  extern __shared__ std::uint8_t smem_raw[];
  std::uint8_t* base = reinterpret_cast<std::uint8_t*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~static_cast<std::uintptr_t>(1023));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const std::uint32_t stages_u32 = sm90::smem_addr(base + kSmemStagesOff);
  std::uint8_t* tok = base + kSmemTokOff;
  const std::uint32_t tok_u32 = sm90::smem_addr(tok);
  float* red = reinterpret_cast<float*>(base + kSmemRedOff);
  int* slot_e = reinterpret_cast<int*>(base + kSmemSlotOff);
  int* sorted = reinterpret_cast<int*>(base + kSmemSortedOff);
  int* off = reinterpret_cast<int*>(base + kSmemOffOff);
  int* gbase = reinterpret_cast<int*>(base + kSmemGbaseOff);
  int* tok_slot = reinterpret_cast<int*>(base + kSmemMiscOff);           // [16]
  float* tok_w = reinterpret_cast<float*>(base + kSmemMiscOff + 64);     // [16]
  float* tok_scale = reinterpret_cast<float*>(base + kSmemMiscOff + 128);  // [16]
  int* scratch = reinterpret_cast<int*>(base + kSmemMiscOff + 192);      // [kWarps + 1]
  float* fscratch = reinterpret_cast<float*>(base + kSmemMiscOff + 256); // [kWarps]
  float* s_scale = reinterpret_cast<float*>(base + kSmemMiscOff + 320);  // [0] a1, [1] a2
  int* s_flag = reinterpret_cast<int*>(base + kSmemMiscOff + 384);

#if MOEKIT_FUSED_PHASE_TIMER
  // Thread 0's phase stamps (it is also the thread that spins on the counters).
  std::uint64_t ph_start = 0, ph_routed = 0, ph_setup = 0, ph_g1 = 0, ph_wait0 = 0, ph_wait1 = 0;
  std::uint64_t ph_wait_ns = 0, ph_g2 = 0, ph_comb = 0;
  std::uint32_t ph_n1 = 0, ph_n2 = 0, ph_nc = 0;
  if (tid == 0) ph_start = sm90::globaltimer_ns();
#define MOEKIT_FUSED_ITEM_DONE(is_g1, combined)         \
  do {                                                  \
    if (tid == 0) {                                     \
      const std::uint64_t t_ = sm90::globaltimer_ns();        \
      if (is_g1) {                                      \
        ph_g1 = t_;                                     \
        ++ph_n1;                                        \
      } else {                                          \
        ph_g2 = t_;                                     \
        ++ph_n2;                                        \
        if (combined) {                                 \
          ph_comb = t_;                                 \
          ++ph_nc;                                      \
        }                                               \
      }                                                 \
    }                                                   \
  } while (0)
#else
#define MOEKIT_FUSED_ITEM_DONE(is_g1, combined) \
  do {                                          \
  } while (0)
#endif

  const int M = a.M, k = a.k, E = a.E, K = a.K, N = a.N;
  const int P = M * k;
  const bool act_fp16 = a.act_fp16 != 0;

  float* blk_a = reinterpret_cast<float*>(base + kSmemBlkAOff);  // [16][kMaxRangeGroups]
  float* blk_w = reinterpret_cast<float*>(base + kSmemBlkWOff);  // [128][kMaxRangeGroups]
  int* s_ids = reinterpret_cast<int*>(base + kSmemIdsOff);
  float* s_wts = reinterpret_cast<float*>(base + kSmemWtsOff);

  // ---- 0. Routing: from logits (every CTA routes the few tokens itself: no grid sync; CTA 0
  // writes the caller's outputs), or the given topk_ids / topk_weights. ----
  if (a.route) {
    float* srow = reinterpret_cast<float*>(tok) + warp * a.E_global;
    for (int m = warp; m < M; m += kWarps) {
      const std::int64_t row = static_cast<std::int64_t>(m) * a.E_global;
      numerics::route_token_warp(
          a.routing, a.E_global, a.k, [&](int e) { return load_logit(a, row + e); },
          [&](int e) { return a.correction_bias != nullptr ? a.correction_bias[e] : 0.f; }, srow, s_ids + m * k,
          s_wts + m * k, lane);
    }
    __syncthreads();
    if (blockIdx.x == 0) {
      for (int s = tid; s < P; s += kThreads) {
        if (a.topk_ids_out != nullptr) a.topk_ids_out[s] = s_ids[s];
        if (a.topk_weights_out != nullptr) a.topk_weights_out[s] = s_wts[s];
      }
    }
  } else {
    for (int s = tid; s < P; s += kThreads) {
      s_ids[s] = a.topk_ids[s];
      s_wts[s] = a.topk_weights[s];
    }
    __syncthreads();
  }

  // ---- 1. Permutation, redundantly in every CTA (identical in all: a stable order). ----
  for (int s = tid; s < P; s += kThreads) {
    const int id = s_ids[s];
    int e = -1;
    if (id >= 0 && id < a.E_global) {
      e = a.expert_map != nullptr ? a.expert_map[id] : id;
      if (e < 0 || e >= E) {
        if (blockIdx.x == 0) record_map_fault(a.faults, s / k, s % k, id, e, E);  // every CTA sees it: one records
        e = -1;
      }
    } else if (blockIdx.x == 0) {
      record_id_fault(a.faults, s / k, s % k, id, a.E_global);
    }
    slot_e[s] = e;
  }
  for (int e = tid; e <= E; e += kThreads) off[e] = 0;
  __syncthreads();
  for (int s = tid; s < P; s += kThreads)
    if (slot_e[s] >= 0) atomicAdd(&off[slot_e[s]], 1);
  __syncthreads();
  block_exclusive_scan(off, E, scratch);  // off[e]: first sorted row of e; off[E]: local slots
  for (int e = tid; e < E; e += kThreads) gbase[e] = off[e];  // running fill pointer
  __syncthreads();
  // Stable scatter (ascending slot inside an expert): warps take turns per chunk of 256 slots.
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int c0 = 0; c0 < P; c0 += kThreads) {
    const int s = c0 + tid;
    const int e = s < P ? slot_e[s] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & lt_mask);
    const int leader = __ffs(peers) - 1;
    for (int w = 0; w < kWarps; ++w) {
      if (warp == w && e >= 0) {
        int b = 0;
        if (lane == leader) {
          b = gbase[e];
          gbase[e] = b + __popc(peers);
        }
        b = __shfl_sync(peers, b, leader);
        sorted[b + rank] = s;
      }
      __syncthreads();
    }
  }
  for (int e = tid; e < E; e += kThreads) gbase[e] = (off[e + 1] - off[e] + kMaxTok - 1) / kMaxTok;
  __syncthreads();
  block_exclusive_scan(gbase, E, scratch);

  Tables T;
  T.off = off;
  T.gbase = gbase;
  T.G = gbase[E];
  T.n1 = T.G * a.t1.tiles * a.t1.split;
  T.total = T.n1 + T.G * a.t2.tiles * a.t2.split;
  const int grid = static_cast<int>(gridDim.x);
#if MOEKIT_FUSED_PHASE_TIMER
  if (tid == 0) ph_routed = sm90::globaltimer_ns();
#endif

  if (T.G == 0) {  // no local slot: the output is zeros (counters untouched)
    std::uint16_t* o = static_cast<std::uint16_t*>(a.out);
    const std::int64_t total = static_cast<std::int64_t>(M) * K;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + tid; i < total;
         i += static_cast<std::int64_t>(grid) * kThreads)
      o[i] = 0;
    return;
  }

  // ---- 2. Weight pipeline: the loader walks this CTA's items ahead of the consumer. ----
  int l_item = static_cast<int>(blockIdx.x);
  Item L = decode_item<kEb>(a, T, l_item);
  int l_stage = 0, load_no = 0;
  auto load_stage = [&](const Item& it, int ls, int slot) {
    const bool g1 = it.gemm == 1;
    const GemmTiling& t = g1 ? a.t1 : a.t2;
    const int rows = t.rows;
    const int skb = kStageBytes / rows;
    const int cpr_log = 31 - __clz(skb >> 4);  // 16-byte chunks per row and stage (power of 2)
    const std::int64_t row_bytes = static_cast<std::int64_t>(g1 ? K : N) * kEb;
    const std::uint8_t* wbase = g1 ? a.w13 : a.w2;
    const bool vec16 = (g1 ? a.vec16_1 : a.vec16_2) != 0;
    const std::uint32_t dst_stage = stages_u32 + slot * kStageBytes;
#pragma unroll
    for (int i = 0; i < kStageBytes / 16 / kThreads; ++i) {
      const int q = tid + kThreads * i;
      const int r = q >> cpr_log, j = q & ((1 << cpr_log) - 1);
      const int sg = j >> 3, c = j & 7;
      const std::uint32_t dst = dst_stage + sg * rows * 128 + r * 128 + ((c ^ (r & 7)) << 4);
      bool ok;
      std::int64_t grow;
      if (g1) {
        const int C = rows >> 1;
        const int cr = r < C ? r : r - C;
        const int n = it.tile * C + cr;
        ok = n < N;
        grow = static_cast<std::int64_t>(it.e) * 2 * N + (r < C ? 0 : N) + n;
      } else {
        const int kr = it.tile * rows + r;
        ok = kr < K;
        grow = static_cast<std::int64_t>(it.e) * K + kr;
      }
      const std::int64_t boff = it.kb + static_cast<std::int64_t>(ls) * skb + j * 16;
      const std::uint8_t* src = wbase + grow * row_bytes + boff;
      if (vec16) {
        const bool v = ok && boff < row_bytes;
        sm90::cp_async_16_zfill(dst, v ? src : wbase, v ? 16 : 0);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool v = ok && boff + 8 * h < row_bytes;
          sm90::cp_async_8_zfill(dst + 8 * h, v ? src + 8 * h : wbase, v ? 8 : 0);
        }
      }
    }
  };
  auto issue = [&]() {
    if (L.gemm != 0) {
      load_stage(L, l_stage, load_no % kStages);
      ++load_no;
      if (++l_stage == L.nst) {
        l_item += grid;
        L = decode_item<kEb>(a, T, l_item);
        l_stage = 0;
      }
    }
    sm90::cp_async_commit();
  };
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) issue();

  // ---- 3. Per-tensor scales (the weights above stream meanwhile). ----
  if (a.scale_mode == kScalePerTensor) {
    if (a.dyn_a1) {
      // Every CTA computes absmax(hidden) itself: M*K is small at decode, and it saves a grid sync.
      float m = 0.0f;
      const std::int64_t nvec = static_cast<std::int64_t>(M) * K / 8;
      const uint4* h = static_cast<const uint4*>(a.hidden);
      for (std::int64_t i = tid; i < nvec; i += kThreads) {
        float x[8];
        unpack8(__ldg(h + i), act_fp16, x);
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(x[j]));
      }
      m = block_max(m, fscratch);
      if (tid == 0) s_scale[0] = numerics::dynamic_scale(m);
    } else if (tid == 0) {
      s_scale[0] = a.a13_scale[0];
    }
    if (!a.dyn_a2 && tid == 0) s_scale[1] = a.a2_scale[0];
  }
  __syncthreads();

#if MOEKIT_FUSED_PHASE_TIMER
  if (tid == 0) ph_setup = sm90::globaltimer_ns();
#endif
  const int tiles1 = a.t1.tiles;
  int cons_no = 0;
  float acc[2][4];

#pragma unroll 1
  for (int c_item = static_cast<int>(blockIdx.x);; c_item += grid) {
    const Item it = decode_item<kEb>(a, T, c_item);
    if (it.gemm == 0) break;
    const bool g1 = it.gemm == 1;
    const GemmTiling& t = g1 ? a.t1 : a.t2;
    const int rows = t.rows;
    const int skb = kStageBytes / rows;
    const int pitch = it.nst * skb + 16;  // +16: 8 token rows of one ldmatrix hit 8 bank groups

    // ---- 3a. Token operand of the item: [16][nst * skb] bytes, zero past cnt and the range. ----
    if (tid < kMaxTok) {
      const int slot = tid < it.cnt ? sorted[it.row0 + tid] : 0;
      tok_slot[tid] = slot;
      tok_w[tid] = tid < it.cnt ? s_wts[slot] : 0.0f;
    }
    if (!g1 && tid == 0) {
#if MOEKIT_FUSED_PHASE_TIMER
      const std::uint64_t w0 = sm90::globaltimer_ns();
      if (ph_wait0 == 0) ph_wait0 = w0;
#endif
      // GEMM2 needs the group's whole intermediate rows (and, for a dynamic per-tensor scale,
      // every group's): wait for the GEMM1 items that write them (all numbered lower).
      if (a.scale_mode == kScalePerTensor && a.dyn_a2) {
        spin_until(a.counters + 0, static_cast<std::uint32_t>(T.G * tiles1));
        const std::uint32_t bits = sm90::ld_acquire_gpu(a.counters + 1);
        s_scale[1] = numerics::dynamic_scale(__uint_as_float(bits));
      } else {
        spin_until(a.grp_done + it.g, static_cast<std::uint32_t>(tiles1));
      }
#if MOEKIT_FUSED_PHASE_TIMER
      ph_wait1 = sm90::globaltimer_ns();
      ph_wait_ns += ph_wait1 - w0;
#endif
    }
    __syncthreads();
    if (a.scale_mode == kScalePerChannel) {
      // Per-channel: the scale of each token row over its full length (hidden row for GEMM1,
      // intermediate row for GEMM2), a warp per token.
      for (int tt = warp; tt < it.cnt; tt += kWarps) {
        float m = 0.0f;
        if (g1) {
          const uint4* h = static_cast<const uint4*>(a.hidden) + static_cast<std::int64_t>(tok_slot[tt] / k) * K / 8;
          for (int i = lane; i < K / 8; i += 32) {
            float x[8];
            unpack8(__ldg(h + i), act_fp16, x);
#pragma unroll
            for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(x[j]));
          }
        } else {
          const float4* h = reinterpret_cast<const float4*>(a.inter + static_cast<std::int64_t>(it.row0 + tt) * N);
          for (int i = lane; i < N / 4; i += 32) {
            const float4 x = __ldcg(h + i);
            m = fmaxf(m, fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
          }
        }
        m = warp_max(m);
        if (lane == 0) tok_scale[tt] = numerics::dynamic_scale(m);
      }
      __syncthreads();
    }
    if (a.scale_mode == kScaleBlock128) {
      // block128 (e4m3: one byte per element, so the item's range starts on a 128-group): the
      // token scales of each group in range (a warp per (token, group), 4 elements a lane) and
      // the weight-block scale of each (row, group).
      const int ngr = it.nst * skb / 128;
      const int gl0 = it.kb / 128;
      const int len = g1 ? K : N;
      for (int q = warp; q < kMaxTok * ngr; q += kWarps) {
        const int tt = q / ngr, gl = q - tt * ngr;
        float m = 0.0f;
        const int c0 = (gl0 + gl) * 128 + 4 * lane;
        if (tt < it.cnt && c0 < len) {
          if (g1) {
            const std::int64_t row = tok_slot[tt] / k;
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(a.hidden) + row * K + c0));
            float x[8];
            unpack8(make_uint4(v.x, v.y, 0u, 0u), act_fp16, x);
#pragma unroll
            for (int j = 0; j < 4; ++j) m = fmaxf(m, fabsf(x[j]));
          } else {
            const float4 x = __ldcg(reinterpret_cast<const float4*>(a.inter + static_cast<std::int64_t>(it.row0 + tt) * N + c0));
            m = fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
          }
        }
        m = warp_max(m);
        if (lane == 0) blk_a[tt * kMaxRangeGroups + gl] = numerics::dynamic_scale(m);
      }
      const std::int64_t rows_b = g1 ? 2 * static_cast<std::int64_t>(N) : K;
      const int row_blocks = static_cast<int>((rows_b + 127) / 128), col_blocks = (len + 127) / 128;
      const float* wsc = (g1 ? a.w13_scale : a.w2_scale) + static_cast<std::int64_t>(it.e) * row_blocks * col_blocks;
      for (int q = tid; q < rows * ngr; q += kThreads) {
        const int r = q / ngr, gl = q - r * ngr;
        std::int64_t grow;
        bool ok;
        if (g1) {
          const int C = rows >> 1;
          const int n = it.tile * C + (r < C ? r : r - C);
          ok = n < N;
          grow = (r < C ? 0 : N) + n;
        } else {
          grow = static_cast<std::int64_t>(it.tile) * rows + r;
          ok = grow < K;
        }
        ok = ok && gl0 + gl < col_blocks;
        blk_w[r * kMaxRangeGroups + gl] = ok ? wsc[(grow / 128) * col_blocks + gl0 + gl] : 0.0f;
      }
      __syncthreads();
    }
    {
      const int nv = it.nst * skb / kEb / 8;  // 8-element vectors per token row
      const int kel0 = it.kb / kEb;
      const int len = g1 ? K : N;
      const float inv_pt = a.scale_mode == kScalePerTensor ? 1.0f / s_scale[g1 ? 0 : 1] : 1.0f;
      for (int idx = tid; idx < kMaxTok * nv; idx += kThreads) {
        const int tt = idx / nv, v = idx - tt * nv;
        const int kel = kel0 + 8 * v;
        float x[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = 0.0f;
        if (tt < it.cnt && kel < len) {
          if (g1) {
            const std::int64_t m = tok_slot[tt] / k;
            unpack8(__ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(a.hidden) + m * K + kel)),
                    act_fp16, x);
          } else {
            const float4* src = reinterpret_cast<const float4*>(a.inter + static_cast<std::int64_t>(it.row0 + tt) * N + kel);
            const float4 x0 = __ldcg(src), x1 = __ldcg(src + 1);
            x[0] = x0.x; x[1] = x0.y; x[2] = x0.z; x[3] = x0.w;
            x[4] = x1.x; x[5] = x1.y; x[6] = x1.z; x[7] = x1.w;
          }
        }
        const float inv = a.scale_mode == kScalePerChannel   ? 1.0f / tok_scale[tt < it.cnt ? tt : 0]
                          : a.scale_mode == kScaleBlock128 ? 1.0f / blk_a[tt * kMaxRangeGroups + (8 * v) / 128]
                                              : inv_pt;
        store_operand8<kOp>(tok + tt * pitch + 8 * v * kEb, x, inv);
      }
    }
    // (the first stage's __syncthreads publishes the token buffer)

    // ---- 3b. Main loop over the item's stages. ----
    const int nmt = rows >> 4;              // m16 tiles
    const int mt = warp & (nmt - 1);
    const int sg = warp / nmt;              // 128-byte segment of the stage
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][c] = 0.0f;
    const std::uint32_t a_row_off = sg * rows * 128 + (16 * mt + (lane & 15)) * 128;
    const std::uint32_t b_row = tok_u32 + ((lane & 7) + 8 * (lane >> 4)) * pitch + sg * 128 + ((lane >> 3) & 1) * 16;
#pragma unroll 1
    for (int cs = 0; cs < it.nst; ++cs) {
      sm90::cp_async_wait<kStages - 2>();
      __syncthreads();
      issue();
      const std::uint32_t sa = stages_u32 + (cons_no % kStages) * kStageBytes + a_row_off;
      const std::uint32_t sb = b_row + cs * skb;
      ++cons_no;
      if constexpr (kOp == Operand::kE4m3) {
        if (a.scale_mode == kScaleBlock128) {
          // block128: this warp's segment is one 128-wide K group: scale its partial sums by
          // the token's group scale and the row's weight-block scale, then accumulate.
          float part[2][4];
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int c = 0; c < 4; ++c) part[i][c] = 0.0f;
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            std::uint32_t af[4], bf[4];
            sm90::ldmatrix_x4(af, sa + (((2 * kk + (lane >> 4)) ^ (lane & 7)) << 4));
            sm90::ldmatrix_x4(bf, sb + kk * 32);
            sm90::mma_m16n8<kOp>(part[0], af, bf[0], bf[1]);
            sm90::mma_m16n8<kOp>(part[1], af, bf[2], bf[3]);
          }
          const int gl = cs * (skb / 128) + sg;
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int r = 16 * mt + (lane >> 2) + 8 * (c >> 1);
              const int tt = 8 * nt + 2 * (lane & 3) + (c & 1);
              acc[nt][c] += part[nt][c] * blk_a[tt * kMaxRangeGroups + gl] * blk_w[r * kMaxRangeGroups + gl];
            }
          continue;
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        std::uint32_t af[4], bf[4];
        sm90::ldmatrix_x4(af, sa + (((2 * kk + (lane >> 4)) ^ (lane & 7)) << 4));
        sm90::ldmatrix_x4(bf, sb + kk * 32);
        sm90::mma_m16n8<kOp>(acc[0], af, bf[0], bf[1]);
        sm90::mma_m16n8<kOp>(acc[1], af, bf[2], bf[3]);
      }
    }

    // ---- 3c. Reduce the segments (fixed order), then the splits (fixed order). ----
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = 16 * mt + (lane >> 2) + 8 * (c >> 1);
        const int tt = 8 * nt + 2 * (lane & 3) + (c & 1);
        red[(sg * kMaxTok + tt) * rows + r] = acc[nt][c];
      }
    __syncthreads();
    const int nseg = kWarps / nmt;
    for (int idx = tid; idx < kMaxTok * rows; idx += kThreads) {
      float v = red[idx];
      for (int s2 = 1; s2 < nseg; ++s2) v += red[s2 * kMaxTok * rows + idx];
      red[idx] = v;  // [token][row]
    }
    const int S = t.split;
    if (S > 1) {
      float* part = g1 ? a.part1 : a.part2;
      auto part_at = [&](int s, int tt, int r) {
        return part + ((static_cast<std::int64_t>(it.tile) * S + s) * P + it.row0 + tt) * rows + r;
      };
      for (int idx = tid; idx < it.cnt * rows; idx += kThreads) {
        const int tt = idx / rows, r = idx - tt * rows;
        __stcg(part_at(it.split, tt, r), red[idx]);
      }
      __syncthreads();
      if (tid == 0) {
        __threadfence();
        std::uint32_t* ticket = (g1 ? a.t1_ticket + static_cast<std::int64_t>(it.g) * a.tiles1_stride
                                    : a.t2_ticket + static_cast<std::int64_t>(it.g) * a.tiles2_stride) + it.tile;
        const bool last = sm90::atom_add_acq_rel_gpu(ticket, 1) == static_cast<std::uint32_t>(S - 1);
        if (last) *ticket = 0;  // its last user this launch: leave it zero for the next one
        *s_flag = last;
      }
      __syncthreads();
      if (!*s_flag) {  // another split finishes this (group, tile)
        MOEKIT_FUSED_ITEM_DONE(g1, false);
        continue;
      }
      __threadfence();
      for (int idx = tid; idx < it.cnt * rows; idx += kThreads) {
        const int tt = idx / rows, r = idx - tt * rows;
        float v = 0.0f;
        for (int s = 0; s < S; ++s) v += __ldcg(part_at(s, tt, r));
        red[idx] = v;
      }
    }
    __syncthreads();

    // ---- 3d. Epilogues. ----
    const int e = it.e;
    if (g1) {
      const int C = rows >> 1;
      float amax = 0.0f;
      for (int idx = tid; idx < it.cnt * C; idx += kThreads) {
        const int tt = idx / C, c = idx - tt * C;
        const int n = it.tile * C + c;
        if (n >= N) continue;
        float g = red[tt * rows + c], u = red[tt * rows + C + c];
        const std::int64_t rg = static_cast<std::int64_t>(e) * 2 * N + n, ru = rg + N;
        if (a.scale_mode == kScalePerTensor) {
          const float sa = s_scale[0], sw = a.w13_scale[e];
          g = g * sa * sw;
          u = u * sa * sw;
        } else if (a.scale_mode == kScalePerChannel) {
          const float sa = tok_scale[tt];
          g = g * sa * a.w13_scale[rg];
          u = u * sa * a.w13_scale[ru];
        }
        if (a.weight_on_input) {
          g *= tok_w[tt];
          u *= tok_w[tt];
        }
        if (a.bias13_type != numerics::kBiasNone) {
          g += numerics::load_bias(a.b13, a.bias13_type, rg);
          u += numerics::load_bias(a.b13, a.bias13_type, ru);
        }
        const float h = numerics::activate<numerics::ActMath::kIeee>(a.act_kind, g, u, a.alpha, a.limit);
        __stcg(a.inter + static_cast<std::int64_t>(it.row0 + tt) * N + n, h);
        amax = fmaxf(amax, fabsf(h));
      }
      const bool dyn2 = a.scale_mode == kScalePerTensor && a.dyn_a2;
      if (dyn2) amax = block_max(amax, fscratch);
      __syncthreads();
      if (tid == 0) {
        if (dyn2) atomicMax(a.counters + 1, __float_as_uint(amax));
        __threadfence();
        sm90::red_release_add_gpu(a.grp_done + it.g, 1);
        if (dyn2) sm90::red_release_add_gpu(a.counters + 0, 1);
      }
    } else {
      for (int idx = tid; idx < it.cnt * rows; idx += kThreads) {
        const int tt = idx / rows, r = idx - tt * rows;
        const int kc = it.tile * rows + r;
        if (kc >= K) continue;
        float v = red[idx];
        const std::int64_t wr = static_cast<std::int64_t>(e) * K + kc;
        if (a.scale_mode == kScalePerTensor) v = v * s_scale[1] * a.w2_scale[e];
        else if (a.scale_mode == kScalePerChannel) v = v * tok_scale[tt] * a.w2_scale[wr];
        if (a.bias2_type != numerics::kBiasNone) v += numerics::load_bias(a.b2, a.bias2_type, wr);
        if (!a.weight_on_input) v *= tok_w[tt];
        __stcg(a.y + static_cast<std::int64_t>(tok_slot[tt]) * K + kc, v);
      }
      __syncthreads();
      if (tid == 0) {
        __threadfence();
        std::uint32_t* ticket = a.comb + it.tile;
        const bool last = sm90::atom_add_acq_rel_gpu(ticket, 1) == static_cast<std::uint32_t>(T.G - 1);
        if (last) *ticket = 0;
        *s_flag = last;
      }
      __syncthreads();
      if (*s_flag) {
        // ---- 3e. Combine this K tile: every group's GEMM2 output for it is in y. ----
        __threadfence();
        for (int idx = tid; idx < M * rows; idx += kThreads) {
          const int m = idx / rows, r = idx - m * rows;
          const int kc = it.tile * rows + r;
          if (kc >= K) continue;
          float sum = 0.0f;
          for (int j = 0; j < k; ++j) {
            const int s = m * k + j;
            if (slot_e[s] >= 0) sum += __ldcg(a.y + static_cast<std::int64_t>(s) * K + kc);
          }
          const std::int64_t o = static_cast<std::int64_t>(m) * K + kc;
          if (act_fp16) static_cast<__half*>(a.out)[o] = __float2half_rn(sum);
          else static_cast<__nv_bfloat16*>(a.out)[o] = __float2bfloat16_rn(sum);
        }
      }
    }
    // The next item's token staging overwrites tok_* and the token buffer: everyone is past
    // this item's reads after this barrier.
    __syncthreads();
    MOEKIT_FUSED_ITEM_DONE(g1, !g1 && *s_flag);
  }
  sm90::cp_async_wait<0>();
#undef MOEKIT_FUSED_ITEM_DONE

#if MOEKIT_FUSED_PHASE_TIMER
  if (tid == 0 && a.phase != nullptr && static_cast<int>(blockIdx.x) < a.phase_ctas) {
    std::uint64_t* r = a.phase + static_cast<std::int64_t>(blockIdx.x) * kPhaseWords;
    r[kPhaseStart] = ph_start;
    r[kPhaseSetup] = ph_setup;
    r[kPhaseGemm1Done] = ph_g1;
    r[kPhaseFirstWait] = ph_wait0;
    r[kPhaseLastWaitEnd] = ph_wait1;
    r[kPhaseWaitNs] = ph_wait_ns;
    r[kPhaseGemm2Done] = ph_g2;
    r[kPhaseCombineDone] = ph_comb;
    r[kPhaseEnd] = sm90::globaltimer_ns();
    r[kPhaseItems1] = ph_n1;
    r[kPhaseItems2] = ph_n2;
    r[kPhaseCombines] = ph_nc;
    r[kPhaseSmid] = sm90::smid();
    r[kPhaseGrid] = static_cast<std::uint64_t>(grid);
    r[kPhaseTotalItems] = static_cast<std::uint64_t>(T.total);
    r[kPhaseRouted] = ph_routed;
  }
#endif

  // ---- 4. The last CTA out resets the counters that outlive their users (tickets reset
  // themselves), so the next launch starts from zero without a memset. ----
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    *s_flag = sm90::atom_add_acq_rel_gpu(a.counters + 2, 1) == static_cast<std::uint32_t>(grid - 1);
  }
  __syncthreads();
  if (*s_flag) {
    for (int g = tid; g < T.G; g += kThreads) a.grp_done[g] = 0;
    if (tid == 0) {
      a.counters[0] = 0;
      a.counters[1] = 0;
      a.counters[2] = 0;
    }
  }
}

// ---- host side of one instantiation (inst/*.cu) ----

// CTAs of the fused kernel that can be resident at once on `device`: occupancy x SMs, computed
// once per device and operand type (the first call also raises the kernel's shared-memory limit).
// The grid never exceeds it, and the launch is cooperative, so the CUDA driver either makes the
// whole grid co-resident or fails the launch (cudaErrorCooperativeLaunchTooLarge): GEMM2 items
// spin on counters that other CTAs' GEMM1 items release (kernel_sm90.cuh, "Synchronization
// protocol"), which deadlocks if a CTA that owes a GEMM1 item is waiting for an SM that spinning
// CTAs hold (a second fused launch on another stream, MPS clients, any concurrent kernel).
template <Operand kOp>
inline int max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];  // zero: not computed yet (static storage)
  if (device >= 0 && device < 64) {
    const int v = cached[device].load(std::memory_order_acquire);
    if (v > 0) return v;
  }
  auto* kernel = &fused_moe_sm90_kernel<kOp>;
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  int coop = 0, sms = 0, per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmemBytes));
  if (coop == 0)
    throw Error(Status::kNotSupported,
                "fused MoE path needs cooperative launches (co-resident CTAs); CUDA device " + std::to_string(device) +
                    " does not support them");
  if (per_sm < 1)
    throw Error(Status::kNotSupported, "fused MoE kernel cannot be resident on device " + std::to_string(device) +
                                           " (" + std::to_string(kSmemBytes) + " bytes of shared memory, " +
                                           std::to_string(kThreads) + " threads per CTA)");
  const int v = per_sm * sms;
  if (device >= 0 && device < 64) cached[device].store(v, std::memory_order_release);
  return v;
}

template <Operand kOp>
void run_fused_moe_sm90(const FusedArgs& args, int grid, void* stream_ptr, int device) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  grid = std::min(grid, max_coresident_ctas<kOp>(device));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, &fused_moe_sm90_kernel<kOp>, args));
}

}  // namespace moekit::cuda::fused_moe
