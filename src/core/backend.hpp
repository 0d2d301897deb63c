// How the host library reaches its backends. The CPU reference is always linked. The CUDA
// backend lives in moekit::cuda, which defines moekit_cuda_backend_v1(); moekit::core refers to
// it weakly, and moekit::cuda's link options force it in (-u), so linking moekit::cuda is all a
// client does to get it.
#pragma once

#include <cstddef>
#include <string>

#include "call.hpp"
#include "rope_quant_call.hpp"
#include "moekit/faults.hpp"

namespace moekit::detail {

/// The CUDA backend's entry points (src/cuda/backend.cu fills this).
struct CudaBackendV1 {
  /// True when a Hopper GPU is usable as `device`; else false with the reason in *why.
  bool (*device_ok)(int device, std::string* why);
  std::size_t (*workspace_size)(const MoeProblem& problem);
  void (*run_moe)(const MoeCall& call);
  void (*run_route)(const RouteCall& call);
  /// The kernel paths the router picks for `problem` under the forced name (null = auto) on
  /// `device` (-1 = current): "gemm1=swapab(split_k=8) gemm2=mma"; the reason in *why.
  std::string (*describe_dispatch)(const MoeProblem& problem, const char* forced, int device, std::string* why);
  /// inv_rope_fp8_quant (src/cuda/kernels/rope_quant/): one launch on call.stream.
  void (*run_inv_rope_fp8_quant)(const InvRopeQuantCall& call);
  /// moekit::preload: load every kernel on `device` (-1 = current) and report what it cost.
  PreloadReport (*preload)(int device);
  /// Read and clear the fault record of `stream`'s device after synchronizing it (true: a fault,
  /// in *fault). With `capturing` not null, a capturing stream sets it and returns false instead
  /// of throwing. src/cuda/common/faults.cuh.
  bool (*take_fault)(void* stream, Fault* fault, bool* capturing);
};

/// The linked CUDA backend, or nullptr when this binary has none.
const CudaBackendV1* cuda_backend() noexcept;

/// The CPU backend's fault record (src/core/faults.cpp): one per process, first fault wins,
/// sticky until take_cpu_fault reads and clears it. Thread-safe.
void record_cpu_fault(const Fault& fault);
bool take_cpu_fault(Fault* fault);
/// The fault of topk_ids[row, slot] == id against E_global and expert_map (null: none) of E local
/// experts; FaultTensor::kNone when the value is valid (in range, or -1). The CPU reference's
/// literal statement of the rule the kernels follow (cuda/common/faults.cuh).
Fault id_fault(std::int64_t row, std::int32_t slot, std::int32_t id, std::int64_t num_experts_global,
               const std::int32_t* expert_map, std::int64_t num_experts);
/// Throw Error(kInvalidArgument) with fault.to_string() and the debug-mode hint.
[[noreturn]] void throw_fault(const Fault& fault, const char* what);

}  // namespace moekit::detail

namespace moekit::cpu {
/// The reference backend (src/cpu/). Exact semantics of docs/design.md, threaded over tokens.
void run_moe(const detail::MoeCall& call);
void run_route(const detail::RouteCall& call);
void run_inv_rope_fp8_quant(const detail::InvRopeQuantCall& call);  // src/cpu/rope_quant_ref.cpp
}  // namespace moekit::cpu

namespace moekit::detail {
/// Validation (src/core/validate.cpp). Each throws Error(kInvalidArgument / kNotSupported)
/// naming the argument and the values; the resolved call has problem and pointers filled in.
MoeCall resolve(const FusedExpertsArgs& args, const Options& options);
MoeCall resolve(const FusedMoeArgs& args, const Options& options);
RouteCall resolve(const RouteArgs& args, const Options& options);
/// Whether the bytes two views can touch (first to last element, non-negative strides)
/// intersect; an absent or empty view overlaps nothing. Shared by the argument checks.
bool views_overlap(const TensorView& a, const TensorView& b);
}  // namespace moekit::detail
