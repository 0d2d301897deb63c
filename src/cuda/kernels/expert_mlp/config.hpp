// Tile constants and the shared-memory layout of the per-expert MLP kernel (kernel_sm90.cuh).
#pragma once

#include <cstdint>

namespace moekit::cuda::expert_mlp {

// A unit is (expert e, token tile of up to kBlockM of e's slots): GEMM1 over the expert's whole
// intermediate (2 kN weight rows), the activation, then GEMM2 over all kN columns of h, so the
// unit's h never leaves its CTA. kN is the one shard width this build takes (qwen3-30b TP8).
inline constexpr int kBlockM = 64;
inline constexpr int kN = 96;
inline constexpr int kGateUp = 2 * kN;  // GEMM1's weight rows a unit
inline constexpr int kKBytes = 128;      // a K stage: 64 bf16 / fp16 or 128 e4m3 elements, the swizzle width
inline constexpr int kKElems = 64;       // ... of the 16-bit operands (hidden_size a multiple of it; e4m3: of 128)
inline constexpr int kW13BoxRows = 32;   // w13 TMA box rows: 6 boxes a GEMM1 stage
inline constexpr int kOutTile = 256;     // GEMM2 output columns (hidden) a wgmma tile
inline constexpr int kATileBytes = kBlockM * kKBytes;        // 8 KB of token rows
inline constexpr int kW13TileBytes = kGateUp * kKBytes;      // 24 KB
inline constexpr int kStageBytes = kATileBytes + kW13TileBytes;  // 32 KB; a GEMM2 stage: 256 w2 rows
static_assert(kOutTile * kKBytes == kStageBytes, "GEMM1 and GEMM2 stages are the same size");
inline constexpr int kH2Chunks = (kN * 2 + kKBytes - 1) / kKBytes;  // h's K chunks in GEMM2: 2 (e4m3: 1)
inline constexpr int kHTileBytes = kH2Chunks * kBlockM * kKBytes;   // 16 KB
inline constexpr int kStages = 5;
inline constexpr int kConsumerThreads = 128;  // one warpgroup: wgmma over the unit's 64 rows
inline constexpr int kProducerThreads = 32;   // one warp: TMA (lane 0) and the token-row gather
inline constexpr int kThreads = kConsumerThreads + kProducerThreads;
inline constexpr int kConsumerBarrier = 1;    // named barrier of the consumer warpgroup
inline constexpr int kMaxSlots = 4096;        // M x k (slot_e table: 2 bytes a slot)
inline constexpr int kMaxExperts = 1024;
inline constexpr int kSmemLimit = 227 * 1024;

// Byte offsets from the 1024-aligned base of dynamic shared memory.
struct SmemLayout {
  int ring;        // kStages x kStageBytes
  int h;           // h as GEMM2's A: kH2Chunks x [64 rows][128 B], 128-byte swizzle
  int full_bar;    // uint64 [kStages]: lane 0's expect_tx arrival + 32 gather arrivals
  int empty_bar;   // uint64 [kStages]: the 4 consumer warps
  int slots_bar;   // uint64 [2]: a unit's slot list placed (consumer thread 0), by unit parity
  int unit_slot;   // int [2][64]: the unit's slots, by unit parity
  int unit_w;      // float [2][64]: their router weights
  int warp_rows;   // int [4]: place_window's per-warp counts
  int red;         // float [4]: the consumer warps' h absmaxes (fp8, a unit's dynamic scale)
  int counts;      // int [E + 1]: slots an expert, then (in place) row offsets
  int prefix;      // int [E + 1]: units of the experts before e
  int slot_e;      // int16 [P]: each slot's local expert (-1: none)
  int bytes;       // total, with 1024 bytes of alignment slack
};

constexpr SmemLayout smem_layout(int num_experts, int slots) {
  SmemLayout l{};
  l.ring = 0;
  l.h = kStages * kStageBytes;
  l.full_bar = l.h + kHTileBytes;
  l.empty_bar = l.full_bar + 8 * kStages;
  l.slots_bar = l.empty_bar + 8 * kStages;
  l.unit_slot = l.slots_bar + 16;
  l.unit_w = l.unit_slot + 2 * kBlockM * 4;
  l.warp_rows = l.unit_w + 2 * kBlockM * 4;
  l.red = l.warp_rows + 16;
  l.counts = l.red + 16;
  l.prefix = l.counts + (num_experts + 1) * 4;
  l.slot_e = l.prefix + (num_experts + 1) * 4;
  l.bytes = l.slot_e + ((slots * 2 + 15) / 16) * 16 + 1024;
  return l;
}

}  // namespace moekit::cuda::expert_mlp
