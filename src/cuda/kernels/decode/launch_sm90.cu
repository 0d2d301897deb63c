// Host side of the single-launch decode path: can_implement, the workspace, the tiling (cluster
// size, token width, pipeline depth), the TMA descriptors and run_decode_sm90, which turns a
// resolved MoeCall into (fused_moe: a routing launch and) the decode launch and the combine
// launch, its programmatic dependent. The kernel instantiations live in inst/.
#include "cuda/kernels/decode/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/env.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/kernels/decode/config.hpp"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/kernels/decode/params.hpp"
#include "cuda/kernels/routing/launch_sm90.hpp"
#include "cuda/numerics/bias.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

namespace dc = decode;

// The partial outputs [M*k, N chunks, K] fp32 live in the workspace: the path declines calls
// whose partials would pass this (the chain's y [M*k, K] is the same order of size at N <= 128).
constexpr std::size_t kMaxPartialBytes = std::size_t{128} << 20;

int elem_bytes(const MoeProblem& p) { return p.scheme == Scheme::kBf16 ? 2 : 1; }

struct DecodeLayout {
  std::size_t topk_ids = 0;      // int32 [P] (fused_moe without caller buffers)
  std::size_t topk_weights = 0;  // fp32 [P]
  std::size_t partials = 0;      // fp32 [P, N chunks, K]
  std::size_t h_buf = 0;         // split (fp8 per tensor with a dynamic intermediate scale, per channel past one N chunk): fp32 [P, N]
  std::size_t h_amax = 0;        // split: fp32 [kMaxAmaxCtas], one per kUp CTA
  std::size_t total = 0;
};

// The split call's kUp grid is one persistent wave, at most one CTA per SM.
constexpr std::size_t kMaxAmaxCtas = 1024;

// fp8 per tensor with a dynamic intermediate scale runs as two launches (params.hpp, Stage), and
// fp8 per channel past one N chunk (a slot's intermediate scale spans its whole h row).
bool split_call(const MoeProblem& p) {
  if (p.scheme == Scheme::kFp8PerChannel) return p.intermediate_size > dc::kChunkCols;
  return p.scheme == Scheme::kFp8PerTensor && !p.static_a2_scale;
}

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

DecodeLayout decode_layout(const MoeProblem& p) {
  DecodeLayout l;
  if (p.num_tokens <= 0) return l;
  const std::size_t M = static_cast<std::size_t>(p.num_tokens);
  const std::size_t P = M * static_cast<std::size_t>(p.top_k);
  const std::size_t nch = static_cast<std::size_t>(dc::ceil_div(p.intermediate_size, dc::kChunkCols));
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t off = at;
    at = align256(at + bytes);
    return off;
  };
  l.topk_ids = take(p.with_routing ? P * 4 : 0);
  l.topk_weights = take(p.with_routing ? P * 4 : 0);
  l.partials = take(P * nch * static_cast<std::size_t>(p.hidden_size) * 4);
  l.h_buf = take(split_call(p) ? P * static_cast<std::size_t>(p.intermediate_size) * 4 : 0);
  l.h_amax = take(split_call(p) ? kMaxAmaxCtas * 4 : 0);
  l.total = at;
  return l;
}

// Resident clusters of 1, 2, 4 and 8 CTAs per device (choose_tiling's cluster_slots): queried
// once per device at its first decode call (cudaOccupancyMaxActiveClusters); -1 = not known (not
// queried yet, or the query failed: asked again next call), which choose_tiling reads as
// sm_count / S. A cluster's CTAs share a GPC: on the H200, 132 SMs hold 15 clusters of 8, not 16.
constexpr int kSlotDevices = 64;
std::atomic<int>& cluster_slot(int device, int i) {
  static std::atomic<int> slots[kSlotDevices][4] = {};  // zero-initialized: 0 means "not queried"
  return slots[device][i];
}

// The cached value as choose_tiling reads it: >0 resident clusters, 0 none can be resident
// (that size is skipped), -1 unknown.
int cached_slots(int device, int i) {
  if (device < 0 || device >= kSlotDevices) return -1;
  const int v = cluster_slot(device, i).load(std::memory_order_acquire);
  return v == 0 ? -1 : v - 1;  // stored +1 so that 0 can mean "not queried"
}

void query_cluster_slots(int device) {
  if (device < 0 || device >= kSlotDevices) return;
  for (int i = 0; i < 4; ++i) {
    if (cluster_slot(device, i).load(std::memory_order_acquire) != 0) continue;
    const int n = dc::decode_max_active_clusters<dc::Operand::kBf16>(1 << i);  // -1 when the query failed
    if (n >= 0) cluster_slot(device, i).store(n + 1, std::memory_order_release);
  }
}

// Expected work items for the cluster choice: touched experts x N chunks x token chunks.
// `device`: whose resident clusters to use (-1: not known, as in can_implement, where only
// whether the problem fits matters); `force`: a cluster size to take where it fits (0: the model's).
dc::Tiling tiling_for(const MoeProblem& p, double touched, int sm_count, int device = -1, int force = 0) {
  int resident[4];
  for (int i = 0; i < 4; ++i) resident[i] = cached_slots(device, i);
  const double slots = static_cast<double>(p.num_tokens * p.top_k);
  const double nch = static_cast<double>(dc::ceil_div(p.intermediate_size, dc::kChunkCols));
  const double tpe = touched > 0 ? slots / touched : slots;
  const double items = std::max(1.0, touched) * nch * std::max(1.0, std::ceil(tpe / dc::kMaxTokens));
  const bool block = p.scheme == Scheme::kFp8Block128;
  dc::Tiling t = dc::choose_tiling(p.num_tokens, p.top_k, p.num_experts, p.hidden_size, p.intermediate_size,
                                   elem_bytes(p), items, sm_count, resident, force, block);
  if (force != 0 && t.max_tokens == 0)  // that size does not fit this problem: the model's choice
    t = dc::choose_tiling(p.num_tokens, p.top_k, p.num_experts, p.hidden_size, p.intermediate_size, elem_bytes(p),
                          items, sm_count, resident, 0, block);
  return t;
}

// Uniform routing's expected touched local experts (the router's estimate), when not given.
double expected_touched(const MoeProblem& p) {
  const double E = static_cast<double>(std::max<std::int64_t>(p.num_experts, 1));
  const double Eg = static_cast<double>(std::max<std::int64_t>(p.has_expert_map ? p.num_experts_global : p.num_experts, 1));
  const double miss = std::max(0.0, 1.0 - static_cast<double>(p.top_k) / Eg);
  return E * (1.0 - std::pow(miss, static_cast<double>(p.num_tokens)));
}

// Phase timer buffer (set_decode_phase_buffer; null = off).
std::atomic<std::uint64_t*> g_phase_buffer{nullptr};
std::atomic<int> g_phase_ctas{0};
// The cluster size of the thread's last launch (decode_last_cluster).
thread_local int last_cluster = 0;

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = "decode_sm90: " + msg;
  return false;
}

}  // namespace

bool can_implement_decode_sm90(const MoeProblem& p, int sm_count, std::string* why) {
  // fp8 takes the reference's quantization points exactly (a different point alone costs ~3.5 %
  // against the reference, docs/decode.md): per tensor, static scales as given, a dynamic
  // activation scale from the whole hidden (every CTA reads it), a dynamic intermediate scale
  // from every slot's h (the split call: kUp, then kDown); block128, the 1x128 groups of the
  // token rows (a K chunk each) and of h (an item's N chunk), all local to an item (one launch);
  // per channel, a token's scale over its whole row of K (each item's tokens, read whole by every
  // rank) and a slot's over its whole h row (local at N <= 128: one launch; else the split call,
  // kChannelDown reading the row from the workspace).
  if (p.scheme != Scheme::kBf16 && p.scheme != Scheme::kFp8PerTensor && p.scheme != Scheme::kFp8PerChannel &&
      p.scheme != Scheme::kFp8Block128)
    return fail(why, std::string("scheme ") + scheme_name(p.scheme) +
                         " is not supported (bf16, fp8_per_tensor, fp8_per_channel, fp8_block128)");
  if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16)
    return fail(why, std::string("act_dtype must be bf16 or fp16, got ") + dtype_name(p.act_dtype));
  const std::int64_t P = p.num_tokens * p.top_k;
  if (P > dc::kMaxSlots) {
    std::ostringstream os;
    os << "M*k = " << P << " slots > " << dc::kMaxSlots << " (every CTA routes the call in shared memory)";
    return fail(why, os.str());
  }
  if (p.top_k > dc::kMaxExperts) {  // the combine kernel's slot bitmask holds kMaxExperts bits
    std::ostringstream os;
    os << "k = " << p.top_k << " > " << dc::kMaxExperts << " slots per token";
    return fail(why, os.str());
  }
  if (p.num_experts < 1 || p.num_experts > dc::kMaxExperts) {
    std::ostringstream os;
    os << "E = " << p.num_experts << ", supported 1.." << dc::kMaxExperts;
    return fail(why, os.str());
  }
  const std::int64_t es = elem_bytes(p);
  if (p.hidden_size % 16 != 0 || (p.intermediate_size * es) % 16 != 0) {
    std::ostringstream os;
    os << "K = " << p.hidden_size << " must be a multiple of 16 and N = " << p.intermediate_size
       << " give 16-byte rows (TMA, 16-byte loads)";
    return fail(why, os.str());
  }
  if (p.hidden_size >= (std::int64_t{1} << 31) || 2 * p.intermediate_size * p.hidden_size * es >= (std::int64_t{1} << 40))
    return fail(why, "weight tensor too large for a TMA descriptor");
  const std::size_t partial_bytes = static_cast<std::size_t>(P) *
                                    static_cast<std::size_t>(dc::ceil_div(p.intermediate_size, dc::kChunkCols)) *
                                    static_cast<std::size_t>(p.hidden_size) * 4;
  if (partial_bytes > kMaxPartialBytes) {
    std::ostringstream os;
    os << "partial outputs of " << (partial_bytes >> 20) << " MiB > " << (kMaxPartialBytes >> 20)
       << " MiB (M*k x ceil(N/128) x K fp32): too many tokens for the decode path";
    return fail(why, os.str());
  }
  const dc::Tiling t = tiling_for(p, expected_touched(p), std::max(1, sm_count));
  if (t.max_tokens == 0) return fail(why, "the problem's tables do not fit in shared memory");
  if (!sm90::encode_tiled_fn()) return fail(why, "cuTensorMapEncodeTiled not available from the driver");
  return true;
}

std::size_t decode_workspace_size(const MoeProblem& p) {
  if (!can_implement_decode_sm90(p, 132, nullptr)) return 0;
  return decode_layout(p).total;
}

int decode_last_cluster() { return last_cluster; }

void set_decode_phase_buffer(std::uint64_t* device_buffer, int max_ctas) {
  g_phase_ctas.store(device_buffer != nullptr ? max_ctas : 0, std::memory_order_release);
  g_phase_buffer.store(device_buffer, std::memory_order_release);
}

void run_decode_sm90(const detail::MoeCall& call, double touched) {
  const MoeProblem& p = call.problem;
  if (p.num_tokens <= 0) return;
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const int sms = device_sm_count(dev);  // once per device
  query_cluster_slots(dev);
  // can_implement_decode_sm90 ran in the router (a plan takes this path only when it passed);
  // the tiling below throws when the problem does not fit.
  const DecodeLayout L = decode_layout(p);
  if (call.workspace == nullptr || call.workspace_bytes < L.total)
    throw Error(Status::kInvalidArgument, "options.workspace_bytes is " + std::to_string(call.workspace_bytes) +
                                              ", this call needs " + std::to_string(L.total));
  char* ws = static_cast<char*>(call.workspace);
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  const bool fp8 = p.scheme != Scheme::kBf16;
  const std::int64_t M = p.num_tokens, k = p.top_k, E = p.num_experts;
  const std::int64_t K = p.hidden_size, N = p.intermediate_size;
  const int Eg = static_cast<int>(p.has_expert_map ? p.num_experts_global : p.num_experts);

  dc::DecodeParams kp{};
  // MOEKIT_DECODE_CLUSTER=1|2|4|8 forces the cluster size where it fits (A/Bs of the cost model in
  // one process; read at every launch); anything else leaves the model's choice.
  int force = 0;
  if (const char* v = detail::env_value(detail::EnvVar::kDecodeCluster)) {
    const int c = std::atoi(v);
    if (c == 1 || c == 2 || c == 4 || c == 8) force = c;
  }
  kp.tiling = tiling_for(p, touched > 0 ? touched : expected_touched(p), sms, dev, force);
  if (kp.tiling.max_tokens == 0)
    throw Error(Status::kNotSupported, "decode_sm90: the problem's tables do not fit in shared memory at cluster " +
                                           std::to_string(kp.tiling.cluster));
  gemm_common::encode_weight_tmap(&kp.tmap_w13, call.w13, fp8, p.act_dtype, K, 2 * N, E, dc::kGateUpRows,
                                  "decode_sm90 (w13)");
  gemm_common::encode_weight_tmap(&kp.tmap_w2, call.w2, fp8, p.act_dtype, N, K, E, dc::kTileRows, "decode_sm90 (w2)");

  // fused_moe: the routing kernel writes topk_ids / topk_weights first (route only).
  const std::int32_t* topk_ids = call.topk_ids;
  const float* topk_weights = call.topk_weights;
  if (p.with_routing) {
    std::int32_t* ids_out =
        call.topk_ids_out != nullptr ? call.topk_ids_out : reinterpret_cast<std::int32_t*>(ws + L.topk_ids);
    float* wts_out = call.topk_weights_out != nullptr ? call.topk_weights_out : reinterpret_cast<float*>(ws + L.topk_weights);
    const RoutingParams rp = route_only_params(call, ids_out, wts_out);
    launch_routing_sm90(rp, call.stream);
    topk_ids = ids_out;
    topk_weights = wts_out;
  }

  kp.hidden = call.hidden;
  kp.out = call.out;
  kp.topk_ids = topk_ids;
  kp.topk_weights = topk_weights;
  kp.expert_map = call.expert_map;
  kp.w13_scale = call.w13_scale;
  kp.w2_scale = call.w2_scale;
  kp.a13_scale = p.scheme == Scheme::kFp8PerTensor && p.static_a13_scale ? call.a13_scale : nullptr;
  kp.a2_scale = p.scheme == Scheme::kFp8PerTensor && p.static_a2_scale ? call.a2_scale : nullptr;
  kp.b13 = p.has_bias13 ? call.b13 : nullptr;
  kp.b2 = p.has_bias2 ? call.b2 : nullptr;
  kp.partials = reinterpret_cast<float*>(ws + L.partials);
  const bool split = split_call(p);
  kp.h_buf = split ? reinterpret_cast<float*>(ws + L.h_buf) : nullptr;
  kp.h_amax = split ? reinterpret_cast<float*>(ws + L.h_amax) : nullptr;
  kp.faults = device_fault_record(dev);
  kp.phases = g_phase_buffer.load(std::memory_order_acquire);
  kp.phase_ctas = kp.phases != nullptr ? g_phase_ctas.load(std::memory_order_acquire) : 0;
  kp.num_tokens = static_cast<int>(M);
  kp.top_k = static_cast<int>(k);
  kp.num_experts = static_cast<int>(E);
  kp.num_experts_global = Eg;
  kp.hidden_size = static_cast<int>(K);
  kp.inter_size = static_cast<int>(N);
  kp.bias_type = numerics::bias_type_of(p.has_bias13 || p.has_bias2, p.bias_dtype);
  kp.act = p.activation;
  kp.weight_on_input = p.apply_router_weight_on_input ? 1 : 0;

  // Persistent grid: one CTA per SM (~200 KB of shared memory each), as many clusters of S as
  // can be resident at once (a cluster launched later would start only when one ends), never
  // more than work items can exist: sum_e ceil(rows_e / W) <= min(E, P) + P / W, times chunks.
  const std::int64_t P = M * k;
  const dc::Tiling& T = kp.tiling;
  const std::int64_t items = (std::min<std::int64_t>(E, P) + P / T.max_tokens) * T.num_chunks;
  const std::int64_t clusters = std::max<std::int64_t>(1, std::min<std::int64_t>(items, T.resident));
  const int grid = static_cast<int>(clusters * T.cluster);
  kp.amax_ctas = grid;
  if (split && static_cast<std::size_t>(grid) > kMaxAmaxCtas)
    throw Error(Status::kInternal, "decode_sm90: a grid of " + std::to_string(grid) + " CTAs > " +
                                       std::to_string(kMaxAmaxCtas) + " absmax slots of the split call");

  // MOEKIT_DECODE_WIDE=1 launches the instantiation that holds every token width instead of the
  // one of the tiling's max_tokens (A/Bs of the narrow kernels; read at every launch).
  const char* wide_env = detail::env_value(detail::EnvVar::kDecodeWide);
  const bool wide = wide_env != nullptr && wide_env[0] == '1';
  const bool f16 = p.act_dtype == DType::kFp16;
  last_cluster = T.cluster;
  if (p.scheme == Scheme::kFp8Block128) {
    if (f16) dc::launch_decode_block128_sm90<dc::Operand::kE4m3F16>(kp, grid, stream, wide);
    else dc::launch_decode_block128_sm90<dc::Operand::kE4m3Bf16>(kp, grid, stream, wide);
  } else if (p.scheme == Scheme::kFp8PerChannel) {
    // One kChannel launch at one N chunk, else kChannelUp + kChannelDown (split_call).
    if (f16) dc::launch_decode_channel_sm90<dc::Operand::kE4m3F16>(kp, grid, stream, wide);
    else dc::launch_decode_channel_sm90<dc::Operand::kE4m3Bf16>(kp, grid, stream, wide);
  } else if (split) {
    // kDown runs on kUp's tiling and grid. (Its own tiling on the SMs kUp leaves free, so that
    // all of it streams w2 while kUp runs, measured slower: docs/decode.md.)
    if (f16) dc::launch_decode_split_sm90<dc::Operand::kE4m3F16>(kp, grid, stream, wide);
    else dc::launch_decode_split_sm90<dc::Operand::kE4m3Bf16>(kp, grid, stream, wide);
  } else if (fp8) {
    if (f16) dc::launch_decode_sm90<dc::Operand::kE4m3F16>(kp, grid, stream, wide);
    else dc::launch_decode_sm90<dc::Operand::kE4m3Bf16>(kp, grid, stream, wide);
  } else if (f16) {
    dc::launch_decode_sm90<dc::Operand::kF16>(kp, grid, stream, wide);
  } else {
    dc::launch_decode_sm90<dc::Operand::kBf16>(kp, grid, stream, wide);
  }
}

}  // namespace moekit::cuda
