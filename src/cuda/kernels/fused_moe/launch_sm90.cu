// Host side of the single-launch fused MoE path (sm_90a): can_implement, workspace size, the
// launcher (tiling choice, cooperative launch of a co-resident grid, counter zeroing) and
// run_fused_moe_sm90, which turns a resolved MoeCall into one launch. The kernel's operand
// instantiations are in inst/ (this file includes no kernel body).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/kernels/fused_moe/config.hpp"
#include "cuda/kernels/fused_moe/params.hpp"
#include "cuda/kernels/fused_moe/launch_sm90.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

namespace fm = fused_moe;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Phase timer buffer (set_fused_phase_buffer; MOEKIT_FUSED_PHASE_TIMER builds only).
std::atomic<std::uint64_t*> g_phase_buffer{nullptr};
std::atomic<int> g_phase_ctas{0};

}  // namespace

bool can_implement_fused_sm90(const MoeProblem& p, std::string* why) {
  auto fail = [why](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (p.with_routing) {
    const std::int64_t Eg = p.has_expert_map ? p.num_experts_global : p.num_experts;
    if (Eg > fm::kMaxRouteExperts)
      return fail("routing from logits over E_global = " + std::to_string(Eg) + " experts (the fused path routes up to " +
                  std::to_string(fm::kMaxRouteExperts) + ")");
    if (p.logits_dtype != DType::kFp32 && p.logits_dtype != DType::kBf16)
      return fail(std::string("router_logits dtype ") + dtype_name(p.logits_dtype) + " (expected fp32 or bf16)");
    if (p.routing.method == RoutingMethod::kSigmoidGroupedTopk && p.routing.num_groups > 32)
      return fail("sigmoid_grouped_topk with num_groups = " + std::to_string(p.routing.num_groups) + " (at most 32)");
  }
  if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16)
    return fail(std::string("activation dtype ") + dtype_name(p.act_dtype) + " (expected bf16 or fp16)");
  if (p.num_tokens < 0 || p.top_k <= 0) return fail("M or k out of range");
  const std::int64_t P = p.num_tokens * p.top_k;
  if (P > fm::kMaxSlots)
    return fail("M*k = " + std::to_string(P) + " exceeds the fused path's " + std::to_string(fm::kMaxSlots) +
                " slots (low concurrency only)");
  if (p.num_experts > fm::kMaxExperts || p.num_experts <= 0)
    return fail("E = " + std::to_string(p.num_experts) + " local experts (the fused path takes 1.." +
                std::to_string(fm::kMaxExperts) + ")");
  if (p.hidden_size % 8 != 0 || p.intermediate_size % 8 != 0 || p.hidden_size <= 0 || p.intermediate_size <= 0)
    return fail("K = " + std::to_string(p.hidden_size) + " and N = " + std::to_string(p.intermediate_size) +
                " must be positive multiples of 8");
  if (p.hidden_size > (1 << 20) || p.intermediate_size > (1 << 20))
    return fail("K or N above 2^20");
  if ((p.has_bias13 || p.has_bias2) && p.bias_dtype != DType::kFp32 && p.bias_dtype != DType::kBf16 &&
      p.bias_dtype != DType::kFp16)
    return fail(std::string("bias dtype ") + dtype_name(p.bias_dtype));
  const fm::FusedTiling t = fm::choose_tiling(p, 132);
  if (t.g1.split <= 0 || t.g2.split <= 0)
    return fail("K = " + std::to_string(p.hidden_size) + " or N = " + std::to_string(p.intermediate_size) +
                " needs more than " + std::to_string(fm::kMaxSplit) + " splits");
  return true;
}

std::size_t fused_workspace_size(const MoeProblem& problem) { return fm::fused_workspace_layout(problem).total; }

bool fused_phase_timer_enabled() { return MOEKIT_FUSED_PHASE_TIMER != 0; }

void set_fused_phase_buffer(std::uint64_t* device_buffer, int max_ctas) {
  g_phase_ctas.store(device_buffer != nullptr ? max_ctas : 0, std::memory_order_release);
  g_phase_buffer.store(device_buffer, std::memory_order_release);
}

void launch_fused_moe_sm90(const FusedMoeParams& fp, void* stream) {
  const MoeProblem& p = fp.problem;
  if (p.num_tokens <= 0) return;
  std::string why;
  if (!can_implement_fused_sm90(p, &why)) throw Error(Status::kNotSupported, "fused MoE path: " + why);
  const fm::FusedWorkspace W = fm::fused_workspace_layout(p);
  if (fp.workspace == nullptr || fp.workspace_bytes < W.total)
    throw Error(Status::kInvalidArgument, "fused MoE workspace is " + std::to_string(fp.workspace_bytes) +
                                              " bytes, this call needs " + std::to_string(W.total));
  if (!aligned16(fp.hidden) || !aligned16(fp.out) || !aligned16(fp.w13) || !aligned16(fp.w2) ||
      !aligned16(fp.workspace))
    throw Error(Status::kNotSupported, "fused MoE path needs 16-byte aligned hidden, out, w13, w2 and workspace");

  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  const int sms = device_sm_count(device);  // once per device

  const bool fp8 = p.scheme != Scheme::kBf16;
  const int eb = fp8 ? 1 : 2;
  fm::FusedArgs a;
  a.M = static_cast<int>(p.num_tokens);
  a.k = static_cast<int>(p.top_k);
  a.E = static_cast<int>(p.num_experts);
  a.E_global = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);
  a.K = static_cast<int>(p.hidden_size);
  a.N = static_cast<int>(p.intermediate_size);
  switch (p.scheme) {
    case Scheme::kBf16: a.scale_mode = kScaleNone; break;
    case Scheme::kFp8PerTensor: a.scale_mode = kScalePerTensor; break;
    case Scheme::kFp8PerChannel: a.scale_mode = kScalePerChannel; break;
    case Scheme::kFp8Block128: a.scale_mode = kScaleBlock128; break;
  }
  a.act_fp16 = p.act_dtype == DType::kFp16;
  a.bias13_type = numerics::bias_type_of(p.has_bias13 && fp.b13 != nullptr, p.bias_dtype);
  a.bias2_type = numerics::bias_type_of(p.has_bias2 && fp.b2 != nullptr, p.bias_dtype);
  a.act_kind = p.activation.kind;
  a.alpha = p.activation.alpha;
  a.limit = p.activation.limit;
  a.weight_on_input = p.apply_router_weight_on_input;
  a.dyn_a1 = a.scale_mode == kScalePerTensor && !(p.static_a13_scale && fp.a13_scale != nullptr);
  a.dyn_a2 = a.scale_mode == kScalePerTensor && !(p.static_a2_scale && fp.a2_scale != nullptr);
  a.vec16_1 = (static_cast<std::int64_t>(a.K) * eb) % 16 == 0;
  a.vec16_2 = (static_cast<std::int64_t>(a.N) * eb) % 16 == 0;
  const fm::FusedTiling t = fm::choose_tiling(p, sms);
  a.t1 = t.g1;
  a.t2 = t.g2;
  a.hidden = fp.hidden;
  a.out = fp.out;
  a.w13 = static_cast<const std::uint8_t*>(fp.w13);
  a.w2 = static_cast<const std::uint8_t*>(fp.w2);
  a.w13_scale = fp.w13_scale;
  a.w2_scale = fp.w2_scale;
  a.b13 = fp.b13;
  a.b2 = fp.b2;
  a.a13_scale = fp.a13_scale;
  a.a2_scale = fp.a2_scale;
  a.expert_map = p.has_expert_map ? fp.expert_map : nullptr;
  a.topk_ids = fp.topk_ids;
  a.topk_weights = fp.topk_weights;
  a.faults = fp.faults;
  a.route = p.with_routing;
  if (p.with_routing) {
    a.routing = p.routing;
    a.routing.top_k = a.k;
    a.logits = fp.router_logits;
    a.logits_bf16 = p.logits_dtype == DType::kBf16;
    a.correction_bias = p.has_correction_bias ? fp.correction_bias : nullptr;
    a.topk_ids_out = fp.topk_ids_out;
    a.topk_weights_out = fp.topk_weights_out;
  }
  char* ws = static_cast<char*>(fp.workspace);
  a.counters = reinterpret_cast<std::uint32_t*>(ws + W.counters);
  a.grp_done = a.counters + W.grp_done;
  a.t1_ticket = a.counters + W.t1_ticket;
  a.t2_ticket = a.counters + W.t2_ticket;
  a.comb = a.counters + W.comb;
  a.tiles1_stride = static_cast<int>(W.tiles1_max);
  a.tiles2_stride = static_cast<int>(W.tiles2_max);
  a.inter = reinterpret_cast<float*>(ws + W.inter);
  a.y = reinterpret_cast<float*>(ws + W.y);
  a.part1 = reinterpret_cast<float*>(ws + W.part1);
  a.part2 = reinterpret_cast<float*>(ws + W.part2);
  if (MOEKIT_FUSED_PHASE_TIMER) {
    a.phase = g_phase_buffer.load(std::memory_order_acquire);
    a.phase_ctas = a.phase != nullptr ? g_phase_ctas.load(std::memory_order_acquire) : 0;
  }

  // Grid: one CTA per SM at most, no more than the items could ever be; launch_op caps it at
  // the co-resident CTA count and launches cooperatively.
  const std::int64_t groups = fm::max_groups(p);
  const std::int64_t max_items =
      groups * (static_cast<std::int64_t>(t.g1.tiles) * t.g1.split + static_cast<std::int64_t>(t.g2.tiles) * t.g2.split);
  const int grid = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(sms, max_items)));

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (fp.zero_counters) MOEKIT_CUDA_CHECK(cudaMemsetAsync(a.counters, 0, W.num_counters * 4, s));
  if (!fp8)
    (p.act_dtype == DType::kFp16 ? fm::run_fused_moe_sm90<Operand::kF16> : fm::run_fused_moe_sm90<Operand::kBf16>)(a, grid, s, device);
  else
    fm::run_fused_moe_sm90<Operand::kE4m3>(a, grid, s, device);
}

FusedMoeParams fused_moe_params(const detail::MoeCall& call, void* workspace) {
  const MoeProblem& p = call.problem;
  FusedMoeParams fp;
  fp.problem = p;
  fp.hidden = call.hidden;
  fp.out = call.out;
  fp.w13 = call.w13;
  fp.w2 = call.w2;
  fp.w13_scale = call.w13_scale;
  fp.w2_scale = call.w2_scale;
  fp.b13 = p.has_bias13 ? call.b13 : nullptr;
  fp.b2 = p.has_bias2 ? call.b2 : nullptr;
  fp.a13_scale = p.static_a13_scale ? call.a13_scale : nullptr;
  fp.a2_scale = p.static_a2_scale ? call.a2_scale : nullptr;
  fp.expert_map = p.has_expert_map ? call.expert_map : nullptr;
  if (p.with_routing) {
    fp.router_logits = call.router_logits;
    fp.correction_bias = p.has_correction_bias ? call.correction_bias : nullptr;
    fp.topk_ids_out = call.topk_ids_out;
    fp.topk_weights_out = call.topk_weights_out;
  } else {
    fp.topk_ids = call.topk_ids;
    fp.topk_weights = call.topk_weights;
  }
  fp.workspace = workspace;
  fp.workspace_bytes = fused_workspace_size(p);
  fp.zero_counters = true;
  fp.faults = device_fault_record(call.device);  // the call's device is current (run_moe)
  return fp;
}

void run_fused_moe_sm90(const detail::MoeCall& call, void* workspace) {
  launch_fused_moe_sm90(fused_moe_params(call, workspace), call.stream);
}

}  // namespace moekit::cuda
