// The tile configs of the inv_rope_fp8_quant kernels (host-visible). Memory-bound: what matters is
// the bytes of loads in flight per SM and that no dependent load (position -> cos/sin row) stalls
// a warp's stream, not arithmetic.
#pragma once

namespace moekit::cuda {

// The register kernel (kernel_sm90.cuh): one warp per (token, head) row of kHeadDim channels, each
// lane holds kHeadDim/256 chunks of 8 channels (16-byte loads), chunk c = lane + 32m, so a warp's
// load instruction reads 512 contiguous bytes and a 128-channel block is one half-warp (4
// xor-shuffles for its absmax). kWarps = 8: a CTA covers 8 consecutive tokens of one head per
// step. Each warp takes kRowsPerWarp tokens, issues the loads of all of them, computes, exits:
// two dependent latencies (position, then cos/sin) per warp lifetime with 2 KB in flight, 55 % of
// HBM at T = 16384 on the H200 (docs/rope_quant.md). Kept for any rope_dim <= 256 (the pipelined
// kernel takes rope_dim <= 64) and as the A/B baseline (MOEKIT_ROPE_QUANT_ROWS=2).
template <int kRows, int kMinBlocks, bool kPrefetch>
struct InvRopeQuantConfig {
  static constexpr int kHeadDim = 512;  // DeepSeek-V4; the only head_dim compiled
  static constexpr int kWarps = 8;
  static constexpr int kRowsPerWarp = kRows;
  static constexpr int kMinBlocksPerSm = kMinBlocks;
  static constexpr bool kPrefetchCs = kPrefetch;  // cos/sin of every row loaded up front
};
// 2 rows a warp, cos/sin prefetched; 64 registers (capped by 4 CTAs/SM), no spills.
using InvRopeQuantR2 = InvRopeQuantConfig<2, 4, true>;

// The pipelined kernel (kernel_pipe_sm90.cuh): a persistent grid (the resident CTAs, or one row a
// warp at small T); each warp keeps one head and walks its tokens t0, t0 + W / H, ... (the warps of
// a CTA hold the heads of one token, which share its position and cos/sin row through L1) through a
// kStages-deep cp.async ring in shared memory: row j + kStages - 1's data, row j + kStages - 2's
// cos/sin (its position landed a stage before) and row j + 2 kStages - 2's position are in flight
// while row j is computed, so the position -> cos/sin chain is off the stream's critical path and
// each warp keeps (kStages - 1) KB of o in flight without registers holding it. The same float
// operations per element as the register kernel, so the same bytes; its lane layout spreads the
// rotated channels over 16 lanes (2 pairs each), so rope_dim <= 64.
template <int kWarpsPerCta, int kNumStages, int kMinBlocks>
struct InvRopeQuantPipeConfig {
  static constexpr int kHeadDim = 512;
  static constexpr int kMaxRopeDim = 64;
  static constexpr int kWarps = kWarpsPerCta;
  static constexpr int kStages = kNumStages;  // power of two, >= 3
  static constexpr int kMinBlocksPerSm = kMinBlocks;
  static_assert(kNumStages >= 3 && (kNumStages & (kNumStages - 1)) == 0, "ring indices use & (kStages - 1)");
};
// The default (MOEKIT_ROPE_QUANT_ROWS unset or 4): 8 warps x 4 stages, 48 KB of static shared
// memory a CTA (a warp: 4 x 1 KB of data, 4 x 256 B of cos/sin, 8 x 128 B of positions), 4 CTAs
// per SM (192 KB of shared memory; __launch_bounds__ caps registers at 64): 32 warps x 3 KB =
// 96 KB of o in flight per SM (Little: ~4.1 TB/s x ~1.5 us loaded latency / 132 SMs = ~47 KB of
// reads needed). ~300 SASS instructions a row in its loop (the register kernel: ~450), under the
// ~400 a row that 4.1 TB/s leaves an SM's 4 schedulers at 1.98 GHz.
using InvRopeQuantPipe4 = InvRopeQuantPipeConfig<8, 4, 4>;
// The A/B alternative (MOEKIT_ROPE_QUANT_ROWS=8): 4 warps x 8 stages (48 KB a CTA), 4 CTAs/SM:
// 16 warps x 7 KB = 112 KB in flight, half the warps (longer per-warp row lists, so a larger
// start-up share at mid T).
using InvRopeQuantPipe8 = InvRopeQuantPipeConfig<4, 8, 4>;

// The half-warp kernel (kernel_half_sm90.cuh): the pipelined kernel's persistent grid and
// per-lane ring with a row per half-warp, so the per-row work that does not grow with the
// channels is paid once per two rows (the pipelined kernel is bound by its ~300 instructions a
// row). 4 warps x 4 stages: a half's ring is 4 x 1 KB of data, 4 x 256 B of cos/sin and 8 x 64 B
// of positions (5.5 KB), 44 KB of static shared memory a CTA; __launch_bounds__ asks for at
// least 4 CTAs an SM (128 registers a thread at most; ptxas uses 79), and the occupancy query that
// sizes the grid finds room for 5 in 228 KB (pipe4's 48 KB CTAs fit 4): 40 rows x 3 KB = 120 KB
// of o in flight per SM. auto's kernel above kRopeQuantBulkMaxRows since session 41 (below).
// Its config is the pipelined kernel's (InvRopeQuantPipeConfig: the same fields).
using InvRopeQuantHalf = InvRopeQuantPipeConfig<4, 4, 4>;

// The latency-first kernel (kernel_small_sm90.cuh): one warp per row, one row a warp, 4 warps a
// CTA (grid = ceil(T * H / 4)), no loop, no shared memory: a call is launch + max(position, row)
// load + the cos/sin load + the math. Any rope_dim <= 256.
template <int kWarpsPerCta>
struct InvRopeQuantSmallConfig {
  static constexpr int kHeadDim = 512;
  static constexpr int kWarps = kWarpsPerCta;
};
using InvRopeQuantSmall = InvRopeQuantSmallConfig<4>;

// The bandwidth kernel (kernel_bulk_sm90.cuh): a persistent grid of CTAs with one producer warp
// (1D bulk copies of whole rows into a kStages ring of kRows-row tiles, positions kPosAhead tiles
// ahead, so each tile's cos/sin rows go out right after its rows) and kConsumerWarps warps of two
// rows each a tile. rope_dim <= 64 with rope_dim % 4 == 0 (a cos/sin row is a bulk copy: a
// multiple of 16 bytes) and a 16-byte aligned cache (pointer and row pitch); otherwise the launcher
// takes the pipelined kernel.
template <int kConsumers, int kNumStages, int kPosAheadTiles, int kMinBlocks>
struct InvRopeQuantBulkConfig {
  static constexpr int kHeadDim = 512;
  static constexpr int kMaxRopeDim = 64;
  static constexpr int kConsumerWarps = kConsumers;
  static constexpr int kRows = 2 * kConsumers;  // rows a tile (a stage)
  static constexpr int kStages = kNumStages;    // power of two
  static constexpr int kPosAhead = kPosAheadTiles;  // positions loaded this many tiles before their rows
  static constexpr int kMinBlocksPerSm = kMinBlocks;
  static_assert((kNumStages & (kNumStages - 1)) == 0, "ring indices use & (kStages - 1)");
};
// The default: 8 consumer warps (16-row tiles of 16.25 KB + 4 KB of cos/sin), 4 stages, positions 2
// tiles ahead of the rows: 84,352 B of dynamic shared memory, 2 CTAs (18 warps) a SM, up to 128 KB
// of o in flight a SM (Little: ~47 KB needed at 4.1 TB/s). ~185 SASS instructions a row in the
// consumers (the pipelined kernel ~300): the loads cost one instruction a row in the producer.
using InvRopeQuantBulk = InvRopeQuantBulkConfig<8, 4, 2, 2>;

// The launcher's auto choice by rows (T x H): the latency-first kernel up to kRopeQuantSmallMaxRows,
// the bulk kernel up to kRopeQuantBulkMaxRows, the half-warp kernel above (the 4-stage pipelined
// kernel until session 41). MOEKIT_ROPE_KERNEL=small|bulk|pipe4|half|... forces one for A/Bs.
// Measured on the H200 (2026-12-01, moekit-bench --op inv_rope_fp8_quant --kernels small,bulk,pipe4,
// V4-Flash 8 heads and V4-Pro 16 heads at TP8, T = 1..16384): small is fastest up to 4096 rows
// (Flash T <= 512, Pro T <= 256), bulk from 8192 to 32768-65536 rows (Flash 1024-4096, Pro
// 512-4096; at 65536 rows bulk and pipe4 are within 1 %), pipe4 at 131072 rows and more. Session
// 41 (2026-12-04, --kernels auto,half,pipe4,bulk, two runs): half is the fastest at 131072 rows and
// more (Flash 16384: 57.0 / 58.5 us against pipe4 59.4 / 59.9 and bulk 61.8; Pro 8192: 57.1 / 57.9
// against 59.2 / 59.5; Pro 16384: 111.7 / 111.7 against 117.1 / 117.3), bulk at 65536 rows (Flash
// 8192: 29.8 / 30.0 against half 31.3 / 31.4).
constexpr long long kRopeQuantSmallMaxRows = 4096;
constexpr long long kRopeQuantBulkMaxRows = 65536;

}  // namespace moekit::cuda
