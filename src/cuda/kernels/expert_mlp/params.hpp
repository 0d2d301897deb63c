// Kernel parameters of the per-expert MLP kernel (sm_90a), built by launch_sm90.cu, and the
// launch entry of each instantiation (inst/expert_mlp_sm90.cu).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "cuda/common/faults.cuh"
#include "cuda/common/operand.hpp"
#include "cuda/kernels/expert_mlp/config.hpp"
#include "moekit/problem.hpp"  // Activation

namespace moekit::cuda::expert_mlp {

struct KernelParams {
  // w13 [E, 2N, K] as a 3D map of 2E planes [N, K] (plane 2e: expert e's gate rows, 2e + 1 its up
  // rows), box [128 bytes of K, kW13BoxRows rows, 1 plane] (two_boxes: [128 bytes, 64 rows, 2
  // planes] here and [128 bytes, 32 rows, 2 planes] in tmap_w13b); w2 [E, K, N], box [128 bytes of N,
  // kOutTile rows, 1 expert], or where w2_pairs as row pairs [E, K / 2, 2N], box [128 bytes,
  // kPairBoxRows pair rows, 1 expert] (config.hpp kPairShift); 128-byte swizzle, zeros outside
  // (rows of a slice past N).
  CUtensorMap tmap_w13;
  CUtensorMap tmap_w2;
  const void* hidden;              // [M, K] activation dtype (e4m3: hidden quantized), rows 16-byte aligned
  const std::int32_t* topk_ids;    // [M, k] global expert ids
  const std::int32_t* expert_map;  // [Eg] -> local expert or -1; null: identity
  const float* topk_weights;       // [M, k]; null: 1
  // Biases (gpt-oss), each null when absent: b13 [E, 2N] added to GEMM1's dequantized sums (after
  // the router weight on the input), b2 [E, K] to GEMM2's (before the router weight on the output),
  // the reference's order; elements of bias_type (numerics::BiasType), staged a unit in shared
  // memory as fp32 (SmemLayout::bias).
  const void* b13;
  const void* b2;
  int bias_type;
  int bias_tiles;                  // bias_tiles_per_rank: b2's staged output tiles a rank
  void* y;                         // [M k, K] activation dtype: GEMM2's row of slot m k + j
  FaultRecord* faults;             // bad ids / map entries (CTA 0 records them)
  int slots;                       // M k
  int top_k;
  int num_experts;                 // local E
  int num_experts_global;          // Eg
  int hidden_size;                 // K
  int k_stages;                    // K / 64: GEMM1's stages a unit
  int out_tiles;                   // ceil(K / kOutTile): GEMM2's tiles a unit (rank r: r, r + S, ...)
  int slices;                      // S = ceil(N / kN), N the intermediate size: the cluster's CTAs (1: none)
  int h_chunks;                    // h's 128-byte column chunks in shared memory (S kN columns)
  int g2_chunks;                   // GEMM2's stages a tile: ceil(N x element bytes / 128)
  int g2_last_steps;               // k steps of the last of them that reach N (1..4; the rest are zeros)
  int weight_on_input;             // router weight on GEMM1's output (before the activation)
  int y_f16;                       // y in fp16 (else bf16): the activation dtype
  int evict_first;                 // the weights' TMA with an L2 evict-first hint (MOEKIT_EXPERT_MLP_EVICT_FIRST=1)
  int lean_gather;                 // the producer's token rows a unit's live groups only (MOEKIT_EXPERT_MLP_LEAN_GATHER=0: off)
  // fp8_per_tensor (the e4m3 instantiation): hidden's scale [1] (the quantization launch's), the
  // weights' per-expert scales [E], and the intermediate's static scale [1] or null: then each unit
  // scales its own h (dynamic_scale of its absmax; docs/design.md "The per-expert MLP path").
  // fp8_per_channel (the e4m3 kChannel instantiations, either form): hidden's scales [M] (one a
  // token row), the w13 scales [E, 2N] and the w2 scales [E, K] (one a weight row); no static
  // intermediate scale (h's is per slot row).
  const float* a_scale;
  const float* w13_scale;
  const float* w2_scale;
  const float* a2_scale;
  int n_cols;                      // N, the intermediate size (kChannel: which w13 scales are real)
  Activation act;
  float alpha;
  float limit;
  SmemLayout smem;
  // Phase timer (tests only; null = off): per CTA < phase_ctas, kPhaseWords words (PhaseWord).
  std::uint64_t* phases;
  int phase_ctas;
  // w2 as row pairs (e4m3 per tensor, N % 16 = 8: SliceShape::pairs): the kPairs kernel. Last, so
  // the other kernels' parameter offsets (and their code) stay as they were.
  int w2_pairs;
  // A CTA's units after its first issue the w13 boxes of all kStages ring stages before they wait
  // for the unit's slot list (else kAheadStages, as the first unit; MOEKIT_EXPERT_MLP_AHEAD_NEXT=0).
  int ahead_next;
  // A GEMM1 stage's w13 tile as two boxes over both planes (tmap_w13's [64 rows, 2 planes] and
  // tmap_w13b's [32 rows, 2 planes]; the default) or, 0 (MOEKIT_EXPERT_MLP_TWO_BOXES=0), as six
  // 32-row boxes of one plane: the same bytes in the same places (issue_w13).
  int two_boxes;
  CUtensorMap tmap_w13b;  // two_boxes only
  // The one-CTA form's warm warp runs the CTA's first unit with no effect right after the routing,
  // so the consumers find the activation's and the epilogue's code in the instruction cache
  // (consume's `warm`; MOEKIT_EXPERT_MLP_WARM_ACT).
  int warm_act;
  // The one-CTA form's GEMM2 as Swap-AB for units of up to kG2SwapRows rows (w2's rows as A, the
  // unit's 8 or 16 token rows of h as B; bf16, fp16 and fp8_per_tensor, not fp8_per_channel; on by
  // default, MOEKIT_EXPERT_MLP_G2_SWAP=0 off).
  int g2_swap;
  // The untimed per-tensor calls whose features are kPlain's run on the kPlain kernels
  // (plain_call; MOEKIT_EXPERT_MLP_PLAIN=0: on the general one, for the A/B). Host-side only.
  int plain;
  // fp8_per_channel's calls with those features too (the kChannel kPlain kernels; off by default,
  // MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1 on, until measured). Host-side only.
  int plain_channel;
};

// The A/B switches' defaults (launch_sm90.cu reads MOEKIT_EXPERT_MLP_* with them), and so their
// values in the kPlain kernels.
inline constexpr bool kTwoBoxesDefault = true;
inline constexpr bool kEvictFirstDefault = false;
inline constexpr bool kLeanGatherDefault = true;
inline constexpr bool kAheadNextDefault = true;
inline constexpr bool kWarmActDefault = true;
inline constexpr bool kG2SwapDefault = true;
// The kChannel kPlain kernels (plain_call): prepared in session 83, not yet run on a GPU, so off.
inline constexpr bool kPlainChannelDefault = false;

// Whether an untimed call (one CTA or cluster) runs on a kPlain kernel (kernel_sm90.cuh's ExpertMlp:
// its features compile-time constants, so it carries no code for the others): kp.plain (and, for
// fp8_per_channel, kp.plain_channel), silu, no biases, the router weight on the output, e4m3's y in
// bf16, every A/B switch at its default. fp8: the e4m3 instantiations; channel: fp8_per_channel's.
inline bool plain_call(const KernelParams& kp, bool fp8, bool channel = false) {
  return kp.plain != 0 && (!channel || kp.plain_channel != 0) && kp.act == Activation::kSilu &&
         kp.b13 == nullptr && kp.b2 == nullptr &&
         kp.weight_on_input == 0 && (!fp8 || kp.y_f16 == 0) && kp.w2_pairs == 0 &&
         (kp.two_boxes != 0) == kTwoBoxesDefault && (kp.evict_first != 0) == kEvictFirstDefault &&
         (kp.lean_gather != 0) == kLeanGatherDefault && (kp.ahead_next != 0) == kAheadNextDefault &&
         (kp.warm_act != 0) == kWarmActDefault && (kp.g2_swap != 0) == kG2SwapDefault;
}

// The phase timer's words per CTA (%globaltimer ns; sums over the CTA's units where marked; 0 = not
// reached). Stamps sit at phase boundaries only, outside the K and tile loops.
enum PhaseWord : int {
  kPhaseEntry = 0,     // thread 0 at the kernel's entry
  kPhaseRouted,        // thread 0 with the routing's tables built (units known)
  kPhaseFirstIssue,    // producer lane 0 once its first stage's weights were asked for
  kPhaseFirstLanded,   // consumer thread 0 when its first GEMM1 stage landed
  kPhaseLastIssue,     // producer lane 0 after its last stage
  kPhaseExit,          // consumer thread 0 at its end
  kPhaseUnits,         // units this CTA ran
  kPhaseSumPlace,      // sum: a unit's slot placement and router weights (consumers)
  kPhaseSumGemm1,      // sum: placement done -> GEMM1's last MMAs done (its data waits included)
  kPhaseSumAct,        // sum: the activation, h to shared memory, the barrier
  kPhaseSumGemm2,      // sum: GEMM2's tiles (waits, MMAs, stores)
  kPhaseProdSlotWait,  // producer lane 0, sum: waiting for a unit's slot list
  kPhaseProdEmptyWait, // producer lane 0, sum: waiting for free stages (clock64 cycles)
  kPhaseG2Wait,        // consumer thread 0, sum: GEMM2's waits for its w2 stages (cycles)
  kPhaseG2Mma,         // consumer thread 0, sum: GEMM2's MMAs, issue to wait (cycles)
  kPhaseG2Store,       // consumer thread 0, sum: GEMM2's stores of y (cycles)
  // consumer thread 0, sums (ns), the per-tensor activation's steps (not kChannel's):
  kPhaseActMath,       // the activation's values and their absmax (act_half, both row halves)
  kPhaseActAmax,       // the unit's absmax over the warps and (cluster, dynamic fp8) the ranks
  kPhaseActEmpty,      // (cluster) waiting for every rank's GEMM2 of the previous unit (h_empty)
  kPhaseActStore,      // h into this CTA's tile and (cluster) the peers'
  kPhaseActFull,       // after the warpgroup's barrier: (cluster) waiting for the peers' slices (h_full)
  kPhaseWords = 24
};

// Launches the instantiation on `stream` with `grid` persistent CTAs (the cluster form where
// kp.slices > 1; kTimed: with the phase timer; kChannel: fp8_per_channel, e4m3 only), as the
// programmatic dependent of the kernel before it when `pdl`. Returns whether it launched a kPlain
// kernel (plain_call).
template <Operand kOp, bool kTimed, bool kChannel = false>
bool run_expert_mlp_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

// Clusters of `slices` CTAs of the untimed instantiation resident at once on the current device at
// the largest shared memory (cudaOccupancyMaxActiveClusters); 0 where the query fails.
template <Operand kOp>
int max_active_clusters_sm90(int slices);

}  // namespace moekit::cuda::expert_mlp
