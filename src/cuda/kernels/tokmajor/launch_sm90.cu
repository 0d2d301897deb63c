// Host side of the token-major prefill GEMM: checks what the kernel supports (can_implement),
// builds the TMA descriptor of the expert weights, sizes the persistent grid and calls the
// instantiation of inst/*.cu. No kernel template is included here.
#include "cuda/kernels/tokmajor/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "core/env.hpp"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/kernels/kshort/launch_sm90.hpp"
#include "cuda/kernels/tokmajor/config.hpp"
#include "cuda/kernels/tokmajor/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using tokmajor::KernelParams;
using gemm_common::ceil_div;
using gemm_common::element_bytes;

bool gate_up_of(const GroupedGemmParams& p) { return p.epilogue == GemmEpilogue::kGateUpActivation; }
bool block128_of(const GroupedGemmParams& p) { return p.scheme == Scheme::kFp8Block128; }

// Output columns of one tile: GEMM1 spends half of the tile's B rows on the up projection.
std::int64_t out_cols(const GroupedGemmParams& p) {
  const int bn = tokmajor::block_n(block128_of(p));
  return gate_up_of(p) ? bn / 2 : bn;
}

// Upper bound of the tiles (expert, column tile, token tile of bm rows) from host-known sizes:
// sum_e ceil(rows_e / bm) <= (experts with rows) + rows / bm.
std::int64_t max_tiles(const GroupedGemmParams& p, int bm = tokmajor::kBlockM) {
  const std::int64_t chunks = std::min<std::int64_t>(p.num_experts, p.max_rows) + p.max_rows / bm;
  return chunks * ceil_div(p.n_out, out_cols(p));
}

// GEMM2's ping-pong consumers (the kPingPong instantiations, inst/tokmajor_sm90_pingpong.cu) where
// the kernel allows them (not block128, cluster 1, the dynamic schedule, K-short tiles:
// num_k_stages < stages) and the call is decode-sized: at most kPingPongMaxRowsPerExpert rows an
// expert on average, so that most experts fit one 64-row unit (more rows per expert would load
// each weight tile once per 64 rows instead of once per 128). MOEKIT_TOKMAJOR_PINGPONG=0 turns
// them off, =1 on wherever allowed.
constexpr std::int64_t kPingPongMaxRowsPerExpert = 64;

bool use_pingpong(const GroupedGemmParams& p, const tokmajor::KernelParams& kp) {
  const bool allowed = !gate_up_of(p) && !block128_of(p) && kp.cluster == 1 && kp.tile_counter != nullptr &&
                       kp.num_k_stages < kp.smem.stages;
  if (!allowed) return false;
  return detail::env_switch(detail::EnvVar::kTokmajorPingpong, p.max_rows <= kPingPongMaxRowsPerExpert * p.num_experts);
}

// Early weights (KernelParams::head_units) where the kernel allows them (cluster 1, the dynamic
// schedule) and the call is decode-sized: at least kEarlyMinRowsPerExpert rows an expert on
// average (a CTA whose first head unit's expert has no rows streams its early stages for nothing;
// the other static head units without rows are passed over, and the counter never hands one out),
// and at most half a token tile (most experts fit one token tile: an expert's later token tiles
// are the counter's, apart from its first, so their weights may come from DRAM again).
// Same-run A/B on the H200 (session 43, docs/perf.md; this rule against off, TP8 M = 16..256,
// every preset, both schemes): fp8 1.020x median (0.997-1.059), bf16 1.006x (1.000-1.029); forced
// on at fewer rows an expert (deepseek-v3, qwen3-235b M = 16) 0.996-1.007x.
// MOEKIT_TOKMAJOR_EARLY=0 turns them off, =1 on wherever allowed.
constexpr std::int64_t kEarlyMinRowsPerExpert = 1;

bool use_early_weights(const GroupedGemmParams& p, const tokmajor::KernelParams& kp, bool pingpong) {
  if (kp.cluster != 1 || kp.tile_counter == nullptr) return false;
  const std::int64_t bm = pingpong ? tokmajor::kPingPongBlockM : tokmajor::kBlockM;
  const bool decode_sized =
      p.max_rows >= kEarlyMinRowsPerExpert * p.num_experts && 2 * p.max_rows <= bm * p.num_experts;
  return detail::env_switch(detail::EnvVar::kTokmajorEarly, decode_sized);
}

// Ping-pong GEMM2s (K-short, decode-sized) of at least 16 units a CTA at most (max_tiles) take 4
// units an atomic (KernelParams::units_per_take) when MOEKIT_TOKMAJOR_TAKE is unset, else 1, and
// run a 5-stage ring (tokmajor::pingpong_layout), else 4.
// Same-run A/B on the H200 (session 32, docs/tokmajor.md; TP8 M = 32..256): take 4 against 1 gave
// qwen3-235b 1.002-1.029x (fp8 1.021-1.029), deepseek-v3 fp8 1.003-1.031x; qwen3-30b (~8 units a
// CTA) 0.993-1.027x, mixed with take 2 as well (0.979-1.024), so it keeps 1; and where units are
// fewer than CTAs (a 4-expert GEMM2 of 64 units on 80 CTAs) take 4 put them all on 16 CTAs and
// the launch took 2x as long (phase timer).
constexpr std::int64_t kManyUnitsPerCta = 16;
constexpr int kTakeUnits = 4;

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = "tokmajor_sm90: " + msg;
  return false;
}

bool aligned(const void* ptr, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0; }

// Phase timer buffer (set_tokmajor_phase_buffer; null = off) and the launches it has left.
std::atomic<std::uint64_t*> g_phase_buffer{nullptr};
std::atomic<int> g_phase_ctas{0};
std::atomic<int> g_phase_next{0};
std::atomic<int> g_phase_launches{0};
// Launches with the routing in the kernel on this thread (tokmajor_route_launches).
thread_local int route_launches = 0;

// "" when p.route is off or the kRoute instantiations take it (kernel_sm90.cuh route_table): GEMM1
// of bf16 / fp16 or fp8_per_tensor gathering token rows, no router weight on the input, at most kRouteMaxSlots
// slots, the slot list beside the expert table in shared memory, and the outputs GEMM2 reads.
std::string route_unsupported_reason(const GroupedGemmParams& p) {
  const GroupedGemmParams::InKernelRouting& r = p.route;
  if (r.ids == nullptr) return "";
  if (!gate_up_of(p)) return "the routing in the kernel is for GEMM1 (gate_up_activation) only";
  if (p.scheme != Scheme::kBf16 && p.scheme != Scheme::kFp8PerTensor)
    return "the routing in the kernel needs scheme bf16 or fp8_per_tensor (no per-row activation scales)";
  if (!p.gather_a_by_token) return "the routing in the kernel needs gather_a_by_token";
  if (p.weight_on_input) return "the routing in the kernel does not apply router weights on the input";
  if (r.slots < 1 || r.slots > tokmajor::kRouteMaxSlots || r.slots > p.max_rows) {
    std::ostringstream os;
    os << "the routing in the kernel takes 1.." << tokmajor::kRouteMaxSlots << " slots (at most max_rows = "
       << p.max_rows << "), got " << r.slots;
    return os.str();
  }
  if (r.experts_global < 1 || (r.expert_map == nullptr && r.experts_global != p.num_experts))
    return "the routing in the kernel needs experts_global (= num_experts without an expert_map)";
  if (r.offsets_out == nullptr || r.sorted_slots_out == nullptr)
    return "the routing in the kernel needs offsets_out and sorted_slots_out";
  if (r.sorted_weights_out != nullptr && p.topk_weights == nullptr)
    return "the routing in the kernel writes sorted_weights_out from topk_weights, which is null";
  const int bytes = tokmajor::smem_layout(false, p.num_experts, false, 0, static_cast<int>(r.slots)).bytes;
  if (bytes > tokmajor::kSmemLimit) {
    std::ostringstream os;
    os << "the routing in the kernel: " << r.slots << " slots and " << p.num_experts
       << " experts need " << bytes << " bytes of shared memory, more than " << tokmajor::kSmemLimit;
    return os.str();
  }
  return "";
}

}  // namespace

bool can_implement_tokmajor_sm90(const GroupedGemmParams& p, std::string* why) {
  const bool gate_up = gate_up_of(p);
  if (!gate_up && p.epilogue != GemmEpilogue::kBiasWeightScatter) return fail(why, "unknown epilogue");
  switch (p.activation.kind) {
    case Activation::kSilu:
    case Activation::kGelu:
    case Activation::kSwigluOai: break;
    default: return fail(why, "unknown activation");
  }
  const std::string common_why = gemm_common::tma_gemm_unsupported_reason(p, tokmajor::kMaxExperts);
  if (!common_why.empty()) return fail(why, common_why);
  const std::int64_t es = element_bytes(p);
  if (p.n_out % 2 != 0) {
    std::ostringstream os;
    os << "n_out = " << p.n_out << " must be even (the epilogue stores pairs of columns)";
    return fail(why, os.str());
  }
  const std::int64_t rows_b = gate_up ? 2 * p.n_out : p.n_out;
  if (p.k_dim >= (std::int64_t{1} << 31) || rows_b >= (std::int64_t{1} << 31) ||
      rows_b * p.k_dim * es >= (std::int64_t{1} << 40))
    return fail(why, "weight tensor too large for a TMA descriptor");
  if (ceil_div(p.k_dim * es, tokmajor::kStageKBytes) >= INT32_MAX) return fail(why, "k_dim too large");
  if (max_tiles(p) >= INT32_MAX) return fail(why, "too many tiles (max_rows too large for this path)");
  if (p.max_rows > 0) {
    const std::uintptr_t out_align = p.out_dtype == DType::kFp32 ? 8 : 4;
    if (!aligned(p.out, out_align)) {
      std::ostringstream os;
      os << "out must be " << out_align << "-byte aligned (pairs of columns are stored together)";
      return fail(why, os.str());
    }
  }
  // GEMM2's y: fp32, or 16-bit in the activation dtype (an e4m3 act_dtype must not pass as 16-bit y).
  if (!gate_up && p.out_dtype != DType::kFp32 &&
      !((p.out_dtype == DType::kBf16 || p.out_dtype == DType::kFp16) && p.out_dtype == p.act_dtype))
    return fail(why, std::string("GEMM2 out_dtype must be fp32 or the activation dtype (") + dtype_name(p.act_dtype) +
                         ", bf16 or fp16), got " + dtype_name(p.out_dtype));
  const std::string route_why = route_unsupported_reason(p);
  if (!route_why.empty()) return fail(why, route_why);
  const std::string device_why = gemm_common::sm90_tma_unsupported_reason();
  if (!device_why.empty()) return fail(why, device_why);
  return true;
}

int tokmajor_default_cluster() {
  const char* v = detail::env_value(detail::EnvVar::kTokmajorCluster);
  if (v == nullptr || v[0] == '\0') return tokmajor::kDefaultCluster;
  if (std::strcmp(v, "1") == 0) return 1;
  if (std::strcmp(v, "2") == 0) return 2;
  throw Error(Status::kInvalidArgument, std::string("MOEKIT_TOKMAJOR_CLUSTER = '") + v + "', expected 1 or 2");
}

bool tokmajor_dynamic_schedule() {
  const char* v = detail::env_value(detail::EnvVar::kTokmajorSchedule);
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "dynamic") == 0) return true;
  if (std::strcmp(v, "static") == 0) return false;
  throw Error(Status::kInvalidArgument, std::string("MOEKIT_TOKMAJOR_SCHEDULE = '") + v + "', expected dynamic or static");
}

// Units the dynamic schedule's atomic takes at once where the producer looks a unit ahead (K-short
// tiles; kernel_sm90.cuh produce()). MOEKIT_TOKMAJOR_TAKE=1..8 (read at every launch) forces it;
// unset, 0: the launcher's rule (kManyUnitsPerCta). Any other value is an error.
int tokmajor_units_per_take() {
  const char* v = detail::env_value(detail::EnvVar::kTokmajorTake);
  if (v == nullptr || v[0] == '\0') return 0;
  if (v[1] == '\0' && v[0] >= '1' && v[0] <= '0' + tokmajor::kMaxUnitsPerTake) return v[0] - '0';
  throw Error(Status::kInvalidArgument, std::string("MOEKIT_TOKMAJOR_TAKE = '") + v + "', expected 1.." +
                                            std::to_string(tokmajor::kMaxUnitsPerTake));
}

void set_tokmajor_phase_buffer(std::uint64_t* device_buffer, int max_ctas, int launches) {
  g_phase_ctas.store(device_buffer != nullptr ? max_ctas : 0, std::memory_order_release);
  g_phase_launches.store(device_buffer != nullptr ? launches : 0, std::memory_order_release);
  g_phase_next.store(0, std::memory_order_release);
  g_phase_buffer.store(device_buffer, std::memory_order_release);
}

int tokmajor_route_launches() { return route_launches; }

bool tokmajor_route_supported(const GroupedGemmParams& p, std::string* why) {
  const std::string route_why = route_unsupported_reason(p);
  return route_why.empty() || fail(why, route_why);
}

void launch_grouped_gemm_tokmajor_sm90(const GroupedGemmParams& p, void* stream) {
  launch_grouped_gemm_tokmajor_sm90(p, stream, 0);
}

void launch_grouped_gemm_tokmajor_sm90(const GroupedGemmParams& p, void* stream, int cluster, bool pdl) {
  if (cluster != 0 && cluster != 1 && cluster != 2) {
    std::ostringstream os;
    os << "tokmajor_sm90: cluster = " << cluster << ", expected 0 (default), 1 or 2";
    throw Error(Status::kInvalidArgument, os.str());
  }
  if (cluster == 0) cluster = tokmajor_default_cluster();
  if (p.max_rows == 0) return;
  std::string why;
  if (!can_implement_tokmajor_sm90(p, &why)) throw Error(Status::kNotSupported, why);

  const bool gate_up = gate_up_of(p);
  const bool block128 = block128_of(p);
  const std::int64_t es = element_bytes(p);
  const std::int64_t rows_b = gate_up ? 2 * p.n_out : p.n_out;
  const int box_rows = tokmajor::block_n(block128) / 2;

  KernelParams kp{};
  kp.num_k_stages = static_cast<int>(ceil_div(p.k_dim * es, tokmajor::kStageKBytes));
  kp.cluster = cluster;
  // The dynamic schedule with one CTA per cluster (a pair of CTAs must take the same unit: the
  // static schedule gives it to them without talking).
  kp.tile_counter = p.tile_counter != nullptr && cluster == 1 && tokmajor_dynamic_schedule() ? p.tile_counter : nullptr;
  const bool route = p.route.ids != nullptr;  // checked by can_implement (GEMM1, bf16 / fp16 / fp8_per_tensor)
  kp.smem = tokmajor::smem_layout(block128, p.num_experts, false, 0, route ? static_cast<int>(p.route.slots) : 0);
  const bool pingpong = use_pingpong(p, kp);
  if (std::uint64_t* buf = g_phase_buffer.load(std::memory_order_acquire)) {
    const int slot = g_phase_next.fetch_add(1, std::memory_order_acq_rel);
    if (slot < g_phase_launches.load(std::memory_order_acquire)) {
      kp.phase_ctas = g_phase_ctas.load(std::memory_order_acquire);
      kp.phases = buf + static_cast<std::int64_t>(slot) * kp.phase_ctas * tokmajor::kPhaseWords;
    }
  }
  // The static K-short GEMM2 (kshort/: contiguous unit ranges, no atomics, one TMA thread) in
  // place of the ping-pong form, or of the two-warpgroup form at 4 K stages, for decode-sized
  // GEMM2s wherever it can run the call (MOEKIT_KSHORT_GEMM2=0 keeps token-major's forms). Asked
  // before this kernel's own weight map is encoded: a GEMM2 it takes costs no work here.
  if (!gate_up && (pingpong || p.max_rows <= kPingPongMaxRowsPerExpert * p.num_experts) &&
      launch_kshort_gemm2_if_wanted(p, stream, pdl, kp.phases, kp.phase_ctas))
    return;

  // Weights [E, rows_b, k_dim], a box of 128 bytes of K by half a tile of rows; the kernel loads
  // two boxes per stage.
  gemm_common::encode_weight_tmap(&kp.tmap_b, p, rows_b, box_rows, "tokmajor_sm90");
  gemm_common::fill_common_fields(kp, p, rows_b, es);
  kp.num_col_tiles = static_cast<int>(ceil_div(p.n_out, out_cols(p)));
  {
    const std::int64_t out_es = p.out_dtype == DType::kFp32 ? 4 : 2;
    kp.out_vec16 = (p.n_out * out_es) % 16 == 0 && aligned(p.out, 16) ? 1 : 0;
  }
  if (route) {
    kp.route_ids = p.route.ids;
    kp.route_map = p.route.expert_map;
    kp.route_experts_global = p.route.experts_global;
    kp.route_slots = static_cast<int>(p.route.slots);
    kp.route_offsets_out = p.route.offsets_out;
    kp.route_sorted_slots_out = p.route.sorted_slots_out;
    kp.route_sorted_weights_out = p.route.sorted_weights_out;
    kp.route_faults = p.route.faults;
  }
  kp.out_absmax = p.out_absmax;  // checked by can_implement (GEMM1, fp8_per_tensor, fp32 out)

  // Persistent grid: one CTA per SM (~200 KB of shared memory each), never more clusters than
  // work units can exist (units <= tiles). The kernel's launcher lowers it to the co-resident
  // clusters.
  const std::int64_t tiles = max_tiles(p, pingpong ? tokmajor::kPingPongBlockM : tokmajor::kBlockM);
  if (tiles == 0) return;
  const int grid = gemm_common::persistent_grid(tiles, cluster, gemm_common::sm_count_of_current_device());
  const bool many_units = pingpong && tiles >= kManyUnitsPerCta * grid;
  const int take = tokmajor_units_per_take();
  kp.units_per_take = take != 0 ? take : (many_units ? kTakeUnits : 1);
  // Ping-pong: 64-row A tiles; 5 stages where units are many a CTA, else 4 as before: a deeper
  // ring lets a CTA take units earlier, which cost qwen3-30b TP8 fp8 (about 8 units a CTA)
  // 1.0-1.4 % at M = 64..256 while qwen3-235b fp8 (16 a CTA) gained 2.3-3.2 %.
  if (pingpong) kp.smem = tokmajor::pingpong_layout(static_cast<int>(p.num_experts), many_units);
  kp.head_units = use_early_weights(p, kp, pingpong) ? static_cast<int>(p.num_experts) * kp.num_col_tiles : 0;
  // The ping-pong A rows by TMA (KernelParams::a_tma): a unit's rows are contiguous sorted rows of
  // A [max_rows, k_dim]. MOEKIT_TOKMAJOR_TMA_A=0 keeps the cp.async gather.
  if (pingpong && !p.gather_a_by_token && detail::env_switch(detail::EnvVar::kTokmajorTmaA, true)) {
    kp.a_tma = 1;
    gemm_common::encode_weight_tmap(&kp.tmap_a, p.a, p.scheme != Scheme::kBf16, p.act_dtype, p.k_dim, p.max_rows,
                                    /*experts=*/1, tokmajor::kPingPongBlockM, "tokmajor_sm90 (A rows)");
  }

  // The inst/ instantiation of this operand, epilogue and scale layout (template arguments); GEMM2's
  // ping-pong form where use_pingpong chose it.
  gemm_common::run_instantiation(p, gate_up, [&](auto op, auto gate_up_c, auto block128_c) {
    constexpr Operand kOp = decltype(op)::value;
    constexpr bool kGateUp = decltype(gate_up_c)::value, kBlock128 = decltype(block128_c)::value;
    if constexpr (!kGateUp && !kBlock128) {
      if (pingpong) {
        tokmajor::run_tokmajor_sm90<kOp, false, false, true>(kp, grid, stream, pdl);
        return;
      }
    }
    if constexpr (kGateUp && !kBlock128) {
      if (route) {
        tokmajor::run_tokmajor_sm90<kOp, true, false, false, true>(kp, grid, stream, pdl);
        ++route_launches;
        return;
      }
    }
    tokmajor::run_tokmajor_sm90<kOp, kGateUp, kBlock128>(kp, grid, stream, pdl);
  });
}

}  // namespace moekit::cuda
