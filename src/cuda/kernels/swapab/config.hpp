// Tile constants of the Swap-AB decode GEMM (sm_90a), host-visible: the launcher sizes shared
// memory and the grid from them, the kernel lays out its pipeline with them.
#pragma once

#include <cstdint>

namespace moekit::cuda::swapab {

// 64 weight rows per tile: wgmma's A side is fixed at M = 64, and at decode an expert sees fewer
// than 64 tokens, so Swap-AB puts the weight rows there and the tokens on wgmma's N side.
inline constexpr int kTileRows = 64;
// Tokens of one expert handled per work item (wgmma N = 8, 16, 32 or 64, chosen per item from the
// item's token count); experts with more rows are cut into chunks of 64.
inline constexpr int kMaxTokens = 64;
// One pipeline stage spans 128 bytes of K (64 bf16 or 128 e4m3): exactly one row of the 128-byte
// swizzle atom, the widest box TMA accepts with SWIZZLE_128B.
inline constexpr int kStageKBytes = 128;
inline constexpr int kTileBytes = kTileRows * kStageKBytes;        // 8 KB of weights
// Warpgroup 0 produces (TMA of weight tiles, cp.async gather of token rows), warpgroup 1 runs
// wgmma and the epilogue.
inline constexpr int kProducerThreads = 128;
inline constexpr int kConsumerThreads = 128;
inline constexpr int kThreads = kProducerThreads + kConsumerThreads;
// Stages: up to ~190 KB of the 227 KB a CTA may use, so that 100+ KB of weights are in flight per
// SM (HBM latency x per-SM bandwidth is ~40 KB); the rest holds barriers, scales, the epilogue
// staging, the split-K receive buffers and the expert table. The count is a run-time value.
inline constexpr int kMaxStagesGateUp = 7;   // 24 KB per stage: gate tile + up tile + tokens
inline constexpr int kMaxStagesScatter = 12; // 16 KB per stage: w2 tile + tokens
inline constexpr int kMinStages = 3;
inline constexpr int kSmemLimit = 227 * 1024;
// Two CTAs an SM (GEMM2 at split 1, launch_sm90.cu gemm2_two_ctas): each within half of the SM's 228 KB
// less the 1 KB the driver reserves a CTA, and within 128 registers a thread (the GEMM2
// instantiations' launch bounds ask for two CTAs).
inline constexpr int kSmemLimitTwoCtas = 113 * 1024;
// Wide stages: where no expert has more than kWideMaxTokens rows (decode; every CTA decides from
// the same expert offsets), a stage spans several 128-byte K blocks with token tiles of
// kWideMaxTokens rows, so the consumer's per-stage work (barrier waits, descriptors, the release)
// and the producer's are paid once per wide_kblocks blocks. GEMM1 two blocks a stage (5 x 36 KB);
// GEMM2 three (its K is short at TP8: gpt-oss fp8's 360 bytes are one stage a tile, not two;
// 6 x 30 KB on one CTA an SM, 3 on two). Not for fp8_block128 (a stage is one 128-wide scale group
// there).
inline constexpr int kWideKBlocksGateUp = 2;
inline constexpr int kWideKBlocksScatter = 3;
inline constexpr int kWideMaxTokens = 16;
inline constexpr int kMaxStagesGateUpWide = 5;
inline constexpr int kMaxStagesScatterWide = 6;
constexpr int wide_kblocks(bool gate_up) { return gate_up ? kWideKBlocksGateUp : kWideKBlocksScatter; }
// The barriers sit at the start of the layout, in a region of their own for every stage count,
// so that a CTA initializes them before it knows which layout its call takes.
inline constexpr int kBarrierRegionBytes = 1024;
inline constexpr int kMaxBarrierStages = 24;
static_assert((2 * kMaxBarrierStages + 2) * 8 <= kBarrierRegionBytes, "barrier region too small");
static_assert(kMaxStagesScatter <= kMaxBarrierStages && kMaxStagesScatterWide <= kMaxBarrierStages,
              "stage count past the barrier region");
// Epilogue staging: the finished fp32 tile goes through shared memory [token][row] so that the
// activation runs in a short loop and the stores are coalesced along the output row. Row stride
// 68 floats: the accumulator layout writes tokens 2(l%4) apart from lanes l/4 rows apart, and
// 4 * tok + row spreads those 32 lanes over 32 banks.
inline constexpr int kOutStride = 68;
// The expert table (row offsets and work-item prefix) lives in shared memory.
inline constexpr int kMaxExperts = 1024;
// Split-K over a thread-block cluster of 1, 2, 4 or 8 CTAs (8 = the portable cluster limit). The
// 64 tile rows form 8 groups of 8 (group 2w + h = the rows a consumer warp w holds in its h half);
// CTA rank r of S owns groups [8r/S, 8(r+1)/S): the other ranks store their partial sums of those
// groups into its shared memory (DSMEM), and it adds them in rank order: deterministic.
inline constexpr int kMaxSplitK = 8;
// Tiles per work item: when one CTA's share of K is short (GEMM2 at TP8: k_dim = N/8 gives 1.5
// to 6 stages), an item covers T consecutive 64-row tiles of one expert and chunk so that it
// streams at least this many K stages per item; T stays 1 when the items would fall below two
// per cluster.
inline constexpr int kTargetItemStages = 8;
inline constexpr int kMaxTilesPerItem = 16;
// Floats of one (source, group, plane) receive block: 16 accumulator registers x 32 lanes.
inline constexpr int kRecvBlockFloats = (kMaxTokens / 4) * 32;

constexpr int planes(bool gate_up) { return gate_up ? 2 : 1; }
// K blocks of 128 bytes a stage spans and the token rows of its token tiles.
constexpr int token_rows(int kblocks) { return kblocks > 1 ? kWideMaxTokens : kMaxTokens; }
constexpr int max_stages(bool gate_up, int kblocks = 1) {
  return kblocks == 1 ? (gate_up ? kMaxStagesGateUp : kMaxStagesScatter)
                      : (gate_up ? kMaxStagesGateUpWide : kMaxStagesScatterWide);
}
// A stage: the weight tiles of every K block ([block][plane], 8 KB each), then the token tiles
// ([block], token_rows x 128 bytes each).
constexpr int stage_bytes(bool gate_up, int kblocks = 1) {
  return kblocks * (planes(gate_up) * kTileBytes + token_rows(kblocks) * kStageKBytes);
}
// Receive buffer floats for one item parity: (S - 1) sources x (8 / S) owned groups x planes.
constexpr int recv_buffer_floats(bool gate_up, int split) {
  return split <= 1 ? 0 : (split - 1) * (8 / split) * planes(gate_up) * kRecvBlockFloats;
}

// Shared-memory layout, in bytes from a 1024-aligned base (TMA and the 128-byte swizzle need it).
struct SmemLayout {
  int stages;
  int stage_bytes;    // stage_bytes(gate_up, kblocks): the layout's K blocks a stage
  int full_bar_off;   // uint64 [kMaxBarrierStages]   } the barrier region, the same offsets in
  int empty_bar_off;  // uint64 [kMaxBarrierStages]   } every layout
  int red_bar_off;    // uint64 [2]: split-K partial sums received, per item parity
  int tiles_off;      // stage s at tiles_off + s * stage_bytes
  // Per-stage areas the producer fills with cp.async and the stage's full barrier publishes:
  int a_scale_off;    // float [stages][kMaxTokens]: block128: token scales of the stage's K group;
                      // other schemes: the item's routed weights (written at its first K stage)
  int b_scale_off;    // float [stages][2]: block128: weight-block scales (gate, up); per tensor:
                      // [stage][0] = b_scale[e] of the item (written at its first K stage)
  int slot_off;       // int [stages][kMaxTokens]: the item's slots sorted_slots[row_begin + t]
                      // (written at its first K stage)
  int token_off;      // epilogue token info, double-buffered: int slot[2][64], float w[2][64], s[2][64]
  int out_plane_floats;  // token_rows(kblocks) x kOutStride
  int out_off;        // float [planes][token rows][kOutStride]: gate (or w2) plane, then up plane
  int recv_off;       // float [2 parities][recv_buffer_floats]
  int table_off;      // int row_offsets[E+1], int item_prefix[E+1]
  int bytes;          // total, including the 1024 bytes of alignment slack
};

constexpr SmemLayout smem_layout_with(bool gate_up, int num_experts, int split, int stages, int kblocks = 1) {
  SmemLayout l{};
  l.stages = stages;
  l.stage_bytes = stage_bytes(gate_up, kblocks);
  l.full_bar_off = 0;
  l.empty_bar_off = kMaxBarrierStages * 8;
  l.red_bar_off = 2 * kMaxBarrierStages * 8;
  l.tiles_off = kBarrierRegionBytes;
  l.a_scale_off = l.tiles_off + stages * l.stage_bytes;
  l.b_scale_off = l.a_scale_off + stages * kMaxTokens * 4;
  l.slot_off = l.b_scale_off + stages * 2 * 4;
  l.token_off = l.slot_off + stages * kMaxTokens * 4;
  l.out_plane_floats = token_rows(kblocks) * kOutStride;
  l.out_off = l.token_off + 3 * 2 * kMaxTokens * 4;
  l.recv_off = l.out_off + planes(gate_up) * l.out_plane_floats * 4;
  l.table_off = l.recv_off + 2 * recv_buffer_floats(gate_up, split) * 4;
  l.bytes = l.table_off + 2 * (num_experts + 1) * 4 + 1024;
  return l;
}

// The deepest pipeline that fits `limit` bytes: the stage count gives way to the split-K receive
// buffers (and, with two CTAs an SM, to the other CTA).
constexpr SmemLayout smem_layout(bool gate_up, int num_experts, int split, int kblocks = 1, int limit = kSmemLimit) {
  int stages = max_stages(gate_up, kblocks);
  while (stages > kMinStages && smem_layout_with(gate_up, num_experts, split, stages, kblocks).bytes > limit)
    --stages;
  return smem_layout_with(gate_up, num_experts, split, stages, kblocks);
}

static_assert(smem_layout(true, kMaxExperts, kMaxSplitK).bytes <= kSmemLimit, "GEMM1 layout exceeds 227 KB");
static_assert(smem_layout(false, kMaxExperts, kMaxSplitK).bytes <= kSmemLimit, "GEMM2 layout exceeds 227 KB");
static_assert(smem_layout(true, kMaxExperts, kMaxSplitK, kWideKBlocksGateUp).bytes <= kSmemLimit, "wide GEMM1 layout exceeds 227 KB");
static_assert(smem_layout(false, kMaxExperts, kMaxSplitK, kWideKBlocksScatter).bytes <= kSmemLimit, "wide GEMM2 layout exceeds 227 KB");
static_assert(smem_layout(false, kMaxExperts, 1, 1, kSmemLimitTwoCtas).bytes <= kSmemLimitTwoCtas &&
                  smem_layout(false, kMaxExperts, 1, kWideKBlocksScatter, kSmemLimitTwoCtas).bytes <= kSmemLimitTwoCtas,
              "GEMM2's two-CTA layouts exceed half an SM");
static_assert(smem_layout(true, kMaxExperts, 1).stages == kMaxStagesGateUp, "GEMM1 lost a stage");
static_assert(smem_layout(false, kMaxExperts, 1).stages == kMaxStagesScatter, "GEMM2 lost a stage");
static_assert(smem_layout(true, kMaxExperts, 1, kWideKBlocksGateUp).stages == kMaxStagesGateUpWide, "wide GEMM1 lost a stage");
static_assert(smem_layout(false, kMaxExperts, 1, kWideKBlocksScatter).stages == kMaxStagesScatterWide, "wide GEMM2 lost a stage");

}  // namespace moekit::cuda::swapab
