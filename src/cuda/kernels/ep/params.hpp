// Parameters of the expert-parallel bookkeeping kernels (docs/parallel.md): one plain struct per
// kernel holding its arguments (the kernels take them one by one), and the launch entry of each
// instantiation (inst/ep.cu). launch.cu fills them from core's EpDispatchCall /
// EpUnpackCall / EpCombineCall.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/tensor.hpp"  // DType

namespace moekit::cuda {

struct FaultRecord;  // cuda/common/faults.cuh

namespace ep {

// ep_plan_kernel: slot_route[i] = d*C + pos and counts[d] = slots to rank d.
struct EpPlanParams {
  const std::int32_t* ids = nullptr;  // topk_ids [M*k]
  std::int64_t slots = 0;             // M*k
  std::int64_t num_experts = 0;       // E_global
  int ep = 1;                         // ranks
  std::int64_t capacity = 0;          // C rows per peer
  std::int32_t* route = nullptr;      // slot_route [M*k]
  std::int32_t* counts = nullptr;     // send_counts [ep]
  std::int64_t top_k = 1;
  FaultRecord* faults = nullptr;      // the device's fault record
};

// ep_pack_kernel: each routed slot's token row to its place in the send buffer, and its meta.
struct EpPackParams {
  const void* hidden = nullptr;       // [M, row_vecs] vectors
  const std::int32_t* ids = nullptr;
  const float* weights = nullptr;
  const std::int32_t* route = nullptr;
  std::int64_t slots = 0, top_k = 1, row_vecs = 0;
  void* send = nullptr;               // [ep*C, row_vecs] vectors
  std::int32_t* meta = nullptr;       // [ep*C, 2]: id, weight bits
};

// ep_unpack_kernel: local ids / weights of each received row, optional zeroing of unused rows.
struct EpUnpackParams {
  const std::int32_t* counts = nullptr;  // recv_counts [ep]
  const std::int32_t* meta = nullptr;
  void* hidden = nullptr;                // [ep*C, row_vecs] vectors
  std::int64_t rows = 0, capacity = 0, row_vecs = 0, first_expert = 0, num_local = 0;
  bool zero_unused = false;
  std::int32_t* local_ids = nullptr;
  float* local_weights = nullptr;
};

// ep_combine_kernel: out[m] = round_act(sum_j returned[route[m*k + j]]) in j order, fp32.
struct EpCombineParams {
  const std::int32_t* route = nullptr;
  const void* returned = nullptr;     // [returned_rows, K] act dtype
  std::int64_t returned_rows = 0, num_tokens = 0, top_k = 1, hidden_size = 0;
  void* out = nullptr;                // [M, K] act dtype
};

// The launch of one instantiation (inst/ep.cu) on `stream` (cudaStream_t), checked: the plan
// on one CTA of kPlanThreads; pack / unpack on `grid` CTAs of kRowThreads moving rows in
// kVecBytes-byte vectors (16 or 2); the combine on `grid` CTAs of kCombineThreads for act dtype
// kAct (bf16 / fp16). `smem`: dynamic shared memory bytes.
void run_ep_plan(const EpPlanParams& p, std::size_t smem, void* stream);
template <int kVecBytes>
void run_ep_pack(const EpPackParams& p, unsigned grid, void* stream);
template <int kVecBytes>
void run_ep_unpack(const EpUnpackParams& p, unsigned grid, void* stream);
template <DType kAct>
void run_ep_combine(const EpCombineParams& p, unsigned grid, std::size_t smem, void* stream);

}  // namespace ep
}  // namespace moekit::cuda
