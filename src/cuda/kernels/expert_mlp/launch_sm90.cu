// Host side of the per-expert MLP kernel: what it supports, the weights' TMA descriptors, the
// shared-memory layout and the persistent grid. No kernel template is included here.
#include "cuda/kernels/expert_mlp/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/env.hpp"

#include "cuda/kernels/expert_mlp/config.hpp"
#include "cuda/kernels/expert_mlp/params.hpp"
#include "cuda/common/check.cuh"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/numerics/bias.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

thread_local int launches = 0;
thread_local int plain_launches = 0;  // of which on the kPlain kernel
std::atomic<std::uint64_t*> g_phase_buffer{nullptr};  // the phase timer (tests only)
std::atomic<int> g_phase_ctas{0};

// The schemes the kernel runs on e4m3 weights (its e4m3 instantiations).
bool fp8_scheme(Scheme s) { return s == Scheme::kFp8PerTensor || s == Scheme::kFp8PerChannel; }

// Floats of biases staged a unit (expert_mlp::bias_floats), 0 without biases.
int bias_floats_of(const MoeProblem& p) {
  if (!p.has_bias13 && !p.has_bias2) return 0;
  const expert_mlp::SliceShape sh = expert_mlp::slice_shape(static_cast<int>(p.intermediate_size), fp8_scheme(p.scheme));
  return expert_mlp::bias_floats(static_cast<int>(p.hidden_size), sh.slices);
}

// The kernel's shared memory for `p` (supported shapes).
expert_mlp::SmemLayout smem_of(const MoeProblem& p) {
  using namespace expert_mlp;
  const bool channel = p.scheme == Scheme::kFp8PerChannel;
  const SliceShape sh = slice_shape(static_cast<int>(p.intermediate_size), fp8_scheme(p.scheme));
  const int scale_floats = channel ? channel_scale_floats(static_cast<int>(p.hidden_size)) : 0;
  // The warm warp's zeros where it runs: the one-CTA form's per-tensor and 16-bit kernels (whether
  // or not MOEKIT_EXPERT_MLP_WARM_ACT turns it off, so the shapes a call takes do not depend on it).
  return smem_layout(static_cast<int>(p.num_experts), static_cast<int>(p.num_tokens * p.top_k), sh.h_chunks,
                     scale_floats, channel && sh.slices > 1, bias_floats_of(p), sh.pairs, sh.slices == 1 && !channel);
}

}  // namespace

// Whether the kernel can run `p`; where not, the reason goes to `why` when given (a call that
// does not print the router's reason builds no string).
bool expert_mlp_supported(const MoeProblem& p, std::string* why) {
  using namespace expert_mlp;
  const auto fail = [why](const char* msg, std::int64_t v = -1) {
    if (why != nullptr) *why = std::string("expert_mlp: ") + msg + (v >= 0 ? std::to_string(v) : std::string());
    return false;
  };
  const bool channel = p.scheme == Scheme::kFp8PerChannel;
  const bool fp8 = fp8_scheme(p.scheme);
  if (p.scheme != Scheme::kBf16 && !fp8) return fail("bf16, fp8_per_tensor or fp8_per_channel scheme only");
  if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16) return fail("bf16 or fp16 activations only");
  if (p.with_routing) return fail("fused_experts calls only (routing given as ids)");
  if (p.intermediate_size < 16 || p.intermediate_size > kMaxSlices * kN || p.intermediate_size % 8 != 0)
    return fail("intermediate_size must be a multiple of 8 from 16 up to ", kMaxSlices * kN);
  // w2's TMA map strides its rows of N elements, which must be a multiple of 16 bytes. gpt-oss TP8's
  // e4m3 rows of 360 bytes are not: the per-tensor cluster form maps them as row pairs (the odd rows
  // 8 bytes early against h shifted by 8 columns, config.hpp kPairShift); fp8_per_channel and the
  // one-CTA form (N <= 96) have no such form.
  if (fp8 && p.intermediate_size % 16 != 0) {
    if (channel)
      return fail("fp8_per_channel: e4m3 w2 rows of N bytes must be a multiple of 16 (no row-pair form): N = ",
                  p.intermediate_size);
    if (p.intermediate_size <= kN)
      return fail("e4m3 w2 rows of N bytes must be a multiple of 16 at N <= 96 (row pairs on clusters only): N = ",
                  p.intermediate_size);
  }
  // A K stage is 128 bytes (64 16-bit or 128 e4m3 elements); e4m3's last stage may be half zeros.
  if (p.hidden_size < kKElems || p.hidden_size % kKElems != 0)
    return fail("hidden_size must be a positive multiple of ", kKElems);
  if (p.hidden_size >= (std::int64_t{1} << 24)) return fail("hidden_size too large");
  if (bias_floats_of(p) > kMaxBiasFloats)
    return fail("biases: at most 3 of GEMM2's 256-column output tiles a CTA (ceil(hidden_size / 256) / ceil(N / 96)), have ",
                bias_tiles_per_rank(static_cast<int>(p.hidden_size),
                                    slice_shape(static_cast<int>(p.intermediate_size), fp8).slices));
  if (p.num_tokens * p.top_k > kMaxSlots) return fail("slots (M x k) at most ", kMaxSlots);
  if (p.num_experts > kMaxExperts) return fail("local experts at most ", kMaxExperts);
  if (smem_of(p).bytes > kSmemLimit)
    return fail(channel ? "the routing tables and the per-channel scales do not fit in shared memory"
                        : "the routing tables do not fit in shared memory");
  const std::string device = gemm_common::sm90_tma_unsupported_reason();
  if (!device.empty()) {
    if (why != nullptr) *why = "expert_mlp: " + device;
    return false;
  }
  return true;
}

namespace {

// MOEKIT_EXPERT_MLP_EVICT_FIRST=1: the weights' TMA with an L2 evict-first hint (branch s55-next,
// for its A/B); unset or 0: without; anything else an error.
bool evict_first() { return detail::env_switch(detail::EnvVar::kExpertMlpEvictFirst, expert_mlp::kEvictFirstDefault); }

// MOEKIT_EXPERT_MLP_LEAN_GATHER=0: the producer's predicated gather of all 16 rows a lane every
// stage (the form before session 62, for the A/B); unset or 1: the lean gather; anything else an error.
bool lean_gather() { return detail::env_switch(detail::EnvVar::kExpertMlpLeanGather, expert_mlp::kLeanGatherDefault); }

// MOEKIT_EXPERT_MLP_AHEAD_NEXT=0: every unit of a CTA issues kAheadStages stages' w13 boxes before
// its slot list, as its first does (the form before session 71, for the A/B); unset or 1: the units
// after the first issue a whole ring's; anything else an error.
bool ahead_next() { return detail::env_switch(detail::EnvVar::kExpertMlpAheadNext, expert_mlp::kAheadNextDefault); }

// A GEMM1 stage's w13 tile as two TMA boxes over both planes (gate and up rows 0..63, then 64..95)
// in place of six 32-row boxes of one plane, the same bytes in the same places: a bare ring streams
// 52.5 GB/s a CTA with six boxes a stage against 75.7 with three (docs/perf.md "Session 75"), and
// the kernel ran 1.08-1.20x faster at TP8 M <= 2 and up to 1.16x at qwen3-30b TP8 M <= 8, ~1.0x where
// HBM-bound ("Session 76"). MOEKIT_EXPERT_MLP_TWO_BOXES=0: six (the A/B); unset or 1: two; anything
// else an error.
bool two_boxes() { return detail::env_switch(detail::EnvVar::kExpertMlpTwoBoxes, expert_mlp::kTwoBoxesDefault); }

// The one-CTA form's warm warp runs the CTA's first unit through the consumers' code with no effect
// right after the routing (consume's `warm`), so the activation and GEMM2's epilogue after GEMM1 run
// from the instruction cache: cold, they took 3-7 and 3-5 µs a unit at qwen3-30b TP8, warm ~1.2
// and ~1.8; 1.020x median at qwen3-30b TP8 M = 4..256, up to 1.065x (docs/perf.md "Session 76").
// The same bits. MOEKIT_EXPERT_MLP_WARM_ACT=0: the warm warp returns at once (the A/B); unset or 1:
// on; anything else an error.
bool warm_act() { return detail::env_switch(detail::EnvVar::kExpertMlpWarmAct, expert_mlp::kWarmActDefault); }

// The one-CTA form's GEMM2 as Swap-AB (gemm2_swap_tile: the tile's w2 rows as A, the unit's first
// 8 / 16 token rows of h as B) in place of m64n256 over 64 rows of which a decode unit fills 1-8,
// for units of up to kG2SwapRows rows (16-bit 8, e4m3 16); bf16, fp16 and fp8_per_tensor
// (fp8_per_channel keeps the m64n256 form). The same bits either way. Unset or 1: on (A/B at
// qwen3-30b-a3b TP8 on an H100, docs/perf.md "Session 77"); MOEKIT_EXPERT_MLP_G2_SWAP=0: off;
// anything else an error.
bool g2_swap() { return detail::env_switch(detail::EnvVar::kExpertMlpG2Swap, expert_mlp::kG2SwapDefault); }

// The per-tensor calls with the common features (silu, no biases, the router weight on the output,
// every switch above at its default) on the kPlain kernels (one CTA and cluster), whose features are
// compile-time constants (params.hpp plain_call; kernel_sm90.cuh ExpertMlp): the same instructions on that call's
// path without the code of the others beside them. MOEKIT_EXPERT_MLP_PLAIN=0: the general kernel
// (the A/B); unset or 1: on; anything else an error.
bool plain() { return detail::env_switch(detail::EnvVar::kExpertMlpPlain, true); }

// fp8_per_channel's calls with those features on the kChannel kPlain kernels (one CTA and cluster).
// Prepared in session 83, when the general kChannel kernel ran 0.900x of its 2f78ff0 build at
// qwen3-30b TP8 (docs/perf.md "Session 83"), and not yet run on a GPU: off by default
// (params.hpp kPlainChannelDefault). MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1: on; unset or 0: off;
// anything else an error.
bool plain_channel() {
  return detail::env_switch(detail::EnvVar::kExpertMlpPlainChannel, expert_mlp::kPlainChannelDefault);
}

// Clusters of `slices` CTAs of the kernel for (fp8, act) resident at once on the current device,
// at the kernel's largest shared memory (one CTA an SM): cudaOccupancyMaxActiveClusters, asked once
// a device and shape. A GPC's SM count need not be a multiple of S, so it can be below SMs / S.
// Where none fits (-1 in the cache) every later call throws at once: the router reads this at
// every call of the cluster form's shapes (expert_mlp_resident_clusters), which must not repeat
// the occupancy query a call.
int expert_mlp_max_clusters(int slices, bool fp8, DType act) {
  using namespace expert_mlp;
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices][kMaxSlices + 1][3];  // zero-initialized (static): not asked yet
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const int op = fp8 ? 2 : act == DType::kFp16 ? 1 : 0;
  std::atomic<int>* slot = dev >= 0 && dev < kDevices ? &cached[dev][slices][op] : nullptr;
  int n = slot != nullptr ? slot->load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    n = fp8 ? max_active_clusters_sm90<Operand::kE4m3>(slices)
            : act == DType::kFp16 ? max_active_clusters_sm90<Operand::kF16>(slices)
                                  : max_active_clusters_sm90<Operand::kBf16>(slices);
    if (n < 1) n = -1;
    if (slot != nullptr) slot->store(n, std::memory_order_relaxed);
  }
  if (n < 1)
    throw Error(Status::kNotSupported, "expert_mlp: no cluster of " + std::to_string(slices) +
                                           " CTAs fits on this device");
  return n;
}

}  // namespace

void expert_mlp_check_launchable(const MoeProblem& p) {
  const bool fp8 = fp8_scheme(p.scheme);
  (void)evict_first();  // throws on a bad value
  (void)lean_gather();
  (void)ahead_next();
  (void)two_boxes();
  (void)warm_act();
  (void)g2_swap();
  (void)plain();
  (void)plain_channel();
  const expert_mlp::SliceShape sh = expert_mlp::slice_shape(static_cast<int>(p.intermediate_size), fp8);
  if (sh.slices > 1) (void)expert_mlp_max_clusters(sh.slices, fp8, p.act_dtype);  // throws where none fits
}

int expert_mlp_resident_clusters(const MoeProblem& p) noexcept {
  try {
    const bool fp8 = fp8_scheme(p.scheme);
    const expert_mlp::SliceShape sh = expert_mlp::slice_shape(static_cast<int>(p.intermediate_size), fp8);
    if (sh.slices < 2 || sh.slices > expert_mlp::kMaxSlices) return 0;
    return expert_mlp_max_clusters(sh.slices, fp8, p.act_dtype);
  } catch (...) {
    return 0;
  }
}

int expert_mlp_launches() { return launches; }
int expert_mlp_plain_launches() { return plain_launches; }

void set_expert_mlp_phase_buffer(std::uint64_t* device_buffer, int max_ctas) {
  g_phase_ctas.store(device_buffer != nullptr ? max_ctas : 0, std::memory_order_relaxed);
  g_phase_buffer.store(device_buffer, std::memory_order_release);
}

bool expert_mlp_pointers_ok(const void* hidden, const void* w13, const void* w2, const void* b13, const void* b2) {
  const auto aligned = [](const void* q, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(q) % a == 0; };
  return aligned(hidden, 16) && aligned(w13, 16) && aligned(w2, 16) && aligned(b13, 4) && aligned(b2, 4);
}

void launch_expert_mlp_sm90(const ExpertMlpArgs& a, void* stream) {
  using namespace expert_mlp;
  const MoeProblem& p = a.problem;
  std::string why;
  if (!expert_mlp_supported(p, &why)) throw Error(Status::kNotSupported, why);
  if (!expert_mlp_pointers_ok(a.hidden, a.w13, a.w2, a.b13, a.b2))
    throw Error(Status::kNotSupported, "expert_mlp: hidden, w13 and w2 must be 16-byte aligned, the biases 4-byte");
  const std::int64_t P = p.num_tokens * p.top_k;
  if (P == 0) return;
  const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
  const bool channel = p.scheme == Scheme::kFp8PerChannel;
  const bool fp8 = fp8_scheme(p.scheme);
  KernelParams kp{};
  // w13 as 2E planes of N rows (gate, up), so a slice's rows past N are TMA's zeros; two_boxes: boxes
  // of 64 and 32 rows over both planes of an expert (gate rows, then the same up rows).
  kp.two_boxes = two_boxes() ? 1 : 0;
  if (kp.two_boxes != 0) {
    gemm_common::encode_weight_tmap(&kp.tmap_w13, a.w13, fp8, p.act_dtype, K, N, 2 * E, 2 * kW13BoxRows,
                                    "expert_mlp_sm90 (w13, 64-row boxes)", 2);
    gemm_common::encode_weight_tmap(&kp.tmap_w13b, a.w13, fp8, p.act_dtype, K, N, 2 * E, kW13BoxRows,
                                    "expert_mlp_sm90 (w13, 32-row boxes)", 2);
  } else {
    gemm_common::encode_weight_tmap(&kp.tmap_w13, a.w13, fp8, p.act_dtype, K, N, 2 * E, kW13BoxRows,
                                    "expert_mlp_sm90 (w13)");
  }
  // w2 as [E, K, N], or as [E, K / 2, 2N] row pairs where e4m3 rows of N bytes are no multiple of 16.
  const SliceShape sh = slice_shape(static_cast<int>(N), fp8);
  kp.w2_pairs = sh.pairs ? 1 : 0;
  if (sh.pairs)
    gemm_common::encode_weight_tmap(&kp.tmap_w2, a.w2, fp8, p.act_dtype, 2 * N, K / 2, E, kPairBoxRows,
                                    "expert_mlp_sm90 (w2 row pairs)");
  else
    gemm_common::encode_weight_tmap(&kp.tmap_w2, a.w2, fp8, p.act_dtype, N, K, E, kOutTile, "expert_mlp_sm90 (w2)");
  kp.hidden = a.hidden;
  kp.topk_ids = a.topk_ids;
  kp.expert_map = a.expert_map;
  kp.topk_weights = a.topk_weights;
  kp.b13 = p.has_bias13 ? a.b13 : nullptr;
  kp.b2 = p.has_bias2 ? a.b2 : nullptr;
  if ((p.has_bias13 && a.b13 == nullptr) || (p.has_bias2 && a.b2 == nullptr))
    throw Error(Status::kInvalidArgument, "expert_mlp: the problem has biases and none was given");
  kp.bias_type = numerics::bias_type_of(p.has_bias13 || p.has_bias2, p.bias_dtype);
  kp.y = a.y;
  kp.faults = a.faults;
  kp.slots = static_cast<int>(P);
  kp.top_k = static_cast<int>(p.top_k);
  kp.num_experts = static_cast<int>(E);
  kp.num_experts_global = static_cast<int>(p.has_expert_map ? p.num_experts_global : E);
  kp.hidden_size = static_cast<int>(K);
  kp.k_stages = static_cast<int>((K * (fp8 ? 1 : 2) + kKBytes - 1) / kKBytes);
  kp.out_tiles = static_cast<int>((K + kOutTile - 1) / kOutTile);
  kp.slices = sh.slices;
  kp.h_chunks = sh.h_chunks;
  kp.g2_chunks = sh.g2_chunks;
  kp.g2_last_steps = sh.g2_last_steps;
  kp.bias_tiles = bias_tiles_per_rank(static_cast<int>(K), sh.slices);
  kp.weight_on_input = p.apply_router_weight_on_input ? 1 : 0;
  kp.y_f16 = p.act_dtype == DType::kFp16 ? 1 : 0;
  kp.evict_first = evict_first() ? 1 : 0;
  kp.lean_gather = lean_gather() ? 1 : 0;
  kp.ahead_next = ahead_next() ? 1 : 0;
  kp.warm_act = warm_act() ? 1 : 0;
  kp.g2_swap = g2_swap() ? 1 : 0;
  kp.plain = plain() ? 1 : 0;
  kp.plain_channel = plain_channel() ? 1 : 0;
  kp.a_scale = a.a_scale;
  kp.w13_scale = a.w13_scale;
  kp.w2_scale = a.w2_scale;
  kp.a2_scale = channel ? nullptr : a.a2_scale;
  kp.n_cols = static_cast<int>(N);
  if (fp8 && (a.a_scale == nullptr || a.w13_scale == nullptr || a.w2_scale == nullptr))
    throw Error(Status::kInvalidArgument, std::string("expert_mlp: ") + scheme_name(p.scheme) +
                                              " needs hidden's and the weights' scales");
  kp.act = p.activation.kind;
  kp.alpha = p.activation.alpha;
  kp.limit = p.activation.limit;
  kp.smem = smem_of(p);
  kp.phases = g_phase_buffer.load(std::memory_order_acquire);
  kp.phase_ctas = kp.phases != nullptr ? g_phase_ctas.load(std::memory_order_relaxed) : 0;
  // Units: sum over experts of ceil(rows / 64) <= min(E, P) + P / 64; one CTA an SM at most, a
  // cluster of S CTAs a unit (as many clusters as fit at once: persistent).
  const std::int64_t max_units = std::min(E, P) + P / kBlockM;
  const int clusters = sh.slices == 1 ? gemm_common::sm_count_of_current_device()
                                      : expert_mlp_max_clusters(sh.slices, fp8, p.act_dtype);
  const int grid = sh.slices * static_cast<int>(std::min<std::int64_t>(max_units, clusters));
  // The timed instantiation only while a test set a phase buffer.
  const bool timed = kp.phases != nullptr;
  bool plain = false;  // a kPlain kernel ran it (run_expert_mlp_sm90 picks)
  if (channel) {
    if (timed) plain = expert_mlp::run_expert_mlp_sm90<Operand::kE4m3, true, true>(kp, grid, stream, a.pdl);
    else plain = expert_mlp::run_expert_mlp_sm90<Operand::kE4m3, false, true>(kp, grid, stream, a.pdl);
  } else if (fp8) {
    if (timed) plain = expert_mlp::run_expert_mlp_sm90<Operand::kE4m3, true>(kp, grid, stream, a.pdl);
    else plain = expert_mlp::run_expert_mlp_sm90<Operand::kE4m3, false>(kp, grid, stream, a.pdl);
  } else if (p.act_dtype == DType::kFp16) {
    if (timed) plain = expert_mlp::run_expert_mlp_sm90<Operand::kF16, true>(kp, grid, stream, a.pdl);
    else plain = expert_mlp::run_expert_mlp_sm90<Operand::kF16, false>(kp, grid, stream, a.pdl);
  } else {
    if (timed) plain = expert_mlp::run_expert_mlp_sm90<Operand::kBf16, true>(kp, grid, stream, a.pdl);
    else plain = expert_mlp::run_expert_mlp_sm90<Operand::kBf16, false>(kp, grid, stream, a.pdl);
  }
  ++launches;
  if (plain) ++plain_launches;
}

}  // namespace moekit::cuda
