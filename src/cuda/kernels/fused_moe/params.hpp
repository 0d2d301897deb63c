// Plain parameters of the single-launch fused MoE path (host and device; no CUDA types): the
// launcher's FusedMoeParams and the kernel's FusedArgs. FusedMoeParams describes one
// fused_experts (routing given) or fused_moe (routed from logits) call for a few tokens:
// routing -> GEMM1 -> activation -> GEMM2 -> combine in one persistent launch (docs/design.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/fused_moe/config.hpp"
#include "cuda/kernels/gemm_common/params.hpp"  // ScaleMode
#include "cuda/numerics/bias.cuh"              // BiasType
#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

struct FusedMoeParams {
  MoeProblem problem;  // sizes, scheme, activation, options, routing (with_routing)

  const void* hidden = nullptr;            // [M, K] act dtype
  void* out = nullptr;                     // [M, K] act dtype
  const void* w13 = nullptr;               // [E, 2N, K] act dtype or e4m3
  const void* w2 = nullptr;                // [E, K, N]
  const float* w13_scale = nullptr;        // per tensor [E]; per channel [E, 2N]
  const float* w2_scale = nullptr;         // per tensor [E]; per channel [E, K]
  const void* b13 = nullptr;               // [E, 2N] problem.bias_dtype, or null
  const void* b2 = nullptr;                // [E, K], or null
  const float* a13_scale = nullptr;        // [1] static GEMM1 input scale (per tensor), or null
  const float* a2_scale = nullptr;         // [1] static GEMM2 input scale (per tensor), or null
  const std::int32_t* expert_map = nullptr;  // [E_global] or null
  // fused_experts (problem.with_routing false): the given routing.
  const std::int32_t* topk_ids = nullptr;    // [M, k]
  const float* topk_weights = nullptr;       // [M, k]
  // fused_moe (problem.with_routing): routed in the same launch from the logits (every CTA
  // routes the few tokens itself); the routing is written to these when not null.
  const void* router_logits = nullptr;       // [M, E_global] problem.logits_dtype (fp32 / bf16)
  const float* correction_bias = nullptr;    // [E_global] or null
  std::int32_t* topk_ids_out = nullptr;      // [M, k] or null
  float* topk_weights_out = nullptr;         // [M, k] or null

  // fused_workspace_size(problem) bytes, 256-byte aligned.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // The counters at the head of the workspace must be zero when the kernel starts. true: the
  // launcher zeroes them with one cudaMemsetAsync (the default: the workspace may be shared
  // with other paths). false: the caller guarantees it; the kernel leaves them zero on exit
  // (every counter is reset by its last user), so a workspace region used only by launches of
  // this path with one problem shape needs one zeroing at allocation (the counter area grows
  // with M and overlaps a smaller M's intermediate).
  bool zero_counters = true;
  // The device's fault record (a bad id or expert_map entry), or null: not recorded.
  FaultRecord* faults = nullptr;
};

}  // namespace moekit::cuda

namespace moekit::cuda::fused_moe {

// What the kernel receives (by value, __grid_constant__).
struct FusedArgs {
  // Sizes.
  int M = 0, k = 0, E = 0, E_global = 0, K = 0, N = 0;
  // Options.
  int scale_mode = kScaleNone;  // ScaleMode (gemm_common/params.hpp)
  int act_fp16 = 0;      // hidden / out are fp16 (else bf16)
  int bias13_type = numerics::kBiasNone;  // b13: numerics::BiasType
  int bias2_type = numerics::kBiasNone;   // b2: the same
  Activation act_kind = Activation::kSilu;
  float alpha = 1.702f, limit = 7.0f;
  int weight_on_input = 0;
  int dyn_a1 = 0;        // per tensor: GEMM1 input scale = dynamic_scale(absmax(hidden)) (else a13_scale)
  int dyn_a2 = 0;        // per tensor: GEMM2 input scale from the intermediate's absmax
  int vec16_1 = 1, vec16_2 = 1;  // weight rows are 16-byte multiples (else 8-byte cp.async)
  GemmTiling t1, t2;
  // Routing from logits (fused_moe), redundantly in every CTA; CTA 0 writes the outputs.
  int route = 0;
  RoutingConfig routing{};
  const void* logits = nullptr;            // [M, E_global]
  int logits_bf16 = 0;                     // else fp32
  const float* correction_bias = nullptr;  // [E_global] or null
  std::int32_t* topk_ids_out = nullptr;    // [M, k] or null
  float* topk_weights_out = nullptr;       // [M, k] or null
  // Tensors.
  const void* hidden = nullptr;
  void* out = nullptr;
  const std::uint8_t* w13 = nullptr;
  const std::uint8_t* w2 = nullptr;
  const float* w13_scale = nullptr;
  const float* w2_scale = nullptr;
  const void* b13 = nullptr;
  const void* b2 = nullptr;
  const float* a13_scale = nullptr;
  const float* a2_scale = nullptr;
  const std::int32_t* expert_map = nullptr;
  const std::int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  FaultRecord* faults = nullptr;  // CTA 0 records a dropped slot's bad value (cuda/common/faults.cuh)
  // Workspace slices.
  std::uint32_t* counters = nullptr;
  std::uint32_t* grp_done = nullptr;
  std::uint32_t* t1_ticket = nullptr;
  std::uint32_t* t2_ticket = nullptr;
  std::uint32_t* comb = nullptr;
  int tiles1_stride = 0;  // FusedWorkspace::tiles1_max
  int tiles2_stride = 0;
  float* inter = nullptr;
  float* y = nullptr;
  float* part1 = nullptr;
  float* part2 = nullptr;
  // Phase timer (MOEKIT_FUSED_PHASE_TIMER builds only; ignored otherwise): [phase_ctas][kPhaseWords].
  std::uint64_t* phase = nullptr;
  int phase_ctas = 0;
};

// The launch of one operand instantiation (inst/*.cu): raises the kernel's shared-memory limit
// and computes its co-resident CTA count once per device, caps `grid` at it and launches
// cooperatively on `stream` (cudaStream_t).
template <Operand kOp>
void run_fused_moe_sm90(const FusedArgs& args, int grid, void* stream, int device);

}  // namespace moekit::cuda::fused_moe
