// Kernel arguments of the mma.sync grouped expert GEMM, derived on the host from
// GroupedGemmParams, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/kernels/mma/config.hpp"

namespace moekit::cuda::mma_sm90 {

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

}  // namespace moekit::cuda::mma_sm90
