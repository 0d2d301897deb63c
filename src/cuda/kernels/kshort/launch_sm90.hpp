// Host entry points of the static K-short GEMM2 (sm_90a; kernel_sm90.cuh): GEMM2 of the
// GroupedGemmParams contract (kBiasWeightScatter) for decode-sized calls whose K (the shard's
// intermediate size) is at most 512 bytes, in place of token-major's ping-pong GEMM2 (and its
// two-warpgroup form at 4 K stages); tokmajor/launch_sm90.cu hands it over with
// launch_kshort_gemm2_if_wanted.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/kernels/gemm_common/params.hpp"

namespace moekit::cuda {

// "" when this kernel can run `params` on the current device; otherwise why not. Never throws.
std::string kshort_gemm2_unsupported_reason(const GroupedGemmParams& params);

// Runs `params` (a decode-sized GEMM2) here instead of on token-major, where the kernel can run
// it, unless MOEKIT_KSHORT_GEMM2 = 0 (read at every launch; the H200 A/B of session 46: 1.018x
// median over TP8 M = 16..256, docs/tokmajor.md): launches on `stream` (cudaStream_t), the
// programmatic dependent of the kernel before it with `pdl`, and returns true (nothing to launch
// when max_rows == 0); returns false, having done nothing, where token-major keeps it. The reason is
// evaluated once. Throws moekit::Error(kInvalidArgument) on a MOEKIT_KSHORT_GEMM2 other than 0 or
// 1, Error(kCudaError) when a CUDA call fails. No allocation, no host synchronization:
// CUDA-graph capturable.
// `phases` / `phase_ctas`: token-major's phase timer slot of this launch (tests only; null: off).
bool launch_kshort_gemm2_if_wanted(const GroupedGemmParams& params, void* stream, bool pdl = false,
                                   std::uint64_t* phases = nullptr, int phase_ctas = 0);

/// Tests only: how many launches on the calling thread ran this kernel, so that a test knows its
/// switch took effect.
int kshort_gemm2_launches();

}  // namespace moekit::cuda
