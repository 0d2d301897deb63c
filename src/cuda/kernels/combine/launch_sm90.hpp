// Host entry point of the weighted combine (sm_90a): one launch on the caller's stream.
#pragma once

#include "cuda/kernels/combine/params.hpp"

namespace moekit::cuda {

/// Enqueue the combine on `stream` (cudaStream_t). No-op when M == 0. With `pdl` it is the
/// programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
void launch_combine_sm90(const CombineParams& params, void* stream, bool pdl = false);

}  // namespace moekit::cuda
