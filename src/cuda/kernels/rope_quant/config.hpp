// The tile shape of the inv_rope_fp8_quant kernel (host-visible). Memory-bound: what matters is
// the bytes in flight per SM, not arithmetic.
#pragma once

namespace moekit::cuda {

struct InvRopeQuantConfig {
  // One warp per (token, head) row of D channels: each lane holds D/256 chunks of 8 channels
  // (16-byte loads), chunk c = lane + 32m, so a warp's load instruction reads 512 contiguous bytes
  // and a 128-channel block is one half-warp (4 xor-shuffles for its absmax).
  static constexpr int kHeadDim = 512;  // DeepSeek-V4; the only head_dim compiled
  static constexpr int kWarps = 8;      // 256 threads: 8 consecutive tokens of one head per step,
                                        // so lane 0 / 16 of the 8 warps write 32 contiguous scale bytes
  static constexpr int kRowsPerWarp = 2;  // tokens per warp, loads of both issued before any math:
                                          // 2 KB in flight per warp
  static constexpr int kMinBlocksPerSm = 4;  // 32 warps/SM (64 KB of loads in flight): caps ptxas
                                             // at 64 registers, no spills (70 without the cap)
};

}  // namespace moekit::cuda
