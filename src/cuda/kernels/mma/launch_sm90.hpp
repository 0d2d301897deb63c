// Host entry point of the mma.sync grouped expert GEMM (sm_90, the correct-first path every
// shape can take): the GroupedGemmParams contract of gemm_common/params.hpp.
#pragma once

#include "cuda/kernels/gemm_common/params.hpp"

namespace moekit::cuda {

/// Launch the grouped GEMM on `stream` (cudaStream_t). Throws moekit::Error on a bad
/// configuration or a failed launch. Does nothing when max_rows == 0. With `pdl` the launch is
/// the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
void launch_grouped_gemm(const GroupedGemmParams& params, void* stream, bool pdl = false);

}  // namespace moekit::cuda
