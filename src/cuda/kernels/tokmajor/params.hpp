// Kernel parameters of the token-major prefill GEMM (sm_90a), built by launch_sm90.cu from
// GroupedGemmParams, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/kernels/gemm_common/kernel_params.hpp"
#include "cuda/kernels/gemm_common/params.hpp"  // OutType
#include "cuda/kernels/tokmajor/config.hpp"     // SmemLayout
#include "moekit/problem.hpp"                   // Activation

namespace moekit::cuda::tokmajor {

// The common fields (gemm_common/kernel_params.hpp; the weight map's box is block_n / 2 rows, two
// boxes a stage), then the epilogue's and the token-major schedule's.
struct KernelParams : gemm_common::WeightMap, gemm_common::TmaGemmParams {
  int out_type;   // OutType
  int out_vec16;  // GEMM2: y rows allow 16-byte stores (n_out * bytes % 16 == 0, out aligned)
  Activation act;
  float alpha;
  float limit;
  int cluster;    // CTAs per cluster, 1 or 2 (weight multicast)
  // Dynamic schedule (cluster 1): units taken in order from this word, zero at launch (see
  // GroupedGemmParams::tile_counter); null: static round-robin.
  std::uint32_t* tile_counter;
  SmemLayout smem;
  // GEMM1 (fp8_per_tensor, fp32 out): GroupedGemmParams::out_absmax, or null. Last, so that the
  // fields before it keep their offsets in every instantiation.
  std::uint32_t* out_absmax;
  // Phase timer (tests only; null = off): per CTA < phase_ctas, kPhaseWords %globaltimer stamps
  // (PhaseWord order) at this launch's slot of the buffer set_tokmajor_phase_buffer gave.
  std::uint64_t* phases;
  int phase_ctas;
  // Dynamic schedule with the lookahead (K-short tiles, kernel_sm90.cuh produce()): consecutive
  // units each atomic on tile_counter takes, 1..kMaxUnitsPerTake (launch_sm90.cu, units_per_take).
  int units_per_take;
  // Early weights (dynamic schedule, cluster 1; launch_sm90.cu, use_early_weights): E x
  // num_col_tiles, else 0. The static first takes' units w are head units, (expert, column tile) =
  // divmod(w, num_col_tiles) and its first token tile (experts without rows included; none past
  // head_units), so that a CTA's first unit, and the weights it loads, is known at the kernel's
  // entry: its first stages' TMA is issued there, before the PDL wait and the expert table. The
  // counter hands out every other unit in the order without head units (kernel_sm90.cuh,
  // find_tile, issue_early_weights).
  int head_units;
  // Routing in the kernel (GroupedGemmParams::route; the kRoute instantiations, GEMM1 only): the
  // call's ids and map, what the kernel writes for GEMM2, and where bad entries are recorded.
  const std::int32_t* route_ids;
  const std::int32_t* route_map;
  int route_experts_global;
  int route_slots;
  std::int32_t* route_offsets_out;
  std::int32_t* route_sorted_slots_out;
  float* route_sorted_weights_out;
  FaultRecord* route_faults;
  // GEMM2's ping-pong form (launch_sm90.cu, MOEKIT_TOKMAJOR_TMA_A): 1 = a unit's 64 A rows come as
  // one TMA box of tmap_a (the sorted rows are contiguous) issued by producer thread 0 with the
  // weights, instead of the producer warpgroup's cp.async row gather; 0 = the gather.
  int a_tma;
  // A [max_rows, a_row_bytes] as a 3D map [1, max_rows, k_dim], box 128 bytes x 64 rows, 128-byte
  // swizzle, zeros past the rows and K (valid where a_tma).
  CUtensorMap tmap_a;
};

// The phase timer's stamps per CTA (KernelParams::phases, ns of %globaltimer; 0 = not reached),
// in the order they happen; the last word counts the units the CTA ran.
enum PhaseWord : int {
  kPhaseEntry = 0,     // thread 0 at the kernel's entry
  kPhaseTable,         // thread 0 once the expert table is built (after the PDL wait)
  kPhaseFirstIssue,    // producer thread 0 once its first unit's row indices landed (before its first TMA);
                       // with early weights, thread 0 at the entry once it issued them (before kPhaseTable)
  kPhaseLastIssue,     // producer thread 0 after its last stage's loads (its loop's end)
  kPhaseFirstLanded,   // consumer thread 0 when its first stage has landed
  kPhaseMmaDone,       // consumer thread 0 when the last unit's MMAs are done (before its epilogue)
  kPhaseEpilogueDone,  // consumer thread 0 after the last unit's epilogue (GEMM1 only)
  kPhaseExit,          // consumer thread 0 after the last epilogue
  kPhaseUnits,         // units this CTA ran
  kPhaseProducerStart, // producer thread 0 past its setmaxnreg
  kPhaseUnitFound,     // producer thread 0 with its first unit found (before its first weight TMA)
  kPhaseConsumerStart, // consumer thread 0 past its setmaxnreg
  kPhaseFirstStore,    // consumer thread 0 after the first chunk of GEMM1's last epilogue
  // The static K-short GEMM2 (kshort/kernel_sm90.cuh) only: sums over consumer warpgroup 0's units
  // of where its thread 0 (warp 0, the warp that runs the epilogue at <= 16 rows a unit) spent
  // the time, and the producer thread's waits for a free stage.
  kPhaseKsTop = 13,    // loop top to past the order barrier (the unit's lookup, row loads, the other warpgroup)
  kPhaseKsData,        // past the order barrier to past the unit's last data wait
  kPhaseKsMma,         // then to its MMAs done and stages released
  kPhaseKsEpilogue,    // then to the epilogue's end
  kPhaseKsFree,        // producer thread 0: waiting for free stages
  kPhaseWords = 24
};

// Launches the kernel instantiation on `stream` with `grid` persistent CTAs (inst/*.cu); with
// `pdl` as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
// kPingPong: GEMM2's ping-pong consumers (kernel_sm90.cuh, consume_pingpong; the launcher picks
// them for K-short, decode-sized GEMM2 calls; inst/tokmajor_sm90_pingpong.cu).
// kRoute: GEMM1 with the routing in the kernel (KernelParams::route_*; kernel_sm90.cuh route_table,
// place_unit_slots; inst/tokmajor_sm90_route.cu).
template <Operand kOp, bool kGateUp, bool kBlock128, bool kPingPong = false, bool kRoute = false>
void run_tokmajor_sm90(const KernelParams& kp, int grid, void* stream, bool pdl);

}  // namespace moekit::cuda::tokmajor
