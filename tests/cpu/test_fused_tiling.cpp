// The fused single-launch path's tiling choice (src/cuda/kernels/fused_moe/config.hpp), host-only:
// a GEMM whose weight rows need more than kMaxSplit reduction splits has no tiling, and says so
// with split 0 (can_implement_fused_sm90 declines it). Until session 20 the "nothing fits" tiling
// kept GemmTiling's default split of 1 with 0 tiles, so the check passed and forced path=fused
// ran no GEMM2 at mixtral-8x7b TP1 bf16 (w2 rows of 28,672 bytes): the output was never written
// (moekit-bench's check caught it at M = 128, 256 once the output no longer held an earlier
// path's result).
#include <gtest/gtest.h>

#include "cuda/kernels/fused_moe/config.hpp"

namespace moekit {
namespace {

namespace fm = cuda::fused_moe;

MoeProblem problem(std::int64_t M, std::int64_t N, Scheme scheme) {
  MoeProblem p;
  p.num_tokens = M;
  p.top_k = 2;
  p.num_experts = 8;
  p.hidden_size = 4096;
  p.intermediate_size = N;
  p.scheme = scheme;
  return p;
}

TEST(CpuFusedTiling, RowsPastEightSplitsHaveNoTiling) {
  // mixtral-8x7b TP1 bf16: GEMM2 reduces over N = 14336 (28,672-byte rows); a split holds at most
  // max_range_bytes(rows) <= 2944 bytes, so it needs 10+ splits. GEMM1 (K = 4096, 8 KB rows) fits.
  for (std::int64_t M : {1, 64, 128, 256}) {
    const fm::FusedTiling t = fm::choose_tiling(problem(M, 14336, Scheme::kBf16), 132);
    EXPECT_GT(t.g1.split, 0) << "M = " << M;
    EXPECT_GT(t.g1.tiles, 0) << "M = " << M;
    EXPECT_EQ(t.g2.split, 0) << "M = " << M;
    EXPECT_EQ(t.g2.tiles, 0) << "M = " << M;
  }
  // fp8 halves the rows (14,336 bytes): 5 splits of 2944 bytes at 128 rows.
  const fm::FusedTiling f = fm::choose_tiling(problem(128, 14336, Scheme::kFp8PerTensor), 132);
  EXPECT_GT(f.g2.split, 0);
  EXPECT_LE(f.g2.split, fm::kMaxSplit);
  EXPECT_GT(f.g2.tiles, 0);
  EXPECT_GE(static_cast<std::int64_t>(f.g2.split) * f.g2.range_bytes, 14336);
  // Every tiling it returns covers its rows within the token buffer's range.
  for (std::int64_t N : {96, 768, 1792, 2048, 11776}) {
    const fm::FusedTiling b = fm::choose_tiling(problem(16, N, Scheme::kBf16), 132);
    for (const fm::GemmTiling* g : {&b.g1, &b.g2}) {
      ASSERT_GT(g->split, 0) << "N = " << N;
      EXPECT_LE(g->range_bytes, fm::max_range_bytes(g->rows)) << "N = " << N;
    }
    EXPECT_GE(static_cast<std::int64_t>(b.g2.split) * b.g2.range_bytes, N * 2) << "N = " << N;
  }
}

}  // namespace
}  // namespace moekit
