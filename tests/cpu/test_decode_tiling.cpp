// The decode path's tiling choice (src/cuda/kernels/decode/config.hpp), host-only: the cluster size
// from the resident clusters, the pipeline depth that holds a whole M = 1 item, the forced
// cluster of MOEKIT_DECODE_CLUSTER A/Bs.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/kernels/decode/config.hpp"

namespace moekit {
namespace {

namespace dc = cuda::decode;

// Resident clusters of 1, 2, 4, 8 CTAs on the H200 (cudaOccupancyMaxActiveClusters, measured
// 2026-12-01: a cluster's CTAs share a GPC, so 15 clusters of 8 rather than 16).
constexpr int kH200Slots[4] = {132, 66, 30, 15};

TEST(CpuDecodeTiling, Qwen3Tp8OneTokenHoldsTheWholeItemInFlight) {
  // qwen3-30b-a3b TP8: K = 2048, N = 96, bf16; M = 1, k = 8: 8 items.
  const dc::Tiling t = dc::choose_tiling(1, 8, 128, 2048, 96, 2, 8.0, 132, kH200Slots);
  EXPECT_EQ(t.cluster, 8);
  EXPECT_EQ(t.resident, 15);
  EXPECT_EQ(t.max_tokens, 8);  // token buffers sized for M, not 64
  EXPECT_EQ(t.smem.stages, dc::kMaxStages);
  EXPECT_LE(t.smem.bytes, dc::kSmemLimit);
  // A rank's item: 3 GEMM1 tiles x 2 K stages + 4 GEMM2 row tiles = 10 stages, all in flight.
  const int tiles1 = 96 / dc::kGateUpRows;
  const int item_stages = tiles1 * static_cast<int>(dc::ceil_div(t.k_stages, t.cluster)) +
                          static_cast<int>(dc::ceil_div(t.row_tiles, t.cluster));
  EXPECT_EQ(item_stages, 10);
  EXPECT_LE(item_stages, t.smem.stages);
}

TEST(CpuDecodeTiling, UnknownResidencyFallsBackToSmsOverClusterSize) {
  const dc::Tiling t = dc::choose_tiling(1, 8, 128, 2048, 96, 2, 8.0, 132);
  EXPECT_EQ(t.resident, 132 / t.cluster);
}

TEST(CpuDecodeTiling, ForcedClusterIsTakenWhereItFits) {
  const dc::Tiling t4 = dc::choose_tiling(1, 8, 128, 2048, 96, 2, 8.0, 132, kH200Slots, 4);
  EXPECT_EQ(t4.cluster, 4);
  EXPECT_EQ(t4.resident, 30);
  EXPECT_GT(t4.max_tokens, 0);
  // K = 256 bf16: 2 K stages, too few to split over more than one rank (each keeps >= 2): a
  // forced 8 finds no tiling (the launcher then takes the model's choice, cluster 1).
  const dc::Tiling t8 = dc::choose_tiling(1, 8, 128, 256, 96, 2, 8.0, 132, kH200Slots, 8);
  EXPECT_EQ(t8.max_tokens, 0);
  const dc::Tiling model = dc::choose_tiling(1, 8, 128, 256, 96, 2, 8.0, 132, kH200Slots);
  EXPECT_EQ(model.cluster, 1);
  EXPECT_GT(model.max_tokens, 0);
}

TEST(CpuDecodeTiling, AClusterSizeThatCannotBeResidentIsSkipped) {
  // A device that holds no cluster of 8 (an MPS limit, say): the model's M = 1 choice, 8, is
  // skipped; -1 (not known) falls back to SMs / size.
  const int no_eights[4] = {132, 66, 30, 0};
  const dc::Tiling t = dc::choose_tiling(1, 8, 128, 2048, 96, 2, 8.0, 132, no_eights);
  EXPECT_NE(t.cluster, 8);
  EXPECT_GT(t.max_tokens, 0);
  const int unknown[4] = {-1, -1, -1, -1};
  const dc::Tiling u = dc::choose_tiling(1, 8, 128, 2048, 96, 2, 8.0, 132, unknown);
  EXPECT_EQ(u.resident, 132 / u.cluster);
}

// The cluster the model picks for a TP8 preset shard at M tokens (bf16), with the launcher's
// expected items: uniformly touched experts x N chunks.
int model_cluster(std::int64_t M, std::int64_t k, std::int64_t E, std::int64_t K, std::int64_t N) {
  const double touched = static_cast<double>(E) * (1.0 - std::pow(1.0 - static_cast<double>(k) / E, static_cast<double>(M)));
  const double items = touched * static_cast<double>(dc::ceil_div(N, dc::kChunkCols));
  return dc::choose_tiling(M, k, E, K, N, 2, items, 132, kH200Slots).cluster;
}

TEST(CpuDecodeTiling, ClusterChoiceMatchesTheMeasuredFastest) {
  // The fastest forced cluster size per point, same-run A/B on the H200 (2026-12-01,
  // bench/results/2026-12-01-6434031-h200-decode-cluster-ab.json): where it beat the next size by
  // more than 3 %, the model must pick it.
  EXPECT_EQ(model_cluster(1, 8, 128, 2048, 96), 8);   // qwen3-30b: 17.8 µs (c4 21.6)
  EXPECT_EQ(model_cluster(2, 8, 128, 2048, 96), 4);   // 21.6 (c8 26.7: 15.5 items, 15 resident)
  EXPECT_EQ(model_cluster(4, 8, 128, 2048, 96), 2);   // 31.3 (c4 36.6)
  EXPECT_EQ(model_cluster(16, 8, 128, 2048, 96), 1);  // 50.1 (c2 60.2)
  EXPECT_EQ(model_cluster(1, 8, 256, 7168, 256), 4);  // deepseek-v3: 45.1 (c8 58.7: 16 items)
  EXPECT_EQ(model_cluster(2, 8, 256, 7168, 256), 2);  // 73.1 (c8 84.9)
  EXPECT_EQ(model_cluster(4, 8, 256, 7168, 256), 2);  // 109.9 (c1 146.7)
  EXPECT_EQ(model_cluster(2, 8, 128, 4096, 192), 2);  // qwen3-235b: 48.2 (c8 51.7)
  EXPECT_EQ(model_cluster(1, 4, 128, 2880, 360), 8);  // gpt-oss-120b: 27.9 (c4 35.1)
  EXPECT_EQ(model_cluster(2, 4, 128, 2880, 360), 4);  // 40.6 (c8 44.5)
}

}  // namespace
}  // namespace moekit
