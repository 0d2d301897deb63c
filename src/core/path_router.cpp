// The kernel-path router (path_router.hpp): the heuristic that picks Swap-AB or the mma.sync
// grouped GEMM per GEMM, the forced names, and the MOEKIT_LOG_DISPATCH line.
#include "path_router.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "env.hpp"
#include "moekit/error.hpp"

namespace moekit::detail {
namespace {

enum class Requested { kAuto, kMma, kSwapab, kFused, kTokmajor, kDecode, kGemv, kExpertMlp };

std::string path_list() {
  std::string s;
  for (const char* n : kPathNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

Requested parse_requested(const char* forced) {
  if (forced == nullptr || forced[0] == '\0' || std::strcmp(forced, "auto") == 0) return Requested::kAuto;
  if (std::strcmp(forced, "mma") == 0) return Requested::kMma;
  if (std::strcmp(forced, "swapab") == 0) return Requested::kSwapab;
  if (std::strcmp(forced, "fused") == 0) return Requested::kFused;
  if (std::strcmp(forced, "tokmajor") == 0) return Requested::kTokmajor;
  if (std::strcmp(forced, "decode") == 0) return Requested::kDecode;
  if (std::strcmp(forced, "gemv") == 0) return Requested::kGemv;
  if (std::strcmp(forced, "expert_mlp") == 0) return Requested::kExpertMlp;
  throw Error(Status::kInvalidArgument, std::string("unknown kernel path '") + forced +
                                            "' (Options::path or MOEKIT_PATH); expected one of " + path_list());
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A single-launch path's reason for declining, or, when none was given, that it is not built.
std::string not_built_or(const std::string& why, const char* path) {
  if (!why.empty()) return why;
  return std::string("the single-launch ") + path + " path is not built in this version of moekit";
}

// The reason's stream, made only when the reason is wanted (RouterInputs::want_reason): an
// ostringstream costs a locale copy per call, and an eager call without MOEKIT_LOG_DISPATCH
// never reads the reason.
class ReasonStream {
 public:
  explicit ReasonStream(bool on) {
    if (on) os_.emplace();
  }
  template <class T>
  ReasonStream& operator<<(const T& v) {
    if (os_) *os_ << v;
    return *this;
  }
  std::string str() const { return os_ ? os_->str() : std::string(); }
  /// Whether the reason is wanted: statements test it first, so that their arguments (fmt's
  /// snprintf, to_string) are not evaluated either when it is not.
  explicit operator bool() const { return os_.has_value(); }

 private:
  std::optional<std::ostringstream> os_;
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f" : "%.1f", v);
  return buf;
}

// Expected local slots and touched local experts under uniform routing: each token picks k
// distinct of the E_global experts, so a given expert is missed by a token with probability
// 1 - k / E_global; E of the E_global are local.
void expected_load(const MoeProblem& p, DispatchPlan& plan) {
  const double M = static_cast<double>(std::max<std::int64_t>(p.num_tokens, 0));
  const double k = static_cast<double>(p.top_k);
  const double E = static_cast<double>(std::max<std::int64_t>(p.num_experts, 1));
  const double Eg = static_cast<double>(std::max<std::int64_t>(p.has_expert_map ? p.num_experts_global : p.num_experts, 1));
  const double miss = std::max(0.0, 1.0 - k / Eg);
  plan.local_slots = M * k * std::min(1.0, E / Eg);
  plan.touched = E * (1.0 - std::pow(miss, M));
  plan.tokens_per_expert = plan.touched > 0 ? plan.local_slots / plan.touched : 0.0;
}

}  // namespace

const char* gemm_impl_name(GemmImpl impl) noexcept {
  switch (impl) {
    case GemmImpl::kSwapab: return "swapab";
    case GemmImpl::kTokmajor: return "tokmajor";
    case GemmImpl::kMma: break;
  }
  return "mma";
}

int choose_swapab_split(std::int64_t items, int sm_count, std::int64_t k_stages) {
  const RouterTable& t = kRouterTable;
  int split = 1;
  while (split < t.max_split_k && std::max<std::int64_t>(items, 1) * split * 2 <= std::max(1, sm_count) &&
         k_stages >= static_cast<std::int64_t>(t.min_k_stages_per_rank) * split)
    split *= 2;
  return split;
}

std::int64_t swapab_max_items(std::int64_t n_out, std::int64_t num_experts, std::int64_t rows, int tiles_per_item) {
  const std::int64_t groups = ceil_div(ceil_div(n_out, 64), std::max(1, tiles_per_item));
  return groups * (std::min(num_experts, rows) + rows / 64);
}

int swapab_split_k(const MoeProblem& p, int gemm, int sm_count) {
  // The launcher's items and K stages (128 bytes each) for this GEMM.
  const std::int64_t P = std::max<std::int64_t>(0, p.num_tokens * p.top_k);
  const std::int64_t n_out = gemm == 1 ? p.intermediate_size : p.hidden_size;
  const std::int64_t k_dim = gemm == 1 ? p.hidden_size : p.intermediate_size;
  const std::int64_t es = p.scheme == Scheme::kBf16 ? 2 : 1;
  return choose_swapab_split(swapab_max_items(n_out, p.num_experts, P), sm_count, ceil_div(k_dim * es, 128));
}

// fp8_per_tensor on the few experts' shards (mixtral TP8): the calls whose rows Swap-AB's plain
// kernels take past one token (RouterTable::early_swapab_max_slots_few_experts_shard_fp8), read by
// both the GEMV tensor-core rule and the early crossover.
namespace {
bool few_experts_fp8_shard(const MoeProblem& p) {
  const RouterTable& t = kRouterTable;
  return p.scheme == Scheme::kFp8PerTensor && p.num_experts <= t.few_experts &&
         p.intermediate_size < t.few_experts_shard_max_n;
}
}  // namespace

// The GEMV path's tensor-core kernel rule (RouterTable::gemv_mma_*): where its same-run sweeps had it
// beat the previous choice.
bool gemv_mma_rule(const MoeProblem& p) {
  const RouterTable& t = kRouterTable;
  // Measured for bf16, fp8_per_tensor and fp8_per_channel (not fp8_block128: not built there).
  if (p.scheme == Scheme::kFp8Block128) return false;
  const double M = static_cast<double>(p.num_tokens);
  const double elems = static_cast<double>(p.intermediate_size) * static_cast<double>(p.hidden_size);
  const bool shard = p.intermediate_size < t.gemv_mma_max_n;
  const bool per_tensor = p.scheme == Scheme::kFp8PerTensor;
  // fp8_per_tensor and bf16 on the smallest shard experts (qwen3-30b TP8), and fp8_per_tensor on
  // the next ones (qwen3-235b TP8), past gemv_mma_max_tokens.
  const bool tiny = shard && elems < t.gemv_mma_tiny_elems;
  const bool mid = shard && !tiny && elems < t.gemv_mma_wide_elems;
  // fp8_per_tensor on TP1-sized experts without biases (not the few-experts clause below): one
  // token, a few on the smallest ones (RouterTable::gemv_mma_tp1_fp8_*).
  if (per_tensor && !shard && p.num_experts > t.few_experts && !p.has_bias13 && !p.has_bias2)
    return elems <= t.gemv_mma_tp1_fp8_small_elems ? M <= t.gemv_mma_tp1_fp8_small_max_tokens
                                                    : elems <= t.gemv_mma_tp1_fp8_max_elems && M <= 1;
  const double max_tokens = tiny && per_tensor                 ? t.gemv_mma_fp8_tiny_max_tokens
                            : tiny && p.scheme == Scheme::kBf16 ? t.gemv_mma_bf16_tiny_max_tokens
                            : mid && per_tensor                 ? t.gemv_mma_fp8_mid_max_tokens
                                                                : t.gemv_mma_max_tokens;
  if (elems > t.gemv_mma_max_expert_elems || M > max_tokens) return false;
  // fp8 (per tensor and per channel; the CUDA-core kernel does not run per channel) on the few
  // experts one token further than bf16.
  // fp8_per_tensor on the few experts' shards (mixtral TP8): not where Swap-AB's plain kernels take
  // the call (2 tokens up to early_swapab_max_slots_few_experts_shard_fp8 slots), but at one token and
  // past them up to gemv_mma_few_experts_max_tokens_fp8.
  const bool plain_swapab_takes =
      few_experts_fp8_shard(p) && M > t.gemv_mma_few_experts_max_tokens_per_tensor_shard &&
      M * static_cast<double>(p.top_k) <= t.early_swapab_max_slots_few_experts_shard_fp8;
  const bool few = p.num_experts <= t.few_experts && !plain_swapab_takes &&
                   M <= (p.scheme != Scheme::kBf16 ? t.gemv_mma_few_experts_max_tokens_fp8
                                                   : t.gemv_mma_few_experts_max_tokens);
  if (!shard && !few) return false;
  // fp8_per_channel: the TP8 shards up to 16 tokens but the wide ones up to 8, qwen3-30b's small
  // experts included, and the few experts (mixtral TP8; RouterTable).
  if (p.scheme == Scheme::kFp8PerChannel) return !shard || elems < t.gemv_mma_wide_elems || M <= t.gemv_mma_wide_max_tokens;
  // fp8_per_tensor on the largest shard experts (deepseek-v3 TP8): its own bound, not the wide one.
  if (per_tensor && shard && elems >= t.gemv_mma_fp8_large_elems) return M <= t.gemv_mma_fp8_large_max_tokens;
  if (shard && elems >= t.gemv_mma_wide_elems && M > t.gemv_mma_wide_max_tokens) return false;
  if (p.scheme != Scheme::kBf16) return !(M <= t.gemv_mma_fp8_small_m && elems < t.gemv_mma_tiny_elems);
  return shard ? M > t.gemv_mma_min_tokens_bf16 : M >= t.gemv_mma_min_tokens_bf16;
}

// MOEKIT_GEMV_KERNEL on a GEMV plan: the named kernel where it can run the call. Returns whether it
// changed the router's kernel.
bool apply_gemv_kernel(DispatchPlan& plan, const RouterInputs& in) {
  if (!in.gemv_kernel) return false;
  const GemvKernel want = *in.gemv_kernel;
  const bool ok = want == GemvKernel::kCuda ? in.gemv_cuda_ok : in.gemv_mma_ok;
  if (!ok || want == plan.gemv_kernel) return false;
  plan.gemv_kernel = want;
  return true;
}

const char* const kGemvOverridden = " (MOEKIT_GEMV_KERNEL: another kernel runs it)";

DispatchPlan choose_paths(const MoeProblem& p, const RouterInputs& in) {
  DispatchPlan plan;
  const Requested req = parse_requested(in.forced);
  plan.requested = req == Requested::kAuto ? "auto" : in.forced;
  expected_load(p, plan);
  const int sms = std::max(1, in.sm_count);

  auto use_swapab = [&](int g) {
    plan.gemm[g].impl = GemmImpl::kSwapab;
    plan.gemm[g].split_k = in.swapab_split ? *in.swapab_split : swapab_split_k(p, g + 1, sms);
  };
  auto use_mma = [&](int g) {
    plan.gemm[g].impl = GemmImpl::kMma;
    plan.gemm[g].split_k = 0;
  };
  auto use_tokmajor = [&](int g) {
    plan.gemm[g].impl = GemmImpl::kTokmajor;
    plan.gemm[g].split_k = 0;
  };
  // A forced GEMM path runs both GEMMs or refuses the call (at M = 0 nothing launches).
  auto force = [&](GemmImpl impl, const bool (&ok)[2], const std::string (&why)[2]) {
    for (int g = 0; g < 2; ++g) {
      if (!ok[g] && p.num_tokens > 0)
        throw Error(Status::kNotSupported, std::string("path '") + gemm_impl_name(impl) +
                                               "' forced (Options::path or MOEKIT_PATH) but it cannot run GEMM" +
                                               std::to_string(g + 1) + " of " + p.to_string() + ": " +
                                               (why[g].empty() ? std::string("it cannot implement it") : why[g]));
      if (impl == GemmImpl::kSwapab) use_swapab(g); else use_tokmajor(g);
    }
    plan.reason = "forced";
  };
  // MOEKIT_GEMM2_PATH (RouterInputs::gemm2_impl): an automatic GEMM plan's GEMM2 on the named
  // kernel where it can run it. Every automatic GEMM plan returns through this.
  auto gemm_plan = [&](std::string reason) {
    const std::optional<GemmImpl> g2 = in.gemm2_impl;
    if (g2 && (*g2 == GemmImpl::kMma || (*g2 == GemmImpl::kSwapab && in.swapab_ok[1]) ||
               (*g2 == GemmImpl::kTokmajor && in.tokmajor_ok[1]))) {
      if (*g2 == GemmImpl::kSwapab) use_swapab(1); else if (*g2 == GemmImpl::kTokmajor) use_tokmajor(1); else use_mma(1);
      reason += " (GEMM2 moved by MOEKIT_GEMM2_PATH)";
    }
    plan.reason = std::move(reason);
    return plan;
  };
  auto why_of = [&](int g) {
    return in.swapab_why[g].empty() ? std::string("swapab cannot implement it") : in.swapab_why[g];
  };

  switch (req) {
    case Requested::kFused:
      if (!in.fused_ok)
        throw Error(Status::kNotSupported, "path 'fused' forced (Options::path or MOEKIT_PATH) but it cannot run " +
                                               p.to_string() + ": " + not_built_or(in.fused_why, "fused"));
      plan.fused = true;
      plan.reason = "forced";
      return plan;
    case Requested::kDecode:
      if (!in.decode_ok)
        throw Error(Status::kNotSupported, "path 'decode' forced (Options::path or MOEKIT_PATH) but it cannot run " +
                                               p.to_string() + ": " + not_built_or(in.decode_why, "decode"));
      plan.decode = true;
      plan.reason = "forced";
      return plan;
    case Requested::kGemv:
      if (!in.gemv_ok())
        throw Error(Status::kNotSupported, "path 'gemv' forced (Options::path or MOEKIT_PATH) but it cannot run " +
                                               p.to_string() + ": " + not_built_or(in.gemv_why, "GEMV"));
      plan.gemv = true;
      // The tensor-core kernel where auto would take it, or where the CUDA-core one cannot run.
      if (in.gemv_mma_ok && (gemv_mma_rule(p) || !in.gemv_cuda_ok)) plan.gemv_kernel = GemvKernel::kMma;
      apply_gemv_kernel(plan, in);
      plan.reason = "forced";
      return plan;
    case Requested::kExpertMlp:
      if (!in.expert_mlp_ok)
        throw Error(Status::kNotSupported, "path 'expert_mlp' forced (Options::path or MOEKIT_PATH) but it cannot run " +
                                               p.to_string() + ": " + not_built_or(in.expert_mlp_why, "expert_mlp"));
      plan.expert_mlp = true;
      plan.reason = "forced";
      return plan;
    case Requested::kMma:
      use_mma(0);
      use_mma(1);
      plan.reason = "forced";
      return plan;
    case Requested::kSwapab:
      force(GemmImpl::kSwapab, in.swapab_ok, in.swapab_why);
      return plan;
    case Requested::kTokmajor:
      force(GemmImpl::kTokmajor, in.tokmajor_ok, in.tokmajor_why);
      return plan;
    case Requested::kAuto: break;
  }

  // auto: the fused single launch at low concurrency when it can run the call; else, where
  // token-major can run both GEMMs and the experts have no biases, the early crossover (Swap-AB
  // for the fewest slots, token-major above); else the late crossovers (Swap-AB while an expert's
  // tokens fit one wgmma N side, mma between, token-major at prefill; a GEMM that Swap-AB or
  // token-major declines runs on mma).
  // The decode branches (GEMV, then decode) come first and read no other answer (GEMM, fused): the
  // CUDA backend asks for those only when the plan is neither (plan_call;
  // CpuPathRouter.DecodeReadsNoOtherAnswer).
  // The per-expert MLP kernel first where it can run the call and its slot range holds
  // (RouterTable::expert_mlp_*).
  // One CTA a unit (N = 96) and the cluster form (N = 97..256) each have their own measured band.
  const double n = static_cast<double>(p.intermediate_size);
  const bool per_tensor = p.scheme == Scheme::kFp8PerTensor;
  // fp8_per_channel: its own slot ranges on either form (RouterTable::expert_mlp_channel_*).
  const bool per_channel = p.scheme == Scheme::kFp8PerChannel;
  const bool one_cta_band = n >= kRouterTable.expert_mlp_auto_min_n && n <= kRouterTable.expert_mlp_auto_max_n;
  const bool cluster_band = n >= kRouterTable.expert_mlp_cluster_min_n && n <= kRouterTable.expert_mlp_cluster_max_n;
  // Clusters of four (N = 289..384: gpt-oss TP8's 360), bf16 / fp16 and fp8_per_tensor, each its
  // own slot range.
  const bool quad_band = n >= kRouterTable.expert_mlp_quad_min_n && n <= kRouterTable.expert_mlp_quad_max_n &&
                         (p.scheme == Scheme::kBf16 || per_tensor);
  // The cluster form: one round of units while the expected units (touched experts: a unit each
  // below 64 slots an expert) fit the resident clusters.
  const bool one_round = in.expert_mlp_clusters > 0 &&
                         plan.touched <= static_cast<double>(in.expert_mlp_clusters);
  double lo = per_tensor    ? kRouterTable.expert_mlp_fp8_min_slots
             : per_channel ? kRouterTable.expert_mlp_channel_min_slots
                           : kRouterTable.expert_mlp_min_slots;
  double hi = kRouterTable.expert_mlp_max_slots;
  if (quad_band) {
    lo = per_tensor ? kRouterTable.expert_mlp_quad_fp8_min_slots : kRouterTable.expert_mlp_quad_min_slots;
    hi = per_tensor ? kRouterTable.expert_mlp_quad_fp8_max_slots : kRouterTable.expert_mlp_quad_max_slots;
  } else if (!one_cta_band && per_channel) {
    lo = kRouterTable.expert_mlp_channel_cluster_min_slots;
    hi = kRouterTable.expert_mlp_channel_cluster_max_slots;
  } else if (!one_cta_band) {
    lo = !one_round ? kRouterTable.expert_mlp_cluster_min_slots
         : per_tensor ? kRouterTable.expert_mlp_cluster_one_round_fp8_min_slots
                    : kRouterTable.expert_mlp_cluster_one_round_min_slots;
    hi = n < kRouterTable.expert_mlp_cluster_wide_n ? kRouterTable.expert_mlp_cluster_max_slots
         : per_tensor                               ? kRouterTable.expert_mlp_cluster_wide_max_slots
                                                    : kRouterTable.expert_mlp_cluster_wide_bf16_max_slots;
  }
  if (kRouterTable.expert_mlp_in_auto && in.expert_mlp_in_auto && in.expert_mlp_ok &&
      (p.scheme == Scheme::kBf16 || (per_tensor && kRouterTable.expert_mlp_fp8_in_auto) ||
       (per_channel && kRouterTable.expert_mlp_channel_in_auto)) &&
      (one_cta_band || cluster_band || quad_band) &&
      plan.local_slots >= lo && plan.local_slots <= hi) {
    plan.expert_mlp = true;
    if (in.want_reason)
      plan.reason = "slots " + fmt(plan.local_slots) + " in [" + fmt(lo) + ", " + fmt(hi) + "], N=" +
                    std::to_string(p.intermediate_size) + ": expert_mlp, " +
                    (one_cta_band ? "one CTA" : one_round ? "a cluster (one round)" : "a cluster") +
                    " an expert's token tile through both GEMMs, then the combine";
    return plan;
  }
  // fp8_per_channel on the smallest shards: decode past a few tokens, where it can run and its
  // own rule takes the call (RouterTable::gemv_mma_channel_tiny_n_max_tokens); else gemv(mma)'s.
  const bool channel_decode_first = p.scheme == Scheme::kFp8PerChannel && kRouterTable.decode_in_auto &&
                                    in.decode_in_auto && in.decode_ok &&
                                    p.intermediate_size < kRouterTable.decode_tiny_n &&
                                    static_cast<double>(p.num_tokens) > kRouterTable.gemv_mma_channel_tiny_n_max_tokens &&
                                    plan.local_slots <= kRouterTable.decode_tiny_n_max_slots_channel;
  if (kRouterTable.gemv_in_auto && in.gemv_in_auto && kRouterTable.gemv_mma_in_auto && in.gemv_mma_in_auto &&
      in.gemv_mma_ok && gemv_mma_rule(p) && !channel_decode_first) {
    plan.gemv = true;
    plan.gemv_kernel = GemvKernel::kMma;
    const bool overridden = apply_gemv_kernel(plan, in);
    if (in.want_reason)
      plan.reason = "M=" + std::to_string(p.num_tokens) + ", N=" + std::to_string(p.intermediate_size) + ", N*K " +
                    fmt(static_cast<double>(p.intermediate_size) * static_cast<double>(p.hidden_size)) + ", E=" +
                    std::to_string(p.num_experts) +
                    " in the tensor-core GEMV rule: gemv(mma), one cooperative launch, mma.sync on the weights as they stream" +
                    (overridden ? kGemvOverridden : "");
    return plan;
  }
  if (kRouterTable.gemv_in_auto && in.gemv_in_auto && in.gemv_cuda_ok) {
    const RouterTable& t = kRouterTable;
    const bool fp8 = p.scheme != Scheme::kBf16;
    const double max_tokens = fp8 ? t.gemv_max_tokens_fp8 : t.gemv_max_tokens_bf16;
    const double max_slots = fp8 ? t.gemv_max_slots_fp8 : t.gemv_max_slots_bf16;
    const double elems = static_cast<double>(p.intermediate_size) * static_cast<double>(p.hidden_size);
    if (static_cast<double>(p.num_tokens) <= max_tokens && plan.local_slots <= max_slots &&
        (!fp8 || elems <= t.gemv_fp8_max_expert_elems)) {
      plan.gemv = true;
      const bool overridden = apply_gemv_kernel(plan, in);
      if (in.want_reason)
        plan.reason = "M=" + std::to_string(p.num_tokens) + " <= " + fmt(max_tokens) + " and slots " +
                      fmt(plan.local_slots) + " <= " + fmt(max_slots) +
                      (fp8 ? " and N*K " + fmt(elems) + " <= " + fmt(t.gemv_fp8_max_expert_elems) : std::string()) +
                      ": gemv, one cooperative launch from routing to the output on the CUDA cores" +
                      (overridden ? kGemvOverridden : "");
      return plan;
    }
  }
  if (kRouterTable.decode_in_auto && in.decode_in_auto && in.decode_ok) {
    const RouterTable& t = kRouterTable;
    const std::int64_t N = p.intermediate_size;
    const std::int64_t n_limit = N < t.decode_tiny_n    ? t.decode_tiny_n
                                 : N < t.decode_small_n ? t.decode_small_n
                                 : N < t.decode_mid_n   ? t.decode_mid_n
                                                        : t.decode_large_n;
    const bool fp8 = p.scheme != Scheme::kBf16;
    const bool block = p.scheme == Scheme::kFp8Block128;
    const bool channel = p.scheme == Scheme::kFp8PerChannel;
    const double max_slots =
        N < t.decode_tiny_n    ? (block     ? t.decode_tiny_n_max_slots_block128
                                  : channel ? t.decode_tiny_n_max_slots_channel
                                  : fp8     ? t.decode_tiny_n_max_slots_fp8
                                            : t.decode_tiny_n_max_slots)
        : N < t.decode_small_n ? (block     ? t.decode_small_n_max_slots_block128
                                  : channel ? t.decode_small_n_max_slots_channel
                                  : fp8     ? t.decode_small_n_max_slots_fp8
                                            : t.decode_small_n_max_slots)
        : N < t.decode_mid_n   ? (channel ? t.decode_mid_n_max_slots_channel : t.decode_mid_n_max_slots)
        : N < t.decode_large_n ? (channel ? t.decode_large_n_max_slots_channel : -1.0)
                               : -1.0;
    if (plan.local_slots <= max_slots) {
      plan.decode = true;
      if (in.want_reason)
        plan.reason = "N=" + std::to_string(N) + " < " + std::to_string(n_limit) +
                    " and slots " + fmt(plan.local_slots) + " <= " + fmt(max_slots) +
                    ": decode, one kernel from routing to the partial outputs, then its combine";
      return plan;
    }
  }
  if (kRouterTable.fused_in_auto && in.fused_ok && p.intermediate_size <= kRouterTable.fused_max_n &&
      plan.local_slots <= kRouterTable.fused_max_slots) {
    plan.fused = true;
    if (in.want_reason)
      plan.reason = "N=" + std::to_string(p.intermediate_size) + " <= " + std::to_string(kRouterTable.fused_max_n) +
                  " and slots " + fmt(plan.local_slots) + " <= " + fmt(kRouterTable.fused_max_slots) +
                  ": launches dominate, one fused launch";
    return plan;
  }
  const double tpe = plan.tokens_per_expert;
  const bool fp8 = p.scheme != Scheme::kBf16;
  const RouterTable& t = kRouterTable;
  ReasonStream why(in.want_reason);
  if (why) why << "tokens/expert ~" << fmt(tpe) << " (slots " << fmt(plan.local_slots) << " over ~" << fmt(plan.touched)
      << " touched of " << p.num_experts << ")";
  const std::int64_t N = p.intermediate_size;
  // The early token-major crossover (RouterTable): Swap-AB for the fewest slots, token-major
  // above, mma between them only for tiny bf16 shards. A GEMM Swap-AB declines runs token-major.
  if (in.tokmajor_ok[0] && in.tokmajor_ok[1] && !p.has_bias13 && !p.has_bias2) {
    const bool tiny = N < t.tiny_n;
    // bf16 and fp8_per_tensor on few experts (mixtral): their own Swap-AB bound and not the
    // TP1-sized clause.
    const bool few = (p.scheme == Scheme::kFp8PerTensor || p.scheme == Scheme::kBf16) && p.num_experts <= t.few_experts;
    const bool few_fp8_shard = few_experts_fp8_shard(p);
    const double swapab_slots = tiny            ? t.tiny_n_swapab_max_slots
                                : few_fp8_shard ? t.early_swapab_max_slots_few_experts_shard_fp8
                                : few           ? t.early_swapab_max_slots_few_experts
                                : fp8 ? t.early_swapab_max_slots
                                      : t.early_swapab_max_slots_bf16;
    const bool fp8_mid = fp8 && !few && N >= t.mid_n && p.hidden_size <= t.early_swapab_fp8_max_k &&
                         tpe <= t.early_swapab_fp8_max_tokens_per_expert;
    const bool block128 = p.scheme == Scheme::kFp8Block128 &&
                          (N < t.mid_n ? plan.local_slots <= t.block128_swapab_max_slots
                                       : tpe <= t.block128_swapab_max_tokens_per_expert);
    // fp8_per_channel on the TP8 shards: Swap-AB longer (RouterTable::channel_swapab_max_slots).
    const bool channel = p.scheme == Scheme::kFp8PerChannel && !tiny && N < t.mid_n &&
                         plan.local_slots <= t.channel_swapab_max_slots;
    if (plan.local_slots <= swapab_slots || fp8_mid || block128 || channel) {
      if (why) {
        if (channel && plan.local_slots > swapab_slots)
          why << ", fp8_per_channel, N=" << N << " < " << t.mid_n << ", slots <= " << fmt(t.channel_swapab_max_slots);
        else if (block128)
          why << ", fp8_block128, "
              << (N < t.mid_n ? "N=" + std::to_string(N) + " < " + std::to_string(t.mid_n) + ", slots <= " + fmt(t.block128_swapab_max_slots)
                              : "tokens/expert <= " + fmt(t.block128_swapab_max_tokens_per_expert));
        else if (plan.local_slots <= swapab_slots)
          why << ", slots <= " << fmt(swapab_slots) << (tiny ? " (N=" + std::to_string(N) + " < " + std::to_string(t.tiny_n) + ")" : "");
        else
          why << ", fp8, N=" << N << " >= " << t.mid_n << ", K=" << p.hidden_size << " <= " << t.early_swapab_fp8_max_k
              << ", tokens/expert <= " << fmt(t.early_swapab_fp8_max_tokens_per_expert);
        why << ": decode, Swap-AB";
      }
      for (int g = 0; g < 2; ++g) {
        if (in.swapab_ok[g]) {
          use_swapab(g);
        } else {
          use_tokmajor(g);
          if (why) why << "; GEMM" << g + 1 << " token-major: " << why_of(g);
        }
      }
    } else if (tiny && !fp8 && tpe <= t.tiny_n_mma_max_tokens_per_expert_bf16) {
      if (why) why << ", N=" << N << " < " << t.tiny_n << " bf16 past " << fmt(swapab_slots) << " slots, <= "
          << fmt(t.tiny_n_mma_max_tokens_per_expert_bf16) << " tokens/expert: mma";
      use_mma(0);
      use_mma(1);
    } else {
      if (why) why << ", slots > " << fmt(swapab_slots) << ": token-major wgmma";
      use_tokmajor(0);
      use_tokmajor(1);
    }
    return gemm_plan(why.str());
  }
  if ((p.has_bias13 || p.has_bias2) && why) why << ", expert biases: the late crossovers";
  // The late crossovers, three regimes: Swap-AB at decode, token-major wgmma at prefill, and
  // between them (small shards past 32 slots, where an expert still sees only a few tokens) mma.
  const double limit = fp8 ? t.swapab_max_tokens_per_expert_fp8 : t.swapab_max_tokens_per_expert_bf16;
  bool swapab = false;
  if (fp8 && N < t.mid_n) {
    swapab = tpe <= t.mid_n_max_tokens_per_expert_fp8;
    if (why) why << ", fp8 with N=" << N << " < " << t.mid_n << ": Swap-AB up to " << fmt(t.mid_n_max_tokens_per_expert_fp8)
        << " tokens/expert, token-major above";
  } else if (N < t.small_n) {
    swapab = plan.local_slots <= t.small_n_max_slots;
    if (why) why << ", N=" << N << " < " << t.small_n << ": Swap-AB only up to " << fmt(t.small_n_max_slots) << " slots";
  } else if (N < t.mid_n) {
    swapab = tpe <= t.mid_n_max_tokens_per_expert_bf16;
    if (why) why << ", N=" << N << " < " << t.mid_n << ": Swap-AB only up to " << fmt(t.mid_n_max_tokens_per_expert_bf16)
        << " tokens/expert";
  } else {
    swapab = tpe <= limit;
    if (why) why << (swapab ? " <= " : " > ") << fmt(limit) << (swapab ? ": decode, Swap-AB" : "");
  }
  const bool prefill = !swapab && (tpe > limit || (fp8 && N < t.mid_n));
  if (prefill && why) why << ": prefill, token-major wgmma";
  for (int g = 0; g < 2; ++g) {
    if (swapab && in.swapab_ok[g]) {
      use_swapab(g);
    } else if (prefill && in.tokmajor_ok[g]) {
      use_tokmajor(g);
    } else {
      use_mma(g);
      if (swapab && why) why << "; GEMM" << g + 1 << " on mma: " << why_of(g);
      if (prefill && why) why << "; GEMM" << g + 1 << " on mma: " << in.tokmajor_why[g];
    }
  }
  return gemm_plan(why.str());
}

DispatchPlan choose_paths(const MoeProblem& problem, int sm_count, const char* forced, bool swapab_ok1,
                          bool swapab_ok2) {
  RouterInputs in;
  in.sm_count = sm_count;
  in.forced = forced;
  in.swapab_ok[0] = swapab_ok1;
  in.swapab_ok[1] = swapab_ok2;
  return choose_paths(problem, in);
}

std::string DispatchPlan::describe() const {
  if (fused) return "fused";
  if (decode) return "decode";
  if (expert_mlp) return "expert_mlp";
  if (gemv) {
    switch (gemv_kernel) {
      case GemvKernel::kMma: return "gemv(mma)";
      case GemvKernel::kCuda: break;
    }
    return "gemv";
  }
  std::string s;
  for (int g = 0; g < 2; ++g) {
    s += (g ? " gemm2=" : "gemm1=") + std::string(gemm_impl_name(gemm[g].impl));
    if (gemm[g].impl == GemmImpl::kSwapab && gemm[g].split_k > 1) s += "(split_k=" + std::to_string(gemm[g].split_k) + ")";
  }
  return s;
}

std::string DispatchPlan::log_line(const MoeProblem& problem) const {
  return "moekit dispatch: " + problem.to_string() + " | path=" + requested + " -> " + describe() + " | " + reason;
}

bool may_take_decode(const char* forced) {
  const Requested r = parse_requested(forced);
  return r == Requested::kAuto || r == Requested::kDecode || r == Requested::kGemv || r == Requested::kExpertMlp;
}

bool gemv_in_auto_enabled() noexcept {
  const char* v = env_value(EnvVar::kGemv);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool gemv_mma_in_auto_enabled() noexcept {
  const char* v = env_value(EnvVar::kGemvMma);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::optional<GemvKernel> gemv_kernel_override() {
  const char* v = env_value(EnvVar::kGemvKernel);
  if (v == nullptr || v[0] == '\0') return std::nullopt;
  if (std::strcmp(v, "cuda") == 0) return GemvKernel::kCuda;
  if (std::strcmp(v, "mma") == 0) return GemvKernel::kMma;
  throw Error(Status::kInvalidArgument,
              std::string("MOEKIT_GEMV_KERNEL must be unset, 'cuda' or 'mma', got '") + v + "'");
}

std::optional<GemmImpl> gemm2_impl_override() {
  const char* v = env_value(EnvVar::kGemm2Path);
  if (v == nullptr || v[0] == '\0') return std::nullopt;
  if (std::strcmp(v, "mma") == 0) return GemmImpl::kMma;
  if (std::strcmp(v, "swapab") == 0) return GemmImpl::kSwapab;
  if (std::strcmp(v, "tokmajor") == 0) return GemmImpl::kTokmajor;
  throw Error(Status::kInvalidArgument,
              std::string("MOEKIT_GEMM2_PATH must be unset, 'mma', 'swapab' or 'tokmajor', got '") + v + "'");
}

std::optional<int> swapab_split_override() {
  const char* v = env_value(EnvVar::kSwapabSplit);
  if (v == nullptr || v[0] == '\0') return std::nullopt;
  for (int s : {1, 2, 4, 8})
    if (std::strcmp(v, std::to_string(s).c_str()) == 0) return s;
  throw Error(Status::kInvalidArgument,
              std::string("MOEKIT_SWAPAB_SPLIT must be unset, 1, 2, 4 or 8, got '") + v + "'");
}

bool decode_in_auto_enabled() noexcept {
  const char* v = env_value(EnvVar::kDecode);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool expert_mlp_in_auto_enabled() noexcept {
  const char* v = env_value(EnvVar::kExpertMlp);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool log_dispatch_enabled() noexcept {
  const char* v = env_value(EnvVar::kLogDispatch);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace moekit::detail
