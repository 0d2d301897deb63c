// How the host side of moekit's parallelism (src/core/parallel.cpp) reaches its CUDA half
// (src/cuda/parallel.cu): a table of entry points behind the weak symbol
// moekit_cuda_parallel_v1(), pulled out of the moekit::cuda archive by a -u link option
// (cmake/moekit_parallel.cmake). No CUDA or NCCL types here: streams and communicators are void*.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/tensor.hpp"

namespace moekit::detail {

// ep_dispatch, resolved: contiguous arrays on one CUDA device.
struct EpDispatchCall {
  const void* hidden = nullptr;          // [M, K], 2-byte act dtype
  const std::int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  std::int64_t num_tokens = 0, top_k = 0, hidden_size = 0, num_experts_global = 0;
  std::int64_t capacity = 0;             // C rows per peer (>= M*k)
  int ep_size = 1;
  std::int32_t* slot_route = nullptr;    // [M*k]
  std::int32_t* send_counts = nullptr;   // [ep]
  void* send_hidden = nullptr;           // [ep, C, K]
  std::int32_t* send_meta = nullptr;     // [ep, C, 2]
  void* stream = nullptr;
};

struct EpUnpackCall {
  const std::int32_t* recv_counts = nullptr;
  const std::int32_t* recv_meta = nullptr;
  void* recv_hidden = nullptr;
  std::int64_t capacity = 0, hidden_size = 0, first_expert = 0, num_local_experts = 0;
  int ep_size = 1;
  bool zero_unused_rows = false;
  std::int32_t* local_ids = nullptr;
  float* local_weights = nullptr;
  void* stream = nullptr;
};

struct EpCombineCall {
  const std::int32_t* slot_route = nullptr;
  const void* returned = nullptr;
  void* out = nullptr;
  DType act_dtype = DType::kBf16;
  std::int64_t num_tokens = 0, top_k = 0, hidden_size = 0;
  std::int64_t returned_rows = 0;        // ep*C: a route outside [0, this) is never read
  void* stream = nullptr;
};

// Every function throws moekit::Error on failure.
struct CudaParallelV1 {
  void (*ep_dispatch)(const EpDispatchCall& call);
  void (*ep_unpack)(const EpUnpackCall& call);
  void (*ep_combine)(const EpCombineCall& call);

  // NCCL (null when moekit::cuda was built without it; nccl_missing says why).
  const char* nccl_missing;
  void (*nccl_unique_id)(void* out_bytes128);
  void* (*nccl_init_rank)(const void* id_bytes128, int world_size, int rank, int device);
  void (*nccl_init_all)(void** comms, int count, const int* devices);
  void (*nccl_destroy)(void* comm);
  void (*nccl_query)(void* comm, int* rank, int* size, int* device);
  void (*nccl_all_reduce_sum)(void* comm, void* buffer, std::int64_t count, DType dtype, void* stream);
  void (*nccl_group_start)();
  void (*nccl_group_end)();
  void (*nccl_send)(void* comm, const void* buffer, std::size_t bytes, int peer, void* stream);
  void (*nccl_recv)(void* comm, void* buffer, std::size_t bytes, int peer, void* stream);
};

// The linked CUDA half, or nullptr in a binary without moekit::cuda (or without the -u option).
const CudaParallelV1* cuda_parallel() noexcept;

}  // namespace moekit::detail
