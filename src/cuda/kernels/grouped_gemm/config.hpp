// Tile configuration of the sm_90 grouped expert GEMMs (host-visible, no CUDA types) and the
// launch-time arguments the host derives from GroupedGemmParams for the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/grouped_gemm/params.hpp"

namespace moekit::cuda::grouped_gemm_sm90 {

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

// Operand element kind of an instantiation.
enum class Operand : int { kBf16, kFp16, kE4m3 };

// What the kernels receive (by value, __grid_constant__): the params plus derived sizes.
struct KernelArgs {
  GroupedGemmParams p;
  std::int64_t k_bytes = 0;     // bytes of one A / B row (k_dim * element size)
  std::int64_t rows_b = 0;      // B rows per expert: 2N (GEMM1) or K (GEMM2)
  std::int64_t half_row_step = 0;  // B row offset of the CTA's second half: N (GEMM1) or 64 (GEMM2)
  int half_col_step = 0;        // output column offset of the second half: 0 (GEMM1) or 64 (GEMM2)
  int num_k_tiles = 0;          // ceil(k_bytes / kBlockKBytes)
  int num_k_groups = 0;         // ceil(k_dim / 128): row length of block128 scales
  int num_b_blocks = 0;         // ceil(rows_b / 128): block128 weight-scale rows per expert
  int vec_bytes = 16;           // cp.async width: 16, 8 or 4 (divides the row pitch and the bases)
};

// One function per instantiation (inst/*.cu); grid = (x, y), stream = cudaStream_t, pdl: launch
// as the programmatic dependent of the previous kernel on the stream (cuda/common/pdl.cuh).
void run_sm90_bf16(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl);
void run_sm90_fp16(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl);
void run_sm90_e4m3(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl);
void run_sm90_e4m3_block128(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl);

}  // namespace moekit::cuda::grouped_gemm_sm90
