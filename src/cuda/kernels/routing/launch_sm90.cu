// Host side of routing + permutation: checks what the kernels need (routing method, logits dtype,
// slot count, shared memory), chooses the path (one CTA, route grid + one CTA, or count grid +
// scatter grid), sizes the grids and launches the explicit instantiations of inst/ (this file
// includes no kernel body).
#include "cuda/kernels/routing/launch_sm90.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/env.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/kernels/quant/config.hpp"  // kSmallTensorMaxElems
#include "cuda/kernels/routing/config.hpp"
#include "cuda/kernels/routing/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using routing::kFusedRouteMaxTokens;
using routing::kMaxRouteBlocks;
using routing::kSmallMaxRouteTokens;
using routing::kSmallThreads;
using routing::kThreads;
using routing::kWarps;

// Dynamic shared memory of the routing rows (a row of E_global floats per warp) and of the
// permutation (kernel_sm90.cuh, permute_smem: warp_cnt, padded to 16 bytes, running, chunk_tot).
std::size_t route_smem_bytes(const RoutingParams& p, int warps = kWarps) {
  return p.route ? static_cast<std::size_t>(warps) * p.num_experts_global * sizeof(float) : 0;
}
std::size_t permute_smem_bytes(const RoutingParams& p, int warps = kWarps) {
  if (!p.permute) return 0;
  const std::size_t cnt = static_cast<std::size_t>(warps) * p.num_experts * 2;
  return cnt + 16 - cnt % 16 + 2 * static_cast<std::size_t>(p.num_experts) * sizeof(int);
}

// Whether the permutation runs on the count and scatter grids (else one CTA).
bool multi_cta_permutation(const RoutingParams& p) {
  const std::int64_t P = p.num_tokens * p.top_k;
  return p.permute && (p.permute_path == PermutePath::kMultiCta ||
                       (p.permute_path == PermutePath::kAuto && P > kPermuteMultiCtaMinSlots && p.chunk_counts != nullptr));
}

// Whether the whole routing is one launch of the one-CTA permutation (routing in the same CTA):
// not the multi-CTA permutation, not the route grid of more than kFusedRouteMaxTokens tokens
// before it. Only that launch hosts the absmax CTAs (RoutingParams::absmax_ctas).
bool one_launch_permutation(const RoutingParams& p) {
  return p.permute && !multi_cta_permutation(p) && !(p.route && p.num_tokens > kFusedRouteMaxTokens);
}

// The multi-CTA permutation's grids: count CTA c owns tokens [c * chunk_tokens, ...) of `chunks`;
// scatter CTA b owns count chunks [b * per_scatter, ...) of `scatters`.
struct PermuteGrids {
  std::int64_t chunks, chunk_tokens, per_scatter, scatters;
};
PermuteGrids permute_grids(const RoutingParams& p, int device) {
  const std::int64_t P = p.num_tokens * p.top_k;
  const int sms = device_sm_count(device);
  auto cdiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t route_grid = std::min<std::int64_t>((p.num_tokens + kWarps - 1) / kWarps, kMaxRouteBlocks);
  // Count CTAs x E <= permute_chunk_count_words(E), the table every scatter CTA reads.
  const std::int64_t max_chunks = std::max<std::int64_t>(1, kPermuteMaxCountWords / std::max(1, p.num_experts));
  // Scatter CTAs: one wave (<= SM count), each at least one full chunk of kThreads slots (a
  // chunk's cost is mostly latency: fewer slots would not finish sooner).
  const std::int64_t scatters_wanted =
      std::max<std::int64_t>(1, std::min({cdiv(P, kThreads), static_cast<std::int64_t>(std::max(sms, 1)), max_chunks}));
  // Count CTAs: when routing here, the route-only grid (one token per warp up to
  // kMaxRouteBlocks CTAs), so that routing is as parallel as in the route-only launch; else one
  // per scatter CTA. Whole tokens per CTA (routing writes a token's k slots).
  std::int64_t chunks = p.route ? std::min<std::int64_t>(route_grid, max_chunks) : scatters_wanted;
  chunks = std::max(chunks, scatters_wanted);
  PermuteGrids g;
  g.chunk_tokens = cdiv(p.num_tokens, chunks);
  g.chunks = cdiv(p.num_tokens, g.chunk_tokens);  // no CTA without tokens
  g.per_scatter = cdiv(g.chunks, scatters_wanted);
  g.scatters = cdiv(g.chunks, g.per_scatter);
  return g;
}

}  // namespace

int routing_absmax_ctas(const RoutingParams& p, int device) {
  if (p.absmax_x == nullptr || p.absmax_partials == nullptr || p.absmax_elems <= 0) return 0;
  if (p.num_tokens <= 0) return 0;
  // The launch that hosts them: the one-CTA permutation's single launch beside its CTA, or the
  // multi-CTA permutation's count launch beside its count CTAs (so that both stay one wave).
  const bool count_launch = !one_launch_permutation(p);
  if (count_launch && !multi_cta_permutation(p)) return 0;
  const std::int64_t busy = count_launch ? permute_grids(p, device).chunks : 1;  // SMs its other CTAs take
  const std::int64_t want = (p.absmax_elems + kAbsmaxElemsPerCta - 1) / kAbsmaxElemsPerCta;
  const std::int64_t cap = std::min<std::int64_t>(kMaxAbsmaxCtas, device_sm_count(device) - busy);
  if (cap <= 0) return 0;
  // Beside many count CTAs (prefill with routing) the SMs left may be too few for hidden: then
  // the absmax launch's full grid takes it.
  if (count_launch && (p.absmax_elems + cap - 1) / cap > kAbsmaxMaxElemsPerCountLaunchCta) return 0;
  return static_cast<int>(std::min(want, cap));
}

bool routing_hosts_quant(const RoutingParams& p) {
  const auto addr = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); };
  return p.absmax_x != nullptr && p.quant_q != nullptr && p.quant_scale != nullptr && p.absmax_elems > 0 &&
         p.absmax_elems <= quant::kSmallTensorMaxElems && p.absmax_elems % 4 == 0 &&
         (p.absmax_x_dtype == DType::kBf16 || p.absmax_x_dtype == DType::kFp16) && addr(p.absmax_x) % 8 == 0 &&
         addr(p.quant_q) % 4 == 0 && p.num_tokens > 0 && one_launch_permutation(p);
}

namespace {
// Launches of the permutation-only instantiations on the calling thread (tests).
thread_local int permute_only_launches = 0;
}  // namespace

int routing_permute_only_launches() { return permute_only_launches; }

void launch_routing_sm90(const RoutingParams& p, void* stream, bool pdl) {
  // Launches without routing (fused_experts calls, the permute launch after a routing launch) run
  // the instantiations compiled without the routing's code (kernel_sm90.cuh kRoute; the same
  // permutation code, the same tables). MOEKIT_ROUTING_PLAIN=0 keeps them on the general kernels
  // (A/Bs); unset or 1: on; anything else an error. Read at every call, before any return.
  const bool plain = detail::env_switch(detail::EnvVar::kRoutingPlain, true);
  if (p.num_tokens <= 0 || (!p.route && !p.permute)) return;
  if (p.route) {
    if (p.routing.method == RoutingMethod::kSigmoidGroupedTopk && p.routing.num_groups > 32)
      throw Error(Status::kNotSupported, "sigmoid_grouped_topk on CUDA supports num_groups <= 32, got " +
                                             std::to_string(p.routing.num_groups));
    if (p.logits_dtype != DType::kFp32 && p.logits_dtype != DType::kBf16)
      throw Error(Status::kNotSupported, std::string("router_logits dtype ") + dtype_name(p.logits_dtype) +
                                             " (expected fp32 or bf16)");
  }
  if (p.permute && p.num_tokens * p.top_k > 0x7fffffffLL)
    throw Error(Status::kNotSupported, "M*k = " + std::to_string(p.num_tokens * p.top_k) +
                                           " slots exceeds the int32 slot index of the CUDA backend");
  const std::size_t smem = std::max(route_smem_bytes(p), permute_smem_bytes(p));
  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  const int optin = device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);  // once per device
  if (smem > static_cast<std::size_t>(optin))
    throw Error(Status::kNotSupported, "routing kernel needs " + std::to_string(smem) +
                                           " bytes of shared memory (E_global=" + std::to_string(p.num_experts_global) +
                                           ", E=" + std::to_string(p.num_experts) + "), the device allows " +
                                           std::to_string(optin));
  const int route_grid =
      static_cast<int>(std::min<std::int64_t>((p.num_tokens + kWarps - 1) / kWarps, kMaxRouteBlocks));
  const bool multi = multi_cta_permutation(p);
  // The absmax CTAs ride on the one-CTA permutation's single launch or on the multi-CTA
  // permutation's count launch (routing_absmax_ctas()).
  if (p.absmax_ctas < 0 || p.absmax_ctas > kMaxAbsmaxCtas ||
      (p.absmax_ctas > 0 && !one_launch_permutation(p) && !multi))
    throw Error(Status::kInternal, "routing: absmax_ctas " + std::to_string(p.absmax_ctas) +
                                       " for this launch (routing_absmax_ctas() says how many it hosts)");
  if (p.quant_cta && (p.absmax_ctas > 0 || !routing_hosts_quant(p)))
    throw Error(Status::kInternal, "routing: quant_cta set for a launch that cannot host it (routing_hosts_quant())");
  if (multi) {
    if (p.chunk_counts == nullptr)
      throw Error(Status::kInvalidArgument, "the multi-CTA permutation needs chunk_counts (permute_chunk_count_words)");
    const PermuteGrids g = permute_grids(p, device);
    const std::int64_t chunks = g.chunks, scatters = g.scatters;

    RoutingParams q = p;
    q.chunk_tokens = g.chunk_tokens;
    q.num_chunks = static_cast<int>(chunks);
    q.chunks_per_scatter = static_cast<int>(g.per_scatter);
    q.pdl_trigger = true;  // the scatter launch follows the count launch; quant or GEMM1 the scatter
    // Launch 1: the call's first, never with the PDL attribute. Routing rows, then counts[E];
    // the absmax CTAs after the count CTAs.
    const std::size_t count_smem =
        std::max(route_smem_bytes(q), static_cast<std::size_t>(std::max(1, p.num_experts)) * sizeof(int));
    const int count_grid = static_cast<int>(chunks) + p.absmax_ctas;
    const bool count_plain = plain && !q.route;
    if (q.route && q.logits_dtype == DType::kBf16)
      routing::run_permute_count_sm90<DType::kBf16>(q, count_smem, count_grid, stream, false, false);
    else
      routing::run_permute_count_sm90<DType::kFp32>(q, count_smem, count_grid, stream, false, count_plain);
    if (count_plain) ++permute_only_launches;
    // Launch 2: the scatter, the programmatic dependent of the count launch.
    q.route = false;
    q.absmax_ctas = 0;
    q.zero_words = nullptr;
    q.num_zero_words = 0;
    routing::run_permute_scatter_sm90(q, permute_smem_bytes(q), static_cast<int>(scatters), stream, pdl);
    return;
  }
  // `after_routing`: the permute launch that follows this call's routing launch, the only one
  // that may have the PDL attribute (the first launch of a call never has it).
  auto launch = [&](RoutingParams q, int grid, bool after_routing) {
    const bool with_pdl = pdl && after_routing;
    // With a permutation a kernel of the chain always follows (the permute launch, quant or
    // GEMM1); a route-only call (moekit::route) ends with this kernel.
    q.pdl_trigger = p.permute;
    // The one-CTA permutation of few slots (decode) runs on the 8-warp CTA.
    const bool small = q.permute && q.num_tokens * q.top_k <= kSmallThreads &&
                       (!q.route || q.num_tokens <= kSmallMaxRouteTokens);
    const int warps = small ? kSmallThreads / 32 : kWarps;
    const std::size_t bytes = std::max(route_smem_bytes(q, warps), permute_smem_bytes(q, warps));
    const bool bf16 = q.route && q.logits_dtype == DType::kBf16;
    const bool permute_only = plain && !q.route;
    if (small) {
      if (bf16) routing::run_routing_sm90<DType::kBf16, kSmallThreads>(q, bytes, grid, stream, with_pdl, false);
      else routing::run_routing_sm90<DType::kFp32, kSmallThreads>(q, bytes, grid, stream, with_pdl, permute_only);
    } else {
      if (bf16) routing::run_routing_sm90<DType::kBf16, kThreads>(q, bytes, grid, stream, with_pdl, false);
      else routing::run_routing_sm90<DType::kFp32, kThreads>(q, bytes, grid, stream, with_pdl, permute_only);
    }
    if (permute_only) ++permute_only_launches;
  };
  if (p.route && p.permute && p.num_tokens > kFusedRouteMaxTokens) {
    // Prefill: one CTA would route ~100 cycles per token; route on a full grid first, then
    // permute in one CTA (two launches instead of one, same results).
    RoutingParams r = p;
    r.permute = false;
    launch(r, route_grid, false);
    RoutingParams q = p;
    q.route = false;
    q.zero_words = nullptr;
    q.num_zero_words = 0;
    launch(q, 1, true);
    return;
  }
  // The one-CTA permutation (routing in the same CTA), plus the CTAs that take hidden's absmax
  // (RoutingParams::absmax_ctas) or the one that quantizes it (quant_cta); a route-only launch
  // has none.
  launch(p, p.permute ? 1 + p.absmax_ctas + (p.quant_cta ? 1 : 0) : route_grid, false);
}

RoutingParams route_only_params(const detail::MoeCall& call, std::int32_t* ids_out, float* wts_out) {
  const MoeProblem& p = call.problem;
  RoutingParams rp;
  rp.num_tokens = p.num_tokens;
  rp.top_k = static_cast<int>(p.top_k);
  rp.num_experts_global = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);
  rp.route = true;
  rp.routing = p.routing;
  rp.routing.top_k = static_cast<int>(p.top_k);
  rp.logits = call.router_logits;
  rp.logits_dtype = p.logits_dtype;
  rp.correction_bias = call.correction_bias;
  rp.topk_ids_out = ids_out;
  rp.topk_weights_out = wts_out;
  return rp;
}

}  // namespace moekit::cuda
