// Kernel parameters of the Swap-AB decode GEMM (sm_90a), built by launch_sm90.cu from
// GroupedGemmParams, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/kernel_params.hpp"
#include "cuda/kernels/gemm_common/params.hpp"  // OutType
#include "cuda/kernels/swapab/config.hpp"       // SmemLayout
#include "moekit/problem.hpp"                   // Activation

namespace moekit::cuda::swapab {

// The common fields (gemm_common/kernel_params.hpp; the weight map's box is 64 rows, a column
// tile 64 output columns), then the epilogue's and the Swap-AB tiling's.
struct KernelParams : gemm_common::WeightMap, gemm_common::TmaGemmParams {
  int out_type;        // OutType
  Activation act;
  float alpha;
  float limit;
  int split_k;         // cluster size S in {1, 2, 4, 8}: CTAs sharing one item's K
  int tiles_per_item;  // T >= 1: consecutive 64-row tiles of one item (same tokens)
  SmemLayout smem;     // from smem_layout(gate_up, E, S) on the host
  // GEMM1 (fp8_per_tensor, fp32 out): GroupedGemmParams::out_absmax, or null. Last, so that the
  // fields before it keep their offsets in every instantiation.
  std::uint32_t* out_absmax;
  // Wide stages (config.hpp, wide_kblocks): allowed (not fp8_block128, not MOEKIT_SWAPAB_KBLOCKS=1),
  // and their layout; a CTA takes them when no expert has more than kWideMaxTokens rows.
  bool allow_wide;
  SmemLayout smem_wide;  // from smem_layout(gate_up, E, S, wide_kblocks(gate_up))
  // GEMM2 with rows of 8 but not 16 bytes (gpt-oss fp8 at TP8: w2 and h rows of N = 360 bytes),
  // which no TMA map can describe (strides must be multiples of 16 bytes): the weights
  // [E, rows_b, b_row_bytes] read by the producer warpgroup's 8-byte cp.async into the same
  // swizzled tiles (tmap_b is not encoded), and the token rows in 8-byte halves. Null otherwise.
  const std::uint8_t* b_rows8;
  std::int64_t b_row_bytes;  // k_dim * element bytes, where b_rows8 is set
  // GEMM2 at split 1: each consumer thread stores its own accumulators (scaled, biased, weighted)
  // straight to y, with no shared-memory staging and no CTA barrier a tile (the token values go to
  // shared memory once an item). The same bits as the staged epilogue. MOEKIT_SWAPAB_DIRECT=0 keeps
  // the staged one (launch_sm90.cu).
  bool direct_epilogue;
  // The call runs on the kPlain instantiation (kernel_sm90.cuh; launch_sm90.cu swapab_plain says
  // which calls). Host-side only.
  bool plain;
};

// The row pitch (k_dim x element bytes) Swap-AB needs a multiple of: 8 where its 8-byte-row
// producer can run (GEMM2, not fp8_block128), else 16 (TMA).
inline std::int64_t row_align(bool gate_up, bool block128) { return !gate_up && !block128 ? 8 : 16; }
// Whether it runs on that producer (KernelParams::b_rows8): rows of 8 bytes but not 16.
inline bool rows8_applies(bool gate_up, bool block128, std::int64_t row_bytes) {
  return row_align(gate_up, block128) == 8 && row_bytes % 16 == 8;
}

// Launches the kernel instantiation on `stream` (cudaStream_t) with `grid` persistent CTAs in
// clusters of kp.split_k (inst/*.cu); with `pdl` as the programmatic dependent of the kernel
// before it on the stream (cuda/common/pdl.cuh).
template <Operand kOp, bool kGateUp, bool kBlock128>
void run_swapab_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

}  // namespace moekit::cuda::swapab
