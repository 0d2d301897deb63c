// The static K-short GEMM2's schedule and ring depth (src/cuda/kernels/kshort/config.hpp; the
// kernel calls the same constexpr functions), host-only: over random routings, the CTAs' unit
// ranges partition the units in near-equal contiguous shares, and the units decode to every
// (expert, token tile, column tile) of the routed rows exactly once; the ring is deeper than a
// unit and fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/kernels/kshort/config.hpp"

namespace moekit {
namespace {

namespace ks = cuda::kshort;

TEST(CpuKshortSchedule, RangesPartitionTheUnitsAndDecodeEachTileOnce) {
  std::mt19937 rng(46);
  for (int trial = 0; trial < 300; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 300);
    const int col_tiles = 1 + static_cast<int>(rng() % 30);
    const int ctas = 1 + static_cast<int>(rng() % 132);
    const int max_rows_per_expert = trial % 3 == 0 ? 8 : trial % 3 == 1 ? 70 : 300;
    std::vector<int> rows(E), off(E + 1, 0), prefix(E + 1, 0);
    for (int e = 0; e < E; ++e) {
      rows[e] = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % (max_rows_per_expert + 1));
      off[e + 1] = off[e] + rows[e];
      prefix[e + 1] = prefix[e] + ks::units_of(rows[e], col_tiles);
    }
    const int units = prefix[E];
    // The ranges: contiguous, in CTA order, covering [0, units), sizes within one of each other.
    int next = 0, smallest = units + 1, largest = -1;
    for (int b = 0; b < ctas; ++b) {
      const ks::UnitRange r = ks::unit_range(units, b, ctas);
      ASSERT_EQ(r.lo, next) << "trial " << trial << " cta " << b;
      ASSERT_LE(r.lo, r.hi);
      smallest = std::min(smallest, r.hi - r.lo);
      largest = std::max(largest, r.hi - r.lo);
      next = r.hi;
    }
    EXPECT_EQ(next, units) << "trial " << trial;
    EXPECT_LE(largest - smallest, 1) << "trial " << trial;
    // Every unit: its expert (the last whose prefix is <= u, as the kernel's search finds), its
    // tile and column, a live row count; every (expert, tile, column) exactly once.
    std::set<std::tuple<int, int, int>> seen;
    for (int u = 0; u < units; ++u) {
      const int e = static_cast<int>(std::upper_bound(prefix.begin(), prefix.end(), u) - prefix.begin()) - 1;
      ASSERT_GE(e, 0);
      ASSERT_LT(e, E);
      ASSERT_GT(rows[e], 0) << "a unit of an expert without rows";
      const ks::UnitPos at = ks::unit_pos(u - prefix[e], col_tiles);
      ASSERT_GE(at.col, 0);
      ASSERT_LT(at.col, col_tiles);
      const int row_begin = off[e] + at.tile * ks::kBlockM;
      const int count = std::min(ks::kBlockM, off[e + 1] - row_begin);
      ASSERT_GE(count, 1) << "trial " << trial << " unit " << u;
      EXPECT_TRUE(seen.emplace(e, at.tile, at.col).second);
    }
    int expected = 0;
    for (int e = 0; e < E; ++e) expected += (rows[e] + ks::kBlockM - 1) / ks::kBlockM * col_tiles;
    EXPECT_EQ(static_cast<int>(seen.size()), expected);
  }
}

TEST(CpuKshortSchedule, RingIsDeeperThanAUnitAndFits) {
  for (int k_blocks = 1; k_blocks <= ks::kMaxKBlocks; ++k_blocks) {
    int last_fit = 0;
    for (int E = 1; E <= ks::kMaxExperts; ++E) {
      const int s = ks::stages_for(E, k_blocks);
      if (s == 0) continue;
      last_fit = E;
      EXPECT_GT(s, k_blocks) << "E " << E;
      EXPECT_LE(s, ks::kMaxStages);
      EXPECT_LE(ks::smem_layout(E, s).bytes, ks::kSmemLimit) << "E " << E;
      // The layout's barriers and table are 8-byte aligned.
      EXPECT_EQ(ks::smem_layout(E, s).full_bar_off % 8, 0);
      EXPECT_EQ(ks::smem_layout(E, s).table_off % 8, 0);
      // The epilogue stores from the accumulators (no staging area): the 5-stage ring fits beside
      // every table, four K stages a unit included.
      EXPECT_EQ(s, ks::kMaxStages) << "E " << E;
    }
    EXPECT_EQ(last_fit, ks::kMaxExperts) << "k_blocks " << k_blocks;
  }
  EXPECT_EQ(ks::stages_for(128, 2), ks::kMaxStages);  // qwen3-30b / qwen3-235b TP8
}

}  // namespace
}  // namespace moekit
