// Host entry points of the GEMV decode path (sm_90a): one cooperative launch on the CUDA cores
// runs a whole decode-sized MoE call, routing to output (kernel_sm90.cuh, docs/gemv.md).
// Host-safe: no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/call.hpp"
#include "core/path_router.hpp"  // detail::GemvKernel
#include "moekit/problem.hpp"

namespace moekit::cuda {

/// Which of the path's two kernels can run `problem` (sizes and options only, each check made
/// once): the CUDA-core one (kernel_sm90.cuh) and the tensor-core one (kernel_mma_sm90.cuh). When
/// neither can, the reason in *why (if given). Never throws. The router plans with it (plan_call).
struct GemvSupport {
  bool cuda = false;
  bool mma = false;
  bool any() const { return cuda || mma; }
};
GemvSupport gemv_support_sm90(const MoeProblem& problem, std::string* why);

/// True when the GEMV decode path can run `problem`: gemv_support_sm90(problem, why).any().
bool can_implement_gemv_sm90(const MoeProblem& problem, std::string* why);

/// Bytes of workspace the GEMV path needs for `problem` (sizes only; 0 when it cannot run it).
std::size_t gemv_workspace_size(const MoeProblem& problem);

/// Everything for one resolved call on call.stream: (fused_moe: the routing kernel first) the
/// GEMV kernel the plan chose (DispatchPlan, MOEKIT_GEMV_KERNEL applied there). No allocation, no host sync:
/// CUDA-graph capturable. Throws Error(kNotSupported) when that kernel cannot run the call (also:
/// weights, hidden or out not 16-byte aligned), Error(kInvalidArgument) when the workspace is too
/// small.
void run_gemv_sm90(const detail::MoeCall& call, detail::GemvKernel kind);

/// Which GEMV kernel the thread's last run_gemv_sm90 enqueued: "cuda" (the CUDA-core kernel),
/// or "mma" (the tensor-core one). Tests check that a forced kernel
/// really ran.
const char* gemv_last_kernel();

/// Whether the thread's last run_gemv_sm90 ran the CUDA-core kernel's GEMM2 in its one-round form
/// (gemv_fast_sm90_kernel; gemv_fast_gemm2 in launch_sm90.cu says where). Tests.
bool gemv_last_gemm2_fast();

/// Whether the thread's last run_gemv_sm90 ran the tensor-core kernel's GEMM1 in tasks of 32
/// columns (gemv_mma_wide_sm90_kernel; MOEKIT_GEMV_WIDE=1 on fp8 calls of the plain kernel). Tests.
bool gemv_last_wide();

/// Whether the thread's last run_gemv_sm90 ran the tensor-core kernel's plain e4m3 form with
/// GEMM1's units on mbarriers (gemv_mma_decoupled_sm90_kernel: its rule, MOEKIT_GEMV_FP8_DECOUPLED). Tests.
bool gemv_last_decoupled();
/// Whether the thread's last tensor-core GEMV launch ran its e4m3 form with GEMM1 on wgmma
/// (gemv_mma_qg_sm90_kernel: MOEKIT_GEMV_QGMMA). Tests.
bool gemv_last_qgmma();
/// Whether the thread's last GEMV launch routed the call with one warp (prologue.cuh route_warp:
/// at most gemv::kWarpRouteSlots slots, MOEKIT_GEMV_WARP_ROUTE unset or 1). Tests.
bool gemv_last_warp_route();

/// Tests only (not synchronized with launches in flight): later GEMV launches write their
/// per-CTA phase stamps (%globaltimer ns, gemv::PhaseWord order, kernels/gemv/params.hpp) to
/// device_buffer[blockIdx.x * gemv::kPhaseWords + word] for the first max_ctas CTAs. Null turns
/// it off (the default).
void set_gemv_phase_buffer(std::uint64_t* device_buffer, int max_ctas);

}  // namespace moekit::cuda
