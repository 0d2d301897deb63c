// The static K-short GEMM2 on sm_90a: GEMM2 of decode-sized calls whose reduction (the shard's
// intermediate size N) is at most 512 bytes of K, on a persistent grid with no atomics and a small
// code footprint.
//
// Work units are (expert e, token tile of 64 expert-sorted rows, column tile of 256 outputs),
// expert-major, column tile fastest; an expert with r rows has ceil(r / 64) x column-tiles units.
// Each CTA takes one contiguous range of units (CTA b of G: [U b / G, U (b + 1) / G) of the U
// units), so every CTA streams the same number of weight bytes to within one unit, and a range
// runs through an expert's column tiles in order. Its units are known from the expert table alone:
// thread 0 issues each unit's TMA boxes (A rows, two weight boxes a stage of 128 bytes of K) as
// soon as a ring stage is free, without waiting on any other thread or on a counter, and the two
// consumer warpgroups run every second unit each (wgmma m64n256, then the epilogue), one's
// epilogue overlapping the other's main loop.
//
// The math of a unit is token-major's ping-pong GEMM2 (tokmajor/kernel_sm90.cuh, consume_pingpong
// and scatter_epilogue) instruction for instruction where it matters for the bits: the same wgmma
// (m64n256k16 / k32) over the same zero-padded 128-byte K stages in the same order, the same
// per-row factor (a_scale x b_scale[e], then x the router weight unless weight_on_input) and the
// same rounding of y; so the two give the same bytes (tested), though this kernel stores each
// lane's column pairs straight from the accumulators where token-major stages 128-byte row
// segments through shared memory. Epilogue inputs it does not take:
// biases, per-channel and block128 scales (launch_sm90.cu declines them; token-major runs those).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/gemm_common/expert_table.cuh"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/kernels/kshort/config.hpp"
#include "cuda/kernels/kshort/params.hpp"
#include "cuda/kernels/tokmajor/params.hpp"  // PhaseWord: the phase timer's stamps

namespace moekit::cuda::kshort {

// A unit's expert, column tile and rows.
struct Unit {
  int e;
  int col;
  int row_begin;  // first expert-sorted row
  int count;      // rows, 1..64
};

// This CTA's phase-timer record (tests only), or null.
__device__ __forceinline__ std::uint64_t* phase_record(const KernelParams& p) {
  return p.phases != nullptr && static_cast<int>(blockIdx.x) < p.phase_ctas
             ? p.phases + static_cast<std::int64_t>(blockIdx.x) * tokmajor::kPhaseWords
             : nullptr;
}

template <Operand kOp>
struct KShort {
  using Tag = typename sm90::TagOf<kOp>::type;
  static constexpr int kAcc = kBlockN / 2;  // fp32 accumulators per consumer thread (m64n256)
  static constexpr int kElemBytes = kOp == Operand::kE4m3 ? 1 : 2;

  struct Smem {
    std::uint32_t tiles;      // stage s: A [64 rows][128 B] at s * kStageBytes, then B [256 rows][128 B]
    std::uint32_t full;       // barrier addresses (8 bytes apart)
    std::uint32_t empty;
    int* off;                 // [E+1] row offsets
    int* prefix;              // [E+1] units of the experts before e
    int stages;
  };

  // Unit u of the call (u < prefix[E]); `hint` is the caller's previous unit's expert (-1 at
  // first) and becomes this one's. One division by the column tiles; no search inside an expert.
  static __device__ __forceinline__ Unit unit_of(const KernelParams& p, const Smem& s, int u, int& hint) {
    gemm_common::find_expert_from(u, s.prefix, p.num_experts, hint);
    const int e = hint;
    const UnitPos at = unit_pos(u - s.prefix[e], p.num_col_tiles);
    Unit t;
    t.e = e;
    t.col = at.col;
    t.row_begin = s.off[e] + at.tile * kBlockM;
    t.count = min(kBlockM, s.off[e + 1] - t.row_begin);
    return t;
  }

  // This CTA's units [lo, hi): the b-th of gridDim.x contiguous, near-equal shares.
  static __device__ __forceinline__ void range(const KernelParams& p, const Smem& s, int& lo, int& hi) {
    const UnitRange r = unit_range(s.prefix[p.num_experts], static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    lo = r.lo;
    hi = r.hi;
  }

  static __device__ __forceinline__ void next_stage(int& stage, std::uint32_t& phase, int stages) {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1;
    }
  }

  // ---- thread 0: every TMA of the CTA's units, a stage as soon as it is free ----
  static __device__ void produce(const KernelParams& p, const Smem& s, int lo, int hi) {
    int stage = 0, hint = -1;
    std::uint32_t phase = 0;
    std::uint64_t* rec = phase_record(p);  // phase timer (tests only)
    if (rec != nullptr) rec[tokmajor::kPhaseUnits] = static_cast<std::uint64_t>(hi - lo);
    std::uint64_t free_wait = 0;
    for (int u = lo; u < hi; ++u) {
      const Unit t = unit_of(p, s, u, hint);
      const int brow = t.col * kBlockN;
      if (rec != nullptr && u == lo) rec[tokmajor::kPhaseUnitFound] = rec[tokmajor::kPhaseFirstIssue] = sm90::globaltimer_ns();
      for (int kb = 0; kb < p.num_k_stages; ++kb) {
        const std::uint64_t w0 = rec != nullptr ? sm90::globaltimer_ns() : 0;
        sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
        if (rec != nullptr) free_wait += sm90::globaltimer_ns() - w0;
        const std::uint32_t full = s.full + 8 * stage;
        const std::uint32_t dst = s.tiles + stage * kStageBytes;
        const int k0 = kb * (kKBlockBytes / kElemBytes);  // K coordinate in elements
        // Every box completes its whole size (zeros past max_rows, K and the weights' rows count).
        sm90::mbar_arrive_expect_tx(full, kStageBytes);
        sm90::tma_load_3d(dst, &p.tmap_a, full, k0, t.row_begin, 0);
        sm90::tma_load_3d(dst + kATileBytes, &p.tmap_b, full, k0, brow, t.e);
        sm90::tma_load_3d(dst + kATileBytes + kBoxRows * kKBlockBytes, &p.tmap_b, full, k0, brow + kBoxRows, t.e);
        next_stage(stage, phase, s.stages);
      }
    }
    if (rec != nullptr) {
      rec[tokmajor::kPhaseLastIssue] = sm90::globaltimer_ns();
      rec[tokmajor::kPhaseKsFree] = free_wait;
    }
  }

  // A consumer warp is done reading `stage` (its wgmma reads completed).
  static __device__ __forceinline__ void release(const Smem& s, int stage, int lane) {
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(s.empty + 8 * stage);
  }

  // What a consumer thread needs of a unit besides its stages: the unit, its two rows' slots
  // (-1: past the unit's rows) and router weights (accumulator rows 16 warp + lane/4 + 8h), and the
  // expert's per-tensor weight scale.
  struct Meta {
    Unit t;
    int slot[2];
    float tw[2];
    float bs;
  };

  static __device__ __forceinline__ void fetch(const KernelParams& p, const Smem& s, int u, int& hint, int warp,
                                               int lane, bool per_tensor, Meta& m) {
    m.t = unit_of(p, s, u, hint);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rloc = 16 * warp + (lane >> 2) + 8 * h;
      m.slot[h] = -1;
      m.tw[h] = 1.0f;
      if (rloc < m.t.count) {
        const int r = m.t.row_begin + rloc;
        m.slot[h] = p.sorted_slots[r];
        if (p.sorted_weights) m.tw[h] = p.sorted_weights[r];
        else if (p.topk_weights) m.tw[h] = p.topk_weights[m.slot[h]];
      }
    }
    m.bs = per_tensor ? p.b_scale[m.t.e] : 1.0f;
  }

  // ---- consumer warpgroups: warpgroup wg runs units lo + wg, lo + wg + 2, ... ----
  // Unit j of the range fills ring positions j * KB .. j * KB + KB - 1 (KB = num_k_stages, all
  // units alike), so warpgroup wg's next unit starts 2 KB positions after its last one; only its 4
  // warps release a stage (empty barriers count 4). The two wait on the ring in unit order: a
  // warpgroup's first data wait of unit j comes after the other passed its data waits of unit
  // j - 1 (named barrier kOrderBarrier + wg: the other arrives, this one syncs; an arrival only
  // where the other has a next unit, so none is left pending). Every position before the one
  // waited on has then been seen complete, and the producer cannot refill that position's stage
  // before this warpgroup releases it (KB < stages): each wait is on the barrier's current phase.
  // Without the order, a slow TMA of the other's unit j - 1 could leave the stage one phase
  // behind, and a parity wait would pass on the phase before it.
  static __device__ void consume(const KernelParams& p, const Smem& s, int lo, int hi) {
    const int ct = threadIdx.x - kProducerThreads;  // 0..255
    const int wg = ct >> 7;
    const int warp = (ct >> 5) & 3, lane = ct & 31;
    const int KB = p.num_k_stages;
    const bool per_tensor = p.scale_mode == kScalePerTensor;
    int stage = 0, hint = -1;
    std::uint32_t phase = 0;
    for (int i = 0; i < wg * KB; ++i) next_stage(stage, phase, s.stages);
    // Phase timer (tests only): warpgroup 0's thread 0 sums where its units' time went.
    std::uint64_t* trace = ct == 0 ? phase_record(p) : nullptr;
    std::uint64_t tsum[4] = {0, 0, 0, 0}, tmark = 0;
    const auto lap = [&](int i) {
      if (trace != nullptr) {
        const std::uint64_t now = sm90::globaltimer_ns();
        if (i >= 0) tsum[i] += now - tmark;
        tmark = now;
      }
    };
    // A unit's metadata (its lookup, this thread's two rows' slots and router weights, the expert's
    // weight scale) is asked for one unit ahead, so that its loads land under the previous unit's
    // data wait, MMAs and epilogue instead of delaying this unit's. The activation scale is one
    // word for the whole launch.
    const float a_s = per_tensor ? p.a_scale[0] : 1.0f;
    Meta next;
    if (lo + wg < hi) fetch(p, s, lo + wg, hint, warp, lane, per_tensor, next);
    for (int u = lo + wg; u < hi; u += 2) {
      lap(-1);
      const Meta m = next;
      if (u + 2 < hi) fetch(p, s, u + 2, hint, warp, lane, per_tensor, next);
      const Unit& t = m.t;
      const int(&slot)[2] = m.slot;
      const float(&tw)[2] = m.tw;
      const float ts = a_s * m.bs;

      float acc[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
      if (u > lo) sm90::named_barrier_sync(kOrderBarrier + wg, kConsumerThreads);
      lap(0);
      int prev = 0;
      for (int kb = 0; kb < KB; ++kb) {
        sm90::mbar_wait(s.full + 8 * stage, phase);
        if (kb == KB - 1) lap(1);
        // This unit's data waits are done: the other warpgroup may start its next unit's.
        if (kb == KB - 1 && u + 1 < hi) sm90::named_barrier_arrive(kOrderBarrier + (wg ^ 1), kConsumerThreads);
        sm90::fence_regs<kAcc>(acc);
        sm90::wgmma_fence();
        const std::uint32_t st = s.tiles + stage * kStageBytes;
        const std::uint64_t da = sm90::make_smem_desc_sw128(st);
        const std::uint64_t db = sm90::make_smem_desc_sw128(st + kATileBytes);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, kBlockN>::mma(acc, da + 2 * kk, db + 2 * kk, 1);
        sm90::wgmma_commit();
        sm90::fence_regs<kAcc>(acc);
        if (kb > 0) {
          sm90::wgmma_wait<1>();
          release(s, prev, lane);
        }
        prev = stage;
        next_stage(stage, phase, s.stages);
      }
      sm90::wgmma_wait<0>();
      sm90::fence_regs<kAcc>(acc);
      release(s, prev, lane);
      for (int i = 0; i < KB; ++i) next_stage(stage, phase, s.stages);  // the other warpgroup's unit
      lap(2);

      // A warp whose 16 rows are past the unit's rows has nothing to store.
      if (!__any_sync(0xffffffffu, slot[0] >= 0)) continue;
      float f[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float bw = p.weight_on_input ? 1.0f : tw[h];
        f[h] = (per_tensor ? ts : 1.0f) * bw;
      }
      if (p.out_type == kOutF32) epilogue<kOutF32>(p, t, acc, slot, f, lane);
      else if (p.out_type == kOutBf16) epilogue<kOutBf16>(p, t, acc, slot, f, lane);
      else epilogue<kOutF16>(p, t, acc, slot, f, lane);
      lap(3);
    }
    if (trace != nullptr) {
      trace[tokmajor::kPhaseKsTop] = tsum[0];
      trace[tokmajor::kPhaseKsData] = tsum[1];
      trace[tokmajor::kPhaseKsMma] = tsum[2];
      trace[tokmajor::kPhaseKsEpilogue] = tsum[3];
    }
    if ((ct & 127) == 0) {  // phase timer (tests only): the later of the two warpgroups' ends
      if (std::uint64_t* rec = phase_record(p))
        atomicMax(reinterpret_cast<unsigned long long*>(rec + tokmajor::kPhaseExit),
                  static_cast<unsigned long long>(sm90::globaltimer_ns()));
    }
  }

  // The epilogue straight from the accumulators: lane (q = lane / 4, c = lane % 4) holds, of its
  // warp's 16 rows, rows q and q + 8 (slot[0], slot[1]) at columns 8 j + 2 c, + 1 for j = 0..31;
  // each pair, times the row factor and rounded to y's type, is one 4-byte (16-bit y) or 8-byte
  // (fp32 y) store into y row slot, so a warp's store writes 8 rows x 16 or 32 contiguous bytes.
  // No staging, no warp barrier: the 64 stores of a lane are independent. A unit has few rows at
  // decode (16 an expert at qwen3-30b TP8 M = 256), where the staged copy token-major's scatter uses
  // (128-byte row segments by 16-byte stores) was a long chain of dependent shared-memory round
  // trips on the one warp that had rows (session 48's stall sample and per-unit phase sums).
  // Pairs past n_out (even) are skipped whole.
  template <int kOut>
  static __device__ __forceinline__ void epilogue(const KernelParams& p, const Unit& t, const float (&acc)[kAcc],
                                                  const int (&slot)[2], const float (&f)[2], int lane) {
    constexpr int kEs = kOut == kOutF32 ? 4 : 2;
    const std::int64_t c0 = static_cast<std::int64_t>(t.col) * kBlockN + 2 * (lane & 3);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (slot[h] < 0) continue;
      std::uint8_t* row = static_cast<std::uint8_t*>(p.out) + static_cast<std::int64_t>(slot[h]) * p.n_out * kEs;
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j) {
        const std::int64_t c = c0 + 8 * j;
        if (c >= p.n_out) continue;
        const float v0 = acc[4 * j + 2 * h] * f[h], v1 = acc[4 * j + 2 * h + 1] * f[h];
        std::uint8_t* dst = row + c * kEs;
        if constexpr (kOut == kOutF32) *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        else if constexpr (kOut == kOutBf16) *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
        else *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(v0, v1);
      }
    }
  }
};

template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) kshort_sm90_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using K = KShort<kOp>;
  extern __shared__ std::uint8_t smem_raw[];
  const SmemLayout& L = p.smem;
  // 1024-aligned base by pointer arithmetic on the shared array, so that every pointer derived
  // from it stays a shared-memory pointer to the compiler (LDS / STS, not generic accesses).
  std::uint8_t* base = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  typename K::Smem s;
  s.tiles = sm90::smem_addr(base);
  s.full = sm90::smem_addr(base + L.full_bar_off);
  s.empty = sm90::smem_addr(base + L.empty_bar_off);
  s.off = reinterpret_cast<int*>(base + L.table_off);
  s.prefix = s.off + (p.num_experts + 1);
  s.stages = L.stages;

  const int E = p.num_experts;
  std::uint64_t* rec = threadIdx.x == 0 ? phase_record(p) : nullptr;  // phase timer (tests only)
  if (rec != nullptr) rec[tokmajor::kPhaseEntry] = sm90::globaltimer_ns();
  if (threadIdx.x == 0) {
    sm90::prefetch_tensormap(&p.tmap_a);
    sm90::prefetch_tensormap(&p.tmap_b);
    for (int i = 0; i < s.stages; ++i) {
      sm90::mbar_init(s.full + 8 * i, 1);                      // thread 0's expect_tx arrival
      sm90::mbar_init(s.empty + 8 * i, kConsumerWarps / 2);    // the 4 warps of the unit's warpgroup
    }
    sm90::fence_mbarrier_init_cluster();
    sm90::fence_proxy_async_shared_cta();
  }
  // PDL: the barrier init and tensormap prefetch overlap the previous kernel; the row offsets, the
  // sorted rows and A (GEMM1's and the quantization's outputs) need it complete.
  pdl_wait();
  pdl_launch_dependents();
  gemm_common::load_expert_offsets<kThreads>(p, E, s.off);
  // Units of expert e: ceil(rows_e / 64) token tiles x the column tiles.
  MOEKIT_BUILD_EXPERT_PREFIX(E, s.off, s.prefix, rows, units_of(rows, p.num_col_tiles));
  int lo, hi;
  K::range(p, s, lo, hi);
  if (rec != nullptr) rec[tokmajor::kPhaseTable] = sm90::globaltimer_ns();

  if (threadIdx.x >= kProducerThreads) {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    if (threadIdx.x == kProducerThreads) {
      if (std::uint64_t* r = phase_record(p)) r[tokmajor::kPhaseConsumerStart] = sm90::globaltimer_ns();
    }
    K::consume(p, s, lo, hi);
  } else {
    sm90::setmaxnreg_dec<kProducerRegs>();
    if (rec != nullptr) rec[tokmajor::kPhaseProducerStart] = sm90::globaltimer_ns();
    if (threadIdx.x == 0) K::produce(p, s, lo, hi);
  }
#endif
}

template <Operand kOp>
void run_kshort_sm90(const KernelParams& kp, int grid, void* stream, bool pdl) {
  auto* kernel = &kshort_sm90_kernel<kOp>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(kp.smem.bytes);
  cfg.stream = static_cast<cudaStream_t>(stream);
  add_pdl_attribute(cfg, attr, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, kp));
}

}  // namespace moekit::cuda::kshort
