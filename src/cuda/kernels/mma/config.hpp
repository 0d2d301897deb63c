// Tile configuration of the mma.sync grouped expert GEMM (host-visible, no CUDA types); the
// kernel arguments are in params.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/gemm_common/params.hpp"  // GemmEpilogue

namespace moekit::cuda::mma_sm90 {

// The correct-first mma.sync tile: 64 rows x 128 B rows x 128 K-bytes per stage, 4 warps (2x2).
// GEMM1 puts 64 gate rows (n0..n0+63) and the matching 64 up rows (N+n0..) in one CTA, so the
// activation runs in registers; GEMM2 covers 128 output columns.
struct TileConfig {
  static constexpr int kBlockM = 64;        // sorted rows per CTA
  static constexpr int kBlockRowsB = 128;   // B rows per CTA (two halves of 64)
  static constexpr int kHalfRowsB = 64;
  static constexpr int kBlockKBytes = 128;  // 64 bf16/fp16 or 128 e4m3: one block128 group per stage
  static constexpr int kStages = 4;         // 4 x 24 KB = 96 KB smem: two CTAs per SM
  static constexpr int kThreads = 128;
  static constexpr int kStageBytes = (kBlockM + kBlockRowsB) * kBlockKBytes;
  static constexpr std::size_t kSmemBytes = static_cast<std::size_t>(kStages) * kStageBytes;
  // Output columns per CTA (grid y).
  static constexpr int out_cols(GemmEpilogue ep) {
    return ep == GemmEpilogue::kGateUpActivation ? kHalfRowsB : kBlockRowsB;
  }
};

}  // namespace moekit::cuda::mma_sm90
