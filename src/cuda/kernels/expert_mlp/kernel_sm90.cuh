// The per-expert MLP kernel on sm_90a: GEMM1, the activation and GEMM2 of one expert's token
// tile, from the routing's ids to GEMM2's per-slot rows y, in one launch (the combine sums y after
// it). For shards whose expert intermediate is narrow (N <= 4 kN = 384: qwen3-30b, qwen3-235b and
// deepseek-v3 at TP8): one unit's GEMM1 covers the whole of h on one CTA (N <= kN = 96) or on a
// thread-block cluster of S = ceil(N / 96) CTAs, so h stays on chip, GEMM2 needs no other unit's
// work, and the expert's w2 streams right behind its w13 through the same ring (docs/design.md
// "The per-expert MLP path").
//
// Every CTA routes the call itself (slot_routing.cuh: each slot's local expert, the experts'
// counts, the units), so no permutation launch runs. Units are (expert e, token tile of up to 64
// of e's slots in ascending slot order), expert-major; cluster c of the C clusters runs units c,
// c + C, ... (S = 1: CTA b, b + G, ...), every rank of it the same units. Per unit, on rank r:
//   producer warp: GEMM1's K stages (lane 0: two TMA boxes of w13 a stage over the expert's gate
//     and up planes, rows 96r + 0..63 of gate then up, then rows 96r + 64..95 of gate then up, or
//     with MOEKIT_EXPERT_MLP_TWO_BOXES=0 the same tile as six 32-row boxes; TMA's zeros past N;
//     the 32 lanes: cp.async gather of the unit's token rows of hidden, 128-byte swizzle), then
//     GEMM2's (per output tile r, r + S, ... of 256 columns, one 256-row box of w2 a 128-byte
//     chunk of h's columns);
//   consumer warpgroup: wgmma m64n128 (gate / up columns 0..63 of the slice) and m64n64 (64..95)
//     over K, the activation from the accumulators (a thread holds gate column n and up column n
//     of the same row), h rounded to the activation dtype into GEMM2's A tile in shared memory, of
//     this CTA and (S > 1) of every other rank (st.async), then per output tile wgmma
//     m64n256 over h's N columns, a chunk a stage, and the epilogue's stores of y (x the router
//     weight);
//   warm warp (the one-CTA form): the CTA's first unit through the consumers' own code with no
//     store, barrier or release, right after the routing, so the activation's and the epilogue's
//     instructions are in the instruction cache when the consumers reach them (consume's `warm`).
// Clusters (S > 1) meet at three mbarriers a unit: h_full (the peers' slices have landed in this
// rank's tile: their st.async bytes against this rank's expect_tx), h_empty (one arrival from every
// rank: its GEMM2 is past its reads of h, before the next unit's h is pushed) and, for fp8 with a
// dynamic intermediate scale, amax (the peers' h absmaxes by st.async, so the unit's scale is the
// same on every rank). The CTAs meet at one cluster barrier after their barriers are set up and
// one before they exit (no rank leaves while a peer may still write to it).
// The ring's stages are one size (32 KB: GEMM1's 8 KB of token rows + 24 KB of w13, or 256 rows
// of w2), so the producer runs ahead across GEMM1, GEMM2 and units alike.
// fp8_per_tensor (the e4m3 instantiation): the token rows are hidden quantized by the chain's
// quantization launch (128 e4m3 a stage, k32 wgmma), whose programmatic dependent this kernel is:
// its routing and first w13 stages run beside that launch, its gather waits for it. GEMM1's sums
// take hidden's scale x the expert's w13 scale, h is quantized with the unit's own dynamic scale
// (the absmax of its rows' h over the cluster) or the static intermediate scale, and GEMM2 (a
// 128-column chunk a stage, 4 k32 steps) takes that scale x the expert's w2 scale (docs/design.md:
// where this differs from the reference). fp8_per_channel (kChannel, either form): hidden's
// scale a token row, the expert's w13 / w2 scales a weight row (staged in shared memory a unit), h's
// scale a slot row (on a cluster, each row's absmax over every rank's slice, exchanged as the
// per-tensor form exchanges the unit's): the reference's quantization points.
// kPairs (e4m3, N % 16 = 8: gpt-oss TP8's N = 360, on its clusters): w2 as row pairs, a GEMM2
// stage's even rows from x = 128 c, its odd rows from x = N - 8 + 128 c (config.hpp kPairShift),
// each half a wgmma m64n128: the even rows against h, the odd rows against h2 (h shifted by 8
// columns, pushed to the peers beside h), so accumulator column i is output column 2 i (i < 128)
// or 2 (i - 128) + 1, and a thread's values make 8-byte runs of 4 output columns.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/slot_routing.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/expert_mlp/config.hpp"
#include "cuda/kernels/expert_mlp/params.hpp"
#include "cuda/kernels/gemm_common/expert_table.cuh"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::expert_mlp {

// This CTA's phase-timer record (tests only), or null; always null in the untimed kernels.
template <bool kTimed>
__device__ __forceinline__ std::uint64_t* phase_record(const KernelParams& p) {
  if constexpr (!kTimed) return nullptr;
  return p.phases != nullptr && static_cast<int>(blockIdx.x) < p.phase_ctas
             ? p.phases + static_cast<std::int64_t>(blockIdx.x) * kPhaseWords
             : nullptr;
}

struct Unit {
  int e;      // local expert
  int r0;     // first rank among e's slots
  int count;  // rows, 1..64
};

// kCluster: the cluster form (S > 1 ranks, h pushed to the peers, GEMM2 over N's chunks a stage);
// else one CTA a unit with N <= kN, compiled without any of the cluster's code, GEMM2 one wgmma
// group over h's fixed kN columns a tile (the form session 55 measured; the cluster's code in the
// one-CTA kernel cost 0.88-1.01x at qwen3-30b TP8, docs/perf.md "Session 58").
// kTimed: the phase timer's stamps compiled in (the instantiation a launch takes while a test set
// a phase buffer, set_expert_mlp_phase_buffer); the untimed kernels carry none of them.
// kChannel: fp8_per_channel (e4m3): hidden's scale per token row, the w13 scales per gate / up
// row (the rank's slice of them) and the w2 scales per output column (the expert's, staged in
// shared memory a unit by cp.async), and h's scale per slot row, dynamic_scale of the row's absmax
// over its N columns (one CTA holds the row; a cluster's ranks exchange their slices' row absmaxes
// through red_cluster, a row each): the reference's quantization points, the reference's scales.
// kPairs: w2 as row pairs (SliceShape::pairs), the e4m3 per-tensor cluster form only.
// kPlain: the kernels (one CTA or cluster, untimed; per tensor and, switched on by
// MOEKIT_EXPERT_MLP_PLAIN_CHANNEL, per channel) for the common call, its features
// fixed at compile time (params.hpp plain_call) so that the kernel carries no code for the others:
// silu, no biases, the router weight on the output, y in the activation dtype's 16-bit type (e4m3:
// bf16), every A/B switch at its default. The same instructions on the path that call runs, less
// the code beside it.
template <Operand kOp, bool kCluster, bool kTimed = false, bool kChannel = false, bool kPairs = false,
          bool kPlain = false>
struct ExpertMlp {
  using Tag = typename sm90::TagOf<kOp>::type;
  static constexpr bool kF16 = kOp == Operand::kF16;
  static constexpr bool kFp8 = kOp == Operand::kE4m3;
  static_assert(!kChannel || kFp8, "fp8_per_channel: the e4m3 kernels only");
  static_assert(!kPairs || (kFp8 && kCluster && !kChannel), "w2 row pairs: the e4m3 per-tensor cluster form only");
  static_assert(!kPlain || (!kTimed && !kPairs), "kPlain: the untimed forms without w2 row pairs");
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  static constexpr int kStageElems = kKBytes / kElemBytes;  // K elements a stage
  // The one-CTA form's GEMM2 over h's kN = 96 columns: 32-byte k steps (k16 of 16-bit, k32 of
  // e4m3), its 128-byte chunks (2; e4m3 1) and the steps in chunk 0. Columns past N (N < kN, forced
  // only) are zeros in h and in w2 (TMA's fill) alike.
  static constexpr int kSteps2 = kN * kElemBytes / 32;
  static constexpr int kChunks2 = (kN * kElemBytes + kKBytes - 1) / kKBytes;
  static constexpr int kSteps2First = kSteps2 < 4 ? kSteps2 : 4;
  // The one-CTA form runs GEMM2 as Swap-AB (gemm2_swap_tile, p.g2_swap) for units of at most this
  // many rows: A/B at qwen3-30b-a3b TP8 M = 1..256 on an H100 (docs/perf.md "Session 77"): e4m3
  // won at units of 1-16 rows (1.03-1.09x at M <= 128) and lost with units up to 32 (0.91x at
  // M = 256); 16-bit won at 8 (1.02-1.05x at M <= 8) and lost 2-5 % where units reach 16-32.
  static constexpr int kG2SwapRows = kFp8 ? 16 : 8;
  // GEMM2's K stages a 256-column output tile, and the CTAs a unit runs on (S): compile-time
  // constants in the one-CTA form.
  static __device__ __forceinline__ int g2_chunks(const KernelParams& p) { return kCluster ? p.g2_chunks : kChunks2; }
  static __device__ __forceinline__ int slices(const KernelParams& p) { return kCluster ? p.slices : 1; }
  // The call's features, compile-time constants in the kPlain kernel (plain_call's values).
  static __device__ __forceinline__ bool has_b13(const KernelParams& p) { return !kPlain && p.b13 != nullptr; }
  static __device__ __forceinline__ bool has_b2(const KernelParams& p) { return !kPlain && p.b2 != nullptr; }
  static __device__ __forceinline__ bool has_bias(const KernelParams& p) {
    return !kPlain && p.bias_type != numerics::kBiasNone;
  }
  static __device__ __forceinline__ bool on_input(const KernelParams& p) { return !kPlain && p.weight_on_input != 0; }
  static __device__ __forceinline__ bool y_f16(const KernelParams& p) { return !kPlain && p.y_f16 != 0; }
  static __device__ __forceinline__ Activation act_kind(const KernelParams& p) {
    return kPlain ? Activation::kSilu : p.act;
  }
  // An A/B switch (0 / 1 in KernelParams): its default (params.hpp k*Default) in the kPlain kernel.
  static __device__ __forceinline__ bool sw(int v, bool dflt) { return kPlain ? dflt : v != 0; }

  // The unit's slice on this CTA of its cluster (read through r(): 0 at compile time in the
  // one-CTA form).
  struct Slice {
    int rank;   // r: h columns 96r .. 96r + 95
    int peers;  // S - 1
    int n;      // N, the intermediate size (kPairs: h2's columns written, those of h below N)
    __device__ __forceinline__ int r() const { return kCluster ? rank : 0; }
    // The i-th other rank of the cluster (i < peers).
    __device__ __forceinline__ std::uint32_t peer(int i) const {
      return static_cast<std::uint32_t>(i < rank ? i : i + 1);
    }
  };

  struct Smem {
    std::uint32_t ring, h, h2, full, empty, slots_bar;  // shared addresses (h2: kPairs only)
    std::uint32_t h_full, h_empty, amax_bar;        // the cluster's barriers (S > 1)
    float* red_cluster;
    int* unit_slot;
    float* unit_w;
    int* warp_rows;
    float* red;
    int* counts;  // row offsets after the table
    int* prefix;
    std::int16_t* slot_e;
    float* scales;  // kChannel: the unit's w13 scales [2 kN] (the slice's gate, up), then its w2 scales [K padded]
    float* bias;    // biases: the unit's b13 [2 kN] (the slice's gate, up), then b2 of the rank's tiles (SmemLayout::bias)
    std::uint32_t* bias_raw;  // ... as copied: a word of two 16-bit elements or one fp32 one
    float* warm;              // kWarmFloats zeros the warm warp reads (SmemLayout::warm)
  };

  static __device__ __forceinline__ void next_stage(int& stage, std::uint32_t& phase) {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }

  // Unit u (< prefix[E]); `hint` is the previous unit's expert (-1 at first).
  static __device__ __forceinline__ Unit unit_of(const KernelParams& p, const Smem& s, int u, int& hint) {
    gemm_common::find_expert_from(u, s.prefix, p.num_experts, hint);
    Unit t;
    t.e = hint;
    t.r0 = (u - s.prefix[hint]) * kBlockM;
    t.count = min(kBlockM, s.counts[hint + 1] - s.counts[hint] - t.r0);
    return t;
  }

  // GEMM1's stage kb of unit expert e on slice rank r: once the ring's stage is free, lane 0 arms
  // its full barrier with the w13 bytes and asks for the tile (gate rows 96r + 0..63 | up 96r +
  // 0..63 | gate 96r + 64..95 | up 96r + 64..95 of planes 2e and 2e + 1) as two boxes over both
  // planes (p.two_boxes, the default: rows 96r + 0..63 from tmap_w13, 96r + 64..95 from tmap_w13b)
  // or as six 32-row boxes of one plane (MOEKIT_EXPERT_MLP_TWO_BOXES=0); the token rows follow
  // through the 32 lanes' gather arrivals.
  template <class Load>
  static __device__ __forceinline__ void issue_w13(const KernelParams& p, const Smem& s, int e, int r, int kb,
                                                   int stage, std::uint32_t phase, int lane, const Load& load,
                                                   std::uint64_t* rec, int j, std::uint64_t& empty_wait) {
    const long long c0 = rec != nullptr ? clock64() : 0;
    sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
    if (rec != nullptr) empty_wait += static_cast<std::uint64_t>(clock64() - c0);
    if (lane != 0) return;
    const std::uint32_t full = s.full + 8 * stage;
    sm90::mbar_arrive_expect_tx(full, kW13TileBytes);
    const std::uint32_t b = s.ring + stage * kStageBytes + kATileBytes;
    const int k0 = kb * kStageElems;
    const int n0 = r * kN;
    if (sw(p.two_boxes, kTwoBoxesDefault)) {
      load(b, &p.tmap_w13, full, k0, n0, 2 * e);
      load(b + 128 * kKBytes, &p.tmap_w13b, full, k0, n0 + 64, 2 * e);
    } else {
      const int rows[6] = {0, 32, 0, 32, 64, 64};
      const int up[6] = {0, 0, 1, 1, 0, 1};
#pragma unroll
      for (int x = 0; x < 6; ++x) load(b + x * 32 * kKBytes, &p.tmap_w13, full, k0, n0 + rows[x], 2 * e + up[x]);
    }
    if (rec != nullptr && j == 0 && kb == 0) rec[kPhaseFirstIssue] = sm90::globaltimer_ns();
  }

  // ---- producer warp ----
  static __device__ void produce(const KernelParams& p, const Smem& s, const Slice& sl, int units) {
    const int lane = threadIdx.x - kConsumerThreads;
    const int chunk = lane & 7;  // 16-byte chunk of a 128-byte K stage this lane copies
    // The lean gather's place of row (lane >> 3) + 4 i in a stage's A tile, less 512 i: by i % 2.
    const std::uint32_t place[2] = {
        static_cast<std::uint32_t>((lane >> 3) * kKBytes + ((chunk ^ (lane >> 3)) << 4)),
        static_cast<std::uint32_t>((lane >> 3) * kKBytes + ((chunk ^ ((lane >> 3) + 4)) << 4))};
    const std::int64_t row_bytes = static_cast<std::int64_t>(p.hidden_size) * kElemBytes;
    const std::uint8_t* hidden = static_cast<const std::uint8_t*>(p.hidden);
    int stage = 0, hint = -1;
    std::uint32_t phase = 0;
    std::uint64_t* rec = lane == 0 ? phase_record<kTimed>(p) : nullptr;  // phase timer (tests only)
    std::uint64_t empty_wait = 0, slot_wait = 0;
    // The weights' TMA, with the L2 evict-first hint when p.evict_first (MOEKIT_EXPERT_MLP_EVICT_FIRST=1).
    const std::uint64_t policy = sm90::createpolicy_evict_first();
    const auto load = [&](std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0, int c1, int c2) {
      if (sw(p.evict_first, kEvictFirstDefault)) sm90::tma_load_3d_hint(dst, map, bar, c0, c1, c2, policy);
      else sm90::tma_load_3d(dst, map, bar, c0, c1, c2);
    };
    const int S = slices(p), r = sl.r();
    int j = 0;  // this CTA's unit count (the slot list's parity)
    for (int u = static_cast<int>(blockIdx.x) / S; u < units; u += static_cast<int>(gridDim.x) / S, ++j) {
      const Unit t = unit_of(p, s, u, hint);
      // GEMM1. The w13 boxes of the unit's first `ahead` stages go out first, as their stages free
      // up, so the stream does not wait for the slot list (nor, fp8, for hidden's quantization);
      // then each stage's token rows, once the consumers placed the unit's slots, and past the first
      // `ahead` stages a stage's w13 boxes and rows together.
      // A unit after the CTA's first: as many as the ring holds (p.ahead_next), its stages freeing as
      // the consumers finish the previous unit's GEMM2, whose end is when they place this unit's
      // slots: the stream runs on across the unit's start instead of waiting there for the slot
      // list, then a DRAM round trip. The first unit keeps kAheadStages (config.hpp: its token
      // rows, read once from DRAM, queued behind more weights).
      const int ahead = min(j > 0 && sw(p.ahead_next, kAheadNextDefault) ? kStages : kAheadStages, p.k_stages);
      int wstage = stage;
      std::uint32_t wphase = phase;
      for (int kb = 0; kb < ahead; ++kb) {
        issue_w13(p, s, t.e, r, kb, wstage, wphase, lane, load, rec, j, empty_wait);
        next_stage(wstage, wphase);
      }
      {
        const std::uint64_t w0 = rec != nullptr ? sm90::globaltimer_ns() : 0;
        sm90::mbar_wait(s.slots_bar + 8 * (j & 1), (j >> 1) & 1);
        if (rec != nullptr) slot_wait += sm90::globaltimer_ns() - w0;
      }
      // hidden (fp8: the quantization launch's rows and scale) is read from here on: the
      // quantization launch, this kernel's programmatic predecessor, has completed (a no-op when
      // launched without the attribute, and once it returned).
      if (j == 0) pdl_wait();
      // The unit's token rows: lane copies 16-byte chunk `chunk` of rows (lane >> 3) + 4 i. The lean
      // gather (p.lean_gather, the default) sets each row's source once a unit and copies, each
      // stage, only the unit's groups of 4 rows that hold one of its rows (a uniform break at
      // `groups`): a 1..4-row unit, most of them at M <= 128, costs a lane one copy a stage. The
      // predicated form (MOEKIT_EXPERT_MLP_LEAN_GATHER=0, kept for the A/B) runs all 16 rows a lane
      // with their 64-bit addresses every stage (~150 instructions a stage, docs/perf.md "Session 61").
      const int* us = s.unit_slot + (j & 1) * kBlockM;
      const bool lean = sw(p.lean_gather, kLeanGatherDefault);
      const int groups = (t.count + 3) >> 2;                 // 1..16, the same in every lane
      const int mine = max(0, (t.count - (lane >> 3) + 3) >> 2);  // this lane's rows: i < mine
      const std::uint8_t* src[kBlockM / 4];  // lean: row (lane >> 3) + 4 i's chunk at K = 0 (i < mine)
      int tok[kBlockM / 4];                  // predicated: its token; -1 past the unit's rows
#pragma unroll
      for (int i = 0; i < kBlockM / 4; ++i) {
        const int row = (lane >> 3) + 4 * i;
        tok[i] = row < t.count ? us[row] / p.top_k : -1;
        if (lean) {
          if (i >= groups) break;  // uniform; the rest are never read
          src[i] = hidden + (tok[i] >= 0 ? tok[i] : 0) * row_bytes + chunk * 16;
        }
      }
      for (int kb = 0; kb < p.k_stages; ++kb) {
        if (kb >= ahead) issue_w13(p, s, t.e, r, kb, stage, phase, lane, load, rec, j, empty_wait);
        const std::uint32_t dst = s.ring + stage * kStageBytes;
        // A chunk past the row's end (e4m3 K % 128 = 64: the last stage's upper half) is zeros,
        // against the w13 box's zeros there (TMA's fill past K).
        const int koff = kb * kKBytes;
        const bool in_k = koff + chunk * 16 < row_bytes;
        const int kbytes = in_k ? 16 : 0;
        if (lean) {
          const int kread = in_k ? koff : 0;
#pragma unroll
          for (int i = 0; i < kBlockM / 4; ++i) {
            if (i >= groups) break;  // uniform
            // Row (lane >> 3) + 4 i at 128 (lane >> 3) + 512 i, its chunk swizzled by row % 8 =
            // (lane >> 3) + 4 (i % 2).
            if (i < mine) sm90::cp_async_16_zfill(dst + 512 * i + place[i & 1], src[i] + kread, kbytes);
          }
        } else {
#pragma unroll
          for (int i = 0; i < kBlockM / 4; ++i) {
            if (tok[i] < 0) continue;
            const int row = (lane >> 3) + 4 * i;
            const std::uint8_t* g = hidden + tok[i] * row_bytes + (in_k ? koff + chunk * 16 : 0);
            sm90::cp_async_16_zfill(dst + row * kKBytes + ((chunk ^ (row & 7)) << 4), g, kbytes);
          }
        }
        sm90::cp_async_mbar_arrive_noinc(s.full + 8 * stage);
        next_stage(stage, phase);
      }
      // GEMM2: per 256-column output tile of this rank (r, r + S, ...), w2's 256 rows a 128-byte
      // chunk of h's N columns (past N: TMA's zeros, against h's zeros).
      for (int o = r; o < p.out_tiles; o += S) {
        for (int c = 0; c < g2_chunks(p); ++c) {
          const long long c0 = rec != nullptr ? clock64() : 0;
          sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
          if (rec != nullptr) empty_wait += static_cast<std::uint64_t>(clock64() - c0);
          const std::uint32_t full = s.full + 8 * stage;
          if (lane == 0) {
            sm90::mbar_arrive_expect_tx(full, kStageBytes);
            const std::uint32_t dst = s.ring + stage * kStageBytes;
            if constexpr (kPairs) {  // the tile's even rows, then its odd rows 8 bytes early (kPairShift)
              load(dst, &p.tmap_w2, full, c * kStageElems, o * kPairBoxRows, t.e);
              load(dst + kPairBoxRows * kKBytes, &p.tmap_w2, full, p.n_cols - kPairShift + c * kStageElems,
                   o * kPairBoxRows, t.e);
            } else {
              load(dst, &p.tmap_w2, full, c * kStageElems, o * kOutTile, t.e);
            }
          }
          sm90::cp_async_mbar_arrive_noinc(full);  // the barrier's count: no copies, arrives at once
          next_stage(stage, phase);
        }
      }
    }
    pdl_wait();  // every CTA waits before it exits, also one with no unit (cuda/common/pdl.cuh)
    if (rec != nullptr) {
      rec[kPhaseLastIssue] = sm90::globaltimer_ns();
      rec[kPhaseProdSlotWait] = slot_wait;
      rec[kPhaseProdEmptyWait] = empty_wait;
    }
    sm90::cp_async_wait_all_groups();
  }

  static __device__ __forceinline__ void release(const Smem& s, int stage, int lane) {
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(s.empty + 8 * stage);
  }

  // Two values as one word of 16-bit values: fp16 when kHalf, else bf16.
  template <bool kHalf>
  static __device__ __forceinline__ std::uint32_t pack2(float v0, float v1) {
    if constexpr (kHalf) {
      const __half2 v = __floats2half2_rn(v0, v1);
      return *reinterpret_cast<const std::uint32_t*>(&v);
    } else {
      const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
      return *reinterpret_cast<const std::uint32_t*>(&v);
    }
  }

  // Byte b of row q (q < 64) of h as GEMM2's A tile: chunk b / 128 of 128-byte rows (64 16-bit
  // columns or 128 e4m3 ones), the 16-byte unit at position ^ (q % 8). h2 has the same layout.
  static __device__ __forceinline__ std::uint32_t h_byte_offset(int q, int b) {
    const int w = b & 127;
    return (b >> 7) * kHChunkBytes + q * kKBytes + (((w >> 4) ^ (q & 7)) << 4) + (w & 15);
  }
  // Row q, columns g, g + 1 of h (q < 64, g even) into this CTA's tile; kPairs: the same bytes also
  // at column g + 8 of h2 (below N only: h2's columns from N + 8 stay the zeros of the kernel's
  // start). The peers get the warp's rows afterwards, from this tile (push_h).
  // on = false (the warm warp): the same instructions, no store.
  static __device__ __forceinline__ void store_h(const Smem& s, const Slice& sl, int q, int g, float v0, float v1,
                                                 bool on = true) {
    if constexpr (kFp8) {
      const std::uint16_t bits = numerics::e4m3x2(v0, v1);
      if (!on) return;
      asm volatile("st.shared.b16 [%0], %1;" ::"r"(s.h + h_byte_offset(q, g)), "h"(bits) : "memory");
      if (kPairs && g < sl.n)  // uniform in a quad (N % 8 = 0)
        asm volatile("st.shared.b16 [%0], %1;" ::"r"(s.h2 + h_byte_offset(q, g + kPairShift)), "h"(bits) : "memory");
    } else {
      const std::uint32_t bits = pack2<kF16>(v0, v1);
      if (!on) return;
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(s.h + h_byte_offset(q, 2 * g)), "r"(bits) : "memory");
    }
  }

  // kBytes (16 or 8) of this CTA's tile at shared address src into the same place of every peer's,
  // by st.async on the peer's h_full barrier.
  template <int kBytes>
  static __device__ __forceinline__ void push_bytes(const Smem& s, const Slice& sl, std::uint32_t src) {
    static_assert(kBytes == 16 || kBytes == 8, "16- or 8-byte vectors");
    std::uint32_t v0, v1, v2 = 0, v3 = 0;
    if constexpr (kBytes == 16)
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(src) : "memory");
    else
      asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v0), "=r"(v1) : "r"(src) : "memory");
    for (int k = 0; k < sl.peers; ++k) {
      const std::uint32_t dst = sm90::map_to_rank(src, sl.peer(k)), bar = sm90::map_to_rank(s.h_full, sl.peer(k));
      if constexpr (kBytes == 16) sm90::st_async_v4_b32(dst, v0, v1, v2, v3, bar);
      else sm90::st_async_v2_b32(dst, v0, v1, bar);
    }
  }

  // On a cluster, once the warp has stored row half `half` of its rows (store_half: 8 rows of the
  // rank's slice): those rows into every peer's tile by st.async, completing the peer's h_full
  // transaction count (no fence: a peer sees the bytes once it sees the phase), 16 bytes a lane
  // read back from this CTA's tile, every lane of the warp busy. The slice is whole 16-byte units
  // of a row (96 columns: 192 or 96 bytes at byte 96 r x element size); kPairs' h2 bytes
  // [96 r + 8, min(96 r + 96, N) + 8) of a row are 16-byte units but for 8 bytes at either end.
  // A quad's first lane pushing the quad's 16 (e4m3: 8) bytes of each pair of columns, 3 shuffles
  // a pair, was the first form: a quarter of the lanes issued every remote store (docs/perf.md
  // "Session 72").
  static __device__ __forceinline__ void push_h(const Smem& s, const Slice& sl, int warp, int half) {
    if constexpr (kCluster) {
      const int lane = static_cast<int>(threadIdx.x & 31);
      __syncwarp();  // the other lanes' stores of the warp's rows are visible to this lane
      constexpr int kUnitsRow = kN * kElemBytes / 16;  // 12 (16-bit) or 6 (e4m3)
      const int base = sl.r() * kN * kElemBytes;
      const int row0 = 16 * warp + 8 * half;  // the half's 8 rows
#pragma unroll
      for (int i = 0; i < (8 * kUnitsRow + 31) / 32; ++i) {
        const int u = lane + 32 * i;
        if (u < 8 * kUnitsRow) push_bytes<16>(s, sl, s.h + h_byte_offset(row0 + u / kUnitsRow, base + 16 * (u % kUnitsRow)));
      }
      if constexpr (kPairs) {
        constexpr int kUnits2 = kUnitsRow + 1;  // h2's bytes of a row touch 7 units
        const int lo = base + kPairShift, hi = min(base + kN, sl.n) + kPairShift;
#pragma unroll
        for (int i = 0; i < (8 * kUnits2 + 31) / 32; ++i) {
          const int u = lane + 32 * i;
          const int b = base + 16 * (u % kUnits2);
          const int a = max(b, lo), e = min(b + 16, hi);
          if (u >= 8 * kUnits2 || e <= a) continue;
          const std::uint32_t src = s.h2 + h_byte_offset(row0 + u / kUnits2, b) + (a - b);
          if (e - a == 16) push_bytes<16>(s, sl, src);
          else push_bytes<8>(s, sl, src);
        }
      }
    }
  }

  // Bytes of h a peer pushes into this CTA's tile a unit: all 64 rows of its 96-column slice.
  static constexpr std::uint32_t kHSliceBytes = kBlockM * kN * kElemBytes;
  // Bytes every peer pushes into this rank's tiles a unit: their slices of h, and (kPairs) of h2
  // their columns below N, i.e. all N but this rank's own (e4m3: a byte a column).
  static __device__ __forceinline__ std::uint32_t h_push_bytes(const Slice& sl) {
    std::uint32_t b = kHSliceBytes * static_cast<std::uint32_t>(sl.peers);
    if constexpr (kPairs) b += kBlockM * static_cast<std::uint32_t>(sl.n - min(kN, sl.n - kN * sl.rank));
    return b;
  }

  // The activation of one row half h (0, 1: rows q and q + 8 of the thread's accumulator rows) of
  // a thread's 24 (gate, up) pairs as straight-line code for one kind: v = act(g fr, u fr) (0 past
  // the unit's rows, whose accumulators are stale shared memory's), written in place over the gate
  // accumulators, its absmax folded into amax (fp8's dynamic scale; unused otherwise). The caller
  // runs the half as a rolled loop (h selects the accumulator registers by FSEL), so the code is
  // fetched once and run twice: the kernel runs it once a unit, cold, while the weight stream holds
  // the memory system (docs/perf.md "Session 55"). Computed once a unit: the stores read the values
  // back (store_half), where fp8's dynamic scale used to run the activation twice, for the absmax
  // and again for the stores. The kind's switch sits outside (per-value switching made 48
  // divergent blocks).
  // kChannel: cs13 holds the unit's w13 scales (gate column n at n, up at kN + n), each pair's
  // taken with the row's fr (hidden's row scale x the router weight on the input).
  // kBias: b13s holds the slice's b13 the same way (zeros past N), added after the scales.
  template <Activation kKind, bool kBias>
  static __device__ __forceinline__ float act_half(const KernelParams& p, float (&acc1)[64], float (&acc2)[32], int h,
                                                   bool live, float fr, float amax, const float* cs13,
                                                   const float* b13s, int lane) {
#pragma unroll
    for (int i = 0; i < 12; ++i) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& g0 = i < 8 ? acc1[4 * i + c] : acc2[4 * (i - 8) + c];
        float& g1 = i < 8 ? acc1[4 * i + 2 + c] : acc2[4 * (i - 8) + 2 + c];
        const float u0 = i < 8 ? acc1[4 * (i + 8) + c] : acc2[4 * (i - 4) + c];
        const float u1 = i < 8 ? acc1[4 * (i + 8) + 2 + c] : acc2[4 * (i - 4) + 2 + c];
        const int n = (i < 8 ? 8 * i : 64 + 8 * (i - 8)) + 2 * (lane & 3) + c;  // the slice's column
        float fg = fr, fu = fr;
        if constexpr (kChannel) {
          fg = fr * cs13[n];
          fu = fr * cs13[kN + n];
        }
        float g = (h != 0 ? g1 : g0) * fg, uu = (h != 0 ? u1 : u0) * fu;
        if constexpr (kBias) {
          g += b13s[n];
          uu += b13s[kN + n];
        }
        const float a = numerics::activate<numerics::ActMath::kFastFtz, kKind>(g, uu, p.alpha, p.limit);
        const float v = live ? a : 0.0f;
        amax = numerics::fold_absmax(amax, v);
        g0 = h != 0 ? g0 : v;
        g1 = h != 0 ? v : g1;
      }
    }
    return amax;
  }

  // Row half h's 24 activation values (act_half's, in the gate accumulators) x inv_h into GEMM2's A
  // tile at row q, columns 96 rank + n (and, on a cluster, the peers' tiles).
  static __device__ __forceinline__ void store_half(const Smem& s, const Slice& sl, const float (&acc1)[64],
                                                    const float (&acc2)[32], int h, int q, int lane, float inv_h,
                                                    bool on = true) {
#pragma unroll
    for (int i = 0; i < 12; ++i) {
      float v[2];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float g0 = i < 8 ? acc1[4 * i + c] : acc2[4 * (i - 8) + c];
        const float g1 = i < 8 ? acc1[4 * i + 2 + c] : acc2[4 * (i - 8) + 2 + c];
        v[c] = h != 0 ? g1 : g0;
      }
      const int n = i < 8 ? 8 * i + 2 * (lane & 3) : 64 + 8 * (i - 8) + 2 * (lane & 3);
      store_h(s, sl, q, sl.r() * kN + n, v[0] * inv_h, v[1] * inv_h, on);
    }
  }

  // On a cluster, before a unit's h is pushed: every rank's GEMM2 of the previous unit is past its
  // reads of h (h_empty), and this unit's phase of h_full expects the peers' slices as bytes (their
  // pushes may land first). Nothing on one CTA.
  static __device__ __forceinline__ void h_push_begin(const Smem& s, const Slice& sl, int warp, int lane, int j) {
    if constexpr (kCluster) {
      if (j > 0) sm90::mbar_wait_cluster(s.h_empty, (j - 1) & 1);
      if (warp == 0 && lane == 0) sm90::mbar_arrive_expect_tx(s.h_full, h_push_bytes(sl));
    }
  }

  // The unit's h slice into GEMM2's A tiles (this CTA's and, on a cluster, the peers') for one
  // activation kind; returns the scale h was divided by (fp8: the static intermediate scale or
  // dynamic_scale of the unit's absmax; else 1). The activation runs once (act_half, both halves);
  // fp8 with a dynamic scale then takes the absmax over the four warps (`red`) and, on a cluster,
  // over every rank (red_cluster and the amax barrier, so all ranks take the same scale); then the
  // stores. On a cluster the stores wait until every rank's GEMM2 of the previous unit is past its
  // reads of h (h_empty).
  // `at` (the phase timer's thread 0 only, else null): its sums of the steps, kPhaseActMath..
  // kPhaseActStore's order. warm (the one-CTA form's warm warp, consume's): the same instructions
  // with no store, no barrier and nothing of the unit's absmax written.
  template <Activation kKind, bool kBias>
  static __device__ __forceinline__ float activation(const KernelParams& p, const Smem& s, const Slice& sl,
                                                     float (&acc1)[64], float (&acc2)[32], const bool (&live)[2],
                                                     const float (&fr)[2], int warp, int lane, int j,
                                                     std::uint64_t* at = nullptr, bool warm = false) {
    std::uint64_t mark = at != nullptr ? sm90::globaltimer_ns() : 0;
    const auto step = [&](int i) {
      if (at != nullptr) {
        const std::uint64_t now = sm90::globaltimer_ns();
        at[i] += now - mark;
        mark = now;
      }
    };
    const int q0 = 16 * warp + (lane >> 2);
    float amax = 0.0f;
#pragma unroll 1
    for (int h = 0; h < 2; ++h)
      amax = act_half<kKind, kBias>(p, acc1, acc2, h, h != 0 ? live[1] : live[0], h != 0 ? fr[1] : fr[0], amax, nullptr,
                                    warm ? s.warm : s.bias, lane);
    step(0);
    float s_h = 1.0f;
    if constexpr (kFp8) {
      if (p.a2_scale != nullptr) {
        s_h = p.a2_scale[0];
      } else {
        amax = warp_max(amax);
        if (!warm) {
          if (lane == 0) s.red[warp] = amax;
          sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
        }
        const float* red = warm ? s.warm : s.red;
        amax = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
        if constexpr (kCluster) {  // every peer's absmax into red_cluster by st.async, counted by amax_bar
          float* rc = s.red_cluster + (j & 1) * kMaxSlices;
          if (warp == 0 && lane == 0) {
            sm90::mbar_arrive_expect_tx(s.amax_bar, 4u * static_cast<std::uint32_t>(sl.peers));
            const std::uint32_t mine = sm90::smem_addr(rc + sl.rank);
            for (int i = 0; i < sl.peers; ++i)
              sm90::st_async_f32(sm90::map_to_rank(mine, sl.peer(i)), amax, sm90::map_to_rank(s.amax_bar, sl.peer(i)));
          }
          sm90::mbar_wait_cluster(s.amax_bar, j & 1);
          for (int i = 0; i < sl.peers; ++i) amax = fmaxf(amax, rc[sl.peer(i)]);
        }
        s_h = numerics::dynamic_scale(amax);
      }
    }
    step(1);
    h_push_begin(s, sl, warp, lane, j);
    step(2);
    const float inv_h = kFp8 ? 1.0f / s_h : 1.0f;
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      store_half(s, sl, acc1, acc2, h, q0 + 8 * h, lane, inv_h, !warm);
      push_h(s, sl, warp, h);
    }
    step(3);
    return s_h;
  }

  // kChannel's activation: as activation(), with the w13 column scales (s.scales) in act_half and
  // one scale a row: s_h[h] = dynamic_scale of row q0 + 8 h's absmax over its N columns, which the
  // four lanes of a quad hold (24 each), the reference's per-slot intermediate scale. On a cluster
  // the quad's lane 0 pushes its two rows' slice absmaxes into every peer's red_cluster (a row a
  // float, [parity][rank][row]) by st.async, counted on the peer's amax barrier, and each row's
  // scale is the max over the ranks: the same scale on every rank, as the per-tensor form's.
  template <Activation kKind, bool kBias>
  static __device__ __forceinline__ void activation_channel(const KernelParams& p, const Smem& s, const Slice& sl,
                                                            float (&acc1)[64], float (&acc2)[32],
                                                            const bool (&live)[2], const float (&fr)[2], int warp,
                                                            int lane, int j, float (&s_h)[2]) {
    const int q0 = 16 * warp + (lane >> 2);
    float amax0 = 0.0f, amax1 = 0.0f;
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      const float a = act_half<kKind, kBias>(p, acc1, acc2, h, h != 0 ? live[1] : live[0], h != 0 ? fr[1] : fr[0],
                                             0.0f, s.scales, s.bias, lane);
      if (h == 0) amax0 = a;
      else amax1 = a;
    }
    amax0 = fmaxf(amax0, __shfl_xor_sync(0xffffffffu, amax0, 1));
    amax0 = fmaxf(amax0, __shfl_xor_sync(0xffffffffu, amax0, 2));
    amax1 = fmaxf(amax1, __shfl_xor_sync(0xffffffffu, amax1, 1));
    amax1 = fmaxf(amax1, __shfl_xor_sync(0xffffffffu, amax1, 2));
    if constexpr (kCluster) {
      float* rc = s.red_cluster + (j & 1) * kMaxSlices * kBlockM;
      if (warp == 0 && lane == 0)
        sm90::mbar_arrive_expect_tx(s.amax_bar, 4u * kBlockM * static_cast<std::uint32_t>(sl.peers));
      if ((lane & 3) == 0) {
        const std::uint32_t mine = sm90::smem_addr(rc + sl.rank * kBlockM + q0);
        for (int i = 0; i < sl.peers; ++i) {
          const std::uint32_t peer = sl.peer(i);
          sm90::st_async_f32(sm90::map_to_rank(mine, peer), amax0, sm90::map_to_rank(s.amax_bar, peer));
          sm90::st_async_f32(sm90::map_to_rank(mine + 32, peer), amax1, sm90::map_to_rank(s.amax_bar, peer));
        }
      }
      sm90::mbar_wait_cluster(s.amax_bar, j & 1);
      for (int i = 0; i < sl.peers; ++i) {
        const float* r = rc + static_cast<int>(sl.peer(i)) * kBlockM + q0;
        amax0 = fmaxf(amax0, r[0]);
        amax1 = fmaxf(amax1, r[8]);
      }
    }
    s_h[0] = numerics::dynamic_scale(amax0);
    s_h[1] = numerics::dynamic_scale(amax1);
    h_push_begin(s, sl, warp, lane, j);
    const float inv0 = 1.0f / s_h[0], inv1 = 1.0f / s_h[1];
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      store_half(s, sl, acc1, acc2, h, q0 + 8 * h, lane, h != 0 ? inv1 : inv0);
      push_h(s, sl, warp, h);
    }
  }

  // GEMM2's epilogue for one 256-column tile: y[slot[h]][col0 + 8 jj + {0, 1}] = acc x f[h] (fp16
  // when kHalf, else bf16) for the thread's live rows h, jj < 32 while col0 + 8 jj < K. The row's address
  // once, a word store a value pair at a fixed offset, the column bound a predicate: ~5
  // instructions a pair, where 64-bit column arithmetic and a branch a pair took ~17 and kept
  // warp 0 in its stores for 5-20 µs of a unit while the other warps waited at the next tile's
  // wgmma (the GEMM2 phase split, docs/perf.md "Session 55").
  // kChannel: cs2 points at the unit's w2 scales of this thread's first column (col0; shared
  // memory, zeros past K), each value's own.
  template <bool kHalf>
  static __device__ __forceinline__ void store_y(const KernelParams& p, const float (&acc)[128], const int (&slot)[2],
                                                 const float (&f)[2], int col0, const float* cs2 = nullptr) {
    const int lim = p.hidden_size - col0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (slot[h] < 0) continue;
      std::uint32_t* row = reinterpret_cast<std::uint32_t*>(static_cast<std::uint8_t*>(p.y) +
                                                            (static_cast<std::int64_t>(slot[h]) * p.hidden_size + col0) * 2);
#pragma unroll
      for (int jj = 0; jj < kOutTile / 8; ++jj) {
        float v0 = acc[4 * jj + 2 * h] * f[h], v1 = acc[4 * jj + 2 * h + 1] * f[h];
        if constexpr (kChannel) {
          v0 *= cs2[8 * jj];
          v1 *= cs2[8 * jj + 1];
        }
        const std::uint32_t bits = pack2<kHalf>(v0, v1);
        if (8 * jj < lim) row[4 * jj] = bits;
      }
    }
  }

  // GEMM2's epilogue for one 256-column tile (tile0 its first column) where the call has a b2:
  // y = (acc x fs[h] (x the w2 column scale, kChannel) + b2) x w[h], the reference's order
  // (scales, bias, then the router weight on the output). fs: the row's h scale x the expert's w2
  // scale; w: its router weight, or 1 when that went on the input. cs2 / b2s: the tile's w2 scales
  // (kChannel) and b2 values in shared memory, a float a column.
  template <bool kHalf>
  static __device__ __forceinline__ void store_y_ext(const KernelParams& p, const float (&acc)[128],
                                                     const int (&slot)[2], const float (&fs)[2], const float (&w)[2],
                                                     int tile0, const float* cs2, const float* b2s, int lane) {
    const int q = lane & 3;
    const int lim = p.hidden_size - tile0;
    const auto value = [&](float a, int h, int c) {
      a *= fs[h];
      if constexpr (kChannel) a *= cs2[c];
      return (a + b2s[c]) * w[h];
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (slot[h] < 0) continue;
      std::uint8_t* row = static_cast<std::uint8_t*>(p.y) + (static_cast<std::int64_t>(slot[h]) * p.hidden_size + tile0) * 2;
#pragma unroll
      for (int jj = 0; jj < kOutTile / 8; ++jj) {
        const int c = 8 * jj + 2 * q;
        const float v0 = value(acc[4 * jj + 2 * h], h, c);
        const float v1 = value(acc[4 * jj + 2 * h + 1], h, c + 1);
        if (c < lim) *reinterpret_cast<std::uint32_t*>(row + 2 * c) = pack2<kHalf>(v0, v1);
      }
    }
  }

  // kPairs' epilogue for one 256-column tile (tile0 its first column): acc[0, 64) holds the tile's
  // even output columns (the m64n128 over w2's even rows), acc[64, 128) its odd ones, so a thread's
  // accumulator columns 8 jj + 2 (lane % 4) + {0, 1} of both halves give output columns 16 jj + 4
  // (lane % 4) + {0, 1, 2, 3}: one 8-byte store. y = acc x f[h] without b2 (store_y's), else
  // (acc x fs[h] + b2) x w[h] (store_y_ext's: b2s the tile's b2 in shared memory).
  template <bool kHalf, bool kB2>
  static __device__ __forceinline__ void store_y_pairs(const KernelParams& p, const float (&acc)[128],
                                                       const int (&slot)[2], const float (&f)[2], const float (&fs)[2],
                                                       const float (&w)[2], int tile0, const float* b2s, int lane) {
    const int q = lane & 3;
    const int lim = p.hidden_size - tile0;
    const auto value = [&](float a, int h, int c) {
      if constexpr (kB2) return (a * fs[h] + b2s[c]) * w[h];
      else return a * f[h];
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (slot[h] < 0) continue;
      std::uint8_t* row = static_cast<std::uint8_t*>(p.y) + (static_cast<std::int64_t>(slot[h]) * p.hidden_size + tile0) * 2;
#pragma unroll
      for (int jj = 0; jj < kOutTile / 16; ++jj) {
        const int c = 16 * jj + 4 * q;
        const float v0 = value(acc[4 * jj + 2 * h], h, c);
        const float v1 = value(acc[64 + 4 * jj + 2 * h], h, c + 1);
        const float v2 = value(acc[4 * jj + 2 * h + 1], h, c + 2);
        const float v3 = value(acc[64 + 4 * jj + 2 * h + 1], h, c + 3);
        if (c < lim) *reinterpret_cast<uint2*>(row + 2 * c) = make_uint2(pack2<kHalf>(v0, v1), pack2<kHalf>(v2, v3));
      }
    }
  }

  // kPairs' GEMM2 steps of one chunk: the even rows (the stage's first 128 rows, descriptor db) against
  // h (dh) into acc[0, 64), the odd rows (the next 128) against h2 (dh2) into acc[64, 128).
  template <int kSteps>
  static __device__ __forceinline__ void gemm2_pair_steps(float (&acc)[128], std::uint64_t dh, std::uint64_t dh2,
                                                          std::uint32_t stage_addr) {
    const std::uint64_t dbe = sm90::make_smem_desc_sw128(stage_addr);
    const std::uint64_t dbo = sm90::make_smem_desc_sw128(stage_addr + kPairBoxRows * kKBytes);
    sm90::fence_regs<128>(acc);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) sm90::WgmmaHalvesE4m3::mma(acc, dh + 2 * kk, dbe + 2 * kk, dh2 + 2 * kk, dbo + 2 * kk, 1);
  }

  // GEMM2's first kSteps k steps of one chunk: acc += h chunk x w2 stage (descriptors dh, db). The
  // fence sits inside each case of the caller's switch on kSteps (before it, ptxas injects a
  // warpgroup.arrive in every case, C7519).
  template <int kSteps>
  static __device__ __forceinline__ void gemm2_steps(float (&acc)[128], std::uint64_t dh, std::uint64_t db) {
    sm90::fence_regs<128>(acc);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) sm90::Wgmma<Tag, 256>::mma(acc, dh + 2 * kk, db + 2 * kk, 1);
  }

  // The one-CTA form's GEMM2 of output tile o as Swap-AB (p.g2_swap, MOEKIT_EXPERT_MLP_G2_SWAP; not
  // kChannel): y^T = the tile's 256 w2 rows (A: four m64 blocks of the stage's 256-row box, K-major)
  // x h^T (B: the unit's first NT token rows of h, K-major), so the tensor cores take NT = 8 or 16
  // token columns (units of up to kG2SwapRows rows) where the m64n256 form takes 64 rows of which
  // a decode unit fills 1-8 (3.7 µs
  // of MMAs a unit at qwen3-30b TP8 bf16 M = 8, docs/perf.md "Session 76"); the same bits as that
  // form (G2SwapGivesTheSameBits: the tensor cores' sums agree). Block b's accumulators
  // d[4 jj + 2 hh + c] hold output column o 256 + 64 b + 16 warp + lane / 4 + 8 hh of token row
  // 8 jj + 2 (lane % 4) + c (Wgmma's layout). The epilogue stores one 16-bit element a value:
  // y = acc x (w x fs) without b2 (store_y's order), (acc x fs + b2) x w with it (store_y_ext's);
  // w the row's router weight (1 where it went on the input), fs h's scale x w2's. Rows past
  // `count` and columns past K are not stored; the warm warp (warm) reads no slot and stores
  // nothing (no column in bounds) and neither waits nor runs an MMA. cyc (timed kernels): the
  // waits, the MMAs, the stores, in cycles.
  template <int NT, bool kHalf>
  static __device__ __forceinline__ void gemm2_swap_tile(const KernelParams& p, const Smem& s, int& stage,
                                                         std::uint32_t& phase, int o, int count, const int* us,
                                                         const float* uw, float fs, bool warm, int warp, int lane,
                                                         bool timed, long long (&cyc)[3]) {
    static_assert(!kCluster && !kChannel, "Swap-AB GEMM2: the one-CTA form, per-tensor scales");
    const long long t0 = timed ? clock64() : 0;
    float acc[4][32];  // Wgmma takes 32 registers a block; the first NT / 2 hold the tile
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int i = 0; i < NT / 2; ++i) acc[b][i] = 0.0f;
    }
    long long t1 = t0, t2 = t0;
    if (!warm) {
      const int s0 = stage;
      sm90::mbar_wait(s.full + 8 * stage, phase);
      next_stage(stage, phase);
      int s1 = s0;
      if constexpr (kChunks2 > 1) {
        s1 = stage;
        sm90::mbar_wait(s.full + 8 * stage, phase);
        next_stage(stage, phase);
      }
      if (timed) t1 = clock64();
#pragma unroll
      for (int b = 0; b < 4; ++b) sm90::fence_regs<NT / 2>(acc[b]);
      sm90::wgmma_fence();
      const std::uint64_t dh0 = sm90::make_smem_desc_sw128(s.h);
      const std::uint64_t dh1 = sm90::make_smem_desc_sw128(s.h + kHChunkBytes);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const std::uint64_t da0 = sm90::make_smem_desc_sw128(s.ring + s0 * kStageBytes + b * 64 * kKBytes);
        const std::uint64_t da1 = sm90::make_smem_desc_sw128(s.ring + s1 * kStageBytes + b * 64 * kKBytes);
#pragma unroll
        for (int kk = 0; kk < kSteps2First; ++kk) sm90::Wgmma<Tag, NT>::mma(acc[b], da0 + 2 * kk, dh0 + 2 * kk, 1);
#pragma unroll
        for (int kk = 0; kk < kSteps2 - kSteps2First; ++kk)
          sm90::Wgmma<Tag, NT>::mma(acc[b], da1 + 2 * kk, dh1 + 2 * kk, 1);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
#pragma unroll
      for (int b = 0; b < 4; ++b) sm90::fence_regs<NT / 2>(acc[b]);
      release(s, s0, lane);
      if constexpr (kChunks2 > 1) release(s, s1, lane);
      if (timed) t2 = clock64();
    }
    const int lim = warm ? 0 : p.hidden_size - o * kOutTile;  // columns of the tile below K
    const int c0 = 16 * warp + (lane >> 2);                       // + 64 b + 8 hh
    const float* b2s = has_b2(p) ? (warm ? s.warm : s.bias + 2 * kN + o * kOutTile) : nullptr;
    using Y = std::conditional_t<kHalf, __half, __nv_bfloat16>;  // y's 16-bit type
    Y* const y = static_cast<Y*>(p.y);
#pragma unroll
    for (int jj = 0; jj < NT / 8; ++jj) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int n = 8 * jj + 2 * (lane & 3) + c;
        const bool live = warm || n < count;
        const int slot = live && !warm ? us[n] : 0;
        const float w = live && !warm && !on_input(p) ? uw[n] : 1.0f;
        const float f = w * fs;
        Y* const row = y + static_cast<std::int64_t>(slot) * p.hidden_size + o * kOutTile;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int col = 64 * b + c0 + 8 * hh;
            const float a = acc[b][4 * jj + 2 * hh + c];
            const float v = b2s != nullptr ? (a * fs + b2s[col]) * w : a * f;
            if (live && col < lim) row[col] = from_float<Y>(v);
          }
        }
      }
    }
    if (timed) {
      cyc[0] += t1 - t0;
      cyc[1] += t2 - t1;
      cyc[2] += clock64() - (warm ? t0 : t2);
    }
  }

  // ---- consumer warpgroup ----
  // warm: the warm warp (the kernel's last, kWarmThreads), which runs this same code for the CTA's
  // first unit as consumer warp 0 would, minus everything with an effect: no slot list, no GEMM1,
  // no store of h or y (store_h's `on`; GEMM2's epilogue with no column in bounds), no barrier, no
  // stage released. It starts right after the routing, so the activation's and the epilogue's
  // instructions are in the SM's instruction cache when the consumers reach them after GEMM1: code
  // a CTA runs once a unit, cold, cost 3-7 µs at qwen3-30b TP8 M <= 64 (docs/perf.md "Session 76").
  // The one-CTA form only (p.warm_act, MOEKIT_EXPERT_MLP_WARM_ACT); elsewhere it returns at once.
  // One call site in the kernel, so both run the same instructions.
  static __device__ void consume(const KernelParams& p, const Smem& s, const Slice& sl, int units, bool warm) {
    if (warm && (kCluster || kChannel || !sw(p.warm_act, kWarmActDefault))) return;
    const int t = warm ? static_cast<int>(threadIdx.x) - (kConsumerThreads + kProducerThreads)
                       : static_cast<int>(threadIdx.x);  // 0..127 (the warm warp: 0..31)
    const int warp = t >> 5, lane = t & 31;
    if (warm) {  // its zeros, read where the consumers read what they write later (biases, absmaxes)
      for (int i = lane; i < kWarmFloats; i += 32) s.warm[i] = 0.0f;
      __syncwarp();
    }
    const int S = slices(p);
    int stage = 0, hint = -1;
    std::uint32_t phase = 0;
    std::uint64_t* rec = t == 0 && !warm ? phase_record<kTimed>(p) : nullptr;  // phase timer (tests only)
    std::uint64_t sums[4] = {0, 0, 0, 0}, mark = 0;
    std::uint64_t g2[3] = {0, 0, 0};  // GEMM2's waits, MMAs, stores (cycles)
    // The per-tensor activation's steps (thread 0 of a timed kernel): the math, the absmax (the
    // warps', on a cluster every rank's), the wait for h_empty, the stores and pushes, the wait for
    // the peers' slices (h_full).
    std::uint64_t at_sums[5] = {0, 0, 0, 0, 0};
    std::uint64_t* const at = rec != nullptr ? at_sums : nullptr;
    const auto lap = [&](int i) {
      if (rec != nullptr) {
        const std::uint64_t now = sm90::globaltimer_ns();
        sums[i] += now - mark;
        mark = now;
      }
    };
    int j = 0;
    for (int u = static_cast<int>(blockIdx.x) / S; u < units; u += static_cast<int>(gridDim.x) / S, ++j) {
      if (rec != nullptr) mark = sm90::globaltimer_ns();
      const Unit un = unit_of(p, s, u, hint);
      // The unit's slots (ranks r0 .. r0 + count of expert e, ascending slot order) and their router
      // weights, for the producer's gather and this epilogue.
      int* us = s.unit_slot + (j & 1) * kBlockM;
      float* uw = s.unit_w + (j & 1) * kBlockM;
      if (!warm) {
      slot_routing::place_window(s.slot_e, p.slots, un.e, un.r0, un.r0 + un.count, t, kConsumerBarrier, s.warp_rows,
                                 us);
      // The slot list is complete (place_window ends at the warpgroup's barrier): the producer's
      // gather of the unit's token rows may start now, before the router weights' global loads
      // below (only this epilogue and the activation read them), so it does not wait a DRAM round
      // trip (1.028x median at qwen3-30b TP8 against the hand-off after them, H100, session 60).
      // Every consumer thread arrives (the barrier's count is 128), so each store of the list is
      // released by its own thread: thread 0's arrival alone orders them too, through the barrier,
      // but compute-sanitizer's racecheck does not carry that ordering and reports the producer's
      // reads as RAW hazards; 128 arrivals measured level with one (1.002x).
      sm90::mbar_arrive(s.slots_bar + 8 * (j & 1));
      if (t < un.count) uw[t] = p.topk_weights != nullptr ? p.topk_weights[us[t]] : 1.0f;
      sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
      }
      lap(0);
      // This thread's accumulator rows q = 16 warp + lane / 4 + 8 h (the warm warp: none).
      int slot[2];
      float tw[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = 16 * warp + (lane >> 2) + 8 * h;
        slot[h] = q < un.count && !warm ? us[q] : -1;
        tw[h] = q < un.count && !warm ? uw[q] : 0.0f;
      }

      // fp8_per_tensor: GEMM1's dequantization (hidden's scale x the expert's w13 scale) and w2's,
      // loaded before the main loop's waits; hidden's scale is the quantization launch's, so after
      // this kernel's wait for it (the producer waits before its gather, pdl_wait()).
      if constexpr (kFp8) {
        if (j == 0) pdl_wait();
      }
      const float s13 = kFp8 && !kChannel ? p.a_scale[0] * p.w13_scale[un.e] : 1.0f;
      const float s2 = kFp8 && !kChannel ? p.w2_scale[un.e] : 1.0f;
      // kChannel: the expert's w13 scales (gate rows, up rows; zeros past N) and w2 scales (zeros past
      // K) into s.scales by cp.async, in flight through GEMM1 (every consumer is past its reads of
      // the previous unit's: the barrier that ends a unit), and hidden's scale of each of this
      // thread's rows (the quantization launch's, after this kernel's wait for it above).
      float xs[2] = {1.0f, 1.0f};
      if constexpr (kChannel) {
        const int N = p.n_cols;
        const float* w13s = p.w13_scale + static_cast<std::int64_t>(un.e) * 2 * N;
        const float* w2s = p.w2_scale + static_cast<std::int64_t>(un.e) * p.hidden_size;
        for (int i = t; i < 2 * kN; i += kConsumerThreads) {
          const int n = sl.r() * kN + (i < kN ? i : i - kN);  // the slice's column n of N
          const bool ok = n < N;
          sm90::cp_async_4_zfill(sm90::smem_addr(s.scales + i), ok ? w13s + (i < kN ? n : N + n) : w13s, ok ? 4 : 0);
        }
        for (int i = t; i < p.out_tiles * kOutTile; i += kConsumerThreads) {
          const bool ok = i < p.hidden_size;
          sm90::cp_async_4_zfill(sm90::smem_addr(s.scales + 2 * kN + i), ok ? w2s + i : w2s, ok ? 4 : 0);
        }
        sm90::cp_async_commit();
#pragma unroll
        for (int h = 0; h < 2; ++h) xs[h] = slot[h] >= 0 ? p.a_scale[slot[h] / p.top_k] : 0.0f;
      }
      // Biases (gpt-oss): the unit's values (SmemLayout::bias: the slice's b13, then b2 of the
      // rank's output tiles; zeros past N and past K) as raw words by cp.async, in flight through
      // GEMM1, then fp32 after it (every consumer is past its reads of the previous unit's: the
      // barrier that ends a unit). A word is two 16-bit elements or one fp32 one; N, K, kN and the
      // tiles are even, so both elements of a word are in or out together.
      const int bias_n = has_bias(p) && !warm ? 2 * kN + p.bias_tiles * kOutTile : 0;
      const int bias_per_word = p.bias_type == numerics::kBiasF32 ? 1 : 2;
      for (int w = t; w * bias_per_word < bias_n; w += kConsumerThreads) {
        const int i = w * bias_per_word;  // the word's first element
        const void* src = nullptr;
        std::int64_t idx = 0;
        if (i < 2 * kN) {
          const int n = sl.r() * kN + (i < kN ? i : i - kN);
          if (has_b13(p) && n < p.n_cols) {
            src = p.b13;
            idx = static_cast<std::int64_t>(un.e) * 2 * p.n_cols + (i < kN ? n : p.n_cols + n);
          }
        } else {
          const int jb = i - 2 * kN;
          const int c = (sl.r() + (jb / kOutTile) * S) * kOutTile + jb % kOutTile;
          if (has_b2(p) && c < p.hidden_size) {
            src = p.b2;
            idx = static_cast<std::int64_t>(un.e) * p.hidden_size + c;
          }
        }
        // A word past N or K copies 0 bytes (zero fill) from any valid address: y's.
        const std::uint8_t* g = static_cast<const std::uint8_t*>(src != nullptr ? src : p.y) +
                                idx * (bias_per_word == 1 ? 4 : 2);
        sm90::cp_async_4_zfill(sm90::smem_addr(s.bias_raw + w), g, src != nullptr ? 4 : 0);
      }
      if (bias_n > 0) sm90::cp_async_commit();
      // GEMM1: acc1 = gate / up columns 0..63 (tile rows 0..127), acc2 = 64..95 (rows 128..191).
      float acc1[64], acc2[32];
#pragma unroll
      for (int i = 0; i < 64; ++i) acc1[i] = 0.0f;
#pragma unroll
      for (int i = 0; i < 32; ++i) acc2[i] = 0.0f;
      if (!warm) {  // the warm warp: no GEMM1 (its accumulators stay zeros)
        int prev = 0;
        for (int kb = 0; kb < p.k_stages; ++kb) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          if (rec != nullptr && j == 0 && kb == 0) rec[kPhaseFirstLanded] = sm90::globaltimer_ns();
          sm90::fence_regs<64>(acc1);
          sm90::fence_regs<32>(acc2);
          sm90::wgmma_fence();
          const std::uint32_t st = s.ring + stage * kStageBytes;
          const std::uint64_t da = sm90::make_smem_desc_sw128(st);
          const std::uint64_t db1 = sm90::make_smem_desc_sw128(st + kATileBytes);
          const std::uint64_t db2 = sm90::make_smem_desc_sw128(st + kATileBytes + 128 * kKBytes);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            sm90::Wgmma<Tag, 128>::mma(acc1, da + 2 * kk, db1 + 2 * kk, 1);
            sm90::Wgmma<Tag, 64>::mma(acc2, da + 2 * kk, db2 + 2 * kk, 1);
          }
          sm90::wgmma_commit();
          sm90::fence_regs<64>(acc1);
          sm90::fence_regs<32>(acc2);
          if (kb > 0) {
            sm90::wgmma_wait<1>();
            release(s, prev, lane);
          }
          prev = stage;
          next_stage(stage, phase);
        }
        sm90::wgmma_wait<0>();
        sm90::fence_regs<64>(acc1);
        sm90::fence_regs<32>(acc2);
        release(s, prev, lane);
      }
      if (bias_n > 0) {  // the unit's biases as fp32 (each thread its own words), for the activation and the epilogue
        sm90::cp_async_wait_all_groups();
        for (int w = t; w * bias_per_word < bias_n; w += kConsumerThreads) {
          const std::uint32_t raw = s.bias_raw[w];
          if (bias_per_word == 1) {
            s.bias[w] = numerics::bias_from_raw(p.bias_type, raw);
          } else {
            s.bias[2 * w] = numerics::bias_from_raw(p.bias_type, raw & 0xffffu);
            s.bias[2 * w + 1] = numerics::bias_from_raw(p.bias_type, raw >> 16);
          }
        }
        sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
      }
      lap(1);

      // The activation: h[q][n] = act(g, u) (x the router weight first when it goes on the input),
      // into GEMM2's A tile, rounded to the activation dtype; fp8: quantized with the unit's scale
      // (dynamic_scale of the absmax of its rows' h, or the static intermediate scale). Rows past
      // the unit's rows get zeros.
      const bool live[2] = {slot[0] >= 0, slot[1] >= 0};
      float s_row[2];  // h's scale of each of the thread's rows (the unit's, or kChannel the row's)
      if constexpr (kChannel) {
        const float fr[2] = {(p.weight_on_input ? tw[0] : 1.0f) * xs[0], (p.weight_on_input ? tw[1] : 1.0f) * xs[1]};
        // Every consumer's scale copies have landed (its own wait, then the warpgroup's barrier).
        sm90::cp_async_wait_all_groups();
        sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
        if (p.b13 != nullptr) {
          switch (p.act) {
            case Activation::kGelu:
              activation_channel<Activation::kGelu, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
              break;
            case Activation::kSwigluOai:
              activation_channel<Activation::kSwigluOai, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
              break;
            default: activation_channel<Activation::kSilu, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
          }
        } else {
          switch (p.act) {
            case Activation::kGelu:
              activation_channel<Activation::kGelu, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
              break;
            case Activation::kSwigluOai:
              activation_channel<Activation::kSwigluOai, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
              break;
            default: activation_channel<Activation::kSilu, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, s_row);
          }
        }
      } else {
        const float fr[2] = {(on_input(p) ? tw[0] : 1.0f) * s13, (on_input(p) ? tw[1] : 1.0f) * s13};
        float s_h;
        if (has_b13(p)) {
          switch (act_kind(p)) {
            case Activation::kGelu:
              s_h = activation<Activation::kGelu, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
              break;
            case Activation::kSwigluOai:
              s_h = activation<Activation::kSwigluOai, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
              break;
            default: s_h = activation<Activation::kSilu, true>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
          }
        } else {
          switch (act_kind(p)) {
            case Activation::kGelu:
              s_h = activation<Activation::kGelu, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
              break;
            case Activation::kSwigluOai:
              s_h = activation<Activation::kSwigluOai, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
              break;
            default: s_h = activation<Activation::kSilu, false>(p, s, sl, acc1, acc2, live, fr, warp, lane, j, at, warm);
          }
        }
        s_row[0] = s_row[1] = s_h;
      }
      // h's generic-proxy stores into this CTA's tile, before the wgmmas read them.
      sm90::fence_proxy_async_shared_cta();
      if (!warm) sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
      const std::uint64_t full0 = at != nullptr ? sm90::globaltimer_ns() : 0;
      if constexpr (kCluster) {  // every peer's slice has landed in this tile (h_full's bytes), then the same
        sm90::mbar_wait_cluster(s.h_full, j & 1);
        sm90::fence_proxy_async_shared_cta();
      }
      if (at != nullptr) at[4] += sm90::globaltimer_ns() - full0;
      lap(2);

      // GEMM2: per 256-column output tile of this rank (r, r + S, ...), wgmma m64n256 over h's
      // columns (one CTA: its kN columns, one group a tile; a cluster: N columns a 128-byte chunk a
      // stage, 4 k steps of k16 of 16-bit or k32 of e4m3, zeros past N in h and w2 alike, one group a
      // chunk as GEMM1's K loop runs), then the stores of y = acc x the unit's dequantization x the
      // router weight (unless on the input).
      const bool rows = warm || __any_sync(0xffffffffu, slot[0] >= 0);
      // The warm warp's epilogue: one tile, row 0's address, no column in bounds (no store).
      const int ys[2] = {warm ? 0 : slot[0], warm ? 0 : slot[1]};
      const int o_end = warm ? min(p.out_tiles, sl.r() + 1) : p.out_tiles;
      const float f[2] = {(on_input(p) ? 1.0f : tw[0]) * (s_row[0] * s2),
                          (on_input(p) ? 1.0f : tw[1]) * (s_row[1] * s2)};
      // store_y_ext's factors (b2): the scales, and the router weight apart.
      const float fs[2] = {s_row[0] * s2, s_row[1] * s2};
      const float wy[2] = {on_input(p) ? 1.0f : tw[0], on_input(p) ? 1.0f : tw[1]};
      // Swap-AB's token columns for this unit (p.g2_swap; gemm2_swap_tile), where the unit has at
      // most kG2SwapRows rows; larger units keep the m64n256 form.
      const bool g2_swap_unit = sw(p.g2_swap, kG2SwapDefault) && un.count <= kG2SwapRows;
      const int g2_nt = un.count <= 8 ? 8 : 16;
      for (int o = sl.r(); o < o_end; o += S) {
        if constexpr (!kCluster && !kChannel) {
          if (g2_swap_unit) {
            long long cyc[3] = {0, 0, 0};
            const float g2_fs = s_row[0] * s2;  // h's scale x w2's (per tensor)
            const bool timed = rec != nullptr;
            // y's 16-bit type: the activations' (bf16 / fp16), or fp8's y_f16.
            const auto run = [&](auto nt) {
              constexpr int kNt = decltype(nt)::value;
              if constexpr (kFp8) {
                if (y_f16(p))
                  gemm2_swap_tile<kNt, true>(p, s, stage, phase, o, un.count, us, uw, g2_fs, warm, warp, lane, timed, cyc);
                else
                  gemm2_swap_tile<kNt, false>(p, s, stage, phase, o, un.count, us, uw, g2_fs, warm, warp, lane, timed, cyc);
              } else {
                gemm2_swap_tile<kNt, kF16>(p, s, stage, phase, o, un.count, us, uw, g2_fs, warm, warp, lane, timed, cyc);
              }
            };
            if (g2_nt == 8) run(std::integral_constant<int, 8>{});
            if constexpr (kG2SwapRows > 8) {
              if (g2_nt == 16) run(std::integral_constant<int, 16>{});
            }
            if (timed) {
              g2[0] += static_cast<std::uint64_t>(cyc[0]);
              g2[1] += static_cast<std::uint64_t>(cyc[1]);
              g2[2] += static_cast<std::uint64_t>(cyc[2]);
            }
            continue;
          }
        }
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        const long long t0 = rec != nullptr ? clock64() : 0;
        long long waited = 0;
        if constexpr (!kCluster) {
          // One CTA: the tile's kChunks2 stages landed, then one group of kSteps2 wgmmas (no wait
          // between them: a wait inside a group makes ptxas serialize every wgmma of the kernel, C7520).
          if (!warm) {  // the warm warp: no wait, no MMA (its accumulators stay zeros)
            const int s0 = stage;
            sm90::mbar_wait(s.full + 8 * stage, phase);
            next_stage(stage, phase);
            int s1 = s0;
            if constexpr (kChunks2 > 1) {
              s1 = stage;
              sm90::mbar_wait(s.full + 8 * stage, phase);
              next_stage(stage, phase);
            }
            if (rec != nullptr) waited = clock64() - t0;
            sm90::fence_regs<128>(acc);
            sm90::wgmma_fence();
            const std::uint64_t dh0 = sm90::make_smem_desc_sw128(s.h);
            const std::uint64_t dh1 = sm90::make_smem_desc_sw128(s.h + kHChunkBytes);
            const std::uint64_t db0 = sm90::make_smem_desc_sw128(s.ring + s0 * kStageBytes);
            const std::uint64_t db1 = sm90::make_smem_desc_sw128(s.ring + s1 * kStageBytes);
#pragma unroll
            for (int kk = 0; kk < kSteps2First; ++kk) sm90::Wgmma<Tag, 256>::mma(acc, dh0 + 2 * kk, db0 + 2 * kk, 1);
#pragma unroll
            for (int kk = 0; kk < kSteps2 - kSteps2First; ++kk)
              sm90::Wgmma<Tag, 256>::mma(acc, dh1 + 2 * kk, db1 + 2 * kk, 1);
            sm90::wgmma_commit();
            sm90::wgmma_wait<0>();
            sm90::fence_regs<128>(acc);
            release(s, s0, lane);
            if constexpr (kChunks2 > 1) release(s, s1, lane);
          }
        } else {
          int prev2 = 0;
          for (int c = 0; c < p.g2_chunks; ++c) {
            const long long w0 = rec != nullptr ? clock64() : 0;
            sm90::mbar_wait(s.full + 8 * stage, phase);
            if (rec != nullptr) waited += clock64() - w0;
            const std::uint64_t dh = sm90::make_smem_desc_sw128(s.h + c * kHChunkBytes);
            const std::uint64_t db = sm90::make_smem_desc_sw128(s.ring + stage * kStageBytes);
            // The last chunk's k steps past N (all zeros) are skipped: N = 96 takes 6 k16 steps, not 8.
            const int nk = c + 1 < p.g2_chunks ? 4 : p.g2_last_steps;  // uniform
            if constexpr (kPairs) {  // the stage's even rows from db's address, its odd rows after them
              const std::uint64_t dh2 = sm90::make_smem_desc_sw128(s.h2 + c * kHChunkBytes);
              const std::uint32_t st = s.ring + stage * kStageBytes;
              switch (nk) {
                case 1: gemm2_pair_steps<1>(acc, dh, dh2, st); break;
                case 2: gemm2_pair_steps<2>(acc, dh, dh2, st); break;
                case 3: gemm2_pair_steps<3>(acc, dh, dh2, st); break;
                default: gemm2_pair_steps<4>(acc, dh, dh2, st);
              }
            } else {
              switch (nk) {  // one straight-line group a case, its own fence first
                case 1: gemm2_steps<1>(acc, dh, db); break;
                case 2: gemm2_steps<2>(acc, dh, db); break;
                case 3: gemm2_steps<3>(acc, dh, db); break;
                default: gemm2_steps<4>(acc, dh, db);
              }
            }
            sm90::wgmma_commit();
            sm90::fence_regs<128>(acc);
            if (c > 0) {
              sm90::wgmma_wait<1>();
              release(s, prev2, lane);
            }
            prev2 = stage;
            next_stage(stage, phase);
          }
          sm90::wgmma_wait<0>();
          sm90::fence_regs<128>(acc);
          release(s, prev2, lane);
        }
        const long long c2 = rec != nullptr ? clock64() : 0;
        if (rec != nullptr) {
          g2[0] += static_cast<std::uint64_t>(waited);
          g2[1] += static_cast<std::uint64_t>(c2 - t0 - waited);
        }
        if (!rows) continue;
        if constexpr (kPairs) {
          const int tile0 = o * kOutTile;
          const float* b2s = s.bias + 2 * kN + (o / S) * kOutTile;
          if (p.b2 != nullptr) {
            if (p.y_f16 != 0) store_y_pairs<true, true>(p, acc, slot, f, fs, wy, tile0, b2s, lane);
            else store_y_pairs<false, true>(p, acc, slot, f, fs, wy, tile0, b2s, lane);
          } else {
            if (p.y_f16 != 0) store_y_pairs<true, false>(p, acc, slot, f, fs, wy, tile0, b2s, lane);
            else store_y_pairs<false, false>(p, acc, slot, f, fs, wy, tile0, b2s, lane);
          }
          if (rec != nullptr) g2[2] += static_cast<std::uint64_t>(clock64() - c2);
          continue;
        }
        if (has_b2(p)) {
          const int tile0 = warm ? p.hidden_size : o * kOutTile;  // warm: no column in bounds
          const float* cs2 = kChannel ? s.scales + 2 * kN + tile0 : nullptr;
          const float* b2s = warm ? s.warm : s.bias + 2 * kN + (o / S) * kOutTile;
          if (kF16 || (kFp8 && y_f16(p))) store_y_ext<true>(p, acc, ys, fs, wy, tile0, cs2, b2s, lane);
          else store_y_ext<false>(p, acc, ys, fs, wy, tile0, cs2, b2s, lane);
          if (rec != nullptr) g2[2] += static_cast<std::uint64_t>(clock64() - c2);
          continue;
        }
        // This thread's columns o 256 + 8 jj + 2 (lane & 3), jj < 32, while below hidden_size (the
        // warm warp: none).
        const int col0 = warm ? p.hidden_size : o * kOutTile + 2 * (lane & 3);
        if constexpr (kFp8) {
          const float* cs2 = kChannel ? s.scales + 2 * kN + col0 : nullptr;
          if (y_f16(p)) store_y<true>(p, acc, ys, f, col0, cs2);
          else store_y<false>(p, acc, ys, f, col0, cs2);
        } else {
          store_y<kF16>(p, acc, ys, f, col0);
        }
        if (rec != nullptr) g2[2] += static_cast<std::uint64_t>(clock64() - c2);
      }
      if (warm) return;  // the first unit only
      lap(3);
      // Every consumer is past its reads of h and of this unit's slot list before the next unit
      // overwrites them (place_window starts with its own barrier after its counting pass: h is
      // written only after GEMM1, which waits on the producer, so one barrier here suffices); on a
      // cluster the peers, which push the next unit's h into this tile, hear it through h_empty.
      sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
      // The arrival releases at CTA scope only (a cluster-scope release costs a MEMBAR.ALL.GPU a
      // unit): GEMM2's reads of h are complete (wgmma.wait_group 0, then the barrier above) before
      // it is sent, which is what the peers' next pushes need; CUTLASS's ClusterBarrier hands
      // multicast stages back the same way. Not a formal release-acquire pair across CTAs.
      if (kCluster && t == 0)
        for (int q = 0; q <= sl.peers; ++q) sm90::mbar_arrive_remote(sm90::map_to_rank(s.h_empty, q));
    }
    if (rec != nullptr) {
      rec[kPhaseUnits] = static_cast<std::uint64_t>(j);
      rec[kPhaseSumPlace] = sums[0];
      rec[kPhaseSumGemm1] = sums[1];
      rec[kPhaseSumAct] = sums[2];
      rec[kPhaseSumGemm2] = sums[3];
      rec[kPhaseG2Wait] = g2[0];
      rec[kPhaseG2Mma] = g2[1];
      rec[kPhaseG2Store] = g2[2];
      for (int i = 0; i < 5; ++i) rec[kPhaseActMath + i] = at_sums[i];
      rec[kPhaseExit] = sm90::globaltimer_ns();
    }
  }
};

template <Operand kOp, bool kCluster, bool kTimed = false, bool kChannel = false, bool kPairs = false,
          bool kPlain = false>
__global__ void __launch_bounds__(kThreads, 1) expert_mlp_sm90_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using K = ExpertMlp<kOp, kCluster, kTimed, kChannel, kPairs, kPlain>;
  extern __shared__ std::uint8_t smem_raw[];
  const SmemLayout& L = p.smem;
  std::uint8_t* base = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  typename K::Smem s;
  s.ring = sm90::smem_addr(base + L.ring);
  s.h = sm90::smem_addr(base + L.h);
  s.h2 = sm90::smem_addr(base + L.h2);
  s.full = sm90::smem_addr(base + L.full_bar);
  s.empty = sm90::smem_addr(base + L.empty_bar);
  s.slots_bar = sm90::smem_addr(base + L.slots_bar);
  s.unit_slot = reinterpret_cast<int*>(base + L.unit_slot);
  s.unit_w = reinterpret_cast<float*>(base + L.unit_w);
  s.warp_rows = reinterpret_cast<int*>(base + L.warp_rows);
  s.red = reinterpret_cast<float*>(base + L.red);
  s.h_full = sm90::smem_addr(base + L.cluster_bar);
  s.h_empty = s.h_full + 8;
  s.amax_bar = s.h_full + 16;
  s.red_cluster = reinterpret_cast<float*>(base + L.red_cluster);
  s.counts = reinterpret_cast<int*>(base + L.counts);
  s.prefix = reinterpret_cast<int*>(base + L.prefix);
  s.slot_e = reinterpret_cast<std::int16_t*>(base + L.slot_e);
  s.scales = nullptr;
  if constexpr (kChannel) s.scales = reinterpret_cast<float*>(base + L.scales);
  s.bias = reinterpret_cast<float*>(base + L.bias);  // read only where the call has biases
  s.bias_raw = reinterpret_cast<std::uint32_t*>(base + L.bias_raw);
  s.warm = reinterpret_cast<float*>(base + L.warm);
  const int E = p.num_experts;
  const int tid = threadIdx.x;
  std::uint64_t* rec = tid == 0 ? phase_record<kTimed>(p) : nullptr;  // phase timer (tests only)
  if (rec != nullptr) rec[kPhaseEntry] = sm90::globaltimer_ns();

  if (tid == 0) {
    sm90::prefetch_tensormap(&p.tmap_w13);
    if (K::sw(p.two_boxes, kTwoBoxesDefault)) sm90::prefetch_tensormap(&p.tmap_w13b);
    sm90::prefetch_tensormap(&p.tmap_w2);
    for (int i = 0; i < kStages; ++i) {
      sm90::mbar_init(s.full + 8 * i, 1 + kProducerThreads);  // lane 0's expect_tx + every lane's gather
      sm90::mbar_init(s.empty + 8 * i, kConsumerThreads / 32);
    }
    sm90::mbar_init(s.slots_bar, kConsumerThreads);  // every consumer thread, once its list is placed
    sm90::mbar_init(s.slots_bar + 8, kConsumerThreads);
    if constexpr (kCluster) {  // a unit's phase: this CTA's expect_tx and the peers' bytes; every rank's arrival
      sm90::mbar_init(s.h_full, 1);
      sm90::mbar_init(s.h_empty, p.slices);
      sm90::mbar_init(s.amax_bar, 1);
    }
    sm90::fence_mbarrier_init_cluster();
    sm90::fence_proxy_async_shared_cta();
  }
  // The cluster form's h tile zeroed once: its columns past the S slices' (up to GEMM2's last
  // chunk) are never written and meet w2's zeros past N; every unit rewrites the rest. The one-CTA
  // form's GEMM2 reads h's first kN columns only (kSteps2), all of which every unit writes (zeros
  // past N and in rows past the unit's), so its tile needs no zeroing. kPairs: h2 (right after h)
  // too: its first 8 columns and those from N + 8 are never written.
  if constexpr (kCluster) {
    std::uint32_t* h = reinterpret_cast<std::uint32_t*>(base + L.h);
    for (int i = tid; i < (kPairs ? 2 : 1) * p.h_chunks * kHChunkBytes / 4; i += kThreads) h[i] = 0u;
    sm90::fence_proxy_async_shared_cta();
  }
  // The routing: every slot's local expert, the experts' counts, then the row offsets and units.
  for (int e = tid; e <= E; e += kThreads) s.counts[e] = 0;
  // On a cluster, every rank's barriers are set up and its h zeroed before any peer arrives on
  // them or pushes h into it.
  if constexpr (kCluster) sm90::cluster_sync_all();
  else __syncthreads();
  const bool bad = slot_routing::map_and_count(p.topk_ids, p.expert_map, p.slots, p.num_experts_global, E, tid,
                                               kThreads, s.slot_e, s.counts);
  __syncthreads();
  if (blockIdx.x == 0 && __syncthreads_or(bad))
    slot_routing::record_faults(p.topk_ids, p.expert_map, p.slots, p.num_experts_global, E, p.top_k, p.faults, tid,
                                kThreads);
  // counts -> exclusive row offsets in place (warp 0: a lane a run of experts, one warp scan).
  if (tid < 32) {
    const int per = (E + 31) / 32;
    const int lo = min(E, tid * per), hi = min(E, lo + per);
    int sum = 0;
    for (int e = lo; e < hi; ++e) sum += s.counts[e];
    int acc = warp_inclusive_sum(sum, tid) - sum;
    for (int e = lo; e < hi; ++e) {
      const int c = s.counts[e];
      s.counts[e] = acc;
      acc += c;
    }
    if (tid == 31) s.counts[E] = acc;
  }
  __syncthreads();
  MOEKIT_BUILD_EXPERT_PREFIX(E, s.counts, s.prefix, rows, (rows + kBlockM - 1) / kBlockM);
  const int units = s.prefix[E];
  if (rec != nullptr) rec[kPhaseRouted] = sm90::globaltimer_ns();
  // The combine, launched as this kernel's programmatic dependent (cuda/common/pdl.cuh), may now
  // become resident beside it and wait in its pdl_wait for this grid's y. Nothing so far read what
  // an earlier launch of the call wrote: the routing reads the call's own inputs. fp8_per_tensor's
  // kernel is the quantization launch's programmatic dependent and waits for it (pdl_wait) before
  // it reads hidden's rows or its scale; bf16 / fp16's is the call's first launch (no predecessor).
  pdl_launch_dependents();

  // This CTA's slice of h (clusters along x: rank = blockIdx.x % S).
  typename K::Slice sl;
  sl.rank = static_cast<int>(blockIdx.x) % p.slices;
  sl.peers = p.slices - 1;
  sl.n = p.n_cols;

  // The consumers and the warm warp through one call site: the same instructions (consume).
  const bool warm = tid >= kConsumerThreads + kProducerThreads;
  if (tid < kConsumerThreads || warm) K::consume(p, s, sl, units, warm);
  else K::produce(p, s, sl, units);
  // No rank leaves while a peer may still push h into it or arrive on its barriers.
  if constexpr (kCluster) sm90::cluster_sync_all();
#endif
}

// The instantiation, its shared-memory limit raised once a process and device (one record an
// instantiation, whichever of the launch and the occupancy query asks first).
template <Operand kOp, bool kCluster, bool kTimed, bool kChannel = false, bool kPairs = false, bool kPlain = false>
auto* raised_kernel() {
  auto* kernel = &expert_mlp_sm90_kernel<kOp, kCluster, kTimed, kChannel, kPairs, kPlain>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised);
  return kernel;
}

template <Operand kOp, bool kTimed, bool kChannel>
bool run_expert_mlp_sm90(const KernelParams& kp, int grid, void* stream, bool pdl) {
  // The cluster form exactly where S > 1 (the one-CTA kernel has none of its code); w2 as row
  // pairs (e4m3 per tensor, N % 16 = 8) its own instantiation; the common call (plain_call) on the
  // kPlain instantiation of its form and scales (plain_call excludes row pairs; per channel only
  // with kp.plain_channel). Only the one launched is raised.
  const bool plain = !kTimed && plain_call(kp, kOp == Operand::kE4m3, kChannel);
  const auto pick = [&kp, plain] {
    if constexpr (kOp == Operand::kE4m3 && !kChannel) {
      if (kp.w2_pairs != 0) return raised_kernel<kOp, true, kTimed, false, true>();
    }
    if constexpr (!kTimed) {
      if (plain)
        return kp.slices > 1 ? raised_kernel<kOp, true, false, kChannel, false, true>()
                             : raised_kernel<kOp, false, false, kChannel, false, true>();
    }
    return kp.slices > 1 ? raised_kernel<kOp, true, kTimed, kChannel>() : raised_kernel<kOp, false, kTimed, kChannel>();
  };
  auto* kernel = pick();
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(grid), kThreads,
                                                 static_cast<std::size_t>(kp.smem.bytes),
                                                 static_cast<cudaStream_t>(stream), kp.slices, attrs);
  add_pdl_attribute(cfg, attrs, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, kp));
  return plain;
}

template <Operand kOp>
int max_active_clusters_sm90(int slices) {
  auto* kernel = raised_kernel<kOp, true, false>();
  cudaLaunchAttribute attrs[1];
  cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(slices), kThreads, kSmemLimit, nullptr, slices,
                                                 attrs);
  cfg.numAttrs = 1;  // the cluster dimension also at S = 1
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace moekit::cuda::expert_mlp
