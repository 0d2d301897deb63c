// The decode kernel's parameters: one plain struct shared by the host launcher and the kernel
// (passed by value as a __grid_constant__). Built by launch_sm90.cu from a resolved MoeCall.
#pragma once

#include <cuda.h>  // CUtensorMap (header only)

#include <cstdint>

#include "cuda/common/faults.cuh"
#include "moekit/problem.hpp"  // ActivationConfig
#include "cuda/kernels/decode/config.hpp"

namespace moekit::cuda::decode {

// What one decode launch runs (a template argument of the kernel). kWhole: GEMM1, activation and
// GEMM2 of each item (bf16 / fp16, and fp8 with a static intermediate scale). fp8 with a dynamic
// intermediate scale needs the absmax of every slot's h before any GEMM2 starts, so the call is
// two launches of the same kernel: kUp (GEMM1 + activation, h to the workspace in fp32, one
// absmax per CTA) and kDown (its programmatic dependent: the scale from those absmaxes, then the
// quantized h through GEMM2), the combine after both. kBlock128: kWhole with fp8_block128's
// scales, all of them local to an item (a token's 1x128 activation groups are the K chunks, the
// intermediate's are the item's N chunk of 128 columns): one launch. fp8_per_channel: a token's
// activation scale spans its whole row of K (every CTA takes all of them itself before its first
// item, as the per-tensor dynamic scale), a slot's intermediate scale its whole h row: local to an
// item when N <= 128 (one N chunk: kChannel, one launch), else the split call again (kChannelUp
// writes h to the workspace, kChannelDown takes each slot's scale from its whole row there).
enum Stage : int { kWhole = 0, kUp = 1, kDown = 2, kBlock128 = 3, kChannel = 4, kChannelUp = 5, kChannelDown = 6 };

struct DecodeParams {
  // w13 [E, 2N, K] as a 3D map (innermost first), box [128 bytes of K, 32 rows, 1], 128-byte
  // swizzle, zero fill outside the tensor; w2 [E, K, N], box [128 bytes of N, 64 rows, 1].
  CUtensorMap tmap_w13;
  CUtensorMap tmap_w2;
  const void* hidden;               // [M, K] activation dtype
  void* out;                        // [M, K] activation dtype
  const std::int32_t* topk_ids;     // [M, k]
  const float* topk_weights;        // [M, k]
  const std::int32_t* expert_map;   // [E_global] or null
  const float* w13_scale;           // fp8: per tensor [E]; per channel [E, 2N]; block128 [E, ceil(2N/128), ceil(K/128)]
  const float* w2_scale;            // fp8: per tensor [E]; per channel [E, K]; block128 [E, ceil(K/128), ceil(N/128)]
  const float* a13_scale;           // static activation scale [1] or null (dynamic: every CTA
                                    // takes the absmax of the whole hidden itself)
  const float* a2_scale;            // static intermediate scale [1] or null (dynamic: kUp + kDown)
  const void* b13;                  // [E, 2N] or null
  const void* b2;                   // [E, K] or null
  float* partials;                  // [M * k, num_chunks, K] fp32
  float* h_buf;                     // kUp / kDown, kChannelUp / kChannelDown: h [M * k, N] fp32 (rows of local slots)
  float* h_amax;                    // kUp / kDown: [amax_ctas] absmax of each kUp CTA's h
  int amax_ctas;                    // the kUp grid's CTAs
  FaultRecord* faults;              // the device's fault record (cuda/common/faults.cuh), or null
  // Phase timer (tests and benchmarks only; null = off): per CTA < phase_ctas, kPhaseWords
  // uint64 (PhaseWord order) of nanoseconds summed over the CTA's items.
  std::uint64_t* phases;
  int phase_ctas;
  int num_tokens;                   // M
  int top_k;                        // k
  int num_experts;                  // E (local)
  int num_experts_global;           // E_global (range of topk_ids)
  int hidden_size;                  // K
  int inter_size;                   // N
  int bias_type;                    // numerics::BiasType (b13 and b2 share the dtype)
  ActivationConfig act;             // kind, swiglu_oai alpha / limit
  int weight_on_input;
  Tiling tiling;
};

// The phase timer's words per CTA (DecodeParams::phases): time in each phase of the consumer
// warpgroup, summed over the CTA's items (ns, %globaltimer), then the item count and the CTA's
// first and last stamps.
enum PhaseWord : int {
  kPhasePrologue = 0,  // kernel entry -> routing done, cluster synced
  kPhaseTokens,        // item's token metadata + token rows loaded (B tiles ready)
  kPhaseGemm1,         // GEMM1 main loops + partial sums to shared memory
  kPhaseExchange1,     // first cluster exchange (partials visible)
  kPhaseActivation,    // partial-sum reduction, activation, h to every rank + second exchange
  kPhaseConvert,       // h -> GEMM2's B tiles
  kPhaseGemm2,         // GEMM2 main loops + partial outputs to the workspace
  kPhaseItems,         // items done
  kPhaseStart,         // %globaltimer at entry
  kPhaseEnd,           // %globaltimer at exit
  kPhaseWords = 16
};

// The kernel's operand types: weights (bf16, fp16 or e4m3) and the activation dtype.
enum class Operand : int { kBf16, kF16, kE4m3Bf16, kE4m3F16 };

// The call's two launches on `stream` (cudaStream_t): decode_sm90_kernel (cluster dimension
// p.tiling.cluster, p.tiling.smem.bytes of shared memory, `grid` CTAs), then decode_combine_kernel
// as its programmatic dependent. The kernel is instantiated per token width (8, 16, 32, 64): the
// launch takes the one of p.tiling.max_tokens, whose code holds only the widths up to it; `wide`
// takes the 64-wide one, which holds them all (MOEKIT_DECODE_WIDE=1, for A/Bs). Defined in
// kernel_sm90.cuh, instantiated in inst/.
template <Operand kOp>
void launch_decode_sm90(const DecodeParams& p, int grid, void* stream, bool wide);
// The same for fp8 with a dynamic intermediate scale: the kUp launch, the kDown launch as its
// programmatic dependent (same tiling and grid), then the combine (p.h_buf, p.h_amax set;
// amax_ctas = grid).
template <Operand kOp>
void launch_decode_split_sm90(const DecodeParams& p, int grid, void* stream, bool wide);
// The same for fp8_block128 (e4m3 operands): one kBlock128 launch, then the combine.
template <Operand kOp>
void launch_decode_block128_sm90(const DecodeParams& p, int grid, void* stream, bool wide);
// The same for fp8_per_channel (e4m3 operands): one kChannel launch when the intermediate is one
// N chunk (p.tiling.num_chunks == 1), else kChannelUp, then kChannelDown as its programmatic
// dependent (p.h_buf set); then the combine.
template <Operand kOp>
void launch_decode_channel_sm90(const DecodeParams& p, int grid, void* stream, bool wide);

// Clusters of `cluster` CTAs of the decode kernel (at kSmemLimit bytes of shared memory) that can
// be resident at once on the current device (cudaOccupancyMaxActiveClusters); -1 when the query
// fails. The same for every operand (one launch shape): defined in kernel_sm90.cuh, instantiated
// for kBf16 only (inst/decode_sm90_bf16.cu).
template <Operand kOp>
int decode_max_active_clusters(int cluster);

}  // namespace moekit::cuda::decode
