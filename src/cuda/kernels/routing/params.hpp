// Parameters of routing fused with the permutation: optionally route every token (softmax_topk,
// sigmoid_grouped_topk, topk_softmax), then count the slots of each local expert, prefix-sum them
// to expert_offsets and write sorted_slots. Plain struct shared by host and device (no CUDA
// types), and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/problem.hpp"  // RoutingConfig
#include "moekit/tensor.hpp"   // DType

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

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

  // fp8_per_tensor with a dynamic activation scale (backend.cu): the launch of the one-CTA
  // permutation, or the multi-CTA permutation's count launch, also takes the absmax of hidden, so
  // that the quantization needs no absmax launch of its own. Its last absmax_ctas CTAs (routing_absmax_ctas(); 0 = none) each fold a share of
  // absmax_x ([absmax_elems], bf16 or fp16) with fmaxf from 0 and write it to absmax_partials[b]
  // (every b written, 0 for an empty share); the quantization takes the max of the partials
  // (QuantParams::absmax_partials), the same value as the absmax launch's atomicMax word.
  const void* absmax_x = nullptr;
  DType absmax_x_dtype = DType::kBf16;
  std::int64_t absmax_elems = 0;
  float* absmax_partials = nullptr;
  int absmax_ctas = 0;

  // fp8_per_tensor with a dynamic activation scale on a small hidden (absmax_elems <=
  // quant::kSmallTensorMaxElems; backend.cu): the launch of the one-CTA permutation quantizes all
  // of hidden on one extra CTA, its last (quant_cta; routing_hosts_quant() says when it can), as
  // the one-CTA quantization launch would (quant/one_cta.cuh: the same scale and bytes), so the
  // chain has no quantization launch of its own. It reads absmax_x ([absmax_elems], bf16 or fp16,
  // 8-byte aligned, absmax_elems % 4 == 0) and writes quant_q ([absmax_elems] e4m3, 4-byte
  // aligned) and quant_scale[0]. Excludes absmax_ctas.
  bool quant_cta = false;
  std::uint8_t* quant_q = nullptr;
  float* quant_scale = nullptr;
};

namespace routing {

// The launch of one instantiation (inst/*.cu) on `stream` (cudaStream_t) with `grid` CTAs and
// `smem` bytes of dynamic shared memory (the kernel's limit raised past 48 KiB when needed); with
// `pdl` as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
// Logits of dtype kLogits (kFp32 also when not routing).
// routing_sm90_kernel: route and / or the one-CTA permutation, CTAs of kNumThreads. permute_only
// (p.route false only): its instantiation without the routing's code (kRoute false).
template <DType kLogits, int kNumThreads>
void run_routing_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl, bool permute_only);
// The multi-CTA permutation: the count launch (routing its own tokens first), then the scatter.
template <DType kLogits>
void run_permute_count_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl,
                            bool permute_only);
void run_permute_scatter_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl);

}  // namespace routing
}  // namespace moekit::cuda
