// The weighted combine (docs/design.md step 6): out[m, :] = round_act(sum over the local slots j
// of y[m*k + j, :]) in j order, fp32 (y itself fp32 or the act dtype); zeros when no slot is
// local. Deterministic, no atomics.
#pragma once

#include <cstdint>

#include "moekit/tensor.hpp"

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

struct CombineParams {
  const void* y = nullptr;                  // [M*k, K] (GEMM2 output, weights applied)
  DType y_dtype = DType::kFp32;             // kFp32, or out_dtype (token-major GEMM2)
  const std::int32_t* topk_ids = nullptr;   // [M, k] global ids
  const std::int32_t* expert_map = nullptr; // [E_global] or null
  int num_experts_global = 0;
  int num_experts = 0;                      // local E
  std::int64_t num_tokens = 0;              // M
  int top_k = 1;
  std::int64_t hidden_size = 0;             // K
  void* out = nullptr;                      // [M, K] act dtype
  DType out_dtype = DType::kBf16;           // kBf16 or kFp16
  FaultRecord* faults = nullptr;            // a dropped slot's bad id / map entry, or null
};

/// Enqueue the combine on `stream` (cudaStream_t). No-op when M == 0. With `pdl` it is the
/// programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
void launch_combine_sm90(const CombineParams& params, void* stream, bool pdl = false);

}  // namespace moekit::cuda
