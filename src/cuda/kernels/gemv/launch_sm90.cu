// Host side of the GEMV decode path: can_implement, the workspace, the shared-memory layout and
// run_gemv_sm90, which turns a resolved MoeCall into (fused_moe: a routing launch and) the one
// cooperative launch of gemv_sm90_kernel. The kernel instantiations live in inst/.
#include "cuda/kernels/gemv/launch_sm90.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "core/env.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/kernels/gemv/params.hpp"
#include "cuda/kernels/routing/launch_sm90.hpp"
#include "cuda/numerics/bias.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

namespace gv = gemv;

int elem_bytes(const MoeProblem& p) { return p.scheme == Scheme::kBf16 ? 2 : 1; }
std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

struct GemvLayout {
  std::size_t topk_ids = 0;      // int32 [P] (fused_moe without caller buffers)
  std::size_t topk_weights = 0;  // fp32 [P]
  std::size_t h_buf = 0;         // fp32 [P, N]
  std::size_t total = 0;
};

GemvLayout gemv_layout(const MoeProblem& p) {
  GemvLayout l;
  if (p.num_tokens <= 0) return l;
  const std::size_t P = static_cast<std::size_t>(p.num_tokens * p.top_k);
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t off = at;
    at = align256(at + bytes);
    return off;
  };
  l.topk_ids = take(p.with_routing ? P * 4 : 0);
  l.topk_weights = take(p.with_routing ? P * 4 : 0);
  l.h_buf = take(P * static_cast<std::size_t>(p.intermediate_size) * 4);
  l.total = at;
  return l;
}

// The token rows staged for GEMM1 ([M][K * es] bytes) and every slot's h for GEMM2 ([P][N] fp32)
// share one region.
std::int64_t region_bytes(const MoeProblem& p) {
  const std::int64_t x = p.num_tokens * p.hidden_size * elem_bytes(p);
  const std::int64_t h = p.num_tokens * p.top_k * p.intermediate_size * 4;
  return std::max(x, h);
}

gv::SmemLayout smem_layout(const MoeProblem& p) {
  gv::SmemLayout L;
  const int P = static_cast<int>(p.num_tokens * p.top_k);
  int at = 0;
  auto take = [&at](int bytes) {
    const int off = at;
    at = (at + bytes + 15) / 16 * 16;
    return off;
  };
  L.slot_e_off = take(P * 4);
  L.sorted_off = take(P * 4);
  L.ue_off = take((P + 1) * 4);
  L.uoff_off = take((P + 2) * 4);
  L.cnt_off = take(static_cast<int>(p.num_experts) * 4);
  L.scratch_off = take((32 + 2 * gv::kMaxSlots) * 4);
  L.region_off = take(static_cast<int>(region_bytes(p)));
  L.bytes = at;
  return L;
}

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = "gemv_sm90: " + msg;
  return false;
}

GemvSupport declined(std::string* why, const std::string& msg) {
  fail(why, msg);
  return GemvSupport{};
}

// ---- the tensor-core variant (kernel_mma_sm90.cuh) ----

// A staged row's pitch: whole 64-byte k-blocks, 64 mod 128 bytes (a quarter warp's 16-byte
// fragment loads from two rows then fall in different banks).
int mma_pitch(std::int64_t bytes) {
  std::int64_t x = (bytes + 63) / 64 * 64;
  if (x % 128 == 0) x += 64;
  return static_cast<int>(x);
}

// The QGMMA form's token tile (gv::kQgTokens rows, K to whole 64-byte k-blocks) in bytes.
std::int64_t qg_tile_bytes(const MoeProblem& p) {
  return std::int64_t{gv::kQgTokens} * ((p.hidden_size + 63) / 64 * 64);
}

// The layout at `grid` CTAs; bytes = 0 when it does not fit (at least one 16-column block per
// GEMM2 pass). `qg`: the region holds the QGMMA form's token tile instead of the padded rows.
gv::SmemLayout mma_smem_layout(const MoeProblem& p, int grid, bool qg = false) {
  gv::SmemLayout L;
  const std::int64_t M = p.num_tokens, P = p.num_tokens * p.top_k;
  const std::int64_t es = elem_bytes(p);
  std::int64_t at = 0;
  auto take = [&at](std::int64_t bytes) {
    const std::int64_t off = at;
    at = (at + bytes + 15) / 16 * 16;
    return static_cast<int>(off);
  };
  L.slot_e_off = take(P * 4);
  L.sorted_off = take(P * 4);
  L.ue_off = take((P + 1) * 4);
  L.uoff_off = take((P + 2) * 4);
  L.cnt_off = take(p.num_experts * 4);
  L.scratch_off = take(64 * 4);
  L.tw_off = take(P * 4);
  L.coef_off = take(P * 4);
  L.gfirst_off = take(P * 4);
  L.gu_off = take(P * 4);
  L.x_pitch = mma_pitch(p.hidden_size * es);
  L.h_pitch = mma_pitch(p.intermediate_size * es);
  L.region_off = take(std::max(qg ? qg_tile_bytes(p) : M * L.x_pitch, P * L.h_pitch));
  const std::int64_t part = std::int64_t{gv::kWarps} * 2 * 16 * 8 * gv::kMmaTokenGroups * 4;
  const std::int64_t cb = (p.hidden_size + 15) / 16;
  const std::int64_t owned = (cb + std::max(grid, 1) - 1) / std::max(grid, 1);
  const std::int64_t avail = gv::kMmaSmemBytes - at;
  const std::int64_t per_block = std::max<std::int64_t>(P, 1) * 16 * 4;  // M = 0 (k >= 1) asks too
  L.cb_pass = static_cast<int>(std::min<std::int64_t>(owned, avail > 0 ? avail / per_block : 0));
  if (L.cb_pass < 1 || part > avail) return gv::SmemLayout{};
  L.work_off = take(std::max(part, per_block * L.cb_pass));
  L.bytes = static_cast<int>(at);
  return L;
}

bool can_implement_mma_kernel(const MoeProblem& p, std::string* why) {
  const std::int64_t P = p.num_tokens * p.top_k;
  // 8-byte w2 rows only in e4m3 (its general instantiation reads them as 8-byte pairs); bf16 /
  // fp16 rows and the staged h rows are read in whole 16-byte chunks.
  if (p.scheme == Scheme::kBf16 && (p.intermediate_size * 2) % 16 != 0) {
    std::ostringstream os;
    os << "N = " << p.intermediate_size << " gives bf16 / fp16 w2 rows of " << p.intermediate_size * 2
       << " bytes: the tensor-core kernel needs 16-byte multiples there (8-byte rows: e4m3 only)";
    return fail(why, os.str());
  }
  if (P > gv::kMmaMaxSlots) {
    std::ostringstream os;
    os << "M*k = " << P << " slots > " << gv::kMmaMaxSlots << " (every CTA routes the call in shared memory)";
    return fail(why, os.str());
  }
  if (mma_smem_layout(p, 1).bytes == 0) {
    std::ostringstream os;
    os << "the staged token rows (" << p.num_tokens << " x " << p.hidden_size << ") or every slot's h (" << P << " x "
       << p.intermediate_size << ") and one 16-column block of slot outputs pass the " << gv::kMmaSmemBytes
       << "-byte shared memory of a CTA: too many tokens for the GEMV path";
    return fail(why, os.str());
  }
  return true;
}

bool can_implement_cuda_kernel(const MoeProblem& p, std::string* why) {
  const std::int64_t P = p.num_tokens * p.top_k;
  if (p.scheme == Scheme::kFp8PerChannel) return fail(why, "fp8_per_channel runs on the tensor-core kernel only");
  if ((p.intermediate_size * elem_bytes(p)) % 16 != 0) {
    std::ostringstream os;
    os << "N = " << p.intermediate_size << " gives w2 rows of " << p.intermediate_size * elem_bytes(p)
       << " bytes: the CUDA-core kernel needs 16-byte multiples";
    return fail(why, os.str());
  }
  if (P > gv::kMaxSlots) {
    std::ostringstream os;
    os << "M*k = " << P << " slots > " << gv::kMaxSlots << " (every CTA routes the call in shared memory)";
    return fail(why, os.str());
  }
  if (region_bytes(p) > gv::kRegionBytes) {
    std::ostringstream os;
    os << "the token rows (" << p.num_tokens * p.hidden_size * elem_bytes(p) << " bytes) or every slot's h ("
       << P * p.intermediate_size * 4 << " bytes) pass the " << gv::kRegionBytes
       << "-byte shared-memory region: too many tokens for the GEMV path";
    return fail(why, os.str());
  }
  return true;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0; }

// Phase timer buffer (set_gemv_phase_buffer; null = off).
std::atomic<std::uint64_t*> g_phase_buffer{nullptr};
std::atomic<int> g_phase_ctas{0};
// Whether the thread's last tensor-core GEMV launch ran GEMM1 in tasks of 32 columns (gemv_last_wide),
// on its decoupled e4m3 form (gemv_last_decoupled).
thread_local bool last_gemv_wide = false;
thread_local bool last_gemv_decoupled = false;
thread_local bool last_gemv_qgmma = false;
thread_local bool last_gemv_warp_route = false;  // gemv_last_warp_route

// GEMM1 tasks of 32 columns (gemv_mma_wide_sm90_kernel) for an fp8 call on the tensor-core
// kernel's plain e4m3 form: where w13 rows are at most 2048 bytes (a 16-column task is then one
// round of two k-blocks a warp, so its per-task sums weigh on every round) and M >= 4. Measured
// twice, same-run (docs/gemv.md, session 31): qwen3-30b TP8 (K = 2048) M = 4, 8, 16 1.04-1.13x,
// M = 2 0.97-0.98x; at K = 4096 and 7168 (qwen3-235b, mixtral, deepseek-v3 TP8) 0.94-1.07x, most
// points lower (half the tasks a CTA: the grid's last CTAs carry a larger share).
// MOEKIT_GEMV_WIDE (read at every call): "1" takes the wide form for every such fp8 call, "0"
// never; unset, the rule. Any other value is an error.
bool gemv_wide(const MoeProblem& p) {
  return detail::env_switch(detail::EnvVar::kGemvWide, p.hidden_size <= 2048 && p.num_tokens >= 4);
}

// GEMM1's units on mbarriers (gemv_mma_decoupled_sm90_kernel: one warp sums a unit while the
// others stream on) for an fp8 call on the tensor-core kernel's plain e4m3 form (not the wide
// one): where w13 rows are at least 4096 bytes and M = 2..8. Same-run A/B on the H200 (session
// 32, docs/gemv.md, TP8 fp8 M = 1..16, every preset): mixtral M = 2, 4 1.095 / 1.110x,
// qwen3-235b M = 4, 8 1.066 / 1.044x, deepseek-v3 M = 2, 4 1.035 / 1.059x, the other M = 2..8
// points at K >= 4096 0.997-1.014x; M = 1 0.978-0.985x at qwen3-235b and deepseek-v3 (mixtral
// 1.023x), qwen3-30b (K = 2048) 0.98-1.02x, M = 16 1.00x. Elsewhere the CTA barriers a unit.
// MOEKIT_GEMV_FP8_DECOUPLED (read at every call): "1" takes the decoupled form for every such
// fp8 call, "0" never; unset, the rule. Any other value is an error.
bool gemv_fp8_decoupled(const MoeProblem& p) {
  return detail::env_switch(detail::EnvVar::kGemvFp8Decoupled,
                            p.hidden_size >= 4096 && p.num_tokens >= 2 && p.num_tokens <= 8);
}

// GEMM1 on wgmma (gemv_mma_qg_sm90_kernel) for an fp8 call on the tensor-core kernel's plain e4m3
// form with M <= gv::kQgTokens whose token tile fits shared memory: where the call has at least
// kQgMinTasksPerCta 16-column tasks a CTA by the bound min(E, M k) x ceil(N / 16) (the touched
// experts are not known on the host). Two same-run A/Bs on the H200 (session 33, docs/gemv.md,
// TP8 fp8 M = 1..16, every preset): mixtral M = 8 1.119 / 1.075x, qwen3-235b M = 16 1.139 /
// 1.096x (about 6 and 8 tasks a CTA); at 1-3 tasks a CTA 0.85-1.05x (M = 1 of deepseek-v3 and
// qwen3-235b 0.85x: a unit is two tasks, so a CTA with one leaves half its warps idle; one task
// a unit with both K halves in one instruction measured 0.93-0.94x there and lost to the pairs
// elsewhere). MOEKIT_GEMV_QGMMA (read at every call): "1" takes it for every such call, "0" never;
// unset, the rule. Any other value is an error.
constexpr std::int64_t kQgMinTasksPerCta = 6;
bool gemv_qgmma(const MoeProblem& p, int sms) {
  const std::int64_t tasks = std::min(p.num_experts, p.num_tokens * p.top_k) * ((p.intermediate_size + 15) / 16);
  const bool on = detail::env_switch(detail::EnvVar::kGemvQgmma, tasks >= kQgMinTasksPerCta * sms);
  return on && p.num_tokens <= gv::kQgTokens;
}

// fp8: hidden's first chunks loaded before the routing (both kernels, every fp8 form:
// GemvParams::hidden_early), so that the dynamic activation scale's pass does not start a DRAM
// round trip after the routing's. The same values and sums: bitwise equal either way.
// MOEKIT_GEMV_HIDDEN_EARLY (read at every call): "0" loads hidden after the routing, as before
// session 34; unset or "1", before it. Any other value is an error.
bool gemv_hidden_early() { return detail::env_switch(detail::EnvVar::kGemvHiddenEarly, true); }

// Calls of at most gv::kWarpRouteSlots slots routed by one warp (both kernels:
// GemvParams::warp_route, prologue.cuh route_warp) instead of the CTA's counts and scan over E: the
// same tables, so the same bits. MOEKIT_GEMV_WARP_ROUTE (read at every call): "0" keeps every call
// on the CTA's routing; unset or "1", the warp's. Any other value is an error.
bool gemv_warp_route() { return detail::env_switch(detail::EnvVar::kGemvWarpRoute, true); }

// Which kernel the thread's last run_gemv_sm90 enqueued (gemv_last_kernel).
thread_local detail::GemvKernel last_gemv_kernel = detail::GemvKernel::kCuda;
thread_local bool last_gemm2_fast = false;

// One kernel's co-residency query and launch, for the call's operand.
struct KernelFns {
  int (*coresident)(int device);
  void (*launch)(const gv::GemvParams& p, int grid, void* stream);
};

// The kernel of `kind` for operand kOp: the tensor-core kernel's general e4m3 instantiation
// (`general`: fp8_per_channel, w2 rows of N % 16 == 8 bytes) or its plain one (kernel_mma_sm90.cuh
// says why); the CUDA-core kernel with GEMM2's one-round form (`fast`) or without.
template <gv::Operand kOp>
KernelFns kernel_fns(detail::GemvKernel kind, bool general, bool fast, bool wide = false, bool decoupled = false,
                     bool qg = false) {
  if (kind == detail::GemvKernel::kMma) {
    if constexpr (kOp == gv::Operand::kE4m3Bf16 || kOp == gv::Operand::kE4m3F16) {
      if (general) return {&gv::gemv_mma_general_max_coresident_ctas<kOp>, &gv::launch_gemv_mma_general_sm90<kOp>};
      if (qg) return {&gv::gemv_mma_qg_max_coresident_ctas<kOp>, &gv::launch_gemv_mma_qg_sm90<kOp>};
      if (wide) return {&gv::gemv_mma_wide_max_coresident_ctas<kOp>, &gv::launch_gemv_mma_wide_sm90<kOp>};
      if (decoupled)
        return {&gv::gemv_mma_decoupled_max_coresident_ctas<kOp>, &gv::launch_gemv_mma_decoupled_sm90<kOp>};
    }
    return {&gv::gemv_mma_max_coresident_ctas<kOp>, &gv::launch_gemv_mma_sm90<kOp>};
  }
  if (fast) return {&gv::gemv_fast_max_coresident_ctas<kOp>, &gv::launch_gemv_fast_sm90<kOp>};
  return {&gv::gemv_max_coresident_ctas<kOp>, &gv::launch_gemv_sm90<kOp>};
}

bool general_e4m3(const MoeProblem& p) {
  return p.scheme != Scheme::kBf16 && (p.scheme == Scheme::kFp8PerChannel || p.intermediate_size % 16 != 0);
}

// `qg`: the plain e4m3 kernel's GEMM1 on wgmma; else `wide`: its 32-column GEMM1 tasks; else
// `decoupled`: its GEMM1 units on mbarriers (fp8, not general; all ignored otherwise).
KernelFns kernel_fns(detail::GemvKernel kind, const MoeProblem& p, bool fast, bool wide = false,
                     bool decoupled = false, bool qg = false) {
  const bool fp8 = p.scheme != Scheme::kBf16, f16 = p.act_dtype == DType::kFp16;
  const bool general = general_e4m3(p);
  if (fp8)
    return f16 ? kernel_fns<gv::Operand::kE4m3F16>(kind, general, fast, wide, decoupled, qg)
               : kernel_fns<gv::Operand::kE4m3Bf16>(kind, general, fast, wide, decoupled, qg);
  return f16 ? kernel_fns<gv::Operand::kF16>(kind, false, fast) : kernel_fns<gv::Operand::kBf16>(kind, false, fast);
}

// MOEKIT_GEMV_ONE_ROUND=0 (read at every call; A/Bs and the bitwise test) keeps every call on the
// plain CUDA-core kernel; unset or 1: gemv_fast_gemm2 decides. Any other value is an error.
bool gemv_one_round_enabled() { return detail::env_switch(detail::EnvVar::kGemvOneRound, true); }

// Where the CUDA-core kernel runs GEMM2 in its one-round form: a task's k x N chunks within one
// round of loads (gv::one_round_chunks_per_lane) and at least gv::kOneRoundMinColumns output
// columns a CTA (K / grid), so that most warps have two or more columns of a token and the next
// one's loads overlap this one's FMAs. Measured at 773e548 (H200, same run, check on): 1.04-1.10x
// on deepseek-v3 and qwen3-235b TP8 (54 and 31 columns a CTA), 0.93-0.96x on qwen3-30b (15) and
// gpt-oss (21), where a warp has one column a token.
bool gemv_fast_gemm2(const MoeProblem& p, int grid) {
  const int es = elem_bytes(p);
  const std::int64_t total = p.top_k * (p.intermediate_size * es / 16);
  return total <= 32 * gv::one_round_chunks_per_lane(es) && p.hidden_size / std::max(grid, 1) >= gv::kOneRoundMinColumns;
}

}  // namespace

GemvSupport gemv_support_sm90(const MoeProblem& p, std::string* why) {
  // fp8 takes the reference's quantization points exactly, as the decode path does: per tensor,
  // static scales as given, a dynamic activation scale from the whole hidden (every CTA reads
  // it), a dynamic intermediate scale from every slot's h (the CTAs' absmaxes, read after the
  // grid barrier). Per channel (the tensor-core kernel only): every CTA takes each token row's
  // scale itself, and after the grid barrier each slot's from its h row. Block scales: declined
  // (not built).
  if (p.scheme != Scheme::kBf16 && p.scheme != Scheme::kFp8PerTensor && p.scheme != Scheme::kFp8PerChannel)
    return declined(why, std::string("scheme ") + scheme_name(p.scheme) +
                             " is not supported (bf16, fp8_per_tensor, fp8_per_channel)");
  if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16)
    return declined(why, std::string("act_dtype must be bf16 or fp16, got ") + dtype_name(p.act_dtype));
  if (p.top_k > gv::kMaxTopK) {
    std::ostringstream os;
    os << "k = " << p.top_k << " > " << gv::kMaxTopK;
    return declined(why, os.str());
  }
  if (p.num_experts < 1 || p.num_experts > gv::kMaxExperts) {
    std::ostringstream os;
    os << "E = " << p.num_experts << ", supported 1.." << gv::kMaxExperts;
    return declined(why, os.str());
  }
  // w13 rows (K elements) of 16-byte multiples; w2 rows (N elements) of 16 (the CUDA-core
  // kernel) or 8 bytes (the tensor-core kernel: fp8 at N % 16 == 8, gpt-oss at TP8).
  const std::int64_t es = elem_bytes(p);
  if ((p.hidden_size * es) % 16 != 0 || (p.intermediate_size * es) % 8 != 0) {
    std::ostringstream os;
    os << "K = " << p.hidden_size << " and N = " << p.intermediate_size
       << " must give 16-byte w13 rows and 8-byte w2 rows";
    return declined(why, os.str());
  }
  if (p.hidden_size * es >= (std::int64_t{1} << 31)) return declined(why, "K too large (32-bit chunk counts)");
  // The CUDA-core kernel and the tensor-core one (when neither can, the reason given is the
  // tensor-core kernel's, the one with the larger limits).
  GemvSupport s;
  s.cuda = can_implement_cuda_kernel(p, nullptr);
  s.mma = can_implement_mma_kernel(p, s.cuda ? nullptr : why);
  return s;
}

bool can_implement_gemv_sm90(const MoeProblem& p, std::string* why) { return gemv_support_sm90(p, why).any(); }

std::size_t gemv_workspace_size(const MoeProblem& p) {
  if (!can_implement_gemv_sm90(p, nullptr)) return 0;
  return gemv_layout(p).total;
}

const char* gemv_last_kernel() {
  switch (last_gemv_kernel) {
    case detail::GemvKernel::kMma: return "mma";
    case detail::GemvKernel::kCuda: break;
  }
  return "cuda";
}

bool gemv_last_gemm2_fast() { return last_gemm2_fast; }
bool gemv_last_wide() { return last_gemv_wide; }
bool gemv_last_decoupled() { return last_gemv_decoupled; }
bool gemv_last_qgmma() { return last_gemv_qgmma; }
bool gemv_last_warp_route() { return last_gemv_warp_route; }

void set_gemv_phase_buffer(std::uint64_t* device_buffer, int max_ctas) {
  g_phase_ctas.store(device_buffer != nullptr ? max_ctas : 0, std::memory_order_release);
  g_phase_buffer.store(device_buffer, std::memory_order_release);
}

void run_gemv_sm90(const detail::MoeCall& call, detail::GemvKernel kind) {
  const MoeProblem& p = call.problem;
  if (p.num_tokens <= 0) return;
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const GemvLayout L = gemv_layout(p);
  if (call.workspace == nullptr || call.workspace_bytes < L.total)
    throw Error(Status::kInvalidArgument, "options.workspace_bytes is " + std::to_string(call.workspace_bytes) +
                                              ", this call needs " + std::to_string(L.total));
  if (!aligned16(call.hidden) || !aligned16(call.out) || !aligned16(call.w13) || !aligned16(call.w2))
    throw Error(Status::kNotSupported, "gemv_sm90: hidden, out, w13 and w2 must be 16-byte aligned (16-byte loads)");
  const bool fp8 = p.scheme != Scheme::kBf16;
  // The kernel the plan chose (DispatchPlan: the router's rule, MOEKIT_GEMV_KERNEL).
  std::string why;
  const bool ok = kind == detail::GemvKernel::kMma ? can_implement_mma_kernel(p, &why) : can_implement_cuda_kernel(p, &why);
  if (!ok) throw Error(Status::kNotSupported, why);
  const bool one_round = gemv_one_round_enabled();  // read (and checked) at every call
  const bool wide_on = gemv_wide(p);                // the same
  const bool decoupled_on = gemv_fp8_decoupled(p);    // the same
  const bool qg_on = gemv_qgmma(p, device_sm_count(dev));  // the same
  const bool hidden_early = gemv_hidden_early();            // the same
  const bool warp_route = gemv_warp_route();                // the same
  // The switches choose among the plain e4m3 kernel's forms (QGMMA first, where its token tile
  // fits); the wide one keeps its barriers.
  const bool plain_e4m3 = kind == detail::GemvKernel::kMma && fp8 && !general_e4m3(p);
  const bool qg = plain_e4m3 && qg_on && mma_smem_layout(p, 1, true).bytes > 0;
  const bool wide = plain_e4m3 && !qg && wide_on;
  const bool decoupled = plain_e4m3 && !qg && !wide && decoupled_on;
  KernelFns fns = kernel_fns(kind, p, false, wide, decoupled, qg);
  // One CTA per SM, all co-resident (a cooperative launch fails rather than deadlock).
  const int coresident = fns.coresident(dev);
  int grid = std::min({device_sm_count(dev), coresident, gv::kMaxCtas});
  bool fast = kind == detail::GemvKernel::kCuda && one_round && gemv_fast_gemm2(p, grid);
  if (fast) {
    const KernelFns f = kernel_fns(kind, p, true);
    const int resident = f.coresident(dev);
    if (resident >= 1) {
      fns = f;
      grid = std::min(grid, resident);
    } else {
      fast = false;  // the plain kernel runs it
    }
  }
  // (The router takes this path only on a device with cooperative launches: plan_call.)
  if (grid < 1) throw Error(Status::kNotSupported, "gemv_sm90: the kernel cannot be resident on device " + std::to_string(dev));

  char* ws = static_cast<char*>(call.workspace);
  const std::int32_t* topk_ids = call.topk_ids;
  const float* topk_weights = call.topk_weights;
  if (p.with_routing) {
    std::int32_t* ids_out =
        call.topk_ids_out != nullptr ? call.topk_ids_out : reinterpret_cast<std::int32_t*>(ws + L.topk_ids);
    float* wts_out = call.topk_weights_out != nullptr ? call.topk_weights_out : reinterpret_cast<float*>(ws + L.topk_weights);
    launch_routing_sm90(route_only_params(call, ids_out, wts_out), call.stream);
    topk_ids = ids_out;
    topk_weights = wts_out;
  }

  gv::GemvParams kp{};
  kp.hidden = call.hidden;
  kp.out = call.out;
  kp.topk_ids = topk_ids;
  kp.topk_weights = topk_weights;
  kp.expert_map = call.expert_map;
  kp.w13 = call.w13;
  kp.w2 = call.w2;
  kp.w13_scale = call.w13_scale;
  kp.w2_scale = call.w2_scale;
  kp.a13_scale = fp8 && p.static_a13_scale ? call.a13_scale : nullptr;
  kp.a2_scale = fp8 && p.static_a2_scale ? call.a2_scale : nullptr;
  kp.b13 = p.has_bias13 ? call.b13 : nullptr;
  kp.b2 = p.has_bias2 ? call.b2 : nullptr;
  kp.h_buf = reinterpret_cast<float*>(ws + L.h_buf);
  kp.faults = device_fault_record(dev);
  kp.num_tokens = static_cast<int>(p.num_tokens);
  kp.top_k = static_cast<int>(p.top_k);
  kp.num_experts = static_cast<int>(p.num_experts);
  kp.num_experts_global = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);
  kp.hidden_size = static_cast<int>(p.hidden_size);
  kp.inter_size = static_cast<int>(p.intermediate_size);
  kp.bias_type = numerics::bias_type_of(p.has_bias13 || p.has_bias2, p.bias_dtype);
  kp.act = p.activation;
  kp.weight_on_input = p.apply_router_weight_on_input ? 1 : 0;
  kp.per_channel = p.scheme == Scheme::kFp8PerChannel ? 1 : 0;
  kp.hidden_early = hidden_early ? 1 : 0;
  kp.warp_route = warp_route && p.num_tokens * p.top_k <= gv::kWarpRouteSlots ? 1 : 0;  // the kernels check P too
  kp.phases = g_phase_buffer.load(std::memory_order_acquire);
  kp.phase_ctas = kp.phases != nullptr ? g_phase_ctas.load(std::memory_order_acquire) : 0;
  kp.smem = kind == detail::GemvKernel::kCuda ? smem_layout(p) : mma_smem_layout(p, grid, qg);
  last_gemv_kernel = kind;
  last_gemm2_fast = fast;
  last_gemv_wide = wide;
  last_gemv_decoupled = decoupled;
  last_gemv_qgmma = qg;
  last_gemv_warp_route = kp.warp_route != 0;
  fns.launch(kp, grid, call.stream);
}

}  // namespace moekit::cuda
