// Tensor and expert parallelism: sharding helpers that cut full expert weights for one rank,
// the expert-parallel (EP) dispatch / combine bookkeeping as plain calls (CPU reference and CUDA
// kernels), and a communicator wrapper over NCCL with the two multi-GPU ops tp_fused_moe and
// ep_fused_moe. docs/parallel.md describes the layouts and the exchange protocol.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moekit/checkpoint.hpp"
#include "moekit/ops.hpp"
#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit {

// ---------------------------------------------------------------------------------------------
// Sharded weights (host memory, owned).

/// Expert weights of one rank, owned in host memory. An absent optional tensor (no scales for
/// kBf16, no bias) has an empty shape and no data; weights() leaves it absent.
struct ShardedExperts {
  HostTensor w13;        ///< [E_r, 2N_r, K]: the rank's gate rows, then the same slice of up rows
  HostTensor w2;         ///< [E_r, K, N_r]
  HostTensor w13_scale;  ///< per scheme, as in ExpertWeights
  HostTensor w2_scale;
  HostTensor b13;        ///< [E_r, 2N_r] or absent
  HostTensor b2;         ///< [E_r, K] or absent (tensor parallel: present on rank 0 only)
  Scheme scheme = Scheme::kBf16;
  std::int64_t first_expert = 0;  ///< global id of local expert 0 (expert parallel), else 0
  ExpertWeights weights() const;  ///< host views for fused_experts
};

// ---------------------------------------------------------------------------------------------
// Tensor parallelism: every rank holds every expert, each with N / tp of the intermediate size.

/// Cut full host weights (`full`, as fused_experts takes them, scheme `scheme`) for rank `tp_rank`
/// of `tp_size`, along N. With n = N / tp_size, the rank keeps gate rows [r*n, (r+1)*n) and up rows
/// [N + r*n, N + (r+1)*n) of w13 (in that order), columns [r*n, (r+1)*n) of w2, and the same slice
/// of b13. b2 is kept on rank 0 only (absent elsewhere), so that summing the ranks' outputs adds it
/// exactly once. Scales: kFp8PerTensor copied; kFp8PerChannel w13_scale sliced like the w13 rows
/// and w2_scale (one per output row K) copied; kFp8Block128 block rows / columns sliced, which
/// needs n % 128 == 0.
/// Errors: kInvalidArgument (bad rank or size, N not divisible by tp_size, shapes that disagree),
/// kNotSupported (kFp8Block128 with n % 128 != 0: the 128x128 scale blocks would straddle ranks).
///
/// Numerics: for every scheme the rank outputs sum to the unsharded output up to rounding; the
/// fp8 schemes re-quantize GEMM2's input per rank, so their dynamic intermediate scales (per tensor,
/// per token) see only the rank's n channels. kFp8Block128 groups are whole 128-channel blocks of
/// N, the same on one rank as unsharded.
ShardedExperts shard_experts_tp(const ExpertWeights& full, Scheme scheme, int tp_size, int tp_rank);

// ---------------------------------------------------------------------------------------------
// Expert parallelism: experts partitioned across ranks in contiguous ranges.

/// The experts rank `rank` of `ep_size` owns: [first, first + count). E_global experts are split
/// in contiguous ranges, the first E_global % ep_size ranks one expert larger (vLLM's layout). A
/// rank may own zero experts when ep_size > E_global. Throws kInvalidArgument for a bad rank/size.
struct ExpertRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
};
ExpertRange expert_range_for_rank(std::int64_t num_experts_global, int ep_size, int rank);

/// The expert_map of rank `rank`: [E_global] int32, global id -> local id in [0, count) for the
/// rank's range, -1 elsewhere.
std::vector<std::int32_t> expert_map_for_rank(std::int64_t num_experts_global, int ep_size, int rank);

/// The rank that owns global expert `expert_id` under expert_range_for_rank, or -1 when the id is
/// outside [0, E_global).
int expert_owner(std::int64_t num_experts_global, int ep_size, std::int64_t expert_id) noexcept;

/// Copy experts [first, first + count) of `full` (all tensors sliced along E; b2 kept).
ShardedExperts slice_experts(const ExpertWeights& full, Scheme scheme, std::int64_t first, std::int64_t count);
/// slice_experts with expert_range_for_rank(E, ep_size, ep_rank). Throws kInvalidArgument when the
/// rank owns no expert.
ShardedExperts shard_experts_ep(const ExpertWeights& full, Scheme scheme, int ep_size, int ep_rank);

// ---------------------------------------------------------------------------------------------
// EP exchange bookkeeping. One rank's M tokens send each (token, slot) pair as one row to the rank
// owning the slot's expert. Every buffer has a fixed capacity of C = M*k rows per peer (the worst
// case: every slot to one peer), so no count ever has to reach the host and the whole exchange is
// CUDA-graph capturable. These calls run on the CPU for host tensors and on the GPU (on
// options.stream, no host sync) for CUDA tensors; both give bitwise identical results.

/// Rows per peer of the EP exchange buffers: M*k.
inline std::int64_t ep_capacity(std::int64_t num_tokens, std::int64_t top_k) { return num_tokens * top_k; }

/// Source side, step 1: plan and pack. For slot i = m*k + j (ascending), d = expert_owner(id) and
/// pos = the number of earlier slots with the same d; then slot_route[i] = d*C + pos (-1 when the id
/// is outside [0, E_global): the slot contributes nothing; unless the id is -1 it is recorded as a
/// fault, moekit/faults.hpp), send_counts[d] = slots to d, row d*C+pos of send_hidden = hidden[m]
/// and of send_meta = (id, bit pattern of the fp32 weight).
struct EpDispatchArgs {
  TensorView hidden;        ///< [M, K] bf16 or fp16
  TensorView topk_ids;      ///< [M, k] int32 global ids
  TensorView topk_weights;  ///< [M, k] fp32
  std::int64_t num_experts_global = 0;
  int ep_size = 1;
  TensorView slot_route;    ///< out [M*k] int32
  TensorView send_counts;   ///< out [ep_size] int32
  TensorView send_hidden;   ///< out [ep_size, C, K] dtype of hidden; rows past the count untouched
  TensorView send_meta;     ///< out [ep_size, C, 2] int32; rows past the count untouched
};
void ep_dispatch(const EpDispatchArgs& args, const Options& options = {});

/// Destination side: after the exchange, recv_hidden / recv_meta region s holds rank s's rows for
/// this rank, recv_counts[s] of them valid. Writes local_ids[s*C + p] = id - first_expert for valid
/// rows whose expert is one of the rank's (else -1) and local_weights the weight (0 for invalid
/// rows); with zero_unused_rows, rows past the count of recv_hidden are zeroed (needed when
/// the local call takes a dynamic per-tensor activation scale over all its rows). Then
/// fused_experts(hidden = recv_hidden as [ep*C, K], topk_ids = local_ids as [ep*C, 1], ...) with the
/// rank's local experts and no expert_map computes every row's weighted expert output.
struct EpUnpackArgs {
  TensorView recv_counts;   ///< [ep_size] int32
  TensorView recv_meta;     ///< [ep_size, C, 2] int32
  TensorView recv_hidden;   ///< [ep_size, C, K]; rows past the count zeroed when zero_unused_rows
  std::int64_t first_expert = 0;
  std::int64_t num_local_experts = 0;
  bool zero_unused_rows = false;
  TensorView local_ids;     ///< out [ep_size * C] int32
  TensorView local_weights; ///< out [ep_size * C] fp32
};
void ep_unpack(const EpUnpackArgs& args, const Options& options = {});

/// Source side, last step: `returned` region d holds rank d's expert outputs for the rows this rank
/// sent it. out[m] = round_act(sum over j = 0..k-1 of returned[slot_route[m*k + j]]), summed in fp32
/// in slot order (deterministic), 0 when no slot of m is routed.
struct EpCombineArgs {
  TensorView slot_route;    ///< [M*k] int32 from ep_dispatch
  TensorView returned;      ///< [ep_size, C, K] act dtype
  TensorView out;           ///< [M, K] act dtype
  std::int64_t top_k = 1;
};
void ep_combine(const EpCombineArgs& args, const Options& options = {});

// ---------------------------------------------------------------------------------------------
// NCCL communicator and the multi-GPU ops (CUDA builds with NCCL; otherwise kNotSupported).

/// True when this build has the CUDA backend compiled with NCCL. `why` gets the reason if not.
bool nccl_available(std::string* why = nullptr);

/// A NCCL communicator: one rank of a group of GPUs. Copies share the communicator; an owned one
/// (made by init_rank / init_all) is destroyed with the last copy, a wrapped one never is.
/// moekit never enables NVLink SHARP / multicast (NCCL_NVLS_ENABLE): keep it 0 on shared hosts.
class Communicator {
 public:
  using UniqueId = std::array<std::uint8_t, 128>;  ///< ncclUniqueId bytes (NCCL_UNIQUE_ID_BYTES)

  /// Wrap an existing ncclComm_t (passed as void*). Not owned: the caller destroys it.
  static Communicator wrap(void* nccl_comm);
  /// ncclGetUniqueId: make on one rank, hand to every rank out of band (MPI, a file, a pipe).
  static UniqueId unique_id();
  /// ncclCommInitRank on CUDA device `device` (which becomes current on this thread).
  static Communicator init_rank(const UniqueId& id, int world_size, int rank, int device);
  /// ncclCommInitAll: one communicator per device of `devices` in this process (rank i = devices[i]).
  static std::vector<Communicator> init_all(const std::vector<int>& devices);

  int rank() const;
  int size() const;
  int device() const;        ///< the CUDA device of this rank
  void* nccl_comm() const;   ///< the ncclComm_t

  /// In-place ncclAllReduce(sum) of a contiguous CUDA tensor on `stream` (cudaStream_t).
  void all_reduce_sum(const TensorView& buffer, void* stream) const;

  struct Impl;
 private:
  std::shared_ptr<Impl> impl_;
};

/// Tensor parallel MoE: fused_moe with this rank's shard (shard_experts_tp) on options.stream, then
/// an in-place ncclAllReduce(sum) of out on the same stream. Every rank passes the same hidden and
/// logits; every rank gets the full output. options.workspace as for fused_moe.
void tp_fused_moe(const FusedMoeArgs& args, const Communicator& comm, const Options& options = {});
/// The same with the routing given.
void tp_fused_experts(const FusedExpertsArgs& args, const Communicator& comm, const Options& options = {});

/// Device workspace bytes of ep_fused_moe / ep_fused_experts for `problem` (describe(args): its M is
/// this rank's tokens) across `ep_size` ranks: the exchange buffers (2 x ep*C rows of K, C =
/// max(M, max_tokens_per_rank) * k) plus the local call's workspace.
std::size_t ep_workspace_size(const MoeProblem& problem, int ep_size, std::int64_t max_tokens_per_rank = 0);

/// Expert parallel MoE over comm (ep_size = comm.size()). Each rank passes its own tokens (hidden,
/// logits or routing), its local experts (shard_experts_ep: exactly the range of
/// expert_range_for_rank) and expert_map = expert_map_for_rank (device memory, [E_global]). On
/// options.stream: route (fused_moe), ep_dispatch, counts exchange (ncclSend/ncclRecv of one int32
/// per peer in its own group), rows exchange (fixed C rows per peer), ep_unpack, fused_experts on
/// the received rows, rows back, ep_combine into out. No host sync; graph capturable. Every rank
/// must own at least one expert (ep_size <= E_global).
/// The per-peer capacity C = max(M, max_tokens_per_rank) * k must be the same on every rank (NCCL
/// matches message sizes): ranks with different M pass the same max_tokens_per_rank (>= every M);
/// 0 means "this rank's M", for callers whose ranks all hold M tokens.
void ep_fused_moe(const FusedMoeArgs& args, const Communicator& comm, const Options& options = {},
                  std::int64_t max_tokens_per_rank = 0);
void ep_fused_experts(const FusedExpertsArgs& args, const Communicator& comm, const Options& options = {},
                      std::int64_t max_tokens_per_rank = 0);

}  // namespace moekit
