// moekit's three operations: route, fused_experts (routing given) and fused_moe (logits in,
// output out), plus the workspace query that makes CUDA calls allocation-free and graph-safe.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit {

/// Which backend runs a call.
enum class Backend : int {
  kAuto,  ///< the backend of the tensors' device (CUDA tensors -> kCuda, CPU tensors -> kCpu)
  kCpu,   ///< the exact reference: plain loops, threaded over tokens
  kCuda,  ///< the Hopper kernels (sm_90a)
};
const char* backend_name(Backend b) noexcept;  ///< "auto", "cpu", "cuda"
Backend parse_backend(std::string_view name);

/// How to run a call. Everything here is optional.
struct Options {
  Backend backend = Backend::kAuto;
  /// cudaStream_t of the call (nullptr = the legacy default stream). Work is enqueued there;
  /// CUDA calls never synchronize the host and never allocate.
  void* stream = nullptr;
  /// Device scratch of at least *_workspace_size() bytes (CUDA), 256-byte aligned.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  /// Force a kernel path by name (see docs/design.md); nullptr = the router decides. The
  /// environment variable MOEKIT_PATH does the same when this is null.
  const char* path = nullptr;
  /// CPU backend threads (0 = hardware concurrency).
  int num_threads = 0;
  /// Debug mode: check for a bad expert id right after the call and throw Error(kInvalidArgument)
  /// naming it (synchronizes the stream; moekit/faults.hpp). MOEKIT_DEBUG_FAULTS=1 does the same
  /// for every call. Off: bad ids are recorded for moekit::check_faults, nothing waits.
  bool debug_faults = false;
};

/// Expert weights as stored: w13 [E, 2N, K] (gate rows [0,N), up rows [N,2N)), w2 [E, K, N].
/// bf16 scheme: bf16/fp16 weights (the activation dtype). fp8 schemes: fp8_e4m3 weights with fp32
/// dequantization scales (value = q * scale):
///   kFp8PerTensor  w13_scale [E]                       w2_scale [E]
///   kFp8PerChannel w13_scale [E, 2N]                   w2_scale [E, K]
///   kFp8Block128   w13_scale [E, ceil(2N/128), ceil(K/128)]  w2_scale [E, ceil(K/128), ceil(N/128)]
struct ExpertWeights {
  TensorView w13;
  TensorView w2;
  TensorView w13_scale;
  TensorView w2_scale;
  TensorView b13;  ///< optional [E, 2N], fp32 or the activation dtype
  TensorView b2;   ///< optional [E, K], fp32 or the activation dtype
};

/// fused_experts: the MoE layer with the routing already chosen (vLLM's fused_experts).
struct FusedExpertsArgs {
  TensorView hidden;        ///< [M, K] bf16 or fp16
  ExpertWeights weights;
  TensorView topk_ids;      ///< [M, k] int32, global expert ids in [0, E_global), or -1 (masked);
                            ///< others are dropped and recorded (moekit/faults.hpp)
  TensorView topk_weights;  ///< [M, k] fp32
  TensorView out;           ///< [M, K], dtype of hidden; every element is written
  Scheme scheme = Scheme::kBf16;
  ActivationConfig activation{};
  TensorView a13_scale;     ///< optional fp32 [1]: static activation scale (kFp8PerTensor)
  TensorView a2_scale;      ///< optional fp32 [1]: static intermediate scale (kFp8PerTensor)
  TensorView expert_map;    ///< optional int32 [E_global]: global id -> local id, -1 = not here;
                            ///< entries outside [0, E) and not -1 are recorded (moekit/faults.hpp)
  /// Multiply the router weight into GEMM1's result (before its bias) instead of GEMM2's.
  bool apply_router_weight_on_input = false;
};

/// route: router logits -> top-k experts and weights.
struct RouteArgs {
  TensorView router_logits;            ///< [M, E_global] fp32 or bf16
  RoutingConfig routing{};
  TensorView e_score_correction_bias;  ///< optional fp32 [E_global] (kSigmoidGroupedTopk)
  TensorView topk_ids;                 ///< out: [M, k] int32
  TensorView topk_weights;             ///< out: [M, k] fp32
};

/// fused_moe: route then fused_experts in one call. experts.topk_ids / topk_weights are
/// optional outputs here (left absent, moekit keeps them in the workspace).
struct FusedMoeArgs {
  TensorView router_logits;
  RoutingConfig routing{};
  TensorView e_score_correction_bias;
  FusedExpertsArgs experts;
};

/// Validate `args` (every check of docs/design.md, before any backend runs) and describe it.
MoeProblem describe(const FusedExpertsArgs& args);
MoeProblem describe(const FusedMoeArgs& args);

/// Device workspace bytes a call of `problem` needs on `backend` (0 on the CPU). Depends on the
/// sizes only, so a caller can size it once for its largest M.
std::size_t workspace_size(const MoeProblem& problem, Backend backend = Backend::kCuda);

void route(const RouteArgs& args, const Options& options = {});
void fused_experts(const FusedExpertsArgs& args, const Options& options = {});
void fused_moe(const FusedMoeArgs& args, const Options& options = {});

/// The kernel paths a call of `problem` runs with `options` (options.path, else MOEKIT_PATH, else
/// the router), as MOEKIT_LOG_DISPATCH=1 prints them: "gemm1=swapab(split_k=8) gemm2=tokmajor"
/// or "fused" on the CUDA backend (current device; tensors assumed 256-byte aligned, as caching
/// allocators hand them out: a real call whose weights or activations are not 16-byte aligned,
/// which the TMA of Swap-AB and token-major needs, can run another path), "cpu" on the reference.
/// `why` (if not null) receives the router's reason. Throws as the call would for a bad path
/// name (kInvalidArgument) or a forced path that cannot run the problem (kNotSupported).
/// Path names: "auto" (the router), "mma" (mma.sync grouped GEMM, 64-token tiles), "swapab"
/// (Swap-AB wgmma + TMA: decode), "tokmajor" (token-major wgmma, warp-specialized: prefill),
/// "fused" (routing to combine in one cooperative launch: the smallest shards at low concurrency).
std::string describe_dispatch(const MoeProblem& problem, const Options& options = {}, std::string* why = nullptr);

/// True when this build has the CUDA backend and a Hopper (sm_90) GPU is visible. `why` (if not
/// null) receives the reason when false. When the probed device (0) is the current one, this also
/// loads the kernels there, as preload() does.
bool cuda_available(std::string* why = nullptr);

/// What loading moekit's kernels on a device cost (see preload()).
struct PreloadReport {
  int device = -1;
  bool loaded_now = false;  ///< this call loaded them (false: an earlier call or the first op had)
  int kernels = 0;          ///< every kernel a call can launch
  double context_ms = 0;    ///< of load_ms: making the device's primary context (~0 when it existed)
  double load_ms = 0;       ///< wall time of the load, host clock
  std::vector<std::pair<std::string, double>> slowest;  ///< the 5 slowest kernels to load (name, ms)
};

/// Loads every moekit CUDA kernel on `device` (-1: the current device) now. The first CUDA call on
/// a device does it anyway (CUDA loads modules lazily; moekit loads them all at once so that no
/// later call, at any batch size, pays a load): call this at model load to keep it off the first
/// request. Once per process and device; later calls return the numbers of that load. Not inside a
/// CUDA-graph capture. Throws Error(kNotSupported) without the CUDA backend or a Hopper device.
PreloadReport preload(int device = -1);

}  // namespace moekit
