// Kernel parameters of the static K-short GEMM2 (sm_90a), built by launch_sm90.cu from
// GroupedGemmParams, and the launch entry of each instantiation (inst/kshort_sm90.cu).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/kernel_params.hpp"
#include "cuda/kernels/kshort/config.hpp"
#include "moekit/problem.hpp"  // Activation

namespace moekit::cuda::kshort {

// The common fields (gemm_common/kernel_params.hpp: the weight map, box 128 bytes of K x kBoxRows
// rows; num_col_tiles = ceil(n_out / kBlockN), num_k_stages = a unit's 128-byte K stages, at most
// kMaxKBlocks), then this family's.
struct KernelParams : gemm_common::WeightMap, gemm_common::TmaGemmParams {
  int out_type;      // OutType (gemm_common/params.hpp)
  // fill_common_fields sets the epilogue's activation for every family; GEMM2 has none.
  Activation act;
  float alpha;
  float limit;
  SmemLayout smem;
  // Phase timer (tests only; null = off): token-major's GEMM2 slot of the buffer
  // set_tokmajor_phase_buffer gave, per CTA < phase_ctas tokmajor::kPhaseWords stamps: entry, table,
  // producer start, first unit, first issue, last issue, the consumers' exit, the units, and the
  // per-unit sums (kPhaseKs*: consumer warpgroup 0's lookup + order barrier, data waits, MMAs,
  // epilogue; the producer's waits for free stages).
  std::uint64_t* phases;
  int phase_ctas;
  // A, the sorted intermediate [max_rows, k_dim] as a 3D map of one "expert", box 128 bytes of K x
  // kBlockM rows, 128-byte swizzle, zeros past max_rows and K: a unit's rows are contiguous.
  CUtensorMap tmap_a;
};

// Launches the instantiation on `stream` with `grid` persistent CTAs; with `pdl` as the
// programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
template <Operand kOp>
void run_kshort_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

}  // namespace moekit::cuda::kshort
