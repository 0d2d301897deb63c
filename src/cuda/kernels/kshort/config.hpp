// Tile constants and shared-memory layout of the static K-short GEMM2 (sm_90a), host-visible: the
// launcher sizes the grid and shared memory from them, the kernel lays out its ring with them.
// The kernel parameters are in params.hpp, the device code in kernel_sm90.cuh.
#pragma once

#include <cstdint>

namespace moekit::cuda::kshort {

// A unit: 64 expert-sorted token rows (one wgmma M) x 256 output columns (wgmma N = 256) x all of K.
inline constexpr int kBlockM = 64;
inline constexpr int kBlockN = 256;
// One stage is 128 bytes of K (one row of the 128-byte swizzle atom, the widest box TMA accepts
// with SWIZZLE_128B): the unit's A rows (one 64-row box) and its 256 weight rows (two 128-row boxes).
inline constexpr int kKBlockBytes = 128;
inline constexpr int kBoxRows = 128;
inline constexpr int kATileBytes = kBlockM * kKBlockBytes;      // 8 KB
inline constexpr int kBTileBytes = kBlockN * kKBlockBytes;      // 32 KB
inline constexpr int kStageBytes = kATileBytes + kBTileBytes;   // 40 KB
// K-short: k_dim x element bytes <= 512 (4 stages a unit): qwen3-30b (N = 96), qwen3-235b (192),
// deepseek-v3 (256) and mixtral-sized fp8 shards at TP8. A unit's stages must be fewer than the
// ring's (the two consumer warpgroups' waits stay within one phase of each barrier).
inline constexpr int kMaxKBlocks = 4;
inline constexpr int kMaxStages = 5;
// Warpgroup 0: thread 0 issues every TMA (the other producer threads leave at once); warpgroups 1
// and 2 each run every second unit of the CTA's range (wgmma, then the epilogue), so that one's
// epilogue overlaps the other's main loop.
inline constexpr int kProducerThreads = 128;
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = kProducerThreads + kConsumerThreads;
inline constexpr int kConsumerWarps = kConsumerThreads / 32;
// Named barriers kOrderBarrier + w (id 0 is __syncthreads'): consumer warpgroup w waits there for
// the other's arrival before its first data wait of a unit (kernel_sm90.cuh, consume).
inline constexpr int kOrderBarrier = 1;
// setmaxnreg: 128 x 40 + 256 x 232 = 64512 <= 65536 registers of the SM (the consumers hold 128
// accumulators).
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
inline constexpr int kSmemLimit = 227 * 1024;
inline constexpr int kMaxExperts = 1024;
// The schedule (kernel_sm90.cuh; constexpr, so the kernel and the CPU tests run the same lines:
// tests/cpu/test_kshort_schedule.cpp). Units are (expert, token tile of kBlockM rows, column
// tile), column tile fastest; an expert with `rows` rows has units_of(rows) of them.
constexpr int units_of(int rows, int col_tiles) { return (rows + kBlockM - 1) / kBlockM * col_tiles; }
// Unit `local` of its expert: token tile and column tile.
struct UnitPos {
  int tile;
  int col;
};
constexpr UnitPos unit_pos(int local, int col_tiles) { return {local / col_tiles, local - local / col_tiles * col_tiles}; }
// CTA b of `ctas` takes the contiguous units [lo, hi) of `units`: shares whose sizes differ by at
// most one, in CTA order.
struct UnitRange {
  int lo;
  int hi;
};
constexpr UnitRange unit_range(long long units, int b, int ctas) {
  return {static_cast<int>(units * b / ctas), static_cast<int>(units * (b + 1) / ctas)};
}

// Shared-memory layout in bytes from a 1024-aligned base (TMA and the 128-byte swizzle need it).
struct SmemLayout {
  int stages;         // ring stages of kStageBytes: stage s at s * kStageBytes (A tile, then B tile)
  int full_bar_off;   // uint64 [stages]
  int empty_bar_off;  // uint64 [stages]
  int table_off;      // int row_offsets[E+1], int unit_prefix[E+1]
  int bytes;          // total, including 1024 bytes of alignment slack
};

constexpr SmemLayout smem_layout(int num_experts, int stages) {
  SmemLayout l{};
  l.stages = stages;
  l.full_bar_off = stages * kStageBytes;
  l.empty_bar_off = l.full_bar_off + stages * 8;
  l.table_off = l.empty_bar_off + stages * 8;
  l.bytes = l.table_off + 2 * (num_experts + 1) * 4 + 1024;
  return l;
}

// The deepest ring that fits with `num_experts`' table, or 0 when none deeper than a unit's
// `k_blocks` stages does.
constexpr int stages_for(int num_experts, int k_blocks) {
  for (int s = kMaxStages; s > k_blocks; --s)
    if (smem_layout(num_experts, s).bytes <= kSmemLimit) return s;
  return 0;
}

static_assert(stages_for(kMaxExperts, kMaxKBlocks) == kMaxStages, "the 5-stage ring fits beside every table");

}  // namespace moekit::cuda::kshort
