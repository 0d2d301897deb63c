// The GEMV decode kernel's parameters: one plain struct shared by the host launcher
// (launch_sm90.cu) and the kernel (kernel_sm90.cuh), passed by value as a __grid_constant__.
#pragma once

#include <cstdint>

#include "cuda/common/faults.cuh"
#include "moekit/problem.hpp"  // ActivationConfig

namespace moekit::cuda::gemv {

// Launch shape: one CTA per SM (cooperative: the grid is co-resident), kThreads threads.
inline constexpr int kThreads = 512;
inline constexpr int kWarps = kThreads / 32;
// Limits of the path (can_implement_gemv_sm90): every CTA routes the call's slots in shared
// memory, stages the call's token rows (GEMM1) and then every slot's h (GEMM2) in one region.
inline constexpr int kMaxSlots = 256;
inline constexpr int kMaxExperts = 1024;
inline constexpr int kMaxTopK = 64;
inline constexpr int kMaxCtas = 1024;  // the most CTAs a launch takes (its grid is at most the SMs)
inline constexpr int kRegionBytes = 192 * 1024;
// The tensor-core variant (kernel_mma_sm90.cuh): more slots (its GEMM2 keeps one fp32 per slot
// and owned column in shared memory), token groups of 8 per mma, kMmaTokenGroups per GEMM1 pass.
inline constexpr int kMmaMaxSlots = 1024;
inline constexpr int kMmaTokenGroups = 2;
inline constexpr int kMmaSmemBytes = 227 * 1024;  // the H200's opt-in maximum a CTA
// The QGMMA e4m3 form (kernel_mma_sm90.cuh, kQg): its B tile holds every token of the call, so it
// runs M <= kQgTokens; a 32-byte K step of the tile is kQgStepBytes (prologue.cuh, stage_rows_e4m3_qg).
inline constexpr int kQgTokens = 16;
inline constexpr int kQgStepBytes = kQgTokens * 32;
// fp8: 16-byte chunks of hidden a thread loads before the routing (prologue.cuh load_hidden_ahead):
// 4 x 512 threads x 8 elements = hidden's M rows up to 16384 elements (qwen3-30b M <= 8,
// qwen3-235b / mixtral M <= 4, deepseek-v3 M <= 2, gpt-oss M <= 5).
inline constexpr int kHiddenAhead = 4;
// Calls of at most this many slots (M k) are routed by one warp (prologue.cuh route_warp) where
// GemvParams::warp_route is set: a slot a lane.
inline constexpr int kWarpRouteSlots = 32;
// The CUDA-core kernel's GEMM2 one-round form (gemv_fast_sm90_kernel): 16-byte w2 chunks a lane
// keeps in flight a task (e4m3 chunks hold 16 weights, bf16 / fp16 8), so a task fits one round
// when k x N * es / 16 <= 32 x that; taken where a CTA owns at least kOneRoundMinColumns output
// columns (launch_sm90.cu gemv_fast_gemm2 says why).
inline constexpr int one_round_chunks_per_lane(int weight_bytes) { return weight_bytes == 1 ? 4 : 8; }
inline constexpr int kOneRoundMinColumns = 24;

// The kernel's operand types: weights (bf16, fp16 or e4m3) and the activation dtype.
enum class Operand : int { kBf16, kF16, kE4m3Bf16, kE4m3F16 };

// Shared-memory layout (bytes from the dynamic base; host-computed, gemv_smem_layout).
struct SmemLayout {
  int slot_e_off = 0;  // int [P]: the local expert of every slot, -1 none
  int sorted_off = 0;  // int [P]: slots grouped by touched expert (ascending), slot order inside
  int ue_off = 0;      // int [P + 1]: touched expert u's id
  int uoff_off = 0;    // int [P + 2]: touched expert u's first entry in sorted (uoff[U] = placed)
  int cnt_off = 0;     // int [E]: per local expert count, then its cursor, then its touched index
  int scratch_off = 0; // float [64]
  int region_off = 0;  // GEMM1: token rows [M][K * es] bytes; GEMM2: h [P][N] fp32
  int bytes = 0;
  // The tensor-core variant only (kernel_mma_sm90.cuh):
  int tw_off = 0;      // float [P]: the slots' router weights
  int coef_off = 0;    // float [P]: the slots' GEMM2 coefficients
  int gfirst_off = 0;  // int [P]: GEMM2 slot group s: its first entry in sorted
  int gu_off = 0;      // int [P]: GEMM2 slot group s: its touched expert
  int work_off = 0;    // GEMM1: the warps' partial sums; GEMM2: [P][cb_pass * 16] fp32 slot outputs
  int x_pitch = 0;     // bytes a staged token row takes (64 mod 128: conflict-free fragment loads)
  int h_pitch = 0;     // bytes a staged h row takes (same rule)
  int cb_pass = 0;     // 16-column output blocks a GEMM2 pass covers
};

struct GemvParams {
  const void* hidden;               // [M, K] activation dtype
  void* out;                        // [M, K] activation dtype
  const std::int32_t* topk_ids;     // [M, k]
  const float* topk_weights;        // [M, k]
  const std::int32_t* expert_map;   // [E_global] or null
  const void* w13;                  // [E, 2N, K] (gate rows 0..N-1, up rows N..2N-1)
  const void* w2;                   // [E, K, N]
  const float* w13_scale;           // fp8: per tensor [E] (per channel [E, 2N])
  const float* w2_scale;            // fp8: per tensor [E] (per channel [E, K])
  const float* a13_scale;           // static activation scale [1] or null (dynamic)
  const float* a2_scale;            // static intermediate scale [1] or null (dynamic)
  const void* b13;                  // [E, 2N] or null
  const void* b2;                   // [E, K] or null
  float* h_buf;                     // workspace: h [M * k, N] fp32 (rows of local slots)
  FaultRecord* faults;              // the device's fault record, or null
  int num_tokens;                   // M
  int top_k;                        // k
  int num_experts;                  // E (local)
  int num_experts_global;           // E_global (range of topk_ids)
  int hidden_size;                  // K
  int inter_size;                   // N
  int bias_type;                    // numerics::BiasType (b13 and b2 share the dtype)
  ActivationConfig act;             // kind, swiglu_oai alpha / limit
  int weight_on_input;
  int per_channel;                  // fp8_per_channel (the tensor-core kernel only): w13_scale [E, 2N],
                                    // w2_scale [E, K], a dynamic scale per token row and per slot's h
  int hidden_early;                 // fp8: hidden's first chunks loaded before the routing (MOEKIT_GEMV_HIDDEN_EARLY)
  int warp_route;                   // M k <= kWarpRouteSlots: one warp routes (MOEKIT_GEMV_WARP_ROUTE)
  // Phase timer (tests only; null = off): per CTA < phase_ctas, kPhaseWords %globaltimer stamps
  // (PhaseWord order), written by thread 0.
  std::uint64_t* phases;
  int phase_ctas;
  SmemLayout smem;
};

// The phase timer's stamps per CTA (GemvParams::phases), in the order they happen.
enum PhaseWord : int {
  kPhaseEntry = 0,  // kernel entry
  kPhaseRouted,     // token rows staged, slots routed and placed
  kPhaseGemm1,      // the CTA's GEMM1 pairs done (h written)
  kPhaseBarrier,    // past the grid barrier
  kPhaseStaged,     // every slot's h staged for GEMM2
  kPhaseExit,       // GEMM2 and the output done
  kPhaseWords = 8
};

// The call's one launch on `stream` (cudaStream_t): gemv_sm90_kernel, cooperative, `grid` CTAs of
// kThreads, p.smem.bytes of shared memory. Defined in kernel_sm90.cuh, instantiated in inst/.
template <Operand kOp>
void launch_gemv_sm90(const GemvParams& p, int grid, void* stream);

// The tensor-core variant's launch (gemv_mma_sm90_kernel, kernel_mma_sm90.cuh), same contract.
template <Operand kOp>
void launch_gemv_mma_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_mma_max_coresident_ctas(int device);
// Its general e4m3 instantiation (fp8_per_channel, w2 rows of N % 16 == 8 bytes), same contract.
template <Operand kOp>
void launch_gemv_mma_general_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_mma_general_max_coresident_ctas(int device);

// Its wide e4m3 instantiation (GEMM1 tasks of 32 columns; plain e4m3 only), same contract.
template <Operand kOp>
void launch_gemv_mma_wide_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_mma_wide_max_coresident_ctas(int device);
// Its decoupled e4m3 instantiation (GEMM1's units on mbarriers; plain e4m3 only), same contract.
template <Operand kOp>
void launch_gemv_mma_decoupled_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_mma_decoupled_max_coresident_ctas(int device);
// Its QGMMA e4m3 instantiation (GEMM1 on wgmma, M <= kQgTokens; plain e4m3 only), same contract.
template <Operand kOp>
void launch_gemv_mma_qg_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_mma_qg_max_coresident_ctas(int device);

// CTAs of the GEMV kernel that can be resident at once on `device` (occupancy x SMs at the
// largest shared-memory size), cached per device; 0 when none can.
template <Operand kOp>
int gemv_max_coresident_ctas(int device);
// The CUDA-core kernel with GEMM2's one-round form (gemv_fast_sm90_kernel), same contract.
template <Operand kOp>
void launch_gemv_fast_sm90(const GemvParams& p, int grid, void* stream);
template <Operand kOp>
int gemv_fast_max_coresident_ctas(int device);

}  // namespace moekit::cuda::gemv
