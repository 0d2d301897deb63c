// Host entry point of the activation quantization (sm_90a): one or two launches on the caller's
// stream.
#pragma once

#include "cuda/kernels/quant/params.hpp"

namespace moekit::cuda {

/// Enqueue the quantization of params.x on `stream` (one launch; two for dynamic per tensor
/// above 32 K elements unless params.absmax_ready). With `pdl` every launch is the programmatic dependent of the kernel
/// before it on the stream (cuda/common/pdl.cuh).
void launch_quant_sm90(const QuantParams& params, void* stream, bool pdl = false);

/// Whether launch_quant_sm90(params) reads params.absmax as a zeroed word that its absmax pass
/// raises (dynamic per tensor above the one-CTA kernel's size, unless params.one_cta): the caller
/// zeroes it first. The one-CTA kernel and the static, ready or partials forms never read it.
bool quant_needs_zeroed_absmax(const QuantParams& params);

}  // namespace moekit::cuda
