// Host entry points of the single-launch decode path (sm_90a): one kernel does routing-derived
// permutation, GEMM1 + activation, GEMM2 and the combine for decode-sized calls, with no
// grid-wide barrier (kernel_sm90.cuh). Host-safe: no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/call.hpp"
#include "moekit/problem.hpp"

namespace moekit::cuda {

/// True when the decode path can run `problem` on a GPU of `sm_count` SMs (sizes and options
/// only). Otherwise false with the reason in *why (if given). Never throws.
bool can_implement_decode_sm90(const MoeProblem& problem, int sm_count, std::string* why);

/// Bytes of workspace the decode path needs for `problem` (sizes only; 0 when it cannot run it).
std::size_t decode_workspace_size(const MoeProblem& problem);

/// Everything for one resolved call on call.stream: (fused_moe: the routing kernel first) the
/// decode kernel and the combine kernel, launched as its programmatic dependent (PDL, unless
/// MOEKIT_PDL=0). `touched` is the router's expected
/// number of touched local experts (it sets the cluster size). No allocation, no host sync:
/// CUDA-graph capturable. Throws Error(kNotSupported) when the path cannot run the call,
/// Error(kInvalidArgument) when the workspace is too small.
void run_decode_sm90(const detail::MoeCall& call, double touched);

/// Tests and benchmarks only (not synchronized with launches in flight): later decode launches add
/// their consumer warpgroup's per-phase times to device_buffer[blockIdx.x * decode::kPhaseWords +
/// word] (decode::PhaseWord order, kernels/decode/params.hpp) for the first max_ctas CTAs; the
/// caller zeroes the buffer. Null turns it off (the default: then the kernel stamps nothing).
void set_decode_phase_buffer(std::uint64_t* device_buffer, int max_ctas);

/// Tests only: the cluster size (CTAs per work item) of the calling thread's last run_decode_sm90
/// launch, 0 before any (MOEKIT_DECODE_CLUSTER forces a size only where it fits).
int decode_last_cluster();

}  // namespace moekit::cuda
