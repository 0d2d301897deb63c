// Routing fused with the permutation (one launch): optionally route every token (softmax_topk,
// sigmoid_grouped_topk, topk_softmax), then count the slots of each local expert, prefix-sum them
// to expert_offsets and write sorted_slots. Plain parameters, no CUDA types.
#pragma once

#include <cstdint>

#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit::cuda {

struct RoutingParams {
  std::int64_t num_tokens = 0;  // M
  int top_k = 1;                // k
  int num_experts_global = 0;   // E_global: logits columns and the range of valid ids

  // Routing (route == true): logits [M, E_global] -> topk_ids_out / topk_weights_out [M, k].
  bool route = false;
  RoutingConfig routing{};
  const void* logits = nullptr;
  DType logits_dtype = DType::kFp32;     // kFp32 or kBf16
  const float* correction_bias = nullptr;  // [E_global] or null
  std::int32_t* topk_ids_out = nullptr;
  float* topk_weights_out = nullptr;

  // Permutation (permute == true; runs in a single CTA after routing):
  //   expert_offsets[E+1]: offsets[e+1] - offsets[e] == slots whose local expert is e;
  //   sorted_slots[offsets[E]]: slot m*k+j, grouped by local expert, ascending inside one;
  //   sorted_weights[offsets[E]] (if both it and topk_weights are given): topk_weights[slot] of
  //   each sorted row, so that the GEMMs read a row's router weight without the slot first.
  // A slot is dropped when its id is outside [0, E_global) or expert_map maps it outside [0, E).
  bool permute = false;
  const std::int32_t* topk_ids = nullptr;    // [M, k]; == topk_ids_out when routing here
  const std::int32_t* expert_map = nullptr;  // [E_global] or null (then E_global == E)
  int num_experts = 0;                       // E (local)
  std::int32_t* expert_offsets = nullptr;
  std::int32_t* sorted_slots = nullptr;
  const float* topk_weights = nullptr;       // [M, k]; == topk_weights_out when routing here
  float* sorted_weights = nullptr;           // [M*k] or null

  // Words zeroed before anything else (the per-call absmax accumulators), or null.
  std::uint32_t* zero_words = nullptr;
  int num_zero_words = 0;

  // Set by launch_routing_sm90: whether the kernel lets the next kernel of the chain launch early
  // (griddepcontrol.launch_dependents; cuda/common/pdl.cuh). Never for the chain's last kernel.
  bool pdl_trigger = false;
};

/// Enqueue the routing / permutation launch on `stream` (cudaStream_t). One CTA when permute
/// is set (route + permute of more than 512 tokens: a routing grid, then the one-CTA permute);
/// a grid of warps-per-token otherwise. Throws Error(kNotSupported) for shapes past the
/// shared-memory limit and Error(kCudaError) when the launch fails. No-op when M == 0.
/// The first launch is a call's first and never overlaps earlier work on the stream; with `pdl`
/// the permute launch of the two-launch case is launched as its programmatic dependent
/// (cuda/common/pdl.cuh).
void launch_routing_sm90(const RoutingParams& params, void* stream, bool pdl = false);

}  // namespace moekit::cuda
