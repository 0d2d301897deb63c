// Routing fused with the permutation: optionally route every token (softmax_topk,
// sigmoid_grouped_topk, topk_softmax), then count the slots of each local expert, prefix-sum them
// to expert_offsets and write sorted_slots. One CTA up to kPermuteMultiCtaMinSlots slots, a
// count grid and a scatter grid above. Plain parameters, no CUDA types.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

// Above this many slots (M*k) the permutation runs on a grid (a count launch, then a scatter
// launch) instead of one CTA. 4096 = 512 tokens x k = 8: decode and fused_moe's one-launch
// routing (up to 512 tokens) of every k <= 8 preset keep the single CTA exactly as before. It is
// also about where the grid starts to pay: 4 chunks of 1024 slots take ~13 us in one CTA at the
// ~3.1 ns per slot measured at 65536 slots, the two grid launches an estimated ~6 us whatever
// the size (not yet measured: retune with a sweep of M around 512 at k = 8).
constexpr std::int64_t kPermuteMultiCtaMinSlots = 4096;
// Bound on count CTAs x E: every scatter CTA reads the whole [count CTAs][E] table from L2
// (128 KiB, ~1 us of one SM's L2 bandwidth). The launcher keeps count CTAs <= max(1, this / E).
constexpr std::int64_t kPermuteMaxCountWords = 32768;

// int32 words of the [count CTAs][E] table the multi-CTA permutation needs (RoutingParams::
// chunk_counts) for `num_experts` local experts: count CTAs x E <= max(E, kPermuteMaxCountWords).
inline std::size_t permute_chunk_count_words(std::int64_t num_experts) {
  return static_cast<std::size_t>(std::max<std::int64_t>(num_experts, kPermuteMaxCountWords));
}

// Bytes a call of `slots` slots reserves for chunk_counts (cuda/workspace.hpp): none up to
// kPermuteMultiCtaMinSlots, where PermutePath::kAuto always takes the one-CTA path.
inline std::size_t permute_chunk_count_bytes(std::int64_t slots, std::int64_t num_experts) {
  return slots > kPermuteMultiCtaMinSlots ? permute_chunk_count_words(num_experts) * sizeof(std::int32_t) : 0;
}

// Which permutation launch_routing_sm90 runs: kAuto picks by slot count (above); tests force
// either to compare them at the same M (same results, bit for bit).
enum class PermutePath { kAuto, kOneCta, kMultiCta };

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

  // Permutation (permute == true; after routing):
  //   expert_offsets[E+1]: offsets[e+1] - offsets[e] == slots whose local expert is e;
  //   sorted_slots[offsets[E]]: slot m*k+j, grouped by local expert, ascending inside one;
  //   sorted_weights[offsets[E]] (if both it and topk_weights are given): topk_weights[slot] of
  //   each sorted row, so that the GEMMs read a row's router weight without the slot first.
  // A slot is dropped when its id is outside [0, E_global) or expert_map maps it outside [0, E);
  // the counting pass records it in `faults` unless the value is -1 (cuda/common/faults.cuh).
  // Both paths write the same offsets, slots and weights.
  bool permute = false;
  const std::int32_t* topk_ids = nullptr;    // [M, k]; == topk_ids_out when routing here
  const std::int32_t* expert_map = nullptr;  // [E_global] or null (then E_global == E)
  int num_experts = 0;                       // E (local)
  std::int32_t* expert_offsets = nullptr;
  std::int32_t* sorted_slots = nullptr;
  const float* topk_weights = nullptr;       // [M, k]; == topk_weights_out when routing here
  float* sorted_weights = nullptr;           // [M*k] or null
  FaultRecord* faults = nullptr;             // the device's fault record, or null: not recorded

  // Words zeroed before anything else (the per-call absmax accumulators), or null.
  std::uint32_t* zero_words = nullptr;
  int num_zero_words = 0;

  // Multi-CTA permutation: scratch for the per-CTA expert counts, permute_chunk_count_words(E)
  // int32 words (workspace). Null: kAuto stays on the one-CTA path; kMultiCta throws.
  std::int32_t* chunk_counts = nullptr;
  PermutePath permute_path = PermutePath::kAuto;

  // Set by launch_routing_sm90 for the multi-CTA launches: count CTA c owns the tokens
  // [c * chunk_tokens, (c + 1) * chunk_tokens) (their slots times k) of num_chunks such chunks;
  // scatter CTA b owns count chunks [b * chunks_per_scatter, (b + 1) * chunks_per_scatter).
  std::int64_t chunk_tokens = 0;
  int num_chunks = 0;
  int chunks_per_scatter = 1;

  // Set by launch_routing_sm90: whether the kernel lets the next kernel of the chain launch early
  // (griddepcontrol.launch_dependents; cuda/common/pdl.cuh). Never for the chain's last kernel.
  bool pdl_trigger = false;
};

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

}  // namespace moekit::cuda
