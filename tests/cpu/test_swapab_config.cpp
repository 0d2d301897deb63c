// Swap-AB's host-visible configuration (src/cuda/kernels/swapab/config.hpp), host-only: the
// balanced-wave cluster count (KernelParams::balance) that the kernel computes on the device.
#include <gtest/gtest.h>

#include "cuda/kernels/swapab/config.hpp"

namespace moekit {
namespace {

namespace sw = cuda::swapab;

TEST(CpuSwapAbConfig, BalancedClustersGiveEveryBusyClusterTheSameItems) {
  // The H200's 132 SMs: 180 items (gpt-oss-120b TP1 M = 1: 4 experts x 45 tiles) -> 90 of two.
  EXPECT_EQ(sw::balanced_clusters(180, 132), 90);
  EXPECT_EQ(sw::balanced_clusters(315, 132), 105);  // three each
  EXPECT_EQ(sw::balanced_clusters(264, 132), 132);  // exactly two waves: every cluster
  EXPECT_EQ(sw::balanced_clusters(265, 132), 89);   // one past two waves: three each
  EXPECT_EQ(sw::balanced_clusters(132, 132), 132);
  EXPECT_EQ(sw::balanced_clusters(40, 132), 40);    // fewer items than clusters: one each
  EXPECT_EQ(sw::balanced_clusters(180, 66), 60);    // split-K clusters of two: three each
  // Nothing to balance: the grid as it is.
  EXPECT_EQ(sw::balanced_clusters(0, 132), 132);
  EXPECT_EQ(sw::balanced_clusters(7, 0), 0);
  // Every case: the busy clusters hold every item, none holds more than ceil(items / clusters),
  // and one fewer cluster could not hold them at that count.
  for (int clusters : {1, 2, 15, 30, 66, 132}) {
    for (int items = 1; items <= 5 * clusters + 3; ++items) {
      const int per = (items + clusters - 1) / clusters;
      const int busy = sw::balanced_clusters(items, clusters);
      ASSERT_GE(busy, 1);
      ASSERT_LE(busy, clusters);
      EXPECT_GE(busy * per, items) << items << " items on " << clusters;
      EXPECT_LT((busy - 1) * per, items) << items << " items on " << clusters;
    }
  }
}

}  // namespace
}  // namespace moekit
