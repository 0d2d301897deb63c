// Parameters of the weighted combine (docs/design.md step 6): out[m, :] = round_act(sum over the
// local slots j of y[m*k + j, :]) in j order, fp32 (y itself fp32 or the act dtype); zeros when no
// slot is local. Plain struct shared by host and device, and the launch entry of each
// instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "moekit/tensor.hpp"  // DType

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

namespace combine {

// Launches combine_sm90_kernel for out dtype kOut, y dtype kY and kVec values of y per thread
// (16 bytes or 1) on `stream` (cudaStream_t) with `grid` CTAs of kThreads (inst/*.cu); with `pdl`
// as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
template <DType kOut, DType kY, int kVec>
void run_combine_sm90(const CombineParams& p, unsigned grid, void* stream, bool pdl);

}  // namespace combine
}  // namespace moekit::cuda
