// Host entry point of routing + permutation (sm_90a): one CTA up to kPermuteMultiCtaMinSlots
// slots (config.hpp), a count grid and a scatter grid above.
#pragma once

#include <cstdint>

#include "core/call.hpp"
#include "cuda/kernels/routing/params.hpp"

namespace moekit::cuda {

/// Enqueue the routing / permutation launches on `stream` (cudaStream_t). Permutation of at most
/// kPermuteMultiCtaMinSlots slots: one CTA (route + permute of more than 512 tokens: a routing
/// grid, then the one-CTA permute). Above (with chunk_counts): a count grid (routing its own
/// tokens first when `route`), then a scatter grid. Route only: a grid of warps-per-token.
/// Throws Error(kNotSupported) for shapes past the shared-memory limit, Error(kInvalidArgument)
/// for kMultiCta without chunk_counts and Error(kCudaError) when a launch fails. No-op when M == 0.
/// The first launch is a call's first and never overlaps earlier work on the stream; with `pdl`
/// the second launch (permute or scatter) is launched as its programmatic dependent
/// (cuda/common/pdl.cuh).
void launch_routing_sm90(const RoutingParams& params, void* stream, bool pdl = false);

/// How many CTAs launch_routing_sm90 adds for hidden's absmax when `params` asks for it
/// (absmax_x, absmax_elems, absmax_partials set; RoutingParams): on the one-CTA permutation's
/// single launch 1..min(SMs - 1, kMaxAbsmaxCtas), on the multi-CTA permutation's count launch
/// 1..min(SMs - count CTAs, kMaxAbsmaxCtas) (since session 41), 0 for the route grid of more than
/// 512 tokens before a one-CTA permutation. Host only, no sync.
int routing_absmax_ctas(const RoutingParams& params, int device);

/// Tests only: launches on the calling thread of the routing kernels' permutation-only
/// instantiations (launches without routing; MOEKIT_ROUTING_PLAIN).
int routing_permute_only_launches();

/// Whether launch_routing_sm90 can host the quantization of all of hidden on an extra CTA
/// (RoutingParams::quant_cta; absmax_x, absmax_elems, quant_q, quant_scale set): the call's
/// routing is the one-CTA permutation's single launch, hidden is bf16 or fp16 with at most
/// quant::kSmallTensorMaxElems elements, a multiple of 4, 8-byte aligned, and quant_q 4-byte
/// aligned. Host only, no sync.
bool routing_hosts_quant(const RoutingParams& params);

/// The route-only parameters of a fused_moe call (problem.with_routing): router_logits (and the
/// correction bias) to topk ids / weights in ids_out / wts_out, nothing permuted. What the
/// single-launch paths (decode, GEMV) launch before their kernel.
RoutingParams route_only_params(const detail::MoeCall& call, std::int32_t* ids_out, float* wts_out);

}  // namespace moekit::cuda
