// The CUDA backend's entry (moekit_cuda_backend_v1): device probing, the workspace size and the
// orchestration of one call's launches on the caller's stream (docs/design.md "The CUDA
// backend"). Host code only: it includes no kernel template. No allocation, no host
// synchronization, nothing that breaks CUDA-graph capture.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/env.hpp"
#include "core/path_router.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/preload.cuh"
#include "cuda/kernels/combine/launch_sm90.hpp"
#include "cuda/kernels/decode/launch_sm90.hpp"
#include "cuda/kernels/expert_mlp/launch_sm90.hpp"
#include "cuda/kernels/gemv/launch_sm90.hpp"
#include "cuda/kernels/fused_moe/launch_sm90.hpp"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/kernels/mma/launch_sm90.hpp"
#include "cuda/kernels/quant/config.hpp"
#include "cuda/kernels/quant/launch_sm90.hpp"
#include "cuda/kernels/rope_quant/launch_sm90.hpp"
#include "cuda/kernels/routing/launch_sm90.hpp"
#include "cuda/kernels/swapab/launch_sm90.hpp"
#include "cuda/kernels/tokmajor/launch_sm90.hpp"
#include "cuda/workspace.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

// Makes `device` current for the scope of a call and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MOEKIT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MOEKIT_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

template <class T>
T* slice(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

bool device_ok(int device, std::string* why) {
  auto fail = [why](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the probe must not poison the caller's next CUDA call
    return fail(std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")");
  }
  if (device < 0 || device >= count)
    return fail("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                " device(s) visible)");
  int major = 0, minor = 0;
  err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail("cannot query CUDA device " + std::to_string(device) + " (" + cudaGetErrorName(err) + ")");
  }
  // The kernels are compiled for sm_90a only: its code runs on compute capability 9.0 alone.
  if (major != 9 || minor != 0) {
    cudaDeviceProp prop{};
    std::string name = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? std::string(prop.name) : "unknown";
    return fail("moekit's CUDA kernels are built for Hopper (sm_90a); CUDA device " + std::to_string(device) +
                " is " + name + " (sm_" + std::to_string(major) + std::to_string(minor) + ")");
  }
  // Load every moekit kernel on the device now (once per device; cuda/common/preload.cuh), so that
  // no later call, at any batch size, pays CUDA's lazy module loading. moekit::cuda_available()
  // and the first eager call both get here. Only for the caller's current device: probing device
  // 0 (cuda_available, Backend::kAuto) must not create a context on a GPU this process does not
  // use; run_moe / run_route preload their own device anyway.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device) {
    try {
      preload_kernels(device);
    } catch (const Error& e) {
      return fail(e.what());
    }
  }
  return true;
}

// What every call of a problem asks that depends on the problem alone: the workspace size (which
// moekit::fused_experts checks before the backend runs) and whether the decode and GEMV paths can
// run it (the router's first queries). An eager caller repeats the same few problems (one per
// layer shape and batch size), so the last kProblemMemo problems seen on this thread keep their
// answers: a call asks the kernels' can_implement (tilings, shared-memory layouts: ~0.2-0.9 us
// each, some twice) once per problem instead of every call. Each field is filled when first asked.
struct ProblemFacts {
  MoeProblem problem{};
  bool used = false;
  bool has_workspace = false;
  std::size_t workspace = 0;
  bool has_paths = false;  // decode_ok / gemv hold the answers at paths_sm_count SMs
  int paths_sm_count = 0;
  bool decode_ok = false;
  GemvSupport gemv{};
};

constexpr int kProblemMemo = 8;

// This thread's entry for `p` (a fresh one, the oldest replaced, when none holds it). The
// reference is valid until the thread's next call of problem_facts: callers compute an answer
// first and then take the entry to store it, so nothing they call in between can move it.
ProblemFacts& problem_facts(const MoeProblem& p) {
  thread_local ProblemFacts memo[kProblemMemo];
  thread_local int next = 0;
  for (ProblemFacts& f : memo)
    if (f.used && detail::same_problem(f.problem, p)) return f;
  ProblemFacts& f = memo[next];
  next = (next + 1) % kProblemMemo;
  f = ProblemFacts{};
  f.problem = p;
  f.used = true;
  return f;
}

// The largest of the multi-launch layout, the fused path's and the decode path's: the router may
// pick any of them.
std::size_t workspace_size(const MoeProblem& problem) {
  if (const ProblemFacts& f = problem_facts(problem); f.has_workspace) return f.workspace;
  const std::size_t fused = can_implement_fused_sm90(problem, nullptr) ? fused_workspace_size(problem) : 0;
  const std::size_t bytes =
      std::max({workspace_layout(problem).total, fused, decode_workspace_size(problem), gemv_workspace_size(problem)});
  ProblemFacts& f = problem_facts(problem);
  f.workspace = bytes;
  f.has_workspace = true;
  return bytes;
}

// Where a call's routing outputs live: the caller's buffers when given, else the workspace.
const float* routed_weights(const detail::MoeCall& call, const WorkspaceLayout& L) {
  if (!call.problem.with_routing) return call.topk_weights;
  return call.topk_weights_out != nullptr ? call.topk_weights_out : slice<float>(call.workspace, L.topk_weights);
}

// Whether the routing launch may take hidden's absmax for a dynamic per-tensor scale
// (RoutingParams::absmax_ctas): on unless MOEKIT_ROUTING_ABSMAX is "0" (the separate absmax
// launch, for A/Bs and the test that compares the two bit for bit); read at every call.
bool routing_absmax_enabled() {
  const char* v = detail::env_value(detail::EnvVar::kRoutingAbsmax);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Whether the routing launch may quantize a small hidden itself on an extra CTA for a dynamic
// per-tensor scale (RoutingParams::quant_cta), so that the chain has no quantization launch for
// hidden: on unless MOEKIT_ROUTING_QUANT is "0" (the one-CTA quantization launch after routing,
// for A/Bs and the test that compares the two bit for bit); read at every call.
bool routing_quant_enabled() {
  const char* v = detail::env_value(detail::EnvVar::kRoutingQuant);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Whether GEMM1's epilogue produces the intermediate's absmax (GroupedGemmParams::out_absmax), so
// that quant(h) is one launch instead of the absmax pass and the quant pass (ncu, H200: the
// absmax launch was 3.2-3.6 us of every such call, e.g. 87 us at mixtral-8x7b TP8 M=64 fp8):
// fp8_per_tensor with a dynamic intermediate scale (no a2_scale). The word is the same max of
// the same values either way, so the output is bitwise the same. MOEKIT_FUSED_H_ABSMAX=0 keeps
// the two passes (read at every call, like MOEKIT_PDL, so a test or benchmark can A/B it in one
// process).
bool fused_h_absmax(const detail::MoeCall& call) {
  if (call.problem.scheme != Scheme::kFp8PerTensor || call.a2_scale != nullptr) return false;
  const char* v = detail::env_value(detail::EnvVar::kFusedHAbsmax);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// GEMM1: gathered token rows x w13[e] -> activation -> inter[P, N] in sorted order.
GroupedGemmParams gemm1_params(const detail::MoeCall& call, const WorkspaceLayout& L) {
  const MoeProblem& p = call.problem;
  void* ws = call.workspace;
  const bool fp8 = p.scheme != Scheme::kBf16;
  GroupedGemmParams g1;
  g1.scheme = p.scheme;
  g1.epilogue = GemmEpilogue::kGateUpActivation;
  g1.num_experts = static_cast<int>(p.num_experts);
  g1.n_out = p.intermediate_size;
  g1.k_dim = p.hidden_size;
  g1.max_rows = p.num_tokens * p.top_k;
  g1.row_offsets = slice<std::int32_t>(ws, L.expert_offsets);
  g1.sorted_slots = slice<std::int32_t>(ws, L.sorted_slots);
  g1.top_k = static_cast<int>(p.top_k);
  g1.a = fp8 ? static_cast<const void*>(slice<std::uint8_t>(ws, L.a_q)) : call.hidden;
  g1.gather_a_by_token = true;
  g1.act_dtype = p.act_dtype;
  g1.a_scale = fp8 ? slice<float>(ws, L.a_scale) : nullptr;
  g1.b = call.w13;
  g1.b_scale = call.w13_scale;
  g1.bias = p.has_bias13 ? call.b13 : nullptr;
  g1.bias_dtype = p.bias_dtype;
  g1.topk_weights = routed_weights(call, L);
  g1.sorted_weights = g1.topk_weights != nullptr ? slice<float>(ws, L.sorted_weights) : nullptr;
  g1.weight_on_input = p.apply_router_weight_on_input;
  g1.activation = p.activation;
  g1.out = slice<void>(ws, L.inter);
  g1.out_dtype = fp8 ? DType::kFp32 : p.act_dtype;
  g1.tile_counter = slice<std::uint32_t>(ws, L.counters) + WorkspaceLayout::kTileGemm1;  // zeroed by routing (or run_moe's memset)
  // The absmax word of quant(h) (zeroed by routing or run_moe's memset), completed by GEMM1's epilogue.
  if (fused_h_absmax(call)) g1.out_absmax = slice<std::uint32_t>(ws, L.counters) + WorkspaceLayout::kAbsmaxInter;
  return g1;
}

// GEMM2: sorted intermediate rows x w2[e] -> (+b2, *w) -> y[slot, K] fp32 (run_moe may make y
// the activation dtype once the router has picked the token-major kernel; see y_dtype()).
GroupedGemmParams gemm2_params(const detail::MoeCall& call, const WorkspaceLayout& L) {
  const MoeProblem& p = call.problem;
  void* ws = call.workspace;
  const bool fp8 = p.scheme != Scheme::kBf16;
  GroupedGemmParams g2;
  g2.scheme = p.scheme;
  g2.epilogue = GemmEpilogue::kBiasWeightScatter;
  g2.num_experts = static_cast<int>(p.num_experts);
  g2.n_out = p.hidden_size;
  g2.k_dim = p.intermediate_size;
  g2.max_rows = p.num_tokens * p.top_k;
  g2.row_offsets = slice<std::int32_t>(ws, L.expert_offsets);
  g2.sorted_slots = slice<std::int32_t>(ws, L.sorted_slots);
  g2.top_k = static_cast<int>(p.top_k);
  g2.a = fp8 ? static_cast<const void*>(slice<std::uint8_t>(ws, L.inter_q)) : slice<void>(ws, L.inter);
  g2.gather_a_by_token = false;
  g2.act_dtype = p.act_dtype;
  g2.a_scale = fp8 ? slice<float>(ws, L.inter_scale) : nullptr;
  g2.b = call.w2;
  g2.b_scale = call.w2_scale;
  g2.bias = p.has_bias2 ? call.b2 : nullptr;
  g2.bias_dtype = p.bias_dtype;
  g2.topk_weights = routed_weights(call, L);
  g2.sorted_weights = g2.topk_weights != nullptr ? slice<float>(ws, L.sorted_weights) : nullptr;
  g2.weight_on_input = p.apply_router_weight_on_input;
  g2.activation = p.activation;
  g2.out = slice<float>(ws, L.y);
  g2.out_dtype = DType::kFp32;
  g2.tile_counter = slice<std::uint32_t>(ws, L.counters) + WorkspaceLayout::kTileGemm2;  // zeroed by routing (or run_moe's memset)
  return g2;
}

// The dtype of y, GEMM2's per-slot rows [M*k, K] that the combine sums. The token-major kernel
// (prefill) writes them in the activation dtype: y is written once and read once, M*k*K values
// (1.9 GB as fp32 at deepseek-v3 M=8192). Measured in a same-run A/B: 1-5 % faster at k = 8 TP8
// prefill, 1.008x at the median (docs/perf.md); the kernels, not these bytes, were the limit.
// Each value is rounded once to bf16 / fp16 (2^-9 / 2^-12 relative) before the fp32 sum over the
// k slots, as vLLM's intermediate cache is; the sum order, hence run-to-run determinism, is
// unchanged. Swap-AB and the mma path (decode, where y is small) keep fp32. MOEKIT_Y_FP32=1 keeps
// fp32 everywhere (read at every call, like MOEKIT_PDL, so a benchmark can A/B it in one process).
DType y_dtype(const MoeProblem& p, const detail::DispatchPlan& plan) {
  if (plan.gemm[1].impl != detail::GemmImpl::kTokmajor) return DType::kFp32;
  const char* v = detail::env_value(detail::EnvVar::kYFp32);
  if (v != nullptr && std::strcmp(v, "0") != 0) return DType::kFp32;
  return p.act_dtype;
}

// The router's plan for a call (core/path_router.hpp), from the sizes, the SM count and the
// kernels' can_implement (host queries only, no sync). call.device is current. *g1 / *g2: the
// GEMMs' parameters (gemm1_params, gemm2_params), filled unless the plan is decode's, which has
// no use for them.
detail::DispatchPlan plan_call(const detail::MoeCall& call, const WorkspaceLayout& L, GroupedGemmParams* g1,
                               GroupedGemmParams* g2, bool log) {
  const MoeProblem& p = call.problem;
  const char* forced = call.forced_path;
  const int device = call.device;
  detail::RouterInputs in;
  in.sm_count = device_sm_count(device);  // once per device (cuda/common/device_attr.cuh)
  in.forced = forced;
  // A call (log) needs the reason only to print it; describe_dispatch (!log) returns it.
  const bool print = log && detail::log_dispatch_enabled();
  in.want_reason = !log || print;
  // The kernels' reasons for declining are read by the router's reason and by a forced path's
  // error only: an automatic call that prints nothing does not have them spelled out.
  const bool need_why = in.want_reason || (forced != nullptr && forced[0] != '\0');
  auto why = [need_why](std::string& s) { return need_why ? &s : nullptr; };
  GemvSupport gemv;
  if (need_why) {
    in.decode_ok = can_implement_decode_sm90(p, in.sm_count, &in.decode_why);
    gemv = gemv_support_sm90(p, &in.gemv_why);
  } else {  // the answers alone: from this thread's memo after the problem's first call
    if (const ProblemFacts& f = problem_facts(p); f.has_paths && f.paths_sm_count == in.sm_count) {
      in.decode_ok = f.decode_ok;
      gemv = f.gemv;
    } else {
      in.decode_ok = can_implement_decode_sm90(p, in.sm_count, nullptr);
      gemv = gemv_support_sm90(p, nullptr);
      ProblemFacts& e = problem_facts(p);
      e.has_paths = true;
      e.paths_sm_count = in.sm_count;
      e.decode_ok = in.decode_ok;
      e.gemv = gemv;
    }
  }
  in.decode_in_auto = detail::decode_in_auto_enabled();
  // The per-expert MLP kernel: the problem's shape and scheme, the tensors' alignment.
  in.expert_mlp_ok = expert_mlp_supported(p, why(in.expert_mlp_why));
  if (in.expert_mlp_ok && !expert_mlp_pointers_ok(call.hidden, call.w13, call.w2, p.has_bias13 ? call.b13 : nullptr,
                                                    p.has_bias2 ? call.b2 : nullptr)) {
    in.expert_mlp_ok = false;
    if (need_why) in.expert_mlp_why = "expert_mlp: hidden, w13 and w2 must be 16-byte aligned, the biases 4-byte";
  }
  in.expert_mlp_in_auto = detail::expert_mlp_in_auto_enabled();
  if (in.expert_mlp_ok) in.expert_mlp_clusters = expert_mlp_resident_clusters(p);
  in.gemv_cuda_ok = gemv.cuda;
  in.gemv_mma_ok = gemv.mma;
  if (gemv.any() && device_attribute<cudaDevAttrCooperativeLaunch>(device) == 0) {
    in.gemv_cuda_ok = in.gemv_mma_ok = false;  // its CTAs wait on each other at the grid barrier
    in.gemv_why = "device " + std::to_string(device) + " does not support cooperative launches";
  }
  in.gemv_in_auto = detail::gemv_in_auto_enabled();
  in.gemv_mma_in_auto = detail::gemv_mma_in_auto_enabled();
  in.gemv_kernel = detail::gemv_kernel_override();
  in.swapab_split = detail::swapab_split_override();
  // choose_paths settles the decode paths (GEMV, decode) before it reads any GEMM or fused answer
  // (path_router.cpp; CpuPathRouter.DecodeReadsNoOtherAnswer): when it takes decode, the plan is
  // the same whatever they are, so a decode call does not build the GEMMs' parameters nor ask
  // their four can_implement, the fused one and the cooperative-launch attribute. Otherwise the
  // plan is made again with them.
  if ((in.decode_ok || in.gemv_ok() || in.expert_mlp_ok) && detail::may_take_decode(forced)) {
    detail::DispatchPlan plan = detail::choose_paths(p, in);
    if (plan.decode || plan.gemv || plan.expert_mlp) {
      if (print) std::fprintf(stderr, "%s\n", plan.log_line(p).c_str());
      return plan;
    }
  }
  *g1 = gemm1_params(call, L);
  *g2 = gemm2_params(call, L);
  in.swapab_ok[0] = can_implement_swapab_sm90(*g1, why(in.swapab_why[0]));
  in.swapab_ok[1] = can_implement_swapab_sm90(*g2, why(in.swapab_why[1]));
  in.tokmajor_ok[0] = can_implement_tokmajor_sm90(*g1, why(in.tokmajor_why[0]));
  in.tokmajor_ok[1] = can_implement_tokmajor_sm90(*g2, why(in.tokmajor_why[1]));
  in.fused_ok = can_implement_fused_sm90(p, why(in.fused_why));
  if (in.fused_ok && device_attribute<cudaDevAttrCooperativeLaunch>(device) == 0) {
    // Its CTAs wait on each other: it launches cooperatively, which this device must support.
    in.fused_ok = false;
    in.fused_why = "device " + std::to_string(device) + " does not support cooperative launches";
  }
  in.gemm2_impl = detail::gemm2_impl_override();
  detail::DispatchPlan plan = detail::choose_paths(p, in);
  if (print) std::fprintf(stderr, "%s\n", plan.log_line(p).c_str());
  return plan;
}

void run_gemm(const GroupedGemmParams& g, const detail::GemmChoice& choice, void* stream, bool pdl,
              int tokmajor_cluster) {
  if (choice.impl == detail::GemmImpl::kSwapab)
    launch_grouped_gemm_swapab_sm90(g, stream, choice.split_k, /*tiles_per_item=*/0, pdl);
  else if (choice.impl == detail::GemmImpl::kTokmajor)
    launch_grouped_gemm_tokmajor_sm90(g, stream, tokmajor_cluster, pdl);
  else
    launch_grouped_gemm(g, stream, pdl);
}

// describe_dispatch: the plan a call of `problem` would get on `device` (-1: the current one),
// with tensors assumed 256-byte aligned (placeholder pointers, never dereferenced).
std::string describe_dispatch(const MoeProblem& problem, const char* forced, int device, std::string* why) {
  if (device < 0) MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  std::string reason;
  if (!device_ok(device, &reason)) throw Error(Status::kNotSupported, reason);
  DeviceGuard guard(device);
  detail::MoeCall call;
  call.problem = problem;
  void* const fake = reinterpret_cast<void*>(std::uintptr_t{1} << 20);
  call.hidden = call.w13 = call.w2 = call.b13 = call.b2 = fake;
  call.out = fake;
  call.w13_scale = call.w2_scale = call.a13_scale = call.a2_scale = static_cast<const float*>(fake);
  call.topk_ids = static_cast<const std::int32_t*>(fake);
  call.topk_weights = static_cast<const float*>(fake);
  call.workspace = fake;
  call.device = device;
  call.forced_path = forced;
  const WorkspaceLayout L = workspace_layout(problem);
  GroupedGemmParams g1, g2;
  const detail::DispatchPlan plan = plan_call(call, L, &g1, &g2, /*log=*/false);
  if (why != nullptr) *why = plan.reason;
  return plan.describe();
}

// moekit::preload: device_ok's checks, then the load (device_ok does it for the current device;
// preload_kernels is a no-op after the first time), then the numbers that load recorded.
PreloadReport preload_report(int device) {
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // no usable device: device_ok(0) says why, as kNotSupported
    device = 0;
  }
  const bool before = kernels_preloaded(device);
  std::string why;
  if (!device_ok(device, &why)) throw Error(Status::kNotSupported, why);
  preload_kernels(device);
  PreloadReport r;
  r.device = device;
  r.loaded_now = !before;
  PreloadStats st;
  if (preload_stats(device, &st)) {
    r.kernels = st.kernels;
    r.context_ms = st.context_seconds * 1e3;
    r.load_ms = st.seconds * 1e3;
    std::vector<std::pair<const char*, double>> slow = st.per_kernel;
    std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    for (std::size_t i = 0; i < slow.size() && i < 5; ++i) r.slowest.emplace_back(slow[i].first, slow[i].second * 1e3);
  }
  return r;
}

void run_route(const detail::RouteCall& call) {
  if (call.num_tokens <= 0) return;
  DeviceGuard guard(call.device);
  preload_kernels(call.device);  // one atomic load after the first call on the device
  RoutingParams rp;
  rp.num_tokens = call.num_tokens;
  rp.top_k = call.routing.top_k;
  rp.num_experts_global = static_cast<int>(call.num_experts);
  rp.route = true;
  rp.routing = call.routing;
  rp.logits = call.router_logits;
  rp.logits_dtype = call.logits_dtype;
  rp.correction_bias = call.correction_bias;
  rp.topk_ids_out = call.topk_ids;
  rp.topk_weights_out = call.topk_weights;
  launch_routing_sm90(rp, call.stream);
}

// Quantization of hidden (fp8 schemes): the chain's step 2 and the per-expert MLP path's. The scale
// is static (fp8_per_tensor with a13_scale) or dynamic, folded into the absmax word of `counters`
// (zeroed earlier on the stream) or, when the caller adds them, from the routing launch's partials.
QuantParams hidden_quant_params(const detail::MoeCall& call, const WorkspaceLayout& L) {
  const MoeProblem& p = call.problem;
  QuantParams qp;
  qp.scheme = p.scheme;
  qp.x = call.hidden;
  qp.x_dtype = p.act_dtype;
  qp.rows = p.num_tokens;
  qp.cols = p.hidden_size;
  qp.static_scale = p.scheme == Scheme::kFp8PerTensor ? call.a13_scale : nullptr;
  qp.absmax = slice<std::uint32_t>(call.workspace, L.counters) + WorkspaceLayout::kAbsmaxHidden;
  qp.q = slice<std::uint8_t>(call.workspace, L.a_q);
  qp.scale = slice<float>(call.workspace, L.a_scale);
  return qp;
}

// The combine of a chain: out[m] = the sum over j of y[m k + j] (local slots, j in order).
void launch_chain_combine(const detail::MoeCall& call, const void* y, DType y_dtype, const std::int32_t* topk_ids,
                          bool pdl) {
  const MoeProblem& p = call.problem;
  CombineParams cp;
  cp.y = y;
  cp.y_dtype = y_dtype;
  cp.topk_ids = topk_ids;
  cp.expert_map = call.expert_map;
  cp.num_experts_global = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);
  cp.num_experts = static_cast<int>(p.num_experts);
  cp.num_tokens = p.num_tokens;
  cp.top_k = static_cast<int>(p.top_k);
  cp.hidden_size = p.hidden_size;
  cp.out = call.out;
  cp.out_dtype = p.act_dtype;
  cp.faults = device_fault_record(call.device);
  launch_combine_sm90(cp, call.stream, pdl);
}

// The per-expert MLP kernel (kernels/expert_mlp/): routing, GEMM1, the activation and GEMM2 in one
// launch writing y in the activation dtype, then the combine as its programmatic dependent
// (MOEKIT_PDL=0: a plain launch). fp8_per_tensor: hidden quantized first (the chain's step 2:
// static scale, the one-CTA kernel, or its absmax into the zeroed word), each unit scaling its own
// h (docs/design.md); fp8_per_channel: hidden quantized a row at a time, h a slot row at a time in
// the kernel. The kernel is then the quantization's programmatic dependent, so its routing and its
// first weight stages overlap the quantization (it waits before it reads hidden's rows).
void run_expert_mlp(const detail::MoeCall& call, const WorkspaceLayout& L, const std::int32_t* topk_ids) {
  const MoeProblem& p = call.problem;
  const bool pdl = pdl_enabled();
  expert_mlp_check_launchable(p);  // before anything of the call is enqueued
  ExpertMlpArgs a;
  a.problem = p;
  a.hidden = call.hidden;
  if (p.scheme == Scheme::kFp8PerTensor || p.scheme == Scheme::kFp8PerChannel) {
    // fp8_per_channel: hidden's rows quantized by the chain's per-row launch (a scale a token row).
    QuantParams qp = hidden_quant_params(call, L);
    // MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=1 (branch s56, off until its A/B): a dynamic scale up to
    // kExpertMlpOneCtaQuantElems in the one-CTA kernel (~1 us an SM per 32 K elements), which the
    // kernel's routing and first weight stages overlap, instead of the memset, the absmax launch
    // and the quantization launch; the same bits (the block max is the atomicMax word's value).
    constexpr std::int64_t kExpertMlpOneCtaQuantElems = 256 * 1024;
    qp.one_cta = p.scheme == Scheme::kFp8PerTensor &&
                 detail::env_switch(detail::EnvVar::kExpertMlpQuantOneCta, false) &&
                 p.num_tokens * p.hidden_size <= kExpertMlpOneCtaQuantElems;
    if (quant_needs_zeroed_absmax(qp))
      MOEKIT_CUDA_CHECK(cudaMemsetAsync(qp.absmax, 0, sizeof(std::uint32_t), static_cast<cudaStream_t>(call.stream)));
    launch_quant_sm90(qp, call.stream, /*pdl=*/false);
    a.pdl = pdl;
    a.hidden = qp.q;
    a.a_scale = qp.scale;
    a.w13_scale = call.w13_scale;
    a.w2_scale = call.w2_scale;
    a.a2_scale = call.a2_scale;
  }
  a.w13 = call.w13;
  a.w2 = call.w2;
  a.topk_ids = topk_ids;
  a.expert_map = call.expert_map;
  a.topk_weights = call.topk_weights;
  a.b13 = call.b13;
  a.b2 = call.b2;
  a.y = slice<void>(call.workspace, L.y);
  a.faults = device_fault_record(call.device);
  launch_expert_mlp_sm90(a, call.stream);
  launch_chain_combine(call, a.y, call.problem.act_dtype, topk_ids, pdl);
}

void run_moe(const detail::MoeCall& call) {
  const MoeProblem& p = call.problem;
  if (p.num_tokens <= 0) {
    // Nothing launches: an unknown path name still fails, any known one is fine.
    detail::RouterInputs in;
    in.forced = call.forced_path;
    in.tokmajor_ok[0] = in.tokmajor_ok[1] = in.fused_ok = in.decode_ok = in.gemv_cuda_ok = in.gemv_mma_ok = true;
    in.expert_mlp_ok = true;
    detail::choose_paths(p, in);
    return;
  }
  DeviceGuard guard(call.device);
  preload_kernels(call.device);  // one atomic load after the first call on the device
  void* stream = call.stream;
  const WorkspaceLayout L = workspace_layout(p);
  void* ws = call.workspace;
  if (L.total > call.workspace_bytes || ws == nullptr)
    throw Error(Status::kInvalidArgument, "options.workspace_bytes is " + std::to_string(call.workspace_bytes) +
                                              ", this call needs " + std::to_string(L.total));

  const std::int64_t M = p.num_tokens, K = p.hidden_size, N = p.intermediate_size;
  const int k = static_cast<int>(p.top_k);
  const int E = static_cast<int>(p.num_experts);
  const int Eg = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);
  const std::int64_t P = M * k;
  const bool fp8 = p.scheme != Scheme::kBf16;

  // Routing outputs: the caller's buffers when given, else the workspace.
  const std::int32_t* topk_ids = call.topk_ids;
  std::int32_t* ids_out = nullptr;
  float* wts_out = nullptr;
  if (p.with_routing) {
    ids_out = call.topk_ids_out != nullptr ? call.topk_ids_out : slice<std::int32_t>(ws, L.topk_ids);
    wts_out = call.topk_weights_out != nullptr ? call.topk_weights_out : slice<float>(ws, L.topk_weights);
    topk_ids = ids_out;
  }
  // The router picks each GEMM's kernel before anything is enqueued, so a forced path that cannot
  // run this problem fails with nothing launched.
  GroupedGemmParams g1, g2;  // the GEMMs' parameters, made by the router (not on the decode path)
  const detail::DispatchPlan plan = plan_call(call, L, &g1, &g2, true);
  g2.out_dtype = y_dtype(p, plan);  // the token-major kernel accepts either (can_implement_tokmajor_sm90)
  // The single-launch fused path (kernels/fused_moe/) replaces steps 1-6 at low concurrency.
  if (plan.fused) {
    run_fused_moe_sm90(call, call.workspace);
    return;
  }
  // The per-expert MLP kernel (kernels/expert_mlp/): one launch to the per-slot rows, the combine.
  if (plan.expert_mlp) {
    run_expert_mlp(call, L, topk_ids);
    return;
  }
  // The single-launch decode path (kernels/decode/) replaces them for decode-sized calls.
  if (plan.decode) {
    run_decode_sm90(call, plan.touched);
    return;
  }
  // The GEMV decode path (kernels/gemv/): one cooperative launch, the CUDA-core or the tensor-core
  // kernel as the router chose.
  if (plan.gemv) {
    run_gemv_sm90(call, plan.gemv_kernel);
    return;
  }

  // Programmatic dependent launch (cuda/common/pdl.cuh): every launch after routing's first may
  // start while the kernel before it runs (its prologue overlaps; it waits for that kernel's
  // output). Decode-sized calls on Swap-AB / mma only (kPdlMaxTokens: measured to lose with the
  // token-major kernel); MOEKIT_PDL=0 turns it off; read here, once per call.
  const bool tokmajor = plan.gemm[0].impl == detail::GemmImpl::kTokmajor || plan.gemm[1].impl == detail::GemmImpl::kTokmajor;
  const bool pdl = pdl_enabled() && M <= kPdlMaxTokens && !tokmajor;
  // The token-major cluster size (MOEKIT_TOKMAJOR_CLUSTER), schedule (MOEKIT_TOKMAJOR_SCHEDULE),
  // units an atomic (MOEKIT_TOKMAJOR_TAKE), ping-pong and early-weights switches
  // (MOEKIT_TOKMAJOR_PINGPONG, MOEKIT_TOKMAJOR_EARLY) are read
  // and checked before anything is enqueued: a bad value fails the call with nothing launched.
  const int tokmajor_cluster = tokmajor ? tokmajor_default_cluster() : 1;
  if (tokmajor) (void)tokmajor_dynamic_schedule();  // MOEKIT_TOKMAJOR_SCHEDULE, checked likewise
  if (tokmajor) (void)tokmajor_units_per_take();    // MOEKIT_TOKMAJOR_TAKE, checked likewise
  if (tokmajor) (void)detail::env_switch(detail::EnvVar::kTokmajorPingpong, false);  // MOEKIT_TOKMAJOR_PINGPONG
  if (tokmajor) (void)detail::env_switch(detail::EnvVar::kTokmajorEarly, false);     // MOEKIT_TOKMAJOR_EARLY
  if (tokmajor) (void)detail::env_switch(detail::EnvVar::kTokmajorTmaA, false);      // MOEKIT_TOKMAJOR_TMA_A
  if (tokmajor) (void)detail::env_switch(detail::EnvVar::kKshortGemm2, true);       // MOEKIT_KSHORT_GEMM2

  std::uint32_t* counters = slice<std::uint32_t>(ws, L.counters);
  // Bad ids / expert_map entries go to the device's sticky fault record (cuda/common/faults.cuh),
  // not to the workspace: it outlives the call and is cleared only by moekit::take_fault.
  FaultRecord* faults = device_fault_record(call.device);
  std::int32_t* offsets = slice<std::int32_t>(ws, L.expert_offsets);
  std::int32_t* sorted_slots = slice<std::int32_t>(ws, L.sorted_slots);

  // 1. Routing (fused_moe) + permutation: one CTA up to kPermuteMultiCtaMinSlots slots, a count
  // grid and a scatter grid above; also zeroes the absmax words. Its first launch never has the
  // PDL attribute: the call does not overlap what the caller ran before it, nor the previous
  // call's kernels, which read the offsets, slots and chunk counts it rewrites.
  RoutingParams rp;
  rp.num_tokens = M;
  rp.top_k = k;
  rp.num_experts_global = Eg;
  rp.route = p.with_routing;
  rp.routing = p.routing;
  rp.routing.top_k = k;
  rp.logits = call.router_logits;
  rp.logits_dtype = p.logits_dtype;
  rp.correction_bias = call.correction_bias;
  rp.topk_ids_out = ids_out;
  rp.topk_weights_out = wts_out;
  rp.permute = true;
  rp.topk_ids = topk_ids;
  rp.expert_map = call.expert_map;
  rp.num_experts = E;
  rp.expert_offsets = offsets;
  rp.sorted_slots = sorted_slots;
  rp.topk_weights = routed_weights(call, L);
  rp.sorted_weights = rp.topk_weights != nullptr ? slice<float>(ws, L.sorted_weights) : nullptr;
  rp.chunk_counts = permute_chunk_count_bytes(P, E) > 0 ? slice<std::int32_t>(ws, L.chunk_counts) : nullptr;
  rp.zero_words = counters;
  rp.num_zero_words = WorkspaceLayout::kNumCounters;
  rp.faults = faults;
  // fp8_per_tensor with a dynamic activation scale past the one-CTA quantization's size: the
  // routing launch takes hidden's absmax on CTAs of its own (RoutingParams::absmax_ctas), so that
  // quant(hidden) is one launch instead of an absmax launch and a quant launch.
  if (fp8 && p.scheme == Scheme::kFp8PerTensor && call.a13_scale == nullptr &&
      M * K > quant::kSmallTensorMaxElems && routing_absmax_enabled()) {
    rp.absmax_x = call.hidden;
    rp.absmax_x_dtype = p.act_dtype;
    rp.absmax_elems = M * K;
    rp.absmax_partials = slice<float>(ws, L.absmax_partials);
    rp.absmax_ctas = routing_absmax_ctas(rp, call.device);
  }
  // The same with a small hidden (decode): the routing launch's extra CTA quantizes all of it
  // (absmax, scale, e4m3 rows), concurrently with the routing, and step 2 has no launch.
  if (fp8 && p.scheme == Scheme::kFp8PerTensor && call.a13_scale == nullptr &&
      M * K <= quant::kSmallTensorMaxElems && routing_quant_enabled()) {
    RoutingParams q = rp;
    q.absmax_x = call.hidden;
    q.absmax_x_dtype = p.act_dtype;
    q.absmax_elems = M * K;
    q.quant_q = slice<std::uint8_t>(ws, L.a_q);
    q.quant_scale = slice<float>(ws, L.a_scale);
    if (routing_hosts_quant(q)) {
      q.quant_cta = true;
      rp = q;
    }
  }
  // The routing in GEMM1 (docs/tokmajor.md "Routing in GEMM1"): a bf16 or fp8_per_tensor
  // fused_experts chain whose GEMM1 is token-major has no routing launch where calls are
  // decode-sized (at most 64 rows an expert on average, the early weights' rule): GEMM1's CTAs count
  // and place the slots themselves while their first weights stream, and write the offsets, the
  // sorted slots and weights GEMM2 reads; a memset zeroes the GEMMs' tile counters and the absmax
  // words, the routing launch's other duty (fp8: step 2's quantization then takes hidden's absmax
  // itself). MOEKIT_TOKMAJOR_ROUTE=0 keeps the routing launch, =1 drops it wherever GEMM1 can route
  // (checked before anything is enqueued).
  bool route_in_gemm1 = false;
  if (plan.gemm[0].impl == detail::GemmImpl::kTokmajor && !p.with_routing &&
      (p.scheme == Scheme::kBf16 || p.scheme == Scheme::kFp8PerTensor)) {
    const bool decode_sized = P <= 64 * static_cast<std::int64_t>(E);
    if (detail::env_switch(detail::EnvVar::kTokmajorRoute, decode_sized)) {
      GroupedGemmParams r = g1;
      r.route.ids = topk_ids;
      r.route.expert_map = call.expert_map;
      r.route.experts_global = Eg;
      r.route.slots = P;
      r.route.offsets_out = offsets;
      r.route.sorted_slots_out = sorted_slots;
      r.route.sorted_weights_out = g1.sorted_weights != nullptr ? slice<float>(ws, L.sorted_weights) : nullptr;
      r.route.faults = faults;
      std::string why;
      // The router accepted g1 on the token-major kernel: only the route's own checks are left.
      route_in_gemm1 = tokmajor_route_supported(r, detail::log_dispatch_enabled() ? &why : nullptr);
      if (route_in_gemm1) g1 = r;
      if (detail::log_dispatch_enabled())
        std::fprintf(stderr, "moekit: gemm1 %s\n",
                     route_in_gemm1 ? "routes the call itself (no routing launch; MOEKIT_TOKMAJOR_ROUTE=0 keeps it)"
                                    : ("keeps the routing launch: " + why).c_str());
    }
  }
  if (route_in_gemm1) {
    MOEKIT_CUDA_CHECK(cudaMemsetAsync(counters, 0, WorkspaceLayout::kNumCounters * sizeof(std::uint32_t),
                                      static_cast<cudaStream_t>(stream)));
  } else {
    launch_routing_sm90(rp, stream, pdl);
  }

  // 2. Quantize hidden once per token (fp8 schemes), unless the routing launch did. Without a
  // routing launch (route in GEMM1) it takes hidden's absmax itself: the memset zeroed the word.
  if (fp8 && (route_in_gemm1 || !rp.quant_cta)) {
    QuantParams qp = hidden_quant_params(call, L);
    if (!route_in_gemm1 && rp.absmax_ctas > 0) {
      qp.absmax_partials = rp.absmax_partials;
      qp.num_partials = rp.absmax_ctas;
    }
    launch_quant_sm90(qp, stream, pdl);
  }

  // 3. GEMM1: gathered token rows x w13[e] -> activation -> inter[P, N] in sorted order.
  run_gemm(g1, plan.gemm[0], stream, pdl, tokmajor_cluster);

  // 4. Quantize the intermediate's live rows (offsets[E] of them) (fp8 schemes). With a dynamic
  // per-tensor scale GEMM1 has already folded them into the absmax word (g1.out_absmax): one
  // launch, which reads the word after its pdl_wait, i.e. once GEMM1 has completed.
  if (fp8) {
    QuantParams qp;
    qp.scheme = p.scheme;
    qp.x = slice<float>(ws, L.inter);
    qp.x_dtype = DType::kFp32;
    qp.rows = P;
    qp.rows_dev = offsets + E;
    qp.cols = N;
    qp.static_scale = p.scheme == Scheme::kFp8PerTensor ? call.a2_scale : nullptr;
    qp.absmax = counters + WorkspaceLayout::kAbsmaxInter;
    qp.absmax_ready = g1.out_absmax != nullptr;
    qp.q = slice<std::uint8_t>(ws, L.inter_q);
    qp.scale = slice<float>(ws, L.inter_scale);
    launch_quant_sm90(qp, stream, pdl);
  }

  // 5. GEMM2: sorted intermediate rows x w2[e] -> (+b2, *w) -> y[slot, K] (fp32 or act dtype).
  run_gemm(g2, plan.gemm[1], stream, pdl, tokmajor_cluster);

  // 6. Combine the k slots of each token in j order. The chain's last kernel: it never lets the
  // caller's next kernel launch early.
  launch_chain_combine(call, slice<void>(ws, L.y), g2.out_dtype, topk_ids, pdl);
}

// inv_rope_fp8_quant (kernels/rope_quant/): one launch, no workspace.
void run_inv_rope_fp8_quant(const detail::InvRopeQuantCall& c) {
  if (c.num_tokens <= 0) return;
  DeviceGuard guard(c.device);
  preload_kernels(c.device);  // one atomic load after the first call on the device
  InvRopeQuantParams p;
  p.num_tokens = c.num_tokens;
  p.num_heads = static_cast<int>(c.num_heads);
  p.heads_per_group = static_cast<int>(c.heads_per_group);
  p.rope_dim = static_cast<int>(c.rope_dim);
  p.max_pos = c.max_pos;
  p.scale_rows = c.scale_rows;
  p.packed_ue8m0 = c.packed_ue8m0;
  p.o = c.o;
  p.o_stride_t = c.o_stride_t;
  p.o_stride_h = c.o_stride_h;
  p.positions = c.positions;
  p.pos_stride = c.pos_stride;
  p.cos_sin = c.cos_sin;
  p.cache_stride = c.cache_stride;
  p.q = c.q;
  p.q_stride_g = c.q_stride_g;
  p.q_stride_t = c.q_stride_t;
  p.scale = c.scale;
  p.s_stride_g = c.s_stride_g;
  p.s_stride_b = c.s_stride_b;
  if (c.num_heads > 65535 || c.head_dim > 65536 || c.rope_dim > 65536)
    throw Error(Status::kNotSupported, "inv_rope_fp8_quant (CUDA): H=" + std::to_string(c.num_heads) +
                                           " heads / head_dim " + std::to_string(c.head_dim) + " beyond the kernel's range");
  launch_inv_rope_quant_sm90(p, static_cast<int>(c.head_dim), c.stream);
}

const detail::CudaBackendV1 kBackend = {&device_ok,         &workspace_size,         &run_moe,
                                        &run_route,         &describe_dispatch,      &run_inv_rope_fp8_quant,
                                        &preload_report,    &take_device_fault};

}  // namespace
}  // namespace moekit::cuda

extern "C" const moekit::detail::CudaBackendV1* moekit_cuda_backend_v1() { return &moekit::cuda::kBackend; }
