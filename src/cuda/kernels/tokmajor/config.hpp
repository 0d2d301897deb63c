// Tile constants and shared-memory layout of the token-major prefill GEMM (sm_90a), host-visible:
// the launcher sizes the grid and shared memory from them, the kernel lays out its pipeline with
// them. The kernel parameters are in params.hpp.
#pragma once

#include <cstdint>

namespace moekit::cuda::tokmajor {

// 128 token rows per tile: two consumer warpgroups, each wgmma M = 64.
inline constexpr int kBlockM = 128;
// Output columns per tile (wgmma N): 256 (the CUTLASS-optimal 128x256 Hopper tile: 128 fp32
// accumulators per consumer thread) except fp8_block128, whose per-K-group promotion needs a
// second accumulator set, so 2 x 64 registers at N = 128. GEMM1 splits N between gate and up:
// a 256-wide tile holds 128 gate rows n..n+127 and the matching up rows N+n.., i.e. 128 outputs.
constexpr int block_n(bool block128) { return block128 ? 128 : 256; }
// One pipeline stage spans 128 bytes of K (64 bf16 or 128 e4m3 = one block128 K group): one row
// of the 128-byte swizzle atom, the widest box TMA accepts with SWIZZLE_128B.
inline constexpr int kStageKBytes = 128;
inline constexpr int kATileBytes = kBlockM * kStageKBytes;  // 16 KB of tokens
constexpr int b_tile_bytes(bool block128) { return block_n(block128) * kStageKBytes; }  // 32 or 16 KB
// GEMM2's ping-pong units (below) are 64 token rows: their A tile is 8 KB.
constexpr int a_tile_bytes(bool pingpong) { return pingpong ? kATileBytes / 2 : kATileBytes; }
constexpr int stage_bytes(bool block128, bool pingpong = false) {
  return a_tile_bytes(pingpong) + b_tile_bytes(block128);
}
// Warpgroup 0 produces (one thread issues TMA of the weight tile, all 128 gather A rows with
// cp.async), warpgroups 1 and 2 run wgmma on rows [0, 64) and [64, 128) of the tile (GEMM2's
// ping-pong form: each on the whole 64-row tile of its own units).
inline constexpr int kProducerThreads = 128;
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = kProducerThreads + kConsumerThreads;
// GEMM2's ping-pong consumers (the kPingPong instantiations): units of 64 token rows, one warpgroup each.
inline constexpr int kPingPongBlockM = 64;
// The ping-pong producer stages a unit's row slots and router weights in the stage's row-scale
// area (SmemLayout::a_scale_off, kBlockM words a stage; only block128 uses it otherwise).
static_assert(2 * kPingPongBlockM <= kBlockM, "a ping-pong unit's row metadata exceeds a stage's row-scale area");
// Named barrier of the producer warpgroup (id 0 is __syncthreads'), used by the dynamic schedule.
inline constexpr int kProducerBarrier = 1;
// The dynamic schedule takes the next unit one tile ahead when a tile has at most this many
// K stages (kernel_sm90.cuh, produce()).
inline constexpr int kLookaheadMaxStages = 8;
// ... and takes up to this many consecutive units an atomic (KernelParams::units_per_take).
inline constexpr int kMaxUnitsPerTake = 8;
// setmaxnreg: 128 x 64 + 256 x 216 = 63488 <= 65536 registers of the SM. The producer keeps 8
// gathered row indices, the tile and the pipeline state live (56 spilled a register with
// block128); the consumers use ~172 (128 accumulators + addresses + epilogue values).
inline constexpr int kProducerRegs = 64;
inline constexpr int kConsumerRegs = 216;
// Stages: 4 x 48 KB (N = 256) or 6 x 32 KB (block128) = 192 KB of the 227 KB a CTA may use; the
// rest holds the barriers, the block128 scales and the expert table. GEMM2's ping-pong (64-row A
// tiles): 5 x 40 KB = 200 KB for calls of many units a CTA where the expert table leaves room
// (E <= 426 with the two order barriers), else 4 (launch_sm90.cu). The K-short
// ping-pong GEMM2 waits on its data with its producer waiting on free stages (stall sampling,
// qwen3-235b TP8 bf16 M = 64: 30 % / 10 % of the samples, session 32): a ring of 1-2 units of
// 2-3 stages holds too few bytes in flight for the loads' latency.
constexpr int num_stages(bool block128) { return block128 ? 6 : 4; }
inline constexpr int kPingPongStages = 5;
inline constexpr int kSmemLimit = 227 * 1024;
// The expert table (row offsets and tile prefix) lives in shared memory.
inline constexpr int kMaxExperts = 1024;
// GEMM2's epilogue stages each consumer warp's 16 rows, 128 bytes of columns at a time, in shared
// memory so that its stores to the scattered y rows leave as whole 128-byte row segments (a
// 16-byte store per lane, 8 lanes per row) instead of a 4- or 8-byte store per lane and row:
// the per-lane stores made the epilogue, not the MMAs or HBM, the cost of K-short tiles. Row pitch
// 144 bytes for 16-bit y (a warp's 4-byte pair stores: 8 rows x 4 lanes on 32 distinct banks),
// 160 for fp32 (8-byte stores, a half-warp's 4 rows x 4 lanes on 32 distinct banks).
inline constexpr int kOutStageRowBytes = 128;
constexpr int out_stage_pitch(int out_bytes) { return kOutStageRowBytes + (out_bytes == 4 ? 32 : 16); }
inline constexpr int kOutStageWarpBytes = 16 * out_stage_pitch(4);
inline constexpr int kConsumerWarps = kConsumerThreads / 32;
// Thread-block clusters of 1 or 2 CTAs. With 2, the CTAs take two token tiles of the same
// (expert, column tile) and each loads one of the two weight boxes with TMA multicast into both,
// halving the L2 -> SM weight traffic (a 128x256 tile at full rate needs ~9 TB/s of L2 reads
// over 132 SMs without it). The default is the size the launcher uses when not told.
inline constexpr int kMaxCluster = 2;
inline constexpr int kDefaultCluster = 1;

// Shared-memory layout in bytes from a 1024-aligned base (TMA and the 128-byte swizzle need it).
struct SmemLayout {
  int stages;
  int stage_bytes;    // stage s: A tile at s * stage_bytes, B tile 16 KB later (ping-pong: 8 KB)
  int a_scale_off;    // block128: float [stages][kBlockM] row scales of the stage's K group
  int b_scale_off;    // block128: float [stages][2] weight-block scales (first, second B box)
  int full_bar_off;   // uint64 [stages]
  int empty_bar_off;  // uint64 [stages]
  int out_stage_off;  // GEMM2 epilogue: [consumer warp][16 rows][kOutStagePitch bytes]
  int tile_w_off;     // dynamic schedule: int [stages] unit of the tile starting at each stage, then
                      // int [1] the producer warpgroup's broadcast of the unit it just took
  int table_off;      // int row_offsets[E+1], int tile_prefix[E+1]
  int route_off;      // routing in the kernel (route_slots > 0): int16 slot_e[slots] (each slot's
                      // local expert, -1 none), then int unit_slots[kBlockM], int warp_rows[4]
  int bytes;          // total, including 1024 bytes of alignment slack
  int order_bar_off;  // GEMM2's ping-pong consumers: uint64 [2], warpgroup w's order barrier
                      // (kernel_sm90.cuh, consume_pingpong); last, so the fields above keep their offsets
};

// Bytes of the routing area for `slots` slots (0: none).
constexpr int route_bytes(int slots) { return slots > 0 ? (2 * slots + 15) / 16 * 16 + kBlockM * 4 + 16 : 0; }
// The most slots the routing in the kernel takes (M * k): every CTA reads them all.
inline constexpr int kRouteMaxSlots = 4096;

constexpr SmemLayout smem_layout(bool block128, int num_experts, bool pingpong = false, int stages = 0,
                                 int route_slots = 0) {
  SmemLayout l{};
  l.stages = stages > 0 ? stages : num_stages(block128);
  l.stage_bytes = stage_bytes(block128, pingpong);
  l.a_scale_off = l.stages * l.stage_bytes;
  l.b_scale_off = l.a_scale_off + l.stages * kBlockM * 4;
  l.full_bar_off = (l.b_scale_off + l.stages * 2 * 4 + 7) / 8 * 8;
  l.empty_bar_off = l.full_bar_off + l.stages * 8;
  l.out_stage_off = (l.empty_bar_off + l.stages * 8 + 15) / 16 * 16;
  l.tile_w_off = l.out_stage_off + kConsumerWarps * kOutStageWarpBytes;
  l.table_off = l.tile_w_off + (l.stages + 1) * 4;
  l.route_off = (l.table_off + 2 * (num_experts + 1) * 4 + 15) / 16 * 16;
  l.order_bar_off = l.route_off + route_bytes(route_slots);  // 16-byte aligned
  l.bytes = l.order_bar_off + (pingpong ? 2 * 8 : 0) + 1024;
  return l;
}

static_assert(smem_layout(false, kMaxExperts).bytes <= kSmemLimit, "N=256 layout exceeds 227 KB");
static_assert(smem_layout(false, kMaxExperts, true, num_stages(false)).bytes <= kSmemLimit,
              "ping-pong layout at 4 stages exceeds 227 KB");
static_assert(smem_layout(false, 128, true, kPingPongStages).bytes <= kSmemLimit,
              "ping-pong layout at 5 stages exceeds 227 KB for 128 experts");

// GEMM2's ping-pong layout: with `deep`, kPingPongStages stages where they fit with `num_experts`'
// table; otherwise (or where they do not fit) 4.
constexpr SmemLayout pingpong_layout(int num_experts, bool deep) {
  const SmemLayout five = smem_layout(false, num_experts, true, kPingPongStages);
  return deep && five.bytes <= kSmemLimit ? five : smem_layout(false, num_experts, true, num_stages(false));
}
// The launcher decides on ping-pong against the default layout's stages (num_k_stages < stages):
// a ping-pong layout never has fewer, and always fits.
static_assert(pingpong_layout(kMaxExperts, true).stages >= num_stages(false) &&
                  pingpong_layout(kMaxExperts, true).bytes <= kSmemLimit &&
                  pingpong_layout(1, true).stages == kPingPongStages,
              "ping-pong layouts");
static_assert(smem_layout(true, kMaxExperts).bytes <= kSmemLimit, "block128 layout exceeds 227 KB");

}  // namespace moekit::cuda::tokmajor
