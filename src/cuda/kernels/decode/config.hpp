// Tile constants, the shared-memory layout and the tiling choice of the single-launch decode path
// (sm_90a), host-visible: the launcher sizes the grid, the workspace and shared memory from them,
// the kernel lays out its pipeline with them. docs/decode.md describes the design.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace moekit::cuda::decode {

// wgmma's A side is 64 rows: the expert's weight rows (Swap-AB), the tokens on the N side.
inline constexpr int kTileRows = 64;
// A K chunk: 128 bytes of the reduction dimension (64 bf16 or 128 e4m3), the widest box TMA
// writes with the 128-byte swizzle; a 64-row tile of one chunk is 8 KB. GEMM1 fills a tile with
// two 32-row boxes (32 gate rows, then the 32 up rows of the same intermediate columns), so that
// one accumulator tile holds both halves of the activation's input.
inline constexpr int kStageKBytes = 128;
inline constexpr int kTileBytes = kTileRows * kStageKBytes;  // 8 KB
// One pipeline stage: up to 2 consecutive K chunks of one tile (16 KB), so that each barrier
// round trip (wait, 8 wgmma, release) moves 16 KB of weights.
inline constexpr int kChunksPerStage = 2;
inline constexpr int kStageBytes = kChunksPerStage * kTileBytes;  // 16 KB
inline constexpr int kGateUpRows = 32;                         // intermediate columns per GEMM1 tile
// Intermediate columns per work item (an N chunk): GEMM2 reduces over them, two 128-byte stages
// of bf16 or one of e4m3. Four GEMM1 tiles.
inline constexpr int kChunkCols = 128;
inline constexpr int kMaxTilesPerChunk = kChunkCols / kGateUpRows;
// Tokens of one expert per item: wgmma N = 8, 16, 32 or 64 (the smallest that holds them); an
// expert with more tokens than the problem's token limit is cut into several items.
inline constexpr int kMaxTokens = 64;
// Warp 0 lane 0 issues the weight TMAs (warps 1-3 help with the routing prologue, then exit);
// warpgroup 1 runs wgmma and every epilogue.
inline constexpr int kThreads = 256;
inline constexpr int kConsumerThreads = 128;
inline constexpr int kConsumerBarrier = 1;  // named barrier id of warpgroup 1
// Prefetch into L2 at kernel entry (consumer warpgroup, before the routing): the call's token
// rows and router weights, so that the item's token-row loads (and fp8's dynamic activation
// absmax) wait on L2 instead of HBM. fp8 with a dynamic activation scale reads all of hidden
// anyway: all of it, up to kPrefetchLinesAll 128-byte lines; otherwise this rank's K slice of
// every token, up to kPrefetchLines (qwen3-30b TP8 bf16 M = 32, 1024 lines a CTA over 132 CTAs,
// lost 3 % in two same-run A/Bs: the requests queue at L2 beside the first weight loads).
inline constexpr int kPrefetchLines = 256;
inline constexpr int kPrefetchLinesAll = 1024;
// Pipeline depth: 4..12 stages of 16 KB, what the item's other buffers leave of 227 KB. HBM
// latency x per-SM bandwidth is ~40 KB, but at M = 1 on a TP8 shard a CTA's whole item (GEMM1's
// K slice and GEMM2's rows, e.g. 10 stages for qwen3-30b) fits: the producer then issues every
// weight load at once, and GEMM2's tiles land while GEMM1 and the exchange run.
inline constexpr int kMaxStages = 12;
inline constexpr int kMinStages = 4;
inline constexpr int kSmemLimit = 227 * 1024;
// Cluster: the CTAs of one item split GEMM1's reduction (K) and GEMM2's output rows (K) and
// exchange the GEMM1 partial sums through distributed shared memory. 8 is the portable limit.
inline constexpr int kMaxCluster = 8;
// The combine kernel: threads per CTA (4 output columns each) and the partials one thread loads
// before its first add.
inline constexpr int kCombineThreads = 256;
inline constexpr int kCombineBatch = 16;
// Every CTA derives the routing itself: the slot table lives in shared memory.
inline constexpr int kMaxSlots = 4096;   // M * k
// Shared floats after the per-item metadata: [0] the dynamic activation scale, [1] the dynamic
// intermediate scale, [4..7] one partial absmax per consumer warp.
inline constexpr int kScratchFloats = 8;
inline constexpr int kMaxExperts = 1024; // local experts

inline constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
inline constexpr std::int64_t align_to(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Byte offsets from a 1024-aligned base (TMA destinations and swizzle atoms need the alignment).
struct SmemLayout {
  int stages = 0;
  int region_off = 0;  // X tiles [k stages][W][128 B]; aliased by H fp32 [W][kChunkCols] + HB tiles
  int h_off = 0;       // = region_off
  int hb_off = 0;      // GEMM2's B operand: [stages of the chunk][W][128 B]
  int p1_off = 0;      // fp32 [kMaxTilesPerChunk][64 rows][W]: this rank's GEMM1 partial sums
  int slot_e_off = 0;  // int [P]: local expert of each slot, -1 when none
  int sorted_off = 0;  // int [P]: slots grouped by local expert, ascending inside one
  int off_off = 0;     // int [E + 1]: offsets into sorted
  int cur_off = 0;     // int [E]: slots of each local expert
  int prefix_off = 0;  // int [E + 1]: work items of experts < e
  int meta_off = 0;    // per item: int slot[64], float weight[64], xscale[64], hscale[64], int warp_rows[4] (+60 spare);
                       // then float scratch[kScratchFloats] (dynamic fp8 scales, reductions)
  int bs_off = 0;      // fp8_block128 only (else no bytes): the item's block scales,
                       // float ws13[kBlockRowSets][k_chunks_rank] (w13's scales of the item's rows),
                       // then xs[k_chunks_rank][W] (each token's activation scale per K chunk of the rank)
  int bar_off = 0;     // uint64 full[stages], empty[stages], b1, b2
  int bytes = 0;       // total, with 1024 bytes of alignment slack
};

// fp8_block128: the 128-row blocks of w13 one item's GEMM1 rows fall in: the gate rows [n0, n0 +
// 128) lie in one (n0 is a multiple of 128), the up rows [N + n0, N + n0 + 128) in at most two.
inline constexpr int kBlockRowSets = 3;

// Bytes of the fp8_block128 scales of one item (SmemLayout::bs_off) for token width W and
// `k_chunks_rank` K chunks (one 128-wide scale block each) per rank.
inline constexpr std::int64_t block_scale_bytes(int W, int k_chunks_rank) {
  return static_cast<std::int64_t>(k_chunks_rank) * (W + kBlockRowSets) * 4;
}

// The layout for token width W (8..64), `k_chunks_rank` GEMM1 K chunks per rank, P slots, E experts;
// `block_scales`: room for fp8_block128's per-item scales.
inline constexpr SmemLayout smem_layout_with(int W, int k_chunks_rank, std::int64_t P, std::int64_t E,
                                             int elem_bytes, int stages, bool block_scales = false) {
  SmemLayout l{};
  l.stages = stages;
  const std::int64_t x_bytes = static_cast<std::int64_t>(k_chunks_rank) * W * kStageKBytes;
  const std::int64_t h_bytes = align_to(static_cast<std::int64_t>(W) * kChunkCols * 4, 1024);
  const std::int64_t hb_bytes = ceil_div(kChunkCols * elem_bytes, kStageKBytes) * W * kStageKBytes;
  std::int64_t at = static_cast<std::int64_t>(stages) * kStageBytes;
  l.region_off = static_cast<int>(at);
  l.h_off = l.region_off;
  l.hb_off = static_cast<int>(at + h_bytes);
  at += std::max(x_bytes, h_bytes + hb_bytes);
  l.p1_off = static_cast<int>(at);
  at += static_cast<std::int64_t>(kMaxTilesPerChunk) * kTileRows * W * 4;
  l.slot_e_off = static_cast<int>(at);
  at += P * 4;
  l.sorted_off = static_cast<int>(at);
  at += P * 4;
  l.off_off = static_cast<int>(at);
  at += (E + 1) * 4;
  l.cur_off = static_cast<int>(at);
  at += E * 4;
  l.prefix_off = static_cast<int>(at);
  at += (E + 1) * 4;
  l.meta_off = static_cast<int>(align_to(at, 16));
  at = l.meta_off + 5 * kMaxTokens * 4 + kScratchFloats * 4;
  l.bs_off = static_cast<int>(align_to(at, 16));
  if (block_scales) at = l.bs_off + block_scale_bytes(W, k_chunks_rank);
  l.bar_off = static_cast<int>(align_to(at, 8));
  at = l.bar_off + (2 * stages + 2) * 8;
  l.bytes = static_cast<int>(at + 1024);
  return l;
}

// The problem's tiling: cluster size, token width limit and pipeline depth.
struct Tiling {
  int cluster = 1;        // CTAs per item
  int resident = 0;       // clusters of that size resident at once (the persistent grid's size)
  int max_tokens = 0;     // tokens per item (8, 16, 32 or 64); 0: the problem does not fit
  int k_chunks = 0;       // GEMM1 reduction chunks (128 bytes of K each)
  int k_stages = 0;       // their stages (kChunksPerStage chunks each; past K zero-filled)
  int row_tiles = 0;      // GEMM2 output tiles of 64 rows (over K)
  int num_chunks = 0;     // N chunks of kChunkCols
  SmemLayout smem{};
};

// Expected work items set the cluster: of 1, 2, 4, 8 (each rank keeping >= 2 K stages and >= 2
// row tiles), the one whose persistent grid finishes first under a model of rounds x (a fixed
// chain per item + the item's weight bytes per rank at a per-CTA stream rate):
// - rounds = ceil((items + 0.5 sqrt(items)) / resident clusters): above M = 1 the touched experts
//   (so the items) vary around the expectation, and one item past the resident clusters costs a
//   whole round; at M = 1 the count is exact (k x chunks);
// - the fixed chain (kItemFixedUs: routing-derived metadata, token rows, the cluster exchanges,
//   the partial outputs);
// - a CTA streams at kCtaBytesPerUs until the active CTAs share HBM (kHbmBytesPerUs).
// Fitted to the same-run A/B of every forced cluster size (H200, 2026-12-01, TP8 presets, M =
// 1..64, bf16: bench/results/2026-12-01-6434031-h200-decode-cluster-ab.json, docs/decode.md): at
// the points the router sends to decode the choice is within 3.2 % of the fastest size (geomean
// 1.002); the previous model (rounds x (6 µs + bytes at 30 KB/µs per CTA), no spread, no HBM
// share) lost up to 23 % (qwen3-30b M = 2: clusters of 8 for 15.5 expected items, 15 resident).
inline constexpr double kItemFixedUs = 6.0;
inline constexpr double kCtaBytesPerUs = 35000.0;
inline constexpr double kHbmBytesPerUs = 3.6e6;
inline constexpr double kItemSpread = 0.5;

// cluster_slots[i]: clusters of 1 << i CTAs that can be resident at once (-1 or no array:
// unknown, then sm_count >> i; 0: none can be, so that size is not taken). A cluster's CTAs
// share one GPC, so fewer clusters of 8 fit than SMs / 8.
// force_cluster (1, 2, 4 or 8; 0: the model's choice) takes that cluster size when it fits (A/Bs:
// MOEKIT_DECODE_CLUSTER, read by the launcher). block_scales: fp8_block128 (its per-item scales
// take shared memory too).
inline Tiling choose_tiling(std::int64_t M, std::int64_t k, std::int64_t E, std::int64_t K, std::int64_t N,
                            int elem_bytes, double expected_items, int sm_count, const int* cluster_slots = nullptr,
                            int force_cluster = 0, bool block_scales = false) {
  Tiling t;
  t.k_chunks = static_cast<int>(ceil_div(K * elem_bytes, kStageKBytes));
  t.k_stages = static_cast<int>(ceil_div(t.k_chunks, kChunksPerStage));
  t.row_tiles = static_cast<int>(ceil_div(K, kTileRows));
  t.num_chunks = static_cast<int>(ceil_div(N, kChunkCols));
  const double items = expected_items > 1.0 ? expected_items : 1.0;
  const double cols = static_cast<double>(N < kChunkCols ? N : kChunkCols);
  const double item_bytes = 3.0 * cols * static_cast<double>(K) * elem_bytes;  // gate, up, down
  // The layout of a cluster size: the widest token width (64, 32, 16, 8) that fits with the
  // deepest pipeline; max_tokens 0 when none fits.
  const std::int64_t P = M * k;
  // No item holds more tokens than the call has (a token's slots name distinct experts; an item
  // is cut at max_tokens anyway), so the token buffers are sized for at most M rounded up to a
  // wgmma width: at M = 1 the room goes to pipeline stages instead.
  int w_top = 8;
  while (w_top < kMaxTokens && w_top < M) w_top *= 2;
  auto fit = [&](int cluster, int& max_tokens, SmemLayout& layout) {
    max_tokens = 0;
    const int ks_rank = static_cast<int>(ceil_div(t.k_stages, cluster)) * kChunksPerStage;
    for (int W = w_top; W >= 8 && max_tokens == 0; W /= 2) {
      for (int s = kMaxStages; s >= kMinStages; --s) {
        const SmemLayout l = smem_layout_with(W, ks_rank, P, E, elem_bytes, s, block_scales);
        if (l.bytes <= kSmemLimit) {
          max_tokens = W;
          layout = l;
          break;
        }
      }
    }
  };
  double best = 0.0;
  bool found = false;
  for (int cluster = 1; cluster <= kMaxCluster; cluster *= 2) {
    if (cluster > 1 && (t.k_stages < 2 * cluster || t.row_tiles < 2 * cluster)) break;
    int max_tokens = 0;
    SmemLayout layout{};
    fit(cluster, max_tokens, layout);
    if (max_tokens == 0) continue;  // a larger cluster holds less of K per rank: it may fit
    if (force_cluster != 0 && cluster != force_cluster) continue;
    const int log2c = cluster == 1 ? 0 : cluster == 2 ? 1 : cluster == 4 ? 2 : 3;
    const int known = cluster_slots != nullptr ? cluster_slots[log2c] : -1;
    if (known == 0) continue;  // no cluster of this size can be resident on this device
    const int resident = known > 0 ? known : sm_count / cluster;
    const double slots = static_cast<double>(resident > 0 ? resident : 1);
    const double spread = M > 1 ? kItemSpread * std::sqrt(items) : 0.0;
    const double rounds = std::max(1.0, std::ceil((items + spread) / slots - 1e-9));
    const double active_ctas = std::min(items, slots) * cluster;
    const double cta_rate = std::min(kCtaBytesPerUs, kHbmBytesPerUs / active_ctas);
    const double cost = rounds * (kItemFixedUs + item_bytes / cluster / cta_rate);
    if (!found || cost < best * 0.999) {
      found = true;
      best = cost;
      t.cluster = cluster;
      t.resident = resident;
      t.max_tokens = max_tokens;
      t.smem = layout;
    }
  }
  return t;
}

}  // namespace moekit::cuda::decode
