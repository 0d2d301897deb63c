// Host entry points of the per-expert MLP kernel (sm_90a; kernel_sm90.cuh): a fused_experts call
// whose shard experts are narrow enough (intermediate size kN = 96) for one CTA to run an expert's
// token tile through GEMM1, the activation and GEMM2, from the routing ids to the per-slot rows y
// that the combine sums.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common/faults.cuh"
#include "moekit/problem.hpp"

namespace moekit::cuda {

struct ExpertMlpArgs {
  MoeProblem problem;              // bf16, fp8_per_tensor or fp8_per_channel, no routing in the call
  const void* hidden = nullptr;    // [M, K] activation dtype; fp8_per_tensor: e4m3, hidden quantized
  const void* w13 = nullptr;       // [E, 2N, K]
  const void* w2 = nullptr;        // [E, K, N]
  const std::int32_t* topk_ids = nullptr;
  const std::int32_t* expert_map = nullptr;
  const float* topk_weights = nullptr;
  const void* b13 = nullptr;       // [E, 2N] problem.bias_dtype, where problem.has_bias13
  const void* b2 = nullptr;        // [E, K], where problem.has_bias2
  void* y = nullptr;               // [M k, K] activation dtype
  // fp8_per_tensor: hidden's scale [1], the weights' per-expert scales [E], the static intermediate
  // scale [1] or null (each unit's own dynamic scale).
  const float* a_scale = nullptr;
  const float* w13_scale = nullptr;
  const float* w2_scale = nullptr;
  const float* a2_scale = nullptr;
  FaultRecord* faults = nullptr;
  // Launched as the programmatic dependent of the kernel before it on the stream (fp8_per_tensor:
  // hidden's quantization; cuda/common/pdl.cuh): the routing and the first weight stages run
  // before the kernel waits for that launch, which it does before it reads hidden or its scale.
  bool pdl = false;
};

// Whether the kernel can run `problem` on the current device; where not, why goes to `why` when
// given (no string is built otherwise). Never throws.
bool expert_mlp_supported(const MoeProblem& problem, std::string* why);

// Whether the tensors' addresses suit the kernel: hidden's rows by 16-byte copies, the weights'
// TMA descriptors (16-byte aligned bases), the biases by 4-byte copies (null: none).
bool expert_mlp_pointers_ok(const void* hidden, const void* w13, const void* w2, const void* b13 = nullptr,
                            const void* b2 = nullptr);

// Throws where a call that expert_mlp_supported accepts still cannot launch: a bad
// MOEKIT_EXPERT_MLP_EVICT_FIRST, or no cluster of the call's ceil(N / 96) CTAs fitting on the
// device (the query is asked once a device and shape). The backend calls it before it enqueues
// anything of the call (fp8: before the quantization launch); launch_expert_mlp_sm90 throws the
// same errors where it reads the switch and sizes the grid.
void expert_mlp_check_launchable(const MoeProblem& problem);

// The cluster form's units at once on the current device: clusters of S = ceil(N / 96) CTAs
// resident together (expert_mlp_max_clusters' occupancy query, asked once a device and shape); 0
// for the one-CTA form (N <= 96: the router does not read it there) and where no cluster fits.
// For the router (RouterInputs::expert_mlp_clusters). Never throws.
int expert_mlp_resident_clusters(const MoeProblem& problem) noexcept;

// Enqueues the kernel on `stream` (cudaStream_t); y's rows of the local slots are written, the
// others untouched. No allocation, no host synchronization: CUDA-graph capturable. Throws
// Error(kNotSupported) where the kernel cannot run the call, Error(kCudaError) when CUDA fails.
void launch_expert_mlp_sm90(const ExpertMlpArgs& args, void* stream);

/// Tests only: launches of this kernel on the calling thread.
int expert_mlp_launches();

/// Tests only: of those, the launches of its kPlain instantiations (the common per-tensor call's
/// features fixed at compile time; MOEKIT_EXPERT_MLP_PLAIN).
int expert_mlp_plain_launches();

/// Tests only: the next launches write each CTA's phase stamps (expert_mlp::PhaseWord, kPhaseWords
/// words a CTA for CTAs < max_ctas) to `device_buffer`; null turns the timer off.
void set_expert_mlp_phase_buffer(std::uint64_t* device_buffer, int max_ctas);

}  // namespace moekit::cuda
