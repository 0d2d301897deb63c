// Plain parameters of the single-launch fused MoE path (host and device; no CUDA types): one
// fused_experts (routing given) or fused_moe (routed from logits) call for a few tokens:
// routing -> GEMM1 -> activation -> GEMM2 -> combine in one persistent launch (docs/design.md).
#pragma once

#include <cstddef>
#include <cstdint>

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
