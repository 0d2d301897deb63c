// The kernel parameters the TMA + wgmma GEMM families (swapab/, tokmajor/) have in common: the
// weights' TMA descriptor, and the pointers, sizes, tile counts, gather and scales that the
// launcher takes from GroupedGemmParams (gemm_common::fill_common_fields). Each family's
// KernelParams derives from WeightMap and TmaGemmParams, in this order, and adds its own fields
// after them: the epilogue's out_type, act, alpha and limit (token-major has its out_vec16 among
// them), then its tiling, schedule and shared-memory layout.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver call is made here)

#include <cstdint>

#include "cuda/kernels/gemm_common/params.hpp"  // ScaleMode
#include "cuda/numerics/bias.cuh"               // BiasType

namespace moekit::cuda::gemm_common {

// The weights B as a 3D tensor [E, rows_b, k_dim] (dims listed innermost first in the map), box
// [128 bytes of K, the family's box rows, 1 expert], 128-byte swizzle, zeros outside the tensor.
// A base of its own: in one struct with the fields below, its 64-byte alignment would pad them
// (and move the family's fields behind them) to the next 64 bytes.
struct WeightMap {
  CUtensorMap tmap_b;
};

// 136 bytes, 8-byte aligned: after a WeightMap base the family's own fields start at byte 264.
struct TmaGemmParams {
  const std::int32_t* row_offsets;   // [E+1]
  const std::int32_t* sorted_slots;  // [rows] slot m*k+j of each expert-sorted row
  const std::uint8_t* a;             // A rows of a_row_bytes each
  const float* a_scale;              // per tensor [1] / per row of A / [rows of A, k_groups]
  const float* b_scale;              // per tensor [E] / [E, rows_b] / [E, row_blocks, k_groups]
  const void* bias;                  // [E, rows_b] or null
  const float* topk_weights;         // [M*k] by slot
  const float* sorted_weights;       // [rows] = topk_weights[sorted_slots[r]], or null
  void* out;
  std::int64_t a_row_bytes;          // k_dim * element bytes (multiple of 16)
  std::int64_t n_out;                // GEMM1: N (B has 2N rows); GEMM2: K
  std::int64_t rows_b;               // 2N or K
  int num_experts;
  int top_k;
  int num_col_tiles;                 // ceil(n_out / output columns of a tile)
  int num_k_stages;                  // ceil(a_row_bytes / 128)
  int k_groups;                      // block128: ceil(k_dim / 128)
  int row_blocks;                    // block128: ceil(rows_b / 128)
  int gather_a;                      // A row of sorted row r = sorted_slots[r] / top_k, else r
  int weight_on_input;
  int scale_mode;                    // ScaleMode (gemm_common/params.hpp)
  int bias_type;                     // numerics::BiasType
};
static_assert(sizeof(WeightMap) == 128 && sizeof(TmaGemmParams) == 136 && alignof(TmaGemmParams) == 8);

}  // namespace moekit::cuda::gemm_common
