// The resolved form of a call that backends receive: the validated MoeProblem plus raw
// pointers (all tensors contiguous, checked by validate.cpp). No CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/ops.hpp"
#include "moekit/problem.hpp"

namespace moekit::detail {

/// True when a and b describe the same call in every field (sizes, scheme, options, activation
/// and routing parameters; floats compared by value). The CUDA backend keys its per-thread memo of
/// problem-only answers (workspace size, which paths can run it) on it.
bool same_problem(const MoeProblem& a, const MoeProblem& b) noexcept;

/// One fused_experts / fused_moe call. Pointers are to contiguous row-major arrays on the
/// backend's device; optional ones are null when absent.
struct MoeCall {
  MoeProblem problem;

  const void* hidden = nullptr;        // [M, K] act_dtype
  void* out = nullptr;                 // [M, K] act_dtype
  const void* w13 = nullptr;           // [E, 2N, K] act_dtype or e4m3
  const void* w2 = nullptr;            // [E, K, N]
  const float* w13_scale = nullptr;    // scheme-dependent shape (ops.hpp)
  const float* w2_scale = nullptr;
  const void* b13 = nullptr;           // [E, 2N] problem.bias_dtype
  const void* b2 = nullptr;            // [E, K]
  const float* a13_scale = nullptr;    // [1] static activation scale (kFp8PerTensor)
  const float* a2_scale = nullptr;     // [1] static intermediate scale (kFp8PerTensor)
  const std::int32_t* expert_map = nullptr;  // [E_global]

  // Routing given (fused_experts), or written by the routing step (fused_moe; then these may
  // point into the workspace when the caller did not ask for them).
  const std::int32_t* topk_ids = nullptr;    // [M, k]
  const float* topk_weights = nullptr;       // [M, k]

  // fused_moe only (problem.with_routing).
  const void* router_logits = nullptr;       // [M, E_global] problem.logits_dtype
  const float* correction_bias = nullptr;    // [E_global]
  std::int32_t* topk_ids_out = nullptr;      // caller's buffers, or null
  float* topk_weights_out = nullptr;

  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* stream = nullptr;
  int device = 0;
  const char* forced_path = nullptr;  // Options::path or MOEKIT_PATH
  int num_threads = 0;
  bool debug_faults = false;          // debug_faults_enabled(options): check ids after the call
};

/// One route call.
struct RouteCall {
  std::int64_t num_tokens = 0;
  std::int64_t num_experts = 0;  // E_global (logits columns)
  RoutingConfig routing{};
  DType logits_dtype = DType::kFp32;
  const void* router_logits = nullptr;
  const float* correction_bias = nullptr;
  std::int32_t* topk_ids = nullptr;
  float* topk_weights = nullptr;
  void* stream = nullptr;
  int device = 0;
  int num_threads = 0;
};

}  // namespace moekit::detail
