// Tile constants and the shared-memory layout of the per-expert MLP kernel (kernel_sm90.cuh).
#pragma once

#include <cstdint>

namespace moekit::cuda::expert_mlp {

// A unit is (expert e, token tile of up to kBlockM of e's slots): GEMM1 over the expert's whole
// intermediate, the activation, then GEMM2 over all of h's columns, so the unit's h never leaves
// its CTA or cluster. An expert's intermediate of N columns is cut into S = ceil(N / kN) slices of
// kN (the last one shorter, TMA's zeros past N): a unit runs on a thread-block cluster of S CTAs,
// rank r computing slice r of h (GEMM1 over 2 kN weight rows), pushing it into every rank's h
// tile, then GEMM2 over all N columns for output tiles r, r + S, ... (qwen3-30b TP8: N = 96, S = 1,
// no cluster; qwen3-235b TP8: 192, 2; deepseek-v3 TP8: 256, 3).
inline constexpr int kBlockM = 64;
inline constexpr int kN = 96;
inline constexpr int kGateUp = 2 * kN;  // GEMM1's weight rows a unit
inline constexpr int kKBytes = 128;      // a K stage: 64 bf16 / fp16 or 128 e4m3 elements, the swizzle width
inline constexpr int kKElems = 64;       // hidden_size a multiple of it (e4m3: a K stage of 128, the last one half zeros where K % 128 = 64)
inline constexpr int kW13BoxRows = 32;   // w13 TMA box rows: 6 boxes a GEMM1 stage
inline constexpr int kOutTile = 256;     // GEMM2 output columns (hidden) a wgmma tile
inline constexpr int kATileBytes = kBlockM * kKBytes;        // 8 KB of token rows
inline constexpr int kW13TileBytes = kGateUp * kKBytes;      // 24 KB
inline constexpr int kStageBytes = kATileBytes + kW13TileBytes;  // 32 KB; a GEMM2 stage: 256 w2 rows
static_assert(kOutTile * kKBytes == kStageBytes, "GEMM1 and GEMM2 stages are the same size");
inline constexpr int kMaxSlices = 4;                            // S: N at most 384
inline constexpr int kHChunkBytes = kBlockM * kKBytes;          // 8 KB: 64 rows x 128 bytes of h
inline constexpr int kMaxHChunks = kMaxSlices * kN * 2 / kKBytes;  // 6 (16-bit h of 384 columns)
inline constexpr int kStages = 5;
// GEMM1 stages whose w13 boxes go out before the producer waits for the unit's slot list (and, in
// fp8, for hidden's quantization). One: with all five, the first stage's token rows queued behind
// 120 KB of weights and landed 2.3-4.3 µs later (s56 on an H100, qwen3-30b TP8, 0.91-0.97x).
inline constexpr int kAheadStages = 1;
inline constexpr int kConsumerThreads = 128;  // one warpgroup: wgmma over the unit's 64 rows
inline constexpr int kProducerThreads = 32;   // one warp: TMA (lane 0) and the token-row gather
// The warm warp (consume's `warm`): the one-CTA form's first unit run with no effect, ahead of the
// consumers, so the code they run once a unit is in the instruction cache.
inline constexpr int kWarmThreads = 32;
inline constexpr int kThreads = kConsumerThreads + kProducerThreads + kWarmThreads;
// The warm warp's zeros in shared memory, read in place of a unit's biases (2 kN b13, a tile of b2)
// and the warps' absmaxes, which the consumers write later.
inline constexpr int kWarmFloats = 512;
inline constexpr int kConsumerBarrier = 1;    // named barrier of the consumer warpgroup
inline constexpr int kMaxSlots = 4096;        // M x k (slot_e table: 2 bytes a slot)
inline constexpr int kMaxExperts = 1024;
inline constexpr int kSmemLimit = 227 * 1024;

// w2's row pairs (e4m3 with N % 16 = 8, gpt-oss TP8's N = 360): a TMA map's row stride must be a
// multiple of 16 bytes, so w2 [E, K, N] is mapped as [E, K / 2, 2N] (rows of 2N bytes). A GEMM2
// stage holds the tile's 128 even rows (box at x = 128 c) and its 128 odd rows from x = N - 8 +
// 128 c: a box's inner start must be 16-byte aligned too, and the odd rows start at N, 8 bytes off
// it. So the odd rows land shifted by kPairShift bytes and run against h2, a copy of h shifted the
// same way (its first 8 columns zeros, against the even row's last 8 bytes in front of them).
inline constexpr int kPairShift = 8;
inline constexpr int kPairBoxRows = kOutTile / 2;  // 128 w2 rows a box (even or odd rows of a tile)

// How a shard of intermediate size N runs (fp8: e4m3 h and w2, else 16-bit).
struct SliceShape {
  int slices;     // S: the cluster's CTAs, each a kN-column slice of h
  int h_chunks;   // h's 128-byte column chunks: S kN columns, all written every unit
  int g2_chunks;  // GEMM2's K stages a tile: N columns (h and w2 zeros up to the chunk's end)
  int g2_last_steps;  // the wgmma k steps (32 bytes of h a row) of the last stage that reach N: 1..4
  bool pairs;     // w2 as row pairs (e4m3, N % 16 = 8: kPairShift above), h2 beside h
};
constexpr SliceShape slice_shape(int n, bool fp8) {
  const int es = fp8 ? 1 : 2;
  const int slices = (n + kN - 1) / kN;
  const int g2_chunks = (n * es + kKBytes - 1) / kKBytes;
  return SliceShape{slices, (slices * kN * es + kKBytes - 1) / kKBytes, g2_chunks,
                    (n * es + 31) / 32 - 4 * (g2_chunks - 1), fp8 && n % 16 != 0};
}
static_assert(slice_shape(96, false).h_chunks == 2 && slice_shape(96, false).g2_chunks == 2 &&
                  slice_shape(96, false).g2_last_steps == 2 && slice_shape(96, true).g2_last_steps == 3,
              "qwen3-30b TP8: 6 k16 steps (bf16), 3 k32 steps (e4m3)");
static_assert(slice_shape(48, true).g2_last_steps == 2 && slice_shape(192, false).g2_last_steps == 4, "k steps past N");
static_assert(slice_shape(kMaxSlices * kN, false).h_chunks == kMaxHChunks, "h's largest tile");
static_assert(slice_shape(256, true).slices == 3 && slice_shape(256, true).h_chunks == 3 &&
                  slice_shape(256, true).g2_chunks == 2, "deepseek-v3 TP8, e4m3");
// gpt-oss TP8 in e4m3: the odd rows' N + 8 shifted bytes take the same chunks and k steps as N
// (N = 16 a + 8 gives N + 8 = 16 (a + 1), in the same 32-byte step), so GEMM2's loop is the even rows'.
static_assert(slice_shape(360, true).pairs && slice_shape(360, true).slices == 4 &&
                  slice_shape(360, true).g2_chunks == 3 && slice_shape(360, true).g2_last_steps == 4 &&
                  !slice_shape(352, true).pairs && !slice_shape(360, false).pairs,
              "gpt-oss TP8, e4m3 row pairs");

// Byte offsets from the 1024-aligned base of dynamic shared memory.
struct SmemLayout {
  int ring;        // kStages x kStageBytes
  int h;           // h as GEMM2's A: h_chunks x [64 rows][128 B], 128-byte swizzle
  int full_bar;    // uint64 [kStages]: lane 0's expect_tx arrival + 32 gather arrivals
  int empty_bar;   // uint64 [kStages]: the 4 consumer warps
  int slots_bar;   // uint64 [2]: a unit's slot list placed (every consumer thread arrives), by unit parity
  int unit_slot;   // int [2][64]: the unit's slots, by unit parity
  int unit_w;      // float [2][64]: their router weights
  int warp_rows;   // int [4]: place_window's per-warp counts
  int red;         // float [4]: the consumer warps' h absmaxes (fp8, a unit's dynamic scale)
  int cluster_bar; // uint64 [3] (S > 1): h_full, amax (expect_tx + the peers' st.async bytes), h_empty (every rank)
  int red_cluster; // float [2][kMaxSlices] (S > 1): each rank's h absmax, by unit parity; fp8_per_channel
                   // on a cluster [2][kMaxSlices][kBlockM]: each rank's row absmaxes (red_cluster_floats)
  int counts;      // int [E + 1]: slots an expert, then (in place) row offsets
  int prefix;      // int [E + 1]: units of the experts before e
  int slot_e;      // int16 [P]: each slot's local expert (-1: none)
  int scales;      // float [scale_floats] (fp8_per_channel only): w13 scales [2 kN], w2 scales [K padded]
  int bias;        // float [bias_floats] (biases only): the slice's b13 [2 kN], then b2 of the rank's output tiles
  int bias_raw;    // uint32 [bias_floats]: the same as copied (a word of two 16-bit elements or one fp32)
  int bytes;       // total, with 1024 bytes of alignment slack
  int h2;          // w2 row pairs only: h shifted by kPairShift columns, the odd rows' A (same layout),
                   // right after h (last here so the other kernels' parameter offsets stay as they were)
  int warm;        // float [kWarmFloats] where `warm` (the one-CTA form's per-tensor kernels): the warm
                   // warp's zeros (consume's `warm`); none elsewhere (the cluster forms run no warm warp
                   // and gpt-oss fp8's row pairs fill shared memory to within 2 KB at its largest calls)
};

// fp8_per_channel's per-unit scales in shared memory: 2 kN w13 scales, then K w2 scales padded
// to whole output tiles.
constexpr int channel_scale_floats(int hidden_size) {
  return 2 * kN + (hidden_size + kOutTile - 1) / kOutTile * kOutTile;
}

// The biases (gpt-oss) staged in shared memory a unit: the slice's 2 kN b13 values (gate, up; zeros
// past N), then b2 of the rank's output tiles r, r + S, ... (256 columns each, zeros past K), copied
// as raw words before GEMM1 and turned into fp32 after it. At most kMaxBiasFloats a unit: gpt-oss
// TP8 (N = 360 on four ranks, K = 2880: 12 output tiles, 3 a rank) stages 192 + 768.
inline constexpr int kMaxBiasFloats = 1024;
constexpr int bias_tiles_per_rank(int hidden_size, int slices) {
  return ((hidden_size + kOutTile - 1) / kOutTile + slices - 1) / slices;
}
constexpr int bias_floats(int hidden_size, int slices) {
  return 2 * kN + bias_tiles_per_rank(hidden_size, slices) * kOutTile;
}
static_assert(bias_floats(2880, 4) == 960 && bias_floats(2880, 4) <= kMaxBiasFloats, "gpt-oss TP8's biases");

// red_cluster's floats: a unit's h absmax a rank, or (fp8_per_channel on a cluster) a row's a rank,
// by unit parity.
constexpr int red_cluster_floats(bool per_row) { return 2 * kMaxSlices * (per_row ? kBlockM : 1); }

// h_chunks: h's 128-byte column chunks (ceil(S kN x element bytes / 128)).
// scale_floats: fp8_per_channel's per-unit scales (the expert's w13 scales of kN gate and kN up
// columns, then its w2 scales of K output columns, padded to whole 256-column tiles); 0 otherwise.
// row_absmax: fp8_per_channel on a cluster (red_cluster a row's absmax a rank).
// bias_floats: the biases staged a unit (bias_floats()); 0 without biases.
// pairs: w2 as row pairs (SliceShape::pairs): h2 beside h, h_chunks more chunks.
// warm: the warm warp's kWarmFloats (SmemLayout::warm).
constexpr SmemLayout smem_layout(int num_experts, int slots, int h_chunks, int scale_floats = 0,
                                 bool row_absmax = false, int bias_floats = 0, bool pairs = false,
                                 bool warm = false) {
  SmemLayout l{};
  l.ring = 0;
  l.h = kStages * kStageBytes;
  l.h2 = l.h + h_chunks * kHChunkBytes;
  l.full_bar = l.h2 + (pairs ? h_chunks * kHChunkBytes : 0);
  l.empty_bar = l.full_bar + 8 * kStages;
  l.slots_bar = l.empty_bar + 8 * kStages;
  l.unit_slot = l.slots_bar + 16;
  l.unit_w = l.unit_slot + 2 * kBlockM * 4;
  l.warp_rows = l.unit_w + 2 * kBlockM * 4;
  l.red = l.warp_rows + 16;
  l.cluster_bar = l.red + 16;
  l.red_cluster = l.cluster_bar + 24;
  l.counts = l.red_cluster + red_cluster_floats(row_absmax) * 4;
  l.prefix = l.counts + (num_experts + 1) * 4;
  l.slot_e = l.prefix + (num_experts + 1) * 4;
  l.scales = l.slot_e + ((slots * 2 + 15) / 16) * 16;
  l.bias = l.scales + scale_floats * 4;
  l.bias_raw = l.bias + bias_floats * 4;
  l.warm = l.bias_raw + bias_floats * 4;
  l.bytes = l.warm + (warm ? kWarmFloats * 4 : 0) + 1024;
  return l;
}

}  // namespace moekit::cuda::expert_mlp
