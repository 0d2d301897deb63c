// Host entry points of the single-launch fused MoE path (sm_90a), for low concurrency (decode,
// a few tokens): one persistent launch does the permutation, GEMM1 + activation, GEMM2 and the
// weighted combine. Host-safe: no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/call.hpp"
#include "cuda/kernels/fused_moe/params.hpp"
#include "moekit/problem.hpp"

namespace moekit::cuda {

/// True when the fused path can run `problem` (sizes and options only; the device is probed by
/// the launcher). Otherwise false with the reason in *why (if given). Never throws.
bool can_implement_fused_sm90(const MoeProblem& problem, std::string* why);

/// Bytes of workspace the fused path needs for `problem` (sizes only; 0 when M == 0).
std::size_t fused_workspace_size(const MoeProblem& problem);

/// One cooperative launch (plus a small cudaMemsetAsync of the counters when
/// params.zero_counters) on `stream` (cudaStream_t): the grid is at most the co-resident CTA
/// count (occupancy x SMs, computed once per device), and the driver makes it co-resident or
/// fails the launch. Throws Error(kNotSupported) when can_implement_fused_sm90 is false or the
/// device cannot hold the kernel / launch cooperatively, Error(kInvalidArgument) when the
/// workspace is too small, Error(kCudaError) on a failed CUDA call. No allocation, no host
/// synchronization: CUDA-graph capturable (the first call on a device queries the occupancy:
/// make it eagerly). Does nothing when M == 0. Launches that may overlap (other streams) need
/// their own workspaces.
void launch_fused_moe_sm90(const FusedMoeParams& params, void* stream);

/// FusedMoeParams of one resolved call (fused_experts: topk_ids / topk_weights given; fused_moe:
/// routed in the launch, written to call.topk_ids_out / topk_weights_out when not null), with
/// `workspace` of fused_workspace_size(call.problem) bytes and zero_counters set (tests change
/// the fields they vary).
FusedMoeParams fused_moe_params(const detail::MoeCall& call, void* workspace);

/// Everything for one resolved call: launch_fused_moe_sm90(fused_moe_params(call, workspace))
/// on call.stream (the workspace's counters are zeroed by a cudaMemsetAsync). The current
/// device must be call.device.
void run_fused_moe_sm90(const detail::MoeCall& call, void* workspace);

/// Whether this build has the fused kernel's phase timer (CMake -DMOEKIT_FUSED_PHASE_TIMER=ON;
/// docs/fused_moe.md). Off by default: the kernel then has no timer code at all.
bool fused_phase_timer_enabled();

/// Tests and benchmarks only (not synchronized with launches in flight): later fused launches
/// write one record of fused_moe::kPhaseWords uint64 per CTA (fused_moe::PhaseWord order,
/// cuda/kernels/fused_moe/config.hpp) to device_buffer[blockIdx.x], for the first max_ctas CTAs.
/// Null turns recording off. No effect unless fused_phase_timer_enabled().
void set_fused_phase_buffer(std::uint64_t* device_buffer, int max_ctas);

}  // namespace moekit::cuda
