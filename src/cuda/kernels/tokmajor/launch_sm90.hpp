// Host entry points of the token-major prefill GEMM (sm_90a): the same GroupedGemmParams contract
// as launch_grouped_gemm, for calls where experts see many tokens (prefill, M >= ~1024).
#pragma once

#include <string>

#include "cuda/kernels/gemm_common/params.hpp"

namespace moekit::cuda {

// True when this path can run `params` on the current device; otherwise false with the reason in
// *why (if given). Never throws.
bool can_implement_tokmajor_sm90(const GroupedGemmParams& params, std::string* why);

// Launch on `stream` (cudaStream_t). Throws moekit::Error(kNotSupported) when
// can_implement_tokmajor_sm90 is false, Error(kCudaError) when a CUDA call fails. Does nothing
// when max_rows == 0. No allocation, no host synchronization: CUDA-graph capturable.
void launch_grouped_gemm_tokmajor_sm90(const GroupedGemmParams& params, void* stream);

// The same with the cluster size forced (tests, tuning): 1 = one CTA per tile; 2 = pairs of CTAs
// on two token tiles of the same weight tile, each loading half of it with TMA multicast into
// both; 0 = the default (tokmajor::kDefaultCluster). With `pdl` the launch is the programmatic
// dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
void launch_grouped_gemm_tokmajor_sm90(const GroupedGemmParams& params, void* stream, int cluster, bool pdl = false);
// A bool third argument is a mistake (the cluster size comes first): refuse to compile it.
void launch_grouped_gemm_tokmajor_sm90(const GroupedGemmParams& params, void* stream, bool) = delete;

// The cluster size the launcher uses when told 0: tokmajor::kDefaultCluster, or
// MOEKIT_TOKMAJOR_CLUSTER (1 or 2; a tuning knob for measuring the 2-CTA weight multicast).
// Throws moekit::Error(kInvalidArgument) on any other value, never ignoring it; the backend
// asks before it enqueues anything, so a bad value fails a call with nothing launched.
int tokmajor_default_cluster();

// Whether the launcher uses the dynamic schedule when GroupedGemmParams::tile_counter is given
// (clusters of 1 only): true by default; MOEKIT_TOKMAJOR_SCHEDULE = "static" turns it off (the
// round-robin schedule, for measuring one against the other), "dynamic" is the default. Throws
// moekit::Error(kInvalidArgument) on any other value.
bool tokmajor_dynamic_schedule();

// Units the dynamic schedule takes with one atomic where its producer looks a unit ahead (tiles of
// at most tokmajor::kLookaheadMaxStages K stages: the K-short GEMM2s): MOEKIT_TOKMAJOR_TAKE =
// "1".."8" forces it (the same units, so the same bits, in another order across the CTAs) and is
// returned; unset, the return is 0 and the launcher applies its rule (4 for decode-sized ping-pong
// GEMM2s of >= 16 units a CTA, else 1). Throws moekit::Error(kInvalidArgument) on any other value
// ("0" included).
int tokmajor_units_per_take();

/// Tests only (not synchronized with launches in flight): the next `launches` token-major launches
/// stamp tokmajor::PhaseWord times of their first max_ctas CTAs, launch i into
/// device_buffer[(i * max_ctas + blockIdx.x) * tokmajor::kPhaseWords + word]; later launches stamp
/// nothing. The caller zeroes the buffer. Null turns it off (the default).
void set_tokmajor_phase_buffer(std::uint64_t* device_buffer, int max_ctas, int launches);

// Whether GEMM1 can also take params.route (the routing in the kernel), for params that
// can_implement_tokmajor_sm90 accepts without it: the route's own checks alone, so that run_moe
// asks them per call without the whole can_implement again (the launch still checks all of it).
// False with the reason in *why (if given); never throws.
bool tokmajor_route_supported(const GroupedGemmParams& params, std::string* why);

/// Tests only: how many launches on the calling thread ran GEMM1 with the routing in the kernel
/// (GroupedGemmParams::route), so that a test knows its switch took effect.
int tokmajor_route_launches();

}  // namespace moekit::cuda
