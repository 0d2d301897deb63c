// How the host library reaches its backends. The CPU reference is always linked. The CUDA
// backend lives in moekit::cuda, which defines moekit_cuda_backend_v1(); moekit::core refers to
// it weakly, and moekit::cuda's link options force it in (-u), so linking moekit::cuda is all a
// client does to get it.
#pragma once

#include <cstddef>
#include <string>

#include "call.hpp"
#include "rope_quant_call.hpp"

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
};

/// The linked CUDA backend, or nullptr when this binary has none.
const CudaBackendV1* cuda_backend() noexcept;

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
}  // namespace moekit::detail
