// Kernel parameters of the token-major prefill GEMM (sm_90a), built by launch_sm90.cu from
// GroupedGemmParams, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/kernel_params.hpp"
#include "cuda/kernels/gemm_common/params.hpp"  // OutType
#include "cuda/kernels/tokmajor/config.hpp"     // SmemLayout
#include "moekit/problem.hpp"                   // Activation

namespace moekit::cuda::tokmajor {

// The common fields (gemm_common/kernel_params.hpp; the weight map's box is block_n / 2 rows, two
// boxes a stage), then the epilogue's and the token-major schedule's.
struct KernelParams : gemm_common::WeightMap, gemm_common::TmaGemmParams {
  int out_type;   // OutType
  int out_vec16;  // GEMM2: y rows allow 16-byte stores (n_out * bytes % 16 == 0, out aligned)
  Activation act;
  float alpha;
  float limit;
  int cluster;    // CTAs per cluster, 1 or 2 (weight multicast)
  // Dynamic schedule (cluster 1): units taken in order from this word, zero at launch (see
  // GroupedGemmParams::tile_counter); null: static round-robin.
  std::uint32_t* tile_counter;
  SmemLayout smem;
  // GEMM1 (fp8_per_tensor, fp32 out): GroupedGemmParams::out_absmax, or null. Last, so that the
  // fields before it keep their offsets in every instantiation.
  std::uint32_t* out_absmax;
};

// Launches the kernel instantiation on `stream` with `grid` persistent CTAs (inst/*.cu); with
// `pdl` as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
template <Operand kOp, bool kGateUp, bool kBlock128>
void run_tokmajor_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

}  // namespace moekit::cuda::tokmajor
