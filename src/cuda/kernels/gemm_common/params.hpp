// The contract every grouped expert GEMM family (mma/, swapab/, tokmajor/) implements: plain
// parameters (host and device; no CUDA types).
// For each local expert e and each row r of the expert-sorted order in
// [row_offsets[e], row_offsets[e+1]):
//   acc[r, n] = sum_c A[a_row(r), c] * B[e, n, c]        (fp32, scales per scheme, docs/design.md)
// and the epilogue turns acc into the output (GEMM1: activation; GEMM2: bias + router weight).
#pragma once

#include <cstdint>

#include "moekit/problem.hpp"

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

enum class GemmEpilogue : int {
  // GEMM1: B = w13 [E, 2N, K]. Output column n in [0, N) combines rows n (gate) and N+n (up):
  //   (acc *= topk_weight if weight_on_input), += b13, activation, then written to
  //   out[r, n] (row-major [rows, N]) as out_dtype (act dtype for bf16, fp32 for fp8 schemes).
  kGateUpActivation,
  // GEMM2: B = w2 [E, K, N]. Output column n in [0, K): (+= b2), (*= topk_weight unless
  //   weight_on_input), written as out_dtype to out[slot(r), n] (row-major [M*k, K]) where
  //   slot(r) = sorted_slots[r] = m*k + j. fp32, or (token-major kernel only) the act dtype.
  kBiasWeightScatter,
};

struct GroupedGemmParams {
  Scheme scheme = Scheme::kBf16;
  GemmEpilogue epilogue = GemmEpilogue::kGateUpActivation;
  int num_experts = 0;              // E (local)
  std::int64_t n_out = 0;           // output columns: N (GEMM1, B has 2N rows) or K (GEMM2)
  std::int64_t k_dim = 0;           // reduction length: K (GEMM1) or N (GEMM2)
  std::int64_t max_rows = 0;        // host-known bound on row_offsets[E] (M*k), sizes the grid
  const std::int32_t* row_offsets = nullptr;  // [E+1] device, row_offsets[0] == 0
  const std::int32_t* sorted_slots = nullptr; // [max_rows] slot m*k+j of each sorted row
  int top_k = 1;                    // k: token of sorted row r is sorted_slots[r] / top_k

  // A: GEMM1 gathers token rows (gather_a_by_token: A row = sorted_slots[r] / top_k, A is
  // [M, K]); GEMM2 reads row r of the sorted intermediate (A is [max_rows, N]).
  const void* a = nullptr;          // act dtype (bf16 scheme) or e4m3 (fp8 schemes)
  bool gather_a_by_token = false;
  DType act_dtype = DType::kBf16;   // bf16 scheme's A and B dtype (kBf16 or kFp16)
  // A scales (fp8): per tensor [1]; per row [rows of A]; block128 [rows of A, ceil(k_dim/128)].
  const float* a_scale = nullptr;

  // B: [E, rows_b, k_dim], rows_b = 2N (GEMM1) or K (GEMM2). Scales (fp8): per tensor [E];
  // per channel [E, rows_b]; block128 [E, ceil(rows_b/128), ceil(k_dim/128)].
  const void* b = nullptr;
  const float* b_scale = nullptr;

  // Epilogue inputs.
  const void* bias = nullptr;       // [E, rows_b] or null
  DType bias_dtype = DType::kFp32;
  const float* topk_weights = nullptr;  // [M*k] indexed by slot
  // Optional: the router weights in sorted row order, sorted_weights[r] = topk_weights[
  // sorted_slots[r]] for r < row_offsets[E] (the routing/permutation kernel writes it). Saves the
  // dependent load topk_weights[slot] in kernels that read it (Swap-AB, token-major); null: they use
  // topk_weights. Kernels that ignore it still need topk_weights.
  const float* sorted_weights = nullptr;
  bool weight_on_input = false;
  ActivationConfig activation{};

  void* out = nullptr;
  DType out_dtype = DType::kFp32;   // GEMM1: act dtype or kFp32; GEMM2: kFp32 (token-major: or act dtype)

  // Token-major only (other kernels ignore it): a device word that is zero when the launch starts.
  // With it the persistent CTAs take their work units from it in order as they become free (the
  // dynamic schedule); the kernel leaves it nonzero, so the caller zeroes it before every launch
  // (run_moe: the routing kernel). Null: the static round-robin schedule.
  std::uint32_t* tile_counter = nullptr;

  // GEMM1 of fp8_per_tensor with fp32 out only (the launchers refuse it elsewhere): a device word
  // holding float bits, zero or a partial absmax when the launch starts, into which the epilogue
  // folds |h| of every value it stores (NaN never wins; one atomicMax per warp). The stored
  // values are exactly the live rows of out (row_offsets[E] rows, n_out columns), so the word
  // ends as the absmax the per-tensor quant kernel would read from out (QuantParams::
  // absmax_ready: quant(h) is then a single launch). Null: off.
  std::uint32_t* out_absmax = nullptr;

  // Token-major GEMM1 only (can_implement_tokmajor_sm90 refuses it elsewhere): the routing in the
  // kernel, so that the chain needs no routing launch (docs/tokmajor.md "Routing in GEMM1"). Every
  // CTA counts `slots` ids (through expert_map) per local expert in its own shared memory and
  // places each unit's rows itself, instead of reading row_offsets / sorted_slots; it writes the
  // expert offsets (CTA 0), the sorted slots and, with topk_weights, the sorted router weights for
  // GEMM2. Bad ids and map entries drop their slot and go to `faults` (CTA 0), as the routing
  // launch does. row_offsets and sorted_slots are then unread. Null ids: off.
  struct InKernelRouting {
    const std::int32_t* ids = nullptr;         // topk_ids [slots]
    const std::int32_t* expert_map = nullptr;  // [experts_global] or null
    int experts_global = 0;
    std::int64_t slots = 0;                    // M * k
    std::int32_t* offsets_out = nullptr;       // [E + 1]
    std::int32_t* sorted_slots_out = nullptr;  // [slots]
    float* sorted_weights_out = nullptr;       // [slots], or null
    FaultRecord* faults = nullptr;
  } route;
};

// Kernel-side encodings of the epilogue shared by the Swap-AB and token-major kernels' params.
enum ScaleMode : int { kScaleNone = 0, kScalePerTensor = 1, kScalePerChannel = 2, kScaleBlock128 = 3 };
enum OutType : int { kOutF32 = 0, kOutBf16 = 1, kOutF16 = 2 };

constexpr ScaleMode scale_mode_of(Scheme s) {
  return s == Scheme::kFp8PerTensor    ? kScalePerTensor
         : s == Scheme::kFp8PerChannel ? kScalePerChannel
         : s == Scheme::kFp8Block128   ? kScaleBlock128
                                       : kScaleNone;
}
constexpr OutType out_type_of(DType d) {
  return d == DType::kBf16 ? kOutBf16 : d == DType::kFp16 ? kOutF16 : kOutF32;
}

// "" when p.out_absmax is null or usable; otherwise why not. Every family folds it in its e4m3
// per-tensor / per-channel instantiation's GEMM1 epilogue only, and the value it folds is the one
// stored only when out is fp32; the quant of the intermediate is per tensor only then.
inline const char* out_absmax_unsupported_reason(const GroupedGemmParams& p) {
  if (p.out_absmax == nullptr) return "";
  if (p.epilogue != GemmEpilogue::kGateUpActivation) return "out_absmax is for GEMM1 (gate_up_activation) only";
  if (p.scheme != Scheme::kFp8PerTensor) return "out_absmax needs scheme fp8_per_tensor";
  if (p.out_dtype != DType::kFp32) return "out_absmax needs out_dtype fp32";
  return "";
}

}  // namespace moekit::cuda
