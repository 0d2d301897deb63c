// Tile constants, work decomposition and workspace layout of the single-launch fused MoE path
// (host-visible, no CUDA types). The launcher picks a FusedTiling per problem; the kernel reads
// it from FusedArgs (params.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "moekit/problem.hpp"

// Compile-time debug aids of the fused kernel (kernel_sm90.cuh), off by default; CMake options
// of the same names set them for moekit_cuda. Off, they generate no code.
//   MOEKIT_FUSED_PHASE_TIMER=1: per-CTA %globaltimer stamps of the kernel's phases (kPhase*).
//   MOEKIT_FUSED_SPIN_LIMIT=n (n > 0): a counter wait that spins n times prints the counter and
//   gives up (debug builds: a hang becomes a wrong result plus a message).
#ifndef MOEKIT_FUSED_PHASE_TIMER
#define MOEKIT_FUSED_PHASE_TIMER 0
#endif
#ifndef MOEKIT_FUSED_SPIN_LIMIT
#define MOEKIT_FUSED_SPIN_LIMIT 0
#endif

namespace moekit::cuda::fused_moe {

// Phase timer record: kPhaseWords uint64 per CTA. Times are %globaltimer ns (0: never reached);
// counts are plain numbers. Written by thread 0 of each CTA just before it exits.
inline constexpr int kPhaseWords = 16;
enum PhaseWord : int {
  kPhaseStart = 0,        // kernel entry
  kPhaseSetup = 1,        // + per-tensor scales, pipeline primed: the first item starts
  kPhaseGemm1Done = 2,    // end of this CTA's last GEMM1 item
  kPhaseFirstWait = 3,    // start of this CTA's first counter wait (GEMM2 item)
  kPhaseLastWaitEnd = 4,  // end of its last counter wait
  kPhaseWaitNs = 5,       // total ns spent in counter waits
  kPhaseGemm2Done = 6,    // end of its last GEMM2 item
  kPhaseCombineDone = 7,  // end of its last combine (the CTA that completed a K tile)
  kPhaseEnd = 8,          // loop exit, before the exit ticket
  kPhaseItems1 = 9,       // GEMM1 items run (splits included)
  kPhaseItems2 = 10,      // GEMM2 items run
  kPhaseCombines = 11,    // K tiles combined
  kPhaseSmid = 12,        // SM the CTA ran on
  kPhaseGrid = 13,        // gridDim.x
  kPhaseTotalItems = 14,  // all items of the launch
  kPhaseRouted = 15,      // routing + permutation (every CTA's own copy) done
};

// 8 warps: one CTA per SM, all co-resident (the GEMM2 items spin on GEMM1 counters).
inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
// A pipeline stage is 16 KB of weights: `rows` weight rows x (16384 / rows) bytes of K, cut
// into kWarps / (rows / 16) segments of 128 bytes (the swizzle width). Warp w computes m-tile
// w % (rows / 16) on segment w / (rows / 16): every warp does 4 mma k-steps per stage whatever
// the row count.
inline constexpr int kStageBytes = 16384;
// 7 stages = 112 KB of weights in flight per SM (HBM latency x per-SM share of 4.8 TB/s is
// ~40-60 KB); with the token buffer and the tables this stays under 227 KB.
inline constexpr int kStages = 7;
// Tokens of one expert per work item (mma n = 2 x 8); experts with more slots get several
// token chunks ("groups").
inline constexpr int kMaxTok = 16;
// The item's token operand [16 tokens][range + 16 bytes pad] sits in shared memory.
inline constexpr int kTokBufBytes = 48 * 1024;
inline constexpr int kMaxRangeBytes = kTokBufBytes / kMaxTok - 16;  // 3056
// Redundant per-CTA permutation in shared memory bounds these.
inline constexpr int kMaxSlots = 512;     // M * k
inline constexpr int kMaxExperts = 1024;  // E (local)
inline constexpr int kMaxSplit = 8;       // K splits of one work item (cross-CTA reduction)
// Rows of the accumulator staging buffer: [segments][kMaxTok][rows] floats, segments * rows = 128.
inline constexpr int kRedFloats = 128 * kMaxTok;

// Shared-memory layout (bytes from a 1024-aligned base).
inline constexpr int kSmemStagesOff = 0;
inline constexpr int kSmemTokOff = kStages * kStageBytes;
inline constexpr int kSmemRedOff = kSmemTokOff + kTokBufBytes;
inline constexpr int kSmemSlotOff = kSmemRedOff + kRedFloats * 4;          // int slot_e[kMaxSlots]
inline constexpr int kSmemSortedOff = kSmemSlotOff + kMaxSlots * 4;        // int sorted[kMaxSlots]
inline constexpr int kSmemOffOff = kSmemSortedOff + kMaxSlots * 4;         // int off[kMaxExperts + 1]
inline constexpr int kSmemGbaseOff = kSmemOffOff + (kMaxExperts + 4) * 4;  // int gbase[kMaxExperts + 1]
inline constexpr int kSmemIdsOff = kSmemGbaseOff + (kMaxExperts + 4) * 4;  // int ids[kMaxSlots]
inline constexpr int kSmemWtsOff = kSmemIdsOff + kMaxSlots * 4;            // float wts[kMaxSlots]
// block128: per item, the token scales [16][kMaxRangeGroups] and the weight-block scales
// [128 rows][kMaxRangeGroups] of the 128-wide K groups its range covers.
inline constexpr int kMaxRangeGroups = (kMaxRangeBytes + 127) / 128;       // 24
inline constexpr int kSmemBlkAOff = kSmemWtsOff + kMaxSlots * 4;
inline constexpr int kSmemBlkWOff = kSmemBlkAOff + kMaxTok * kMaxRangeGroups * 4;
inline constexpr int kSmemMiscOff = kSmemBlkWOff + 128 * kMaxRangeGroups * 4;  // token info + scalars
inline constexpr int kSmemMiscBytes = 1024;
inline constexpr int kSmemBytes = kSmemMiscOff + kSmemMiscBytes + 1024;    // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "fused MoE shared memory exceeds 227 KB");
// Routing from logits (fused_moe): each warp's row of E_global scores lives in the token
// buffer, which is free until the first work item.
inline constexpr int kMaxRouteExperts = kTokBufBytes / (kWarps * 4);  // E_global <= 1536

// One GEMM's decomposition into work items (group x tile x split).
struct GemmTiling {
  int rows = 128;        // weight rows per item: 16, 32, 64 or 128 (GEMM1: rows/2 gate + rows/2 up)
  int split = 1;         // items along the reduction dim
  int range_bytes = 0;   // reduction bytes per split (multiple of stage_k_bytes)
  int tiles = 0;         // row tiles: ceil(N / (rows/2)) for GEMM1, ceil(K / rows) for GEMM2
  constexpr int stage_k_bytes() const { return kStageBytes / rows; }
  constexpr int out_cols() const { return rows; }  // GEMM1 uses rows/2
};

struct FusedTiling {
  GemmTiling g1, g2;
};

inline std::int64_t ceil_div64(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Largest reduction range (bytes, multiple of the stage's K bytes) the token buffer holds.
inline int max_range_bytes(int rows) {
  const int skb = kStageBytes / rows;
  return kMaxRangeBytes / skb * skb;
}

// Candidate tiling of one GEMM: rows, split -> tiles and range. row_bytes = reduction bytes of a
// weight row; out_rows = N (GEMM1, two weight rows per output) or K (GEMM2).
inline GemmTiling make_tiling(bool gate_up, std::int64_t out_rows, std::int64_t row_bytes, int rows, int split) {
  GemmTiling t;
  t.rows = rows;
  const int skb = t.stage_k_bytes();
  const std::int64_t per = ceil_div64(ceil_div64(row_bytes, split), skb) * skb;
  t.range_bytes = static_cast<int>(per);
  t.split = static_cast<int>(ceil_div64(row_bytes, per));
  t.tiles = static_cast<int>(ceil_div64(out_rows, gate_up ? rows / 2 : rows));
  return t;
}

// Heuristic: groups = the expected number of distinct experts M tokens touch with k random
// distinct picks each, E (1 - (1 - k/E)^M), and a
// CTA's time ~ (bytes it streams) + a fixed cost per item (token staging, reduction, epilogue,
// ~8 KB of streaming time). Pick rows / split minimizing the busiest CTA's cost.
inline GemmTiling choose_gemm_tiling(bool gate_up, std::int64_t out_rows, std::int64_t row_bytes,
                                     std::int64_t groups, int sm_count) {
  GemmTiling best{};
  best.split = 0;  // nothing fits until a candidate does (can_implement_fused_sm90 refuses split 0)
  double best_cost = 0;
  bool have = false;
  for (int rows : {128, 64, 32, 16}) {
    const int min_split = static_cast<int>(ceil_div64(row_bytes, max_range_bytes(rows)));
    if (min_split > kMaxSplit) continue;
    for (int split = min_split; split <= kMaxSplit; split *= 2) {
      const GemmTiling t = make_tiling(gate_up, out_rows, row_bytes, rows, split);
      if (t.split > kMaxSplit || t.range_bytes > max_range_bytes(rows)) continue;
      const std::int64_t items = groups * t.tiles * t.split;
      const std::int64_t per_cta = ceil_div64(items, std::max(sm_count, 1));
      // Valid weight rows per tile on average (a last, partial tile streams fewer bytes).
      const double rows_per_tile = static_cast<double>(gate_up ? 2 * out_rows : out_rows) / t.tiles;
      const double item_bytes = rows_per_tile * static_cast<double>(std::min<std::int64_t>(t.range_bytes, row_bytes));
      const double cost = static_cast<double>(per_cta) * (item_bytes + 8192.0);
      if (!have || cost < best_cost) {
        best = t;
        best_cost = cost;
        have = true;
      }
      if (t.split == 1 && split > 1) break;
    }
  }
  return best;  // rows == 128 split == 0 tiles == 0 when nothing fits (can_implement refuses)
}

inline int operand_bytes(Scheme s) { return s == Scheme::kBf16 ? 2 : 1; }

inline FusedTiling choose_tiling(const MoeProblem& p, int sm_count) {
  const double E = static_cast<double>(std::max<std::int64_t>(p.num_experts, 1));
  const double pick = std::min(1.0, static_cast<double>(p.top_k) / E);
  const double touched = E * (1.0 - std::pow(1.0 - pick, static_cast<double>(p.num_tokens)));
  const std::int64_t groups = std::max<std::int64_t>(1, static_cast<std::int64_t>(touched + 0.5));
  const int eb = operand_bytes(p.scheme);
  FusedTiling t;
  t.g1 = choose_gemm_tiling(true, p.intermediate_size, p.hidden_size * eb, groups, sm_count);
  t.g2 = choose_gemm_tiling(false, p.hidden_size, p.intermediate_size * eb, groups, sm_count);
  return t;
}

// Bound on token groups (expert x chunk of 16 slots) of a call: sum_e ceil(c_e / 16).
inline std::int64_t max_groups(const MoeProblem& p) {
  const std::int64_t P = p.num_tokens * p.top_k;
  return std::min(p.num_experts, P) + ceil_div64(P, kMaxTok);
}

// Workspace: counters first (zeroed per call), then fp32 buffers. Sizes use upper bounds over
// every tiling the launcher may pick (rows >= 16, split <= kMaxSplit), so they depend on the
// problem's sizes only.
struct FusedWorkspace {
  static constexpr std::size_t kAlign = 256;
  // Counter words (uint32), in order:
  //   [0] gemm1_all: finished GEMM1 (group, tile) outputs; [1] inter absmax (float bits);
  //   [2] exit: CTAs done (the last one resets the per-group counters);
  //   grp_done[Gmax]; t1_ticket[Gmax * tiles1_max]; t2_ticket[Gmax * tiles2_max]; comb[tiles2_max].
  std::size_t num_counters = 0;
  std::size_t grp_done = 0, t1_ticket = 0, t2_ticket = 0, comb = 0;  // word indices
  std::size_t tiles1_max = 0, tiles2_max = 0;
  std::size_t counters = 0;  // byte offsets
  std::size_t inter = 0;     // fp32 [P, N] by sorted row
  std::size_t y = 0;         // fp32 [P, K] by slot m*k+j
  std::size_t part1 = 0;     // fp32 [tiles1 * rows1 (<= 2N + 128)][kMaxSplit][P] partial sums
  std::size_t part2 = 0;     // fp32 [tiles2 * rows2 (<= K + 128)][kMaxSplit][P]
  std::size_t total = 0;
};

inline FusedWorkspace fused_workspace_layout(const MoeProblem& p) {
  FusedWorkspace w;
  if (p.num_tokens <= 0) return w;
  const std::size_t P = static_cast<std::size_t>(p.num_tokens * p.top_k);
  const std::size_t N = static_cast<std::size_t>(p.intermediate_size);
  const std::size_t K = static_cast<std::size_t>(p.hidden_size);
  const std::size_t G = static_cast<std::size_t>(max_groups(p));
  w.tiles1_max = (N + 7) / 8;     // rows1 >= 16: 8 columns per tile
  w.tiles2_max = (K + 15) / 16;   // rows2 >= 16
  w.grp_done = 3;
  w.t1_ticket = w.grp_done + G;
  w.t2_ticket = w.t1_ticket + G * w.tiles1_max;
  w.comb = w.t2_ticket + G * w.tiles2_max;
  w.num_counters = w.comb + w.tiles2_max;
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t off = at;
    at = (at + bytes + FusedWorkspace::kAlign - 1) / FusedWorkspace::kAlign * FusedWorkspace::kAlign;
    return off;
  };
  w.counters = take(w.num_counters * 4);
  w.inter = take(P * N * 4);
  w.y = take(P * K * 4);
  w.part1 = take((2 * N + 128) * kMaxSplit * P * 4);
  w.part2 = take((K + 128) * kMaxSplit * P * 4);
  w.total = at;
  return w;
}

}  // namespace moekit::cuda::fused_moe
