// Token-major grouped expert GEMM for prefill on sm_90a: persistent, warp-specialized. Per tile
// (expert e, 128 expert-sorted token rows, 256 or 128 weight rows) a producer warpgroup streams
// the weight tile through TMA and gathers the token rows with cp.async into the same 128-byte
// swizzled layout (GEMM2's ping-pong form: its contiguous A rows as one TMA box, KernelParams::
// a_tma), an mbarrier pipeline deep; two consumer warpgroups run wgmma (64 rows each) with fp32
// accumulators and apply the fused epilogue of params.hpp in registers.
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
#include "cuda/common/slot_routing.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/gemm_common/gather.cuh"
#include "cuda/kernels/gemm_common/expert_table.cuh"
#include "cuda/kernels/tokmajor/config.hpp"
#include "cuda/kernels/tokmajor/params.hpp"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::tokmajor {


// ---------------------------------------------------------------------------------------------
// Work units: (expert e, column tile, group of `cluster` token tiles), expert-major, then column
// tile, token group fastest: clusters that run at the same time (consecutive unit ids) read the
// same weight tile (L2 hits) and an expert's few token tiles, which stay in L2 across its column
// tiles. CTA rank r of a cluster takes token tile cluster * group + r of the unit (none past the
// expert's last token tile: count = 0, the CTA then only loads its share of the weights).
// Which CTA runs which unit: with clusters of 1 and a tile counter, the dynamic schedule (each CTA
// takes the next unit when it is ready for it, so the CTAs on consecutive units start them
// together); otherwise static round-robin (cluster c takes units c, c + clusters, ...).
// ---------------------------------------------------------------------------------------------
struct Tile {
  int e;
  int col;        // column tile
  int row_begin;  // first expert-sorted row of the tile
  int count;      // rows in the tile, 0..128
};

// Units of an expert with `rows` rows in token tiles of `bm` rows (kBlockM, or
// kPingPongBlockM for GEMM2's ping-pong consumers).
__device__ __forceinline__ int units_of(int rows, int cluster, int num_col_tiles, int bm) {
  const int chunks = (rows + bm - 1) / bm;
  return (chunks + cluster - 1) / cluster * num_col_tiles;
}
// With early weights (head units, cluster 1): the column tiles of expert e whose first token tile
// is a static head unit (units e * num_col_tiles .. below static_units).
__device__ __forceinline__ int head_covered_cols(int e, int num_col_tiles, int static_units) {
  return min(num_col_tiles, max(0, static_units - e * num_col_tiles));
}
// ... and the counter's units of an expert, those that are not static head units (find_tile).
__device__ __forceinline__ int counter_units_of(int e, int rows, int num_col_tiles, int bm, int static_units) {
  if (rows <= 0) return 0;
  const int covered = head_covered_cols(e, num_col_tiles, static_units);
  return (rows + bm - 1) / bm * num_col_tiles - covered;
}

// Units each atomic of the dynamic schedule takes: KernelParams::units_per_take where the producer
// looks a unit ahead (K-short tiles), else 1. Every CTA's first take is static: units
// [b * take, b * take + take) of CTA b, gridDim.x * take in all (produce()).
__device__ __forceinline__ int units_per_take(const KernelParams& p) {
  return p.num_k_stages <= kLookaheadMaxStages ? p.units_per_take : 1;
}
__device__ __forceinline__ int first_static_unit(const KernelParams& p) {
  return static_cast<int>(blockIdx.x) * units_per_take(p);
}
__device__ __forceinline__ int static_units(const KernelParams& p) {
  return static_cast<int>(gridDim.x) * units_per_take(p);
}

// prefix[e] = units of experts < e (prefix[0] = 0, prefix[E] = all units). kHint (GEMM2's ping-pong
// instantiations, whose K-short units make the search a visible cost): `hint` is the caller's
// previous unit's expert (-1 at first), tried before the search, and becomes this unit's. The
// other instantiations search every time (with the hint live, GEMM1's spilled 8 bytes).
template <bool kHint>
__device__ __forceinline__ bool find_tile(int w, const int* off, const int* prefix, int E, int cluster, int rank,
                                          int bm, Tile& t, int& hint, int head_units, int num_col_tiles,
                                          int static_units) {
  if (head_units > 0) {
    // Early weights (KernelParams::head_units, cluster 1, dynamic schedule). The static first
    // takes, units w < static_units (gridDim.x x take), are head units: (expert, column tile) =
    // (w / column tiles, w % column tiles), its first token tile, whatever the expert's rows (none:
    // count 0), so that a CTA knows its first unit's weights before the routing's table; past
    // E x column tiles there is no such unit (count 0 too). The counter's units, w - static_units,
    // are every other unit in the order of the schedule without head units (experts in order, an
    // expert's column tiles in order, its token tiles inside each), the prefix counting them.
    if (w < static_units) {
      const int e = min(w / num_col_tiles, E - 1);
      const int rows = w < head_units ? max(0, off[e + 1] - off[e]) : 0;
      t.e = e;
      t.col = w - e * num_col_tiles;
      t.row_begin = off[e];
      t.count = min(bm, rows);
      return true;
    }
    w -= static_units;
  }
  // The unit's expert: the search over the prefix (with kHint from the previous unit's expert).
  if constexpr (kHint) {
    if (!gemm_common::find_expert_from(w, prefix, E, hint)) return false;
  } else {
    if (!gemm_common::find_expert(w, prefix, E, hint)) return false;
  }
  const int lo = hint;
  const int rows = off[lo + 1] - off[lo];
  const int chunks = (rows + bm - 1) / bm;
  const int local = w - prefix[lo];
  int col, chunk;
  if (head_units > 0) {
    // The expert's first column tiles whose first token tile was a static unit: only their later
    // token tiles are here, then every token tile of the other column tiles.
    const int covered = head_covered_cols(lo, num_col_tiles, static_units);
    if (chunks == 1) {  // decode: one token tile, no division
      col = covered + local;
      chunk = 0;
    } else if (local < covered * (chunks - 1)) {
      col = local / (chunks - 1);
      chunk = 1 + local % (chunks - 1);
    } else {
      const int l2 = local - covered * (chunks - 1);
      col = covered + l2 / chunks;
      chunk = l2 % chunks;
    }
  } else {
    // Clusters of `cluster` token tiles: the unit's group, then this CTA's rank in it (none past
    // the expert's last token tile: count 0).
    const int groups = (chunks + cluster - 1) / cluster;
    col = local / groups;
    chunk = (local % groups) * cluster + rank;
  }
  t.e = lo;
  t.col = col;
  t.row_begin = off[lo] + chunk * bm;
  t.count = chunk < chunks ? min(bm, rows - chunk * bm) : 0;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Epilogue helpers.
// ---------------------------------------------------------------------------------------------
// store_pair with the output type known at compile time.
template <int kOut>
__device__ __forceinline__ void store_pair_t(void* out, std::int64_t i, float v0, float v1) {
  if constexpr (kOut == kOutBf16)
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(out) + i) = __floats2bfloat162_rn(v0, v1);
  else if constexpr (kOut == kOutF16)
    *reinterpret_cast<__half2*>(static_cast<__half*>(out) + i) = __floats2half2_rn(v0, v1);
  else
    *reinterpret_cast<float2*>(static_cast<float*>(out) + i) = make_float2(v0, v1);
}

// This CTA's phase-timer record (KernelParams::phases), or null when the timer is off.
__device__ __forceinline__ std::uint64_t* phase_record(const KernelParams& p) {
  return p.phases != nullptr && static_cast<int>(blockIdx.x) < p.phase_ctas
             ? p.phases + static_cast<std::int64_t>(blockIdx.x) * kPhaseWords
             : nullptr;
}

// ---------------------------------------------------------------------------------------------
// The kernel.
// ---------------------------------------------------------------------------------------------
template <Operand kOp, bool kGateUp, bool kBlock128, bool kPingPong, bool kRoute = false>
struct TokMajor {
  static_assert(!kPingPong || (!kGateUp && !kBlock128), "ping-pong consumers are GEMM2's, not block128");
  static_assert(!kRoute || (kGateUp && !kBlock128),
                "the routing in the kernel is GEMM1's, bf16 / fp16 or e4m3 per tensor (no per-row scales or "
                "router weights)");
  using Tag = typename sm90::TagOf<kOp>::type;
  static constexpr int kBN = block_n(kBlock128);  // B rows per tile (wgmma N)
  static constexpr int kBox = kBN / 2;            // B rows per TMA box (two boxes per stage)
  static constexpr int kAcc = kBN / 2;            // fp32 accumulators per consumer thread
  // Ping-pong: a unit's 64 rows are the whole A tile (8 KB), so a stage is 40 KB and the ring
  // holds 5 (config.hpp, smem_layout); otherwise 128 rows (16 KB) and 48 KB.
  static constexpr int kATile = a_tile_bytes(kPingPong);
  static constexpr int kStageBytes = stage_bytes(kBlock128, kPingPong);
  static constexpr std::uint32_t kTmaBytes = b_tile_bytes(kBlock128);
  static constexpr int kElemBytes = kOp == Operand::kE4m3 ? 1 : 2;
  // GEMM1 of the e4m3 per-tensor / per-channel instantiation folds |h| of its fp32 stores for
  // out_absmax (params.hpp); the other instantiations and output types compile as before.
  static constexpr bool kAbsmax = kGateUp && !kBlock128 && kOp == Operand::kE4m3;

  struct Smem {
    std::uint32_t tiles;  // stage s: A [128 or 64 rows][128 B] at s * kStageBytes, then B [kBN rows][128 B]
    float* a_scale;       // [stages][kBlockM]
    float* b_scale;       // [stages][2]
    std::uint32_t full;   // barrier addresses (8 bytes apart)
    std::uint32_t empty;
    std::uint32_t peer_empty;  // cluster of 2: the peer CTA's empty barriers (shared::cluster)
    std::uint32_t order;       // ping-pong: the two consumer warpgroups' order barriers (8 bytes apart)
    std::uint8_t* out_stage;  // GEMM2 epilogue staging, kOutStageWarpBytes per consumer warp
    int* tile_w;          // dynamic schedule: [stages] unit of the tile starting at the stage, -1 = no
                          // more; [stages] the producer warpgroup's broadcast slot
    int* off;             // [E+1]
    int* prefix;          // [E+1]
    std::int16_t* slot_e; // kRoute: [route_slots] each slot's local expert, -1 none
    int* unit_slots;      // kRoute: [kBlockM] the producer's current unit's slots, by tile row
    int* warp_rows;       // kRoute: [4] the unit's expert's slots in each producer warp's share
    int stages;
    int cluster;          // 1 or 2
    int rank;             // this CTA's rank in the cluster
  };

  // A consumer warp is done reading `stage`: with multicast the peer's producer writes into this
  // CTA's stage too, so both CTAs' empty barriers hear of it. The peer's arrival releases at CTA
  // scope (as CUTLASS hands multicast stages back): the stage's reads are complete (the wgmma wait
  // before), and a cluster-scope release compiles to MEMBAR.ALL.GPU, which held each consumer warp
  // a stage for every outstanding access of its lane 0 (read in the SASS in session 56; the
  // multicast's measured 0.45-1.00x, bench/results/...-3ff8cfc-h200-cluster-ab.json, ran with it).
  static __device__ __forceinline__ void release(const Smem& s, int stage, int lane) {
    __syncwarp();
    if (lane == 0) {
      sm90::mbar_arrive(s.empty + 8 * stage);
      if (s.cluster > 1) sm90::mbar_arrive_remote(s.peer_empty + 8 * stage);
    }
  }

  // B rows of the two TMA boxes of a column tile: GEMM1 gate rows n.. and up rows N+n..; GEMM2
  // the two halves of kBN consecutive rows.
  static __device__ __forceinline__ int box_row(const KernelParams& p, int col, int box) {
    if (kGateUp) return (box ? static_cast<int>(p.n_out) : 0) + col * kBox;
    return col * kBN + box * kBox;
  }

  // Thread 0: the weight boxes of K stage ks of a tile into `stage` (the stage's empty barrier
  // passed): the whole B tile lands in this CTA, both boxes, or (cluster of 2) one box from each CTA.
  // extra_bytes: more bytes the stage's barrier expects (the ping-pong A box, KernelParams::a_tma).
  static __device__ __forceinline__ void issue_weights(const KernelParams& p, const Smem& s, int stage, int ks, int e,
                                                       int brow0, int brow1, std::uint32_t extra_bytes = 0) {
    const std::uint32_t full = s.full + 8 * stage;
    const std::uint32_t b_dst = s.tiles + stage * kStageBytes + kATile;
    sm90::mbar_arrive_expect_tx(full, kTmaBytes + extra_bytes);
    const int k0 = ks * (kStageKBytes / kElemBytes);  // K coordinate in elements
    if (s.cluster == 1) {
      sm90::tma_load_3d(b_dst, &p.tmap_b, full, k0, brow0, e);
      sm90::tma_load_3d(b_dst + kBox * kStageKBytes, &p.tmap_b, full, k0, brow1, e);
    } else {
      sm90::tma_load_3d_multicast(b_dst + s.rank * kBox * kStageKBytes, &p.tmap_b, full, k0, s.rank ? brow1 : brow0,
                                  e, static_cast<std::uint16_t>(0x3));
    }
  }

  // Early weights (KernelParams::head_units): the K stages of the CTA's first unit whose weight
  // boxes thread 0 issues at the kernel's entry, before the PDL wait and the expert table (stages
  // 0.., the ring's first pass); 0 without head units or where the first unit is not a head unit.
  static __device__ __forceinline__ int early_stages(const KernelParams& p, int stages) {
    if (p.head_units <= 0 || first_static_unit(p) >= p.head_units) return 0;
    return min(stages, p.num_k_stages);
  }

  // K stages of a unit: all, except a CTA's first unit whose weights the entry issued and whose
  // expert has no rows: only those early stages (nothing to compute; a consumer passes them on).
  // Ping-pong: early = num_k_stages (< stages), so every unit keeps num_k_stages.
  static __device__ __forceinline__ int unit_stages(const KernelParams& p, const Tile& tl, int early) {
    return early > 0 && tl.count == 0 ? early : p.num_k_stages;
  }

  // Thread 0 at the kernel's entry (barriers initialized): the first early_stages() weight stages
  // of the CTA's first unit, (expert, column tile) = its head unit, into stages 0.. with the unit
  // for the consumers in tile_w[0]. produce() then gathers those stages' A rows once the table is
  // built, and issues the rest.
  static __device__ __forceinline__ void issue_early_weights(const KernelParams& p, const Smem& s) {
    const int n = early_stages(p, s.stages);
    if (n == 0) return;
    const int w0 = first_static_unit(p);
    const int e = w0 / p.num_col_tiles, col = w0 - e * p.num_col_tiles;
    const int brow0 = box_row(p, col, 0), brow1 = box_row(p, col, 1);
    s.tile_w[0] = w0;
    for (int ks = 0; ks < n; ++ks) issue_weights(p, s, ks, ks, e, brow0, brow1);
  }

  // ---- kRoute: the routing in the kernel (GEMM1 of a chain without the routing launch) ----
  // Every thread, in place of load_expert_offsets: each slot's local expert into slot_e and the
  // expert offsets into off, from the call's ids (common/slot_routing.cuh; every CTA derives the
  // same). CTA 0 records bad ids and map entries (their slots are dropped, as the routing launch
  // drops them) and writes the offsets for GEMM2.
  static __device__ void route_table(const KernelParams& p, const Smem& s) {
    const int tid = threadIdx.x;
    const int P = p.route_slots, E = p.num_experts, Eg = p.route_experts_global;
    for (int i = tid; i <= E; i += kThreads) s.off[i] = 0;
    __syncthreads();
    // off[e + 1]: expert e's slots, for now (common/slot_routing.cuh).
    const bool bad = slot_routing::map_and_count(p.route_ids, p.route_map, P, Eg, E, tid, kThreads, s.slot_e, s.off + 1);
    // (A thread's slots in map_and_count are not record_faults' slots of that thread: the CTA's
    // vote decides, and every thread of CTA 0 records.)
    if (__syncthreads_or(bad) && blockIdx.x == 0)
      slot_routing::record_faults(p.route_ids, p.route_map, P, Eg, E, p.top_k, p.route_faults, tid, kThreads);
    // The counts become offsets: warp 0, an inclusive scan of 32 experts a step.
    if (tid < 32) {
      int run = 0;
      for (int e0 = 0; e0 < E; e0 += 32) {
        const int e = e0 + tid;
        int v = e < E ? s.off[e + 1] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int u = __shfl_up_sync(0xffffffffu, v, d);
          if (tid >= d) v += u;
        }
        if (e < E) s.off[e + 1] = run + v;
        run += __shfl_sync(0xffffffffu, v, 31);
      }
    }
    __syncthreads();
    if (blockIdx.x == 0)
      for (int i = tid; i <= E; i += kThreads) p.route_offsets_out[i] = s.off[i];
  }

  // kRoute, the producer warpgroup at each unit with rows: the unit's slots, ranks [row_begin -
  // off[e], + count) of expert e's slots in slot order (the routing launch's stable order), into
  // unit_slots by tile row (slot_routing::place_window). The first column tile's unit also writes
  // its rows' slots and router weights to the sorted lists GEMM2 reads (every unit with rows of an
  // expert's token tile has a column tile 0): the return is this thread's row's slot there (-1:
  // none), which produce() writes, with its router weight, once the unit's loads are issued.
  static __device__ int place_unit_slots(const KernelParams& p, const Smem& s, const Tile& tl) {
    const int t = threadIdx.x;  // 0..127
    // Begins and ends with a producer barrier: unit_slots is free of the previous unit's reads.
    static_assert(kProducerThreads == 128, "place_window runs on one warpgroup");
    const int r0 = tl.row_begin - s.off[tl.e];
    slot_routing::place_window(s.slot_e, p.route_slots, tl.e, r0, r0 + tl.count, t, kProducerBarrier, s.warp_rows,
                               s.unit_slots);
    return tl.col == 0 && t < tl.count ? s.unit_slots[t] : -1;
  }

  // ---- producer warpgroup: TMA of the weight tile (thread 0), cp.async gather of A rows (or,
  // a_tma, thread 0's TMA box of them) ----
  static __device__ void produce(const KernelParams& p, const Smem& s) {
    const int t = threadIdx.x;  // 0..127
    const int chunk16 = t & 7;  // 16-byte chunk of the 128-byte K slice this thread copies
    const int row0 = t >> 3;    // tile rows row0 + 16 i, i = 0..7
    int stage = 0;
    std::uint32_t phase = 0;
    const bool dynamic = p.tile_counter != nullptr;
    const int num_clusters = gridDim.x / s.cluster;
    // Dynamic schedule with K-short tiles (GEMM2 at N = 96..360: 1-6 stages a tile), thread 0:
    // the unit taken one tile ahead, so that the atomic's round trip to L2 (~1 µs) overlaps the
    // current tile's loads instead of stopping the producer between tiles. Not for long tiles:
    // there the wait is a small part of a tile, and taking units ahead lets the CTAs on one
    // weight tile start it apart (mixtral-8x7b M = 512..1024 lost 3-4 %, H200, 2026-12-01).
    const bool lookahead = dynamic && p.num_k_stages <= kLookaheadMaxStages;
    // With the lookahead, each atomic takes `take` consecutive units (KernelParams::units_per_take):
    // the producer then waits on the counter's round trip once every `take` units instead of at
    // every unit (K-short GEMM2: a unit of 1-2 stages issues in well under that round trip).
    // units_per_take(p), the rule the consumers and the early weights read too (static_units).
    const int take = dynamic ? units_per_take(p) : 1;
    int taken = 0;  // units of the current take already handed out (thread 0)
    int base = 0;   // the current take's first unit (thread 0)
    // Every CTA's first take is static, units [b * take, b * take + take) of CTA b, so that its
    // first unit does not wait on the counter's round trip to L2 (the phase timer: ~1 us from the
    // table to the first unit found, the atomic's latency in series with the first weight TMA);
    // the counter hands out the units after those: gridDim.x * take + its value. The first wave
    // is the same consecutive units the counter gave, in the same order.
    const int first_static = static_cast<int>(gridDim.x) * take;
    bool first_take = true;  // thread 0
    // Ping-pong (GEMM2, K-short): units of 64 rows, the stage's whole A tile (rows 0..63: this
    // thread's first 4 rows); unit k of the CTA's sequence is warpgroup k % 2's.
    constexpr bool pp = kPingPong;
    constexpr int bm = pp ? kPingPongBlockM : kBlockM;
    constexpr int kRowsCopied = pp ? 4 : 8;  // tile rows row0 + 16 i, i < kRowsCopied
    int ahead = 0;
    if (lookahead && t == 0)
      ahead = first_static + static_cast<int>(atomicAdd(p.tile_counter, static_cast<unsigned>(take)));
    // Phase timer (tests only): thread 0's first unit found and its row indices landed, its last
    // issue done. (A stamp around the K loop's waits slowed the kernel by up to 20 %: %globaltimer
    // reads cost ~0.1-0.2 us each there.)
    std::uint64_t* rec = t == 0 ? phase_record(p) : nullptr;
    bool first_unit = rec != nullptr;
    int hint = -1;  // the expert of this thread's previous unit (find_tile; ping-pong only)
    // Early weights: stages [0, early) of the first unit were issued at the entry (their empty
    // barriers were free: the ring's first pass); this producer adds their A rows. 0 after it.
    int early = early_stages(p, s.stages);
    // Ping-pong with KernelParams::a_tma: thread 0 loads a unit's 64 A rows as one TMA box a stage.
    const bool a_tma = kPingPong && p.a_tma != 0;
    for (int w = blockIdx.x / s.cluster;; w += num_clusters) {
      if (dynamic) {
        // The next unit in order, taken when this CTA is (about) ready for it: the CTAs that take
        // the token tiles of one weight tile (consecutive units) start them together, so the
        // second reads the weights from L2 (under the static schedule the CTAs drift apart over
        // their units and the weights came from DRAM again). The counter only grows: once a unit
        // is past the end, so is every unit after it (the rest of its take, the take ahead).
        if (t == 0) {
          if (lookahead) {
            if (taken == 0) {
              if (first_take) {
                base = static_cast<int>(blockIdx.x) * take;  // the take ahead was asked for at the start
              } else {
                base = ahead;
                ahead = first_static + static_cast<int>(atomicAdd(p.tile_counter, static_cast<unsigned>(take)));
              }
              first_take = false;
            }
            s.tile_w[s.stages] = base + taken;
            taken = taken + 1 == take ? 0 : taken + 1;
          } else {
            s.tile_w[s.stages] = first_take ? static_cast<int>(blockIdx.x)
                                            : first_static + static_cast<int>(atomicAdd(p.tile_counter, 1u));
            first_take = false;
          }
        }
        sm90::named_barrier_sync(kProducerBarrier, kProducerThreads);
        w = s.tile_w[s.stages];
        sm90::named_barrier_sync(kProducerBarrier, kProducerThreads);
      }
      Tile tl;
      if (!find_tile<kPingPong>(w, s.off, s.prefix, p.num_experts, s.cluster, s.rank, bm, tl, hint, p.head_units,
                                      p.num_col_tiles, first_static)) {
        if (dynamic) {
          // No more units: one stage with unit -1 and no data tells the consumers. Its full
          // barrier completes on thread 0's arrival and every thread's cp.async arrival.
          // Ping-pong: a second one for the other warpgroup, at the stage where the CTA's next unit
          // would have started (num_k_stages < stages, so that stage's previous fill was a real
          // unit's, released by its warpgroup; the stages skipped between are never waited on).
          for (int end = 0; end < (pp ? 2 : 1); ++end) {
            if (end == 1) {
              for (int i = 0; i < p.num_k_stages; ++i)
                if (++stage == s.stages) { stage = 0; phase ^= 1; }
            }
            sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
            if (t == 0) {
              s.tile_w[stage] = -1;
              sm90::mbar_arrive(s.full + 8 * stage);
            }
            sm90::cp_async_mbar_arrive_noinc(s.full + 8 * stage);
          }
        }
        break;
      }
      // Static head units without rows (count 0) are passed over, except the CTA's first when the
      // entry issued its weights: its consumers wait on those stages, and it ends with them
      // (unit_stages).
      if (p.head_units > 0 && tl.count == 0 && early == 0) continue;
      const int nks = unit_stages(p, tl, early);
      const int brow0 = box_row(p, tl.col, 0), brow1 = box_row(p, tl.col, 1);
      if (first_unit) rec[kPhaseUnitFound] = sm90::globaltimer_ns();
      // kRoute: this thread's row's slot for GEMM2's sorted lists (place_unit_slots) and its router
      // weight, loaded now and stored after the unit's loads are issued (a load waits where it is used).
      int route_slot = -1;
      float route_weight = 0.0f;
      if constexpr (kRoute) {
        if (tl.count > 0) route_slot = place_unit_slots(p, s, tl);
        if (route_slot >= 0 && p.route_sorted_weights_out != nullptr) route_weight = p.topk_weights[route_slot];
      }
      // A row of each tile row this thread copies; -1 past the tile's rows (those rows are
      // skipped: wgmma rows are independent, and the epilogue drops them).
      int arow[kRowsCopied];
#pragma unroll
      for (int i = 0; i < kRowsCopied; ++i) {
        const int rr = row0 + 16 * i;
        arow[i] = -1;
        if (rr < tl.count) {
          const int r = tl.row_begin + rr;
          if constexpr (kRoute)
            arow[i] = s.unit_slots[rr] / p.top_k;
          else
            arow[i] = gemm_common::a_row_of(p, r);
        }
      }
      int srow = -1;  // block128: A row of tile row t, whose group scales this thread copies
      if (kBlock128 && t < tl.count) {
        const int r = tl.row_begin + t;
        srow = gemm_common::a_row_of(p, r);
      }
      if (rec != nullptr) rec[kPhaseUnits] += 1;
      if (first_unit) {
        // Outside the K loop: once the first unit's gathered row indices have landed (the stamp
        // waits on the first), right before its first weight TMA.
        if (early == 0) rec[kPhaseFirstIssue] = arow[0] < -1 ? 0 : sm90::globaltimer_ns();
        first_unit = false;
      }

      for (int ks = 0; ks < nks; ++ks) {
        const std::uint32_t full = s.full + 8 * stage;
        const std::uint32_t a_dst = s.tiles + stage * kStageBytes;
        const bool issued = ks < early;  // weights and unit already there (issue_early_weights)
        if (!issued) sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
        // The A box (a_tma): the unit's rows row_begin.. (rows past it are the next expert's or
        // zeros past max_rows: each wgmma row depends on its own A row only, and the epilogue
        // drops them), K from this stage's 128 bytes (zeros past K).
        const bool a_box = a_tma && tl.count > 0;
        if (t == 0 && !issued) {
          // The unit, for the consumers (ordered before them by this thread's arrival below).
          if (dynamic && ks == 0) s.tile_w[stage] = w;
          issue_weights(p, s, stage, ks, tl.e, brow0, brow1, a_box ? static_cast<std::uint32_t>(kATile) : 0u);
        }
        if constexpr (kPingPong) {
          if (a_box && t == 0) {
            if (issued) sm90::mbar_expect_tx(full, kATile);  // the entry's arrival expected the weights only
            sm90::tma_load_3d(a_dst, &p.tmap_a, full, ks * (kStageKBytes / kElemBytes), tl.row_begin, 0);
          }
        }
        const std::int64_t kbyte = static_cast<std::int64_t>(ks) * kStageKBytes + chunk16 * 16;
        const bool k_in = kbyte < p.a_row_bytes;  // K tail: zeros (TMA zero-fills B too)
        if (!a_tma) {
#pragma unroll
          for (int i = 0; i < kRowsCopied; ++i) {
            if (arow[i] < 0) continue;
            const int rr = row0 + 16 * i;
            const std::uint8_t* src = p.a + static_cast<std::int64_t>(arow[i]) * p.a_row_bytes + kbyte;
            sm90::cp_async_16_zfill(a_dst + rr * kStageKBytes + ((chunk16 ^ (rr & 7)) << 4),
                                    k_in ? static_cast<const void*>(src) : p.a, k_in ? 16 : 0);
          }
        }
        if constexpr (kPingPong) {
          // The unit's per-row epilogue inputs ride with its first stage (s.a_scale, which only
          // block128 uses otherwise: [stage][0..63] the rows' slots, [stage][64..127] their router
          // weights; s.b_scale[stage][0..1] the per-tensor scales), so that the consumer warps read
          // them from shared memory instead of waiting an L2 round trip after their MMAs.
          if (ks == 0) {
            if (t < kPingPongBlockM) {
              const bool live = t < tl.count;
              const std::int64_t r = tl.row_begin + (live ? t : 0);
              float* meta = s.a_scale + stage * kBlockM;
              sm90::cp_async_4_zfill(sm90::smem_addr(meta + t), p.sorted_slots + r, live ? 4 : 0);
              if (p.sorted_weights != nullptr)
                sm90::cp_async_4_zfill(sm90::smem_addr(meta + kPingPongBlockM + t), p.sorted_weights + r, live ? 4 : 0);
            } else if (t < kPingPongBlockM + 2 && p.scale_mode == kScalePerTensor) {
              const float* src = t == kPingPongBlockM ? p.a_scale : p.b_scale + tl.e;
              sm90::cp_async_4_zfill(sm90::smem_addr(s.b_scale + stage * 2 + (t - kPingPongBlockM)), src, 4);
            }
          }
        }
        if (kBlock128) {
          // One stage = one 128-wide K group: the row scales and the two weight-block scales.
          if (srow >= 0)
            sm90::cp_async_4_zfill(sm90::smem_addr(s.a_scale + stage * kBlockM + t),
                                   p.a_scale + static_cast<std::int64_t>(srow) * p.k_groups + ks, 4);
          if (t == 1 || t == 2) {
            const int rb = (t == 1 ? brow0 : brow1) / 128;
            sm90::cp_async_4_zfill(sm90::smem_addr(s.b_scale + stage * 2 + (t - 1)),
                                   p.b_scale + (static_cast<std::int64_t>(tl.e) * p.row_blocks + rb) * p.k_groups + ks,
                                   4);
          }
        }
        sm90::cp_async_mbar_arrive_noinc(full);
        if (++stage == s.stages) { stage = 0; phase ^= 1; }
      }
      early = 0;
      if constexpr (kRoute) {
        if (route_slot >= 0) {
          const int r = tl.row_begin + static_cast<int>(threadIdx.x);
          p.route_sorted_slots_out[r] = route_slot;
          if (p.route_sorted_weights_out != nullptr) p.route_sorted_weights_out[r] = route_weight;
        }
      }
    }
    if (rec != nullptr) rec[kPhaseLastIssue] = sm90::globaltimer_ns();
    sm90::cp_async_wait_all_groups();
  }

  // ---- consumer warpgroups: wgmma main loop over K, epilogue in registers ----
  static __device__ void consume(const KernelParams& p, const Smem& s) {
    if constexpr (kPingPong) {
      consume_pingpong(p, s);
      return;
    }
    const int ct = threadIdx.x - kProducerThreads;  // 0..255
    const int wg = ct >> 7;                         // rows [64 wg, 64 wg + 64) of the tile
    const int warp = (ct >> 5) & 3, lane = ct & 31;
    const std::uint32_t a_off = wg * 64 * kStageKBytes;
    const bool scaled = p.scale_mode == kScalePerTensor || p.scale_mode == kScalePerChannel;
    int stage = 0;
    std::uint32_t phase = 0;

    const bool dynamic = p.tile_counter != nullptr;
    const int num_clusters = gridDim.x / s.cluster;
    // out_absmax: |h| of every value this thread stores, over all its tiles (one atomic per warp
    // per CTA). The GEMM1 epilogue stores each live (row, column) of out once in the grid: rows
    // past the tile's count (slot -1) and columns past n_out are skipped there.
    float hmax = 0.0f;
    // Phase timer (tests only): consumer thread 0's first stage landed and each unit's MMAs done
    // (GEMM1 only: any stamp in GEMM2's unit loop made its consumers spill), its exit.
    const bool timed = ct == 0 && p.phases != nullptr;
    int hint = -1;  // the expert of this thread's previous unit (find_tile; ping-pong only)
    int early = early_stages(p, s.stages);  // the first unit's stages issued at the entry (unit_stages)
    for (int w = blockIdx.x / s.cluster;; w += num_clusters) {
      if (dynamic) {
        // The unit the producer took for the tile that starts at this stage (-1: none left), read
        // by lane 0, the lane that later releases the stage (release()): compute-sanitizer's
        // racecheck does not carry a lane's read across the __syncwarp to lane 0's empty-barrier
        // arrival, and reported every lane's read against the producer's next write of the slot
        // as a potential WAR hazard.
        sm90::mbar_wait(s.full + 8 * stage, phase);
        w = __shfl_sync(0xffffffffu, lane == 0 ? s.tile_w[stage] : 0, 0);
        if (w < 0) break;
      }
      Tile tl;
      if (!find_tile<false>(w, s.off, s.prefix, p.num_experts, s.cluster, s.rank, kBlockM, tl, hint, p.head_units,
                          p.num_col_tiles, static_units(p))) break;

      // This thread's two tile rows (accumulator rows 16 warp + lane/4 + 8h of its warpgroup);
      // their per-row values load now and land during the main loop.
      int rloc[2], slot[2];
      float tw[2], ts[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        rloc[h] = 64 * wg + 16 * warp + (lane >> 2) + 8 * h;
        slot[h] = -1;
        tw[h] = 1.0f;
        ts[h] = 1.0f;
        if (rloc[h] < tl.count) {
          const int r = tl.row_begin + rloc[h];
          if constexpr (kRoute) {
            // GEMM1's epilogue reads a row's slot only for its liveness (kRoute runs without
            // per-row scales or router weights on the input: launch_sm90.cu), and the producer
            // places the slots. e4m3 runs fp8_per_tensor only: one scale a unit.
            slot[h] = r;
            if constexpr (kOp == Operand::kE4m3) ts[h] = p.a_scale[0] * p.b_scale[tl.e];
          } else {
            slot[h] = p.sorted_slots[r];
            // By sorted row when routing wrote them (no load that waits for the slot's).
            if (p.sorted_weights) tw[h] = p.sorted_weights[r];
            else if (p.topk_weights) tw[h] = p.topk_weights[slot[h]];
            if (p.scale_mode == kScalePerTensor) ts[h] = p.a_scale[0] * p.b_scale[tl.e];
            else if (p.scale_mode == kScalePerChannel) ts[h] = p.a_scale[p.gather_a ? slot[h] / p.top_k : r];
          }
        }
      }

      float acc[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
      if (kGateUp && timed) {
        if (std::uint64_t* rec = phase_record(p); rec != nullptr && rec[kPhaseMmaDone] == 0) {
          // The main loop's first wait, done early (waiting on a completed phase again returns).
          sm90::mbar_wait(s.full + 8 * stage, phase);
          rec[kPhaseFirstLanded] = sm90::globaltimer_ns();
        }
      }
      const int nks = unit_stages(p, tl, early);
      early = 0;
      if (64 * wg >= tl.count) {
        // A tail tile with <= 64 rows (or none: the spare CTA of a cluster, a CTA's first head
        // unit without rows): this warpgroup's rows are all past the expert's end, so it skips
        // the MMAs (the other warpgroup then has the tensor cores alone) and only passes the
        // stages on; its epilogue writes nothing.
        for (int ks = 0; ks < nks; ++ks) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          release(s, stage, lane);
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
      } else if (!kBlock128) {
        int prev = 0;
        for (int ks = 0; ks < p.num_k_stages; ++ks) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          sm90::fence_regs<kAcc>(acc);
          sm90::wgmma_fence();
          const std::uint32_t st = s.tiles + stage * kStageBytes;
          const std::uint64_t da = sm90::make_smem_desc_sw128(st + a_off);
          const std::uint64_t db = sm90::make_smem_desc_sw128(st + kATile);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, kBN>::mma(acc, da + 2 * kk, db + 2 * kk, 1);
          sm90::wgmma_commit();
          sm90::fence_regs<kAcc>(acc);
          if (ks > 0) {
            // The previous stage's wgmma group is done: its shared memory can be refilled.
            sm90::wgmma_wait<1>();
            release(s, prev, lane);
          }
          prev = stage;
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
        sm90::wgmma_wait<0>();
        sm90::fence_regs<kAcc>(acc);
        release(s, prev, lane);
      } else {
        // block128 (DeepGEMM style): each stage is one 128-wide K group; its partial sum is
        // promoted into acc scaled by the row's group scale and the weight block's scale.
        float tmp[kAcc];
        for (int ks = 0; ks < p.num_k_stages; ++ks) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          sm90::fence_regs<kAcc>(tmp);
          sm90::wgmma_fence();
          const std::uint32_t st = s.tiles + stage * kStageBytes;
          const std::uint64_t da = sm90::make_smem_desc_sw128(st + a_off);
          const std::uint64_t db = sm90::make_smem_desc_sw128(st + kATile);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, kBN>::mma(tmp, da + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
          sm90::wgmma_commit();
          sm90::wgmma_wait<0>();
          sm90::fence_regs<kAcc>(tmp);
          const float sa0 = s.a_scale[stage * kBlockM + rloc[0]];
          const float sa1 = s.a_scale[stage * kBlockM + rloc[1]];
          const float bs0 = s.b_scale[stage * 2 + 0];
          const float bs1 = s.b_scale[stage * 2 + 1];
          release(s, stage, lane);  // after every lane has read the stage's scales
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const float bs = j < kBN / 16 ? bs0 : bs1;  // columns of the first / second box
            acc[4 * j + 0] += tmp[4 * j + 0] * (sa0 * bs);
            acc[4 * j + 1] += tmp[4 * j + 1] * (sa0 * bs);
            acc[4 * j + 2] += tmp[4 * j + 2] * (sa1 * bs);
            acc[4 * j + 3] += tmp[4 * j + 3] * (sa1 * bs);
          }
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
      }

      if (kGateUp && timed) {
        if (std::uint64_t* rec = phase_record(p)) rec[kPhaseMmaDone] = sm90::globaltimer_ns();
      }

      // Epilogue. Column pairs 8j + 2(lane%4) + {0,1} of the accumulator.
      const std::int64_t rb = static_cast<std::int64_t>(tl.e) * p.rows_b;
      if (kGateUp) {
        // The row factor (activation scale x routed weight when weight_on_input) and, only with
        // per-channel scales or a bias, per-column terms: g = acc * (ts * w) * gs + gb. The
        // output type, the activation and the column terms are template parameters chosen once
        // per tile, so the unrolled loop holds no per-column branch (the epilogue had taken as
        // long as the 64-stage main loop at mixtral prefill, and the tensor cores waited).
        float f[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) f[h] = (scaled ? ts[h] : 1.0f) * (p.weight_on_input ? tw[h] : 1.0f);
        const bool col_terms = p.bias != nullptr || p.scale_mode == kScalePerChannel;
        const int cw = ct >> 5;
        if (16 * cw < tl.count) {  // a warp with none of the tile's rows has nothing to write
          if (col_terms) gateup_epilogue_out<true>(p, s, tl, acc, slot, rloc, f, rb, cw, lane, hmax);
          else gateup_epilogue_out<false>(p, s, tl, acc, slot, rloc, f, rb, cw, lane, hmax);
        }
        if (timed) {
          if (std::uint64_t* rec = phase_record(p)) rec[kPhaseEpilogueDone] = sm90::globaltimer_ns();
        }
      } else {
        // GEMM2: rows scattered to the slot's own row of out [M*k, K], fp32 or the activation dtype.
        // One row factor (activation scale x routed weight) and, only with per-channel scales or
        // a bias, per-column terms: x = (acc * ts * bs + bias) * w = acc * (ts * w) * bs + bias * w.
        // The common case (neither) costs one multiply per value; the instantiation is chosen
        // once per tile, so that no per-column branch is left in the unrolled loops.
        gemm2_epilogue(p, s, tl, acc, slot, tw, ts, scaled, rb, ct >> 5, lane);
      }
    }
    // Every consumer thread leaves the loop at the same unit (the schedule is per CTA).
    if constexpr (kAbsmax) {
      if (p.out_absmax != nullptr) numerics::warp_absmax_to_word(p.out_absmax, hmax);
    }
    if (timed) {
      if (std::uint64_t* rec = phase_record(p)) rec[kPhaseExit] = sm90::globaltimer_ns();
    }
  }

  // GEMM2's epilogue: the row factors, then the scatter_epilogue instantiation of the output type
  // and the column terms (uniform per kernel call).
  static __device__ __forceinline__ void gemm2_epilogue(const KernelParams& p, const Smem& s, const Tile& tl,
                                                        const float (&acc)[kAcc], const int (&slot)[2],
                                                        const float (&tw)[2], const float (&ts)[2], bool scaled,
                                                        std::int64_t rb, int cw, int lane) {
    float f[2], bw[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bw[h] = p.weight_on_input ? 1.0f : tw[h];
      f[h] = (scaled ? ts[h] : 1.0f) * bw[h];
    }
    const bool col_terms = p.bias != nullptr || p.scale_mode == kScalePerChannel;
    if (p.out_type == kOutF32) {
      if (col_terms) scatter_epilogue<kOutF32, true>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
      else scatter_epilogue<kOutF32, false>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
    } else if (p.out_type == kOutBf16) {
      if (col_terms) scatter_epilogue<kOutBf16, true>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
      else scatter_epilogue<kOutBf16, false>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
    } else {
      if (col_terms) scatter_epilogue<kOutF16, true>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
      else scatter_epilogue<kOutF16, false>(p, s, tl, acc, slot, f, bw, rb, cw, lane);
    }
  }

  // ---- GEMM2's ping-pong consumers (the kPingPong instantiations) ----
  // K-short tiles (num_k_stages < stages) of at most 64 rows: warpgroup wg runs the units
  // wg, wg + 2, ... of the CTA's sequence alone, so one warpgroup's epilogue overlaps the other's
  // main loop (with 128-row units at decode, one warpgroup had no rows and both waited on each
  // unit's epilogue). Unit j takes stages j * S .. j * S + S - 1 of the ring (S = num_k_stages,
  // all units alike), so a warpgroup's next unit starts 2 S stages after its last one; only its
  // 4 warps release a stage (empty barriers count 4). S < stages and the order barriers (below)
  // keep every wait on its barrier's current phase. The per-row values and the main loop repeat consume()'s lines on
  // purpose: shared through a helper, the other instantiations would no longer compile to the
  // SASS they were measured with (a run-time switch there cost mixtral TP8 2-4 %).
  static __device__ void consume_pingpong(const KernelParams& p, const Smem& s) {
    const int ct = threadIdx.x - kProducerThreads;  // 0..255
    const int wg = ct >> 7;                         // units wg, wg + 2, ... of the CTA's sequence
    const int warp = (ct >> 5) & 3, lane = ct & 31;
    constexpr std::uint32_t a_off = 0;  // every unit's rows are the stage's whole A tile
    const bool scaled = p.scale_mode == kScalePerTensor || p.scale_mode == kScalePerChannel;
    const int S = p.num_k_stages;
    int hint = -1;  // the expert of this warpgroup's previous unit (find_tile)
    // The two warpgroups wait on the ring in unit order: a warpgroup's first data wait of a unit
    // (or of the "none left" stage) comes after the other warpgroup passed its data waits of the
    // unit before (order barrier s.order + 8 wg: the other's 4 warps arrive, once a unit, this one
    // waits; warpgroup 0's first unit has no unit before it). Then every ring position before the
    // one waited on has been seen complete, so each parity wait is on its barrier's current
    // phase. Without the order a TMA of the other warpgroup's earlier unit still in flight (its
    // stage's previous fill) would let the wait pass one phase early: e.g. 1 stage a unit on a
    // 5-stage ring, warpgroup 0 at position 6 (stage 1) while position 1 (warpgroup 1's) has not
    // landed. The arrivals strictly alternate (a warpgroup arrives again only after the other's
    // wait), so a wait never sees a phase two ahead.
    const std::uint32_t my_order = s.order + 8 * wg, other_order = s.order + 8 * (wg ^ 1);
    std::uint32_t order_phase = 0;
    bool order_wait = wg == 1;
    const auto pass_order = [&]() {
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(other_order);
    };
    for (int pos = wg * S;; pos += 2 * S) {
      int stage = pos % s.stages;
      std::uint32_t phase = (pos / s.stages) & 1;
      if (order_wait) {
        sm90::mbar_wait(my_order, order_phase);
        order_phase ^= 1;
      }
      order_wait = true;
      // The unit the producer took for the tile that starts at this stage (-1: none left), read
      // by lane 0 (the lane that releases the stage) and broadcast, as consume() does: racecheck
      // does not carry the other lanes' reads across release()'s __syncwarp to lane 0's arrival
      // and reported them against the producer's next write of the slot (units taken n an atomic,
      // which reuse a CTA's slots within the small test cases, made them show).
      sm90::mbar_wait(s.full + 8 * stage, phase);
      const int w = __shfl_sync(0xffffffffu, lane == 0 ? s.tile_w[stage] : 0, 0);
      Tile tl;
      if (w < 0 || !find_tile<true>(w, s.off, s.prefix, p.num_experts, 1, 0, kPingPongBlockM, tl, hint,
                                    p.head_units, p.num_col_tiles, static_units(p))) {
        pass_order();  // the other warpgroup goes on to its own "none left" stage
        break;
      }

      // This thread's two unit rows (accumulator rows 16 warp + lane/4 + 8h): their slots, router
      // weights and per-tensor scales from the unit's first stage (the producer staged them there).
      const float* meta = s.a_scale + stage * kBlockM;
      int slot[2];
      float tw[2], ts[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rloc = 16 * warp + (lane >> 2) + 8 * h;
        slot[h] = -1;
        tw[h] = 1.0f;
        ts[h] = 1.0f;
        if (rloc < tl.count) {
          const int r = tl.row_begin + rloc;
          slot[h] = __float_as_int(meta[rloc]);
          if (p.sorted_weights) tw[h] = meta[kPingPongBlockM + rloc];
          else if (p.topk_weights) tw[h] = p.topk_weights[slot[h]];
          if (p.scale_mode == kScalePerTensor) ts[h] = s.b_scale[stage * 2] * s.b_scale[stage * 2 + 1];
          else if (p.scale_mode == kScalePerChannel) ts[h] = p.a_scale[p.gather_a ? slot[h] / p.top_k : r];
        }
      }

      float acc[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
      int prev = 0;
      for (int ks = 0; ks < S; ++ks) {
        sm90::mbar_wait(s.full + 8 * stage, phase);
        if (ks == S - 1) pass_order();  // this unit's data waits are done
        sm90::fence_regs<kAcc>(acc);
        sm90::wgmma_fence();
        const std::uint32_t st = s.tiles + stage * kStageBytes;
        const std::uint64_t da = sm90::make_smem_desc_sw128(st + a_off);
        const std::uint64_t db = sm90::make_smem_desc_sw128(st + kATile);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, kBN>::mma(acc, da + 2 * kk, db + 2 * kk, 1);
        sm90::wgmma_commit();
        sm90::fence_regs<kAcc>(acc);
        if (ks > 0) {
          sm90::wgmma_wait<1>();
          release(s, prev, lane);
        }
        prev = stage;
        if (++stage == s.stages) { stage = 0; phase ^= 1; }
      }
      sm90::wgmma_wait<0>();
      sm90::fence_regs<kAcc>(acc);
      release(s, prev, lane);

      const std::int64_t rb = static_cast<std::int64_t>(tl.e) * p.rows_b;
      gemm2_epilogue(p, s, tl, acc, slot, tw, ts, scaled, rb, ct >> 5, lane);
    }
    if (ct == 0) {
      if (std::uint64_t* rec = phase_record(p)) rec[kPhaseExit] = sm90::globaltimer_ns();
    }
  }

  // GEMM1's epilogue: dispatch on the output type and the activation (uniform per kernel call).
  template <bool kColTerms>
  static __device__ __forceinline__ void gateup_epilogue_out(const KernelParams& p, const Smem& s, const Tile& tl,
                                                             const float (&acc)[kAcc], const int (&slot)[2],
                                                             const int (&rloc)[2], const float (&f)[2],
                                                             std::int64_t rb, int cwarp, int lane, float& hmax) {
    if (p.out_type == kOutF32) gateup_epilogue_act<kOutF32, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
    else if (p.out_type == kOutBf16) gateup_epilogue_act<kOutBf16, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
    else gateup_epilogue_act<kOutF16, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
  }
  template <int kOut, bool kColTerms>
  static __device__ __forceinline__ void gateup_epilogue_act(const KernelParams& p, const Smem& s, const Tile& tl,
                                                             const float (&acc)[kAcc], const int (&slot)[2],
                                                             const int (&rloc)[2], const float (&f)[2],
                                                             std::int64_t rb, int cwarp, int lane, float& hmax) {
    if (p.act == Activation::kSilu) gateup_epilogue<kOut, Activation::kSilu, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
    else if (p.act == Activation::kSwigluOai) gateup_epilogue<kOut, Activation::kSwigluOai, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
    else gateup_epilogue<kOut, Activation::kGelu, kColTerms>(p, s, tl, acc, slot, rloc, f, rb, cwarp, lane, hmax);
  }

  // GEMM1's epilogue as one rolled loop (session 17: the unrolled form was ~1.3 k instructions a
  // variant, fetched cold after the main loop, 2-7 us a CTA). Per chunk of 16 gate columns and
  // their 16 up columns, each lane writes its accumulators of the warp's 16 rows to the warp's
  // staging area (the only unrolled part: a switch over the 8 chunks), then lane l finishes 8
  // columns of row l / 2: the row factor, the column terms, the activation, one 16-byte store
  // (two with fp32 out) to the tile row's own row of out [rows, N] (expert-sorted order). Same
  // values as before: every output is the same expression of the same accumulator.
  template <int kJC>
  static __device__ __forceinline__ void stage_gateup_chunk(const float (&acc)[kAcc], float* stw, int lane) {
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * kJC + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* row = stw + ((lane >> 2) + 8 * h) * kGateUpPitch + 8 * jj + 2 * (lane & 3);
        *reinterpret_cast<float2*>(row) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        *reinterpret_cast<float2*>(row + 16) =
            make_float2(acc[4 * (j + kBN / 16) + 2 * h], acc[4 * (j + kBN / 16) + 2 * h + 1]);
      }
    }
  }
  static constexpr int kGateUpPitch = 36;  // floats a staged row: 16 gate, 16 up, 4 of padding

  template <int kOut, Activation kAct, bool kColTerms>
  static __device__ __forceinline__ void gateup_epilogue(const KernelParams& p, const Smem& s, const Tile& tl,
                                                         const float (&acc)[kAcc], const int (&slot)[2],
                                                         const int (&rloc)[2], const float (&f)[2],
                                                         std::int64_t rb, int cwarp, int lane, float& hmax) {
    static_assert(16 * kGateUpPitch * 4 <= kOutStageWarpBytes, "GEMM1 staging exceeds the warp's area");
    // The row this lane finishes (r) and its factor and validity, from the lane that holds it.
    const int r = lane >> 1;
    const float fr0 = __shfl_sync(0xffffffffu, f[0], 4 * (r & 7));
    const float fr1 = __shfl_sync(0xffffffffu, f[1], 4 * (r & 7));
    const int sr0 = __shfl_sync(0xffffffffu, slot[0], 4 * (r & 7));
    const int sr1 = __shfl_sync(0xffffffffu, slot[1], 4 * (r & 7));
    const float fr = r < 8 ? fr0 : fr1;
    const bool row_live = (r < 8 ? sr0 : sr1) >= 0;
    const int rl = __shfl_sync(0xffffffffu, rloc[0], 0) + r;  // lane 0's rloc[0]: the warp's first tile row
    std::uint8_t* orow = static_cast<std::uint8_t*>(p.out) +
                         (static_cast<std::int64_t>(tl.row_begin) + rl) * p.n_out * (kOut == kOutF32 ? 4 : 2);
    float* stw = reinterpret_cast<float*>(s.out_stage + cwarp * kOutStageWarpBytes);
    const std::int64_t nbase = static_cast<std::int64_t>(tl.col) * kBox;
    const float alpha = p.alpha, limit = p.limit;
#pragma unroll 1
    for (int jc = 0; jc < kBN / 32; ++jc) {
      if (nbase + 16 * jc >= p.n_out) break;  // uniform: later chunks are past n_out too
      __syncwarp();  // the previous chunk's reads of the staging area are done
      // The chunk's accumulators (compile-time indices: a case each; kBN / 32 chunks).
      switch (jc) {
        case 0: stage_gateup_chunk<0>(acc, stw, lane); break;
        case 1: stage_gateup_chunk<1>(acc, stw, lane); break;
        case 2: stage_gateup_chunk<2>(acc, stw, lane); break;
        case 3: stage_gateup_chunk<3>(acc, stw, lane); break;
        default:
          if constexpr (kBN / 32 > 4) {
            if (jc == 4) stage_gateup_chunk<4>(acc, stw, lane);
            else if (jc == 5) stage_gateup_chunk<5>(acc, stw, lane);
            else if (jc == 6) stage_gateup_chunk<6>(acc, stw, lane);
            else stage_gateup_chunk<7>(acc, stw, lane);
          }
          break;
      }
      __syncwarp();
      if (jc == 1 && threadIdx.x == kProducerThreads) {  // phase timer (tests only): chunk 0 done
        if (std::uint64_t* rec = phase_record(p)) rec[kPhaseFirstStore] = sm90::globaltimer_ns();
      }
      if (!row_live) continue;
      const int c0 = 8 * (lane & 1);                       // first of this lane's 8 columns in the chunk
      const std::int64_t n0 = nbase + 16 * jc + c0;        // its output column
      if (n0 >= p.n_out) continue;
      const float* src = stw + r * kGateUpPitch + c0;
      // The column terms of the lane's 8 gate and 8 up columns, all loaded before the first is
      // used (g * gs + gb with gs = 1, gb = 0 where a term is absent or past n_out).
      float gs[8], us[8], gb[8], ub[8];
      if constexpr (kColTerms) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          gs[i] = 1.0f;
          us[i] = 1.0f;
        }
        if (p.scale_mode == kScalePerChannel) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (n0 + i < p.n_out) {
              gs[i] = p.b_scale[rb + n0 + i];
              us[i] = p.b_scale[rb + p.n_out + n0 + i];
            }
          }
#pragma unroll
          for (int i = 0; i < 8; ++i) asm volatile("" : "+f"(gs[i]), "+f"(us[i]));  // loads issued together
        }
        const int bt = p.bias != nullptr ? p.bias_type : numerics::kBiasNone;
        numerics::load_bias_run<8, 8, 0>(p.bias, bt, rb, n0, p.n_out, gb);
        numerics::load_bias_run<8, 8, 0>(p.bias, bt, rb + p.n_out, n0, p.n_out, ub);
      }
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float g = src[i] * fr, u = src[16 + i] * fr;
        if constexpr (kColTerms) {
          g = g * gs[i] + gb[i];
          u = u * us[i] + ub[i];
        }
        v[i] = numerics::activate<numerics::ActMath::kFast, kAct>(g, u, alpha, limit);
        if constexpr (kAbsmax && kOut == kOutF32) {
          if (n0 + i < p.n_out) hmax = numerics::fold_absmax(hmax, v[i]);
        }
      }
      if (p.out_vec16 && n0 + 8 <= p.n_out) {
        if constexpr (kOut == kOutF32) {
          float4* d = reinterpret_cast<float4*>(orow + n0 * 4);
          d[0] = make_float4(v[0], v[1], v[2], v[3]);
          d[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
          uint4 q;
          std::uint32_t* w = reinterpret_cast<std::uint32_t*>(&q);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if constexpr (kOut == kOutBf16) {
              const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
              w[i] = *reinterpret_cast<const std::uint32_t*>(&b);
            } else {
              const __half2 b = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
              w[i] = *reinterpret_cast<const std::uint32_t*>(&b);
            }
          }
          *reinterpret_cast<uint4*>(orow + n0 * 2) = q;
        }
      } else {
        // The row's end inside these 8 columns, or rows not 16-byte aligned: pairs (n_out is even).
#pragma unroll
        for (int i = 0; i < 8; i += 2)
          if (n0 + i < p.n_out)
            store_pair_t<kOut>(p.out, (static_cast<std::int64_t>(tl.row_begin) + rl) * p.n_out + n0 + i, v[i], v[i + 1]);
      }
    }
  }

  // GEMM2's epilogue through the warp's staging area (config.hpp): per chunk of 128 bytes of
  // columns, each lane writes its accumulator pairs of the warp's 16 rows, then 8 lanes per row
  // copy the row's 128 bytes to y with 16-byte stores. kOut: OutType; kColTerms: per-column
  // weight scales (fp8_per_channel) or a bias. f[h] / bw[h]: the row factor and the routed
  // weight (1 with weight_on_input) of the thread's rows h.
  template <int kOut, bool kColTerms>
  static __device__ __forceinline__ void scatter_epilogue(const KernelParams& p, const Smem& s, const Tile& tl,
                                                          const float (&acc)[kAcc], const int (&slot)[2],
                                                          const float (&f)[2], const float (&bw)[2],
                                                          std::int64_t rb, int cwarp, int lane) {
    constexpr int kEs = kOut == kOutF32 ? 4 : 2;
    constexpr int kChunkCols = kOutStageRowBytes / kEs;  // 32 fp32 or 64 16-bit columns
    constexpr int kChunkJ = kChunkCols / 8;               // accumulator column groups per chunk
    constexpr int kPitch = out_stage_pitch(kEs);
    std::uint8_t* stage_w = s.out_stage + cwarp * kOutStageWarpBytes;
    // The copy phase: lane covers rows q * 4 + lane / 8 (q = 0..3) of the warp, 16 bytes at
    // lane % 8; the slot of row r is held by lane 4 (r % 8) in slot[r / 8].
    int cslot[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = q * 4 + (lane >> 3);
      const int s0 = __shfl_sync(0xffffffffu, slot[0], 4 * (r & 7));
      const int s1 = __shfl_sync(0xffffffffu, slot[1], 4 * (r & 7));
      cslot[q] = r < 8 ? s0 : s1;
    }
    const std::int64_t nbase = static_cast<std::int64_t>(tl.col) * kBN;
    const int piece = lane & 7;  // 16-byte piece of a staged row
    // The y row of each row this lane copies (null past the tile's rows), computed once per tile.
    std::uint8_t* rowp[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      rowp[q] = cslot[q] < 0 ? nullptr
                             : static_cast<std::uint8_t*>(p.out) + static_cast<std::int64_t>(cslot[q]) * p.n_out * kEs;
    const bool whole = p.out_vec16 && nbase + kBN <= p.n_out;  // the usual tile: no bound checks
#pragma unroll
    for (int ch = 0; ch < kBN / kChunkCols; ++ch) {
      const std::int64_t c0 = nbase + ch * kChunkCols;
      if (c0 >= p.n_out) break;
      __syncwarp();  // the previous chunk's copy has read the staging area
      // The chunk's bias values of this lane (columns c0 + 8 jj + 2 (lane % 4) + c), loaded in
      // batches before any of a batch is used; 0 where absent or past n_out (n_out is even, so a
      // pair is in or out together). Per-channel scales (fp8_per_channel) as they are used.
      // Two batches of kChunkJ / 2 column pairs (16 values at once spilled a register).
      constexpr int kHalfJ = kChunkJ / 2;
      float bi[2 * kHalfJ];
#pragma unroll
      for (int jj = 0; jj < kChunkJ; ++jj) {
        if constexpr (kColTerms) {
          if (jj % kHalfJ == 0)
            numerics::load_bias_run<2 * kHalfJ, 2, 8>(p.bias, p.bias != nullptr ? p.bias_type : numerics::kBiasNone, rb,
                                                      c0 + 8 * jj + 2 * (lane & 3), p.n_out, bi);
        }
        const int j = ch * kChunkJ + jj;
        const int cl = 8 * jj + 2 * (lane & 3);  // column in the chunk
        float bs[2] = {1.0f, 1.0f};
        if constexpr (kColTerms) {
          const std::int64_t n0 = c0 + cl;
          if (n0 < p.n_out && p.scale_mode == kScalePerChannel) {
            bs[0] = p.b_scale[rb + n0];
            bs[1] = p.b_scale[rb + n0 + 1];
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            v[c] = acc[4 * j + 2 * h + c] * f[h];
            if constexpr (kColTerms) v[c] = v[c] * bs[c] + bi[2 * (jj % kHalfJ) + c] * bw[h];
          }
          std::uint8_t* dst = stage_w + ((lane >> 2) + 8 * h) * kPitch + cl * kEs;
          if constexpr (kOut == kOutF32) *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
          else if constexpr (kOut == kOutBf16) *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v[0], v[1]);
          else *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(v[0], v[1]);
        }
      }
      __syncwarp();
      const std::int64_t pc = c0 + piece * (16 / kEs);  // the piece's first column
      if (whole) {
        // Every piece of every chunk in bounds and 16-byte aligned: one store per row, no checks.
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (rowp[q] != nullptr)
            *reinterpret_cast<uint4*>(rowp[q] + pc * kEs) =
                *reinterpret_cast<const uint4*>(stage_w + (q * 4 + (lane >> 3)) * kPitch + piece * 16);
        continue;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = q * 4 + (lane >> 3);
        if (cslot[q] < 0 || pc >= p.n_out) continue;
        const std::uint8_t* src = stage_w + r * kPitch + piece * 16;
        std::uint8_t* dst = rowp[q] + pc * kEs;
        if (p.out_vec16 && pc + 16 / kEs <= p.n_out) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
          // The row's end inside the piece, or rows not 16-byte aligned: 4-byte words (n_out is
          // even, so a 16-bit pair never straddles the end).
#pragma unroll
          for (int b = 0; b < 16; b += 4)
            if (pc + b / kEs < p.n_out)
              *reinterpret_cast<std::uint32_t*>(dst + b) = *reinterpret_cast<const std::uint32_t*>(src + b);
        }
      }
    }
  }
};

// Persistent: with p.tile_counter (S = 1), the producer warpgroup takes each next unit from the
// counter and hands it to the consumers through the stage it starts at; otherwise cluster c
// (CTAs c*S .. c*S+S-1, S = p.cluster) takes units c, c + gridDim.x/S, ..., every thread walking
// the same unit list. Launched with cluster dimension S when S > 1.
template <Operand kOp, bool kGateUp, bool kBlock128, bool kPingPong = false, bool kRoute = false>
__global__ void __launch_bounds__(kThreads, 1) tokmajor_sm90_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using K = TokMajor<kOp, kGateUp, kBlock128, kPingPong, kRoute>;
  extern __shared__ std::uint8_t smem_raw[];
  const SmemLayout& L = p.smem;
  // 1024-aligned base by pointer arithmetic on the shared array (not through an integer cast), so
  // the compiler keeps knowing that base and every pointer derived from it (the staging area,
  // the expert table, the scales) are shared memory: LDS / STS with immediate offsets instead of
  // generic LD / ST and their address arithmetic.
  // (fp8_block128 keeps the integer form: with shared-space pointers its instantiations spilled
  // 4 bytes, its consumers holding a second accumulator set.)
  std::uint8_t* base;
  if constexpr (kBlock128)
    base = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                           ~static_cast<std::uintptr_t>(1023));
  else
    base = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  typename K::Smem s;
  s.tiles = sm90::smem_addr(base);
  s.a_scale = reinterpret_cast<float*>(base + L.a_scale_off);
  s.b_scale = reinterpret_cast<float*>(base + L.b_scale_off);
  s.full = sm90::smem_addr(base + L.full_bar_off);
  s.empty = sm90::smem_addr(base + L.empty_bar_off);
  s.order = sm90::smem_addr(base + L.order_bar_off);
  s.out_stage = base + L.out_stage_off;
  s.tile_w = reinterpret_cast<int*>(base + L.tile_w_off);
  s.off = reinterpret_cast<int*>(base + L.table_off);
  s.prefix = s.off + (p.num_experts + 1);
  if constexpr (kRoute) {
    s.slot_e = reinterpret_cast<std::int16_t*>(base + L.route_off);
    s.unit_slots = reinterpret_cast<int*>(base + L.route_off + (2 * p.route_slots + 15) / 16 * 16);
    s.warp_rows = s.unit_slots + kBlockM;
  }
  s.stages = L.stages;
  s.cluster = p.cluster;
  s.rank = p.cluster > 1 ? static_cast<int>(sm90::cluster_ctarank()) : 0;
  s.peer_empty = p.cluster > 1 ? sm90::map_to_rank(s.empty, static_cast<std::uint32_t>(s.rank ^ 1)) : 0;

  const int E = p.num_experts;
  std::uint64_t* rec = threadIdx.x == 0 ? phase_record(p) : nullptr;  // phase timer (tests only)
  if (rec != nullptr) rec[kPhaseEntry] = sm90::globaltimer_ns();
  if (threadIdx.x == 0) {
    sm90::prefetch_tensormap(&p.tmap_b);
    if (kPingPong && p.a_tma != 0) sm90::prefetch_tensormap(&p.tmap_a);
    for (int i = 0; i < s.stages; ++i) {
      // full: thread 0's expect_tx arrival + one cp.async arrival per producer thread.
      sm90::mbar_init(s.full + 8 * i, 1 + kProducerThreads);
      // empty: one arrival per consumer warp of each CTA of the cluster once its wgmma reads of
      // the stage completed (the peer's TMA multicast writes this CTA's B tile too).
      // Ping-pong (cluster 1): the 4 warps of the warpgroup that runs the stage's unit.
      sm90::mbar_init(s.empty + 8 * i, kPingPong ? kConsumerWarps / 2 : kConsumerThreads / 32 * p.cluster);
    }
    if constexpr (kPingPong) {
      // Each warpgroup's order barrier: one arrival per warp of the other warpgroup (consume_pingpong).
      sm90::mbar_init(s.order, kConsumerWarps / 2);
      sm90::mbar_init(s.order + 8, kConsumerWarps / 2);
    }
    sm90::fence_mbarrier_init_cluster();
    sm90::fence_proxy_async_shared_cta();
    // Early weights: the first unit's weights do not depend on the previous kernel (the routing):
    // they stream during the PDL wait, the table and the first unit's row gather.
    K::issue_early_weights(p, s);
    if (rec != nullptr && K::early_stages(p, s.stages) > 0) rec[kPhaseFirstIssue] = sm90::globaltimer_ns();
  }
  // PDL (cuda/common/pdl.cuh): the tensormap prefetch and the barrier init above overlap the
  // previous kernel; the row offsets (routing's) and everything after need it complete. Every
  // thread waits, then lets the next kernel launch: this grid is one persistent wave, all of it
  // resident by the time its CTAs get here, so the dependents' CTAs only take SMs it leaves free.
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kRoute)
    K::route_table(p, s);  // the offsets from the call's ids, while the early weights stream
  else
    gemm_common::load_expert_offsets<kThreads>(p, E, s.off);
  // Tile prefix over experts: tiles(e) = ceil(rows_e / 128) * column tiles. Warp 0, 32 a step.
  // With head units (early weights) the prefix counts the counter's units (find_tile).
  MOEKIT_BUILD_EXPERT_PREFIX(E, s.off, s.prefix, rows,
                            p.head_units > 0 ? counter_units_of(e_, rows, p.num_col_tiles,
                                                                kPingPong ? kPingPongBlockM : kBlockM, static_units(p))
                                             : units_of(rows, p.cluster, p.num_col_tiles,
                                                        kPingPong ? kPingPongBlockM : kBlockM));
  if (rec != nullptr) rec[kPhaseTable] = sm90::globaltimer_ns();
  // The peer's barriers must be initialized before any multicast or remote arrival reaches them.
  if (p.cluster > 1) sm90::cluster_sync_all();

  // The consumers' branch first: ptxas then lays the producer's code right after the entry (the
  // GEMM1 bf16 instantiation's first weight TMA at 0x3f40 instead of past every epilogue variant,
  // ~0x35820), so the path to the first weight TMA is fetched in sequence (the phase timer had 1.1-1.9 us from
  // the producer's setmaxnreg to its first unit, with nothing but shared-memory reads between).
  if (threadIdx.x >= kProducerThreads) {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    if (threadIdx.x == kProducerThreads) {
      if (std::uint64_t* r = phase_record(p)) r[kPhaseConsumerStart] = sm90::globaltimer_ns();
    }
    K::consume(p, s);
  } else {
    sm90::setmaxnreg_dec<kProducerRegs>();
    if (rec != nullptr) rec[kPhaseProducerStart] = sm90::globaltimer_ns();
    K::produce(p, s);
  }
  // No CTA leaves while its peer may still arrive on its barriers.
  if (p.cluster > 1) sm90::cluster_sync_all();
#endif
}

template <Operand kOp, bool kGateUp, bool kBlock128, bool kPingPong, bool kRoute>
void run_tokmajor_sm90(const KernelParams& kp, int grid, void* stream, bool pdl) {
  auto* kernel = &tokmajor_sm90_kernel<kOp, kGateUp, kBlock128, kPingPong, kRoute>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised);
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaLaunchAttribute attr[2];  // the cluster dimension, PDL (added after the occupancy query)
  cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(grid), kThreads, kp.smem.bytes,
                                                 static_cast<cudaStream_t>(stream), kp.cluster, attr);
  if (kp.cluster > 1) {
    // One wave of persistent clusters: not every GPC holds an even number of free SMs, so ask
    // how many 2-CTA clusters fit at once (once per device and kernel). Correctness does not
    // depend on it (clusters never wait on each other).
    static std::atomic<int> max_clusters[64];  // zero-initialized (static storage)
    int fit = dev < 64 ? max_clusters[dev].load(std::memory_order_relaxed) : 0;
    if (fit == 0) {
      cfg.gridDim = dim3(static_cast<unsigned>(kp.cluster), 1, 1);
      MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg));
      if (fit < 1) fit = 1;
      if (dev < 64) max_clusters[dev].store(fit, std::memory_order_relaxed);
    }
    grid = std::min(grid, fit * kp.cluster);
    cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  }
  add_pdl_attribute(cfg, attr, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, kp));
}

}  // namespace moekit::cuda::tokmajor
