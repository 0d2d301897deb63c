// The tile shapes of the inv_rope_fp8_quant kernel (host-visible). Memory-bound: what matters is
// the bytes of loads in flight per SM, not arithmetic.
#pragma once

namespace moekit::cuda {

// One warp per (token, head) row of kHeadDim channels: each lane holds kHeadDim/256 chunks of 8
// channels (16-byte loads), chunk c = lane + 32m, so a warp's load instruction reads 512
// contiguous bytes and a 128-channel block is one half-warp (4 xor-shuffles for its absmax).
// kWarps = 8: a CTA covers 8 consecutive tokens of one head per step, so lanes 0 / 16 of its
// warps write 32 contiguous scale bytes. Each warp takes kRowsPerWarp tokens and issues the loads
// of all of them before any math.
template <int kRows, int kMinBlocks, bool kPrefetch>
struct InvRopeQuantConfig {
  static constexpr int kHeadDim = 512;  // DeepSeek-V4; the only head_dim compiled
  static constexpr int kWarps = 8;
  static constexpr int kRowsPerWarp = kRows;
  static constexpr int kMinBlocksPerSm = kMinBlocks;
  static constexpr bool kPrefetchCs = kPrefetch;  // cos/sin of every row loaded up front
};

// The default: 2 rows a warp, cos/sin prefetched; 64 registers (capped by 4 CTAs/SM), no spills:
// 32 warps x 2 KB = 64 KB of loads in flight per SM.
using InvRopeQuantR2 = InvRopeQuantConfig<2, 4, true>;
// The alternative for the A/B (MOEKIT_ROPE_QUANT_ROWS=4): 4 rows a warp, cos/sin loaded per row
// when it is processed (an L2 hit for every head but the first); 3 CTAs/SM, 24 warps x 4 KB.
using InvRopeQuantR4 = InvRopeQuantConfig<4, 3, false>;

}  // namespace moekit::cuda
