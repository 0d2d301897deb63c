// Host entry points of the Swap-AB decode GEMM (sm_90a): the same GroupedGemmParams contract as
// launch_grouped_gemm, for calls where an expert sees few tokens (decode).
#pragma once

#include <string>

#include "cuda/kernels/gemm_common/params.hpp"

namespace moekit::cuda {

// True when this path can run `params` on the current device; otherwise false with the reason in
// *why (if given). Never throws.
bool can_implement_swapab_sm90(const GroupedGemmParams& params, std::string* why);

// Launch on `stream` (cudaStream_t) without split-K. Throws moekit::Error(kNotSupported) when
// can_implement_swapab_sm90 is false, Error(kCudaError) when a CUDA call fails. Does nothing
// when max_rows == 0. No allocation, no host synchronization: CUDA-graph capturable.
void launch_grouped_gemm_swapab_sm90(const GroupedGemmParams& params, void* stream);

// The same with the split-K factor the router chose (core/path_router.hpp, choose_swapab_split:
// the launcher takes the decision, it does not make it), the tiles per work item and PDL.
// split_k in {1, 2, 4, 8} is the number of CTAs of a cluster that share one work item's K loop
// (anything else: Error(kInvalidArgument)). tiles_per_item in 1..16 is the number of consecutive 64-row weight tiles one item walks
// over the same tokens (clamped to the tile count); 0 chooses it as the launcher does (more tiles
// per item while K is short and the items stay at least two per cluster). With `pdl` the launch
// is the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
void launch_grouped_gemm_swapab_sm90(const GroupedGemmParams& params, void* stream, int split_k,
                                     int tiles_per_item = 0, bool pdl = false);
// A bool third argument is a mistake (split_k comes first): refuse to compile it.
void launch_grouped_gemm_swapab_sm90(const GroupedGemmParams& params, void* stream, bool) = delete;

/// Tests only: launches on the calling thread, and of those the ones on a kPlain instantiation
/// (MOEKIT_SWAPAB_PLAIN; launch_sm90.cu swapab_plain).
int swapab_launches();
int swapab_plain_launches();

}  // namespace moekit::cuda
