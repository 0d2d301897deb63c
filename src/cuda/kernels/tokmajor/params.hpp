// Kernel parameters of the token-major prefill GEMM (sm_90a), built by launch_sm90.cu from
// GroupedGemmParams, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver call is made here)

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/params.hpp"  // ScaleMode, OutType
#include "cuda/kernels/tokmajor/config.hpp"     // SmemLayout
#include "cuda/numerics/bias.cuh"               // BiasType
#include "moekit/problem.hpp"                   // Activation

namespace moekit::cuda::tokmajor {

// Built by launch_sm90.cu from GroupedGemmParams.
struct KernelParams {
  // Weights B as a 3D tensor [E, rows_b, k_dim] (innermost first in the map), box [128 bytes of
  // K, block_n / 2 rows, 1 expert], 128-byte swizzle, zeros outside the tensor.
  CUtensorMap tmap_b;
  const std::int32_t* row_offsets;   // [E+1]
  const std::int32_t* sorted_slots;  // [rows] slot m*k+j of each expert-sorted row
  const std::uint8_t* a;             // A rows of a_row_bytes each
  const float* a_scale;              // per tensor [1] / per row of A / [rows of A, k_groups]
  const float* b_scale;              // per tensor [E] / [E, rows_b] / [E, row_blocks, k_groups]
  const void* bias;                  // [E, rows_b] or null
  const float* topk_weights;         // [M*k] by slot
  const float* sorted_weights;       // [rows] by sorted row, or null (then topk_weights[slot])
  void* out;
  std::int64_t a_row_bytes;          // k_dim * element bytes (multiple of 16)
  std::int64_t n_out;                // GEMM1: N (B has 2N rows); GEMM2: K
  std::int64_t rows_b;               // 2N or K
  int num_experts;
  int top_k;
  int num_col_tiles;                 // ceil(n_out / output columns per tile)
  int num_k_stages;                  // ceil(a_row_bytes / 128)
  int k_groups;                      // block128: ceil(k_dim / 128)
  int row_blocks;                    // block128: ceil(rows_b / 128)
  int gather_a;                      // A row of sorted row r = sorted_slots[r] / top_k, else r
  int weight_on_input;
  int scale_mode;                    // ScaleMode (gemm_common/params.hpp)
  int bias_type;                     // numerics::BiasType
  int out_type;                      // OutType
  int out_vec16;                     // GEMM2: y rows allow 16-byte stores (n_out * bytes % 16 == 0, out aligned)
  Activation act;
  float alpha;
  float limit;
  int cluster;                       // CTAs per cluster, 1 or 2 (weight multicast)
  // Dynamic schedule (cluster 1): units taken in order from this word, zero at launch (see
  // GroupedGemmParams::tile_counter); null: static round-robin.
  std::uint32_t* tile_counter;
  SmemLayout smem;
};

// Launches the kernel instantiation on `stream` with `grid` persistent CTAs (inst/*.cu); with
// `pdl` as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
template <Operand kOp, bool kGateUp, bool kBlock128>
void run_tokmajor_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

}  // namespace moekit::cuda::tokmajor
