// The per-expert MLP kernel's slicing and shared-memory layout (src/cuda/kernels/expert_mlp/
// config.hpp; the kernel and its host side call the same constexpr functions), host-only: for every
// intermediate size the kernel takes (N = 16..384, a multiple of 16) and both element sizes, the
// cluster's slices cover N, h's tile holds every column a rank pushes and every column GEMM2 reads,
// and the layout's regions are aligned, disjoint and within the shared-memory limit at the largest
// tables the support check lets through.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda/kernels/expert_mlp/config.hpp"

namespace moekit {
namespace {

namespace em = cuda::expert_mlp;

TEST(CpuExpertMlpLayout, SlicesCoverTheIntermediateAndHHoldsWhatIsWrittenAndRead) {
  for (bool fp8 : {false, true}) {
    const int per_chunk = em::kKBytes / (fp8 ? 1 : 2);  // h columns a 128-byte chunk
    for (int n = 16; n <= em::kMaxSlices * em::kN; n += 16) {
      const em::SliceShape sh = em::slice_shape(n, fp8);
      SCOPED_TRACE(testing::Message() << "N=" << n << (fp8 ? " e4m3" : " 16-bit"));
      EXPECT_GE(sh.slices * em::kN, n);                 // the slices cover N
      EXPECT_LT((sh.slices - 1) * em::kN, n);           // and none is empty
      EXPECT_LE(sh.slices, em::kMaxSlices);
      EXPECT_GE(sh.h_chunks * per_chunk, sh.slices * em::kN);  // every pushed column has a place
      EXPECT_GE(sh.g2_chunks * per_chunk, n);           // GEMM2 reads every column of h
      EXPECT_LT((sh.g2_chunks - 1) * per_chunk, n);     // and no chunk past N
      EXPECT_LE(sh.g2_chunks, sh.h_chunks);             // what it reads lies in the tile
      EXPECT_LE(sh.h_chunks, em::kMaxHChunks);
    }
  }
  // The shards it was built for.
  EXPECT_EQ(em::slice_shape(96, false).slices, 1);   // qwen3-30b TP8
  EXPECT_EQ(em::slice_shape(192, false).slices, 2);  // qwen3-235b TP8
  EXPECT_EQ(em::slice_shape(256, true).slices, 3);   // deepseek-v3 TP8
}

TEST(CpuExpertMlpLayout, RegionsAreAlignedDisjointAndFit) {
  for (bool fp8 : {false, true}) {
    for (int n : {16, 96, 192, 256, 352, 384}) {
      const int hc = em::slice_shape(n, fp8).h_chunks;
      for (int E : {1, 7, 128, 256, em::kMaxExperts}) {
        for (int slots : {1, 2048, em::kMaxSlots}) {
          const em::SmemLayout l = em::smem_layout(E, slots, hc);
          SCOPED_TRACE(testing::Message() << "N=" << n << " fp8=" << fp8 << " E=" << E << " slots=" << slots);
          EXPECT_EQ(l.ring % 1024, 0);  // 128-byte swizzled TMA tiles and wgmma operands
          EXPECT_EQ(l.h % 1024, 0);
          for (int bar : {l.full_bar, l.empty_bar, l.slots_bar, l.cluster_bar}) EXPECT_EQ(bar % 8, 0);
          // Regions in order, each ending where the next begins or before.
          const std::vector<std::pair<int, int>> regions = {
              {l.ring, em::kStages * em::kStageBytes},
              {l.h, hc * em::kHChunkBytes},
              {l.full_bar, 8 * em::kStages},
              {l.empty_bar, 8 * em::kStages},
              {l.slots_bar, 16},
              {l.unit_slot, 2 * em::kBlockM * 4},
              {l.unit_w, 2 * em::kBlockM * 4},
              {l.warp_rows, 16},
              {l.red, 16},
              {l.cluster_bar, 24},
              {l.red_cluster, em::red_cluster_floats(false) * 4},
              {l.counts, (E + 1) * 4},
              {l.prefix, (E + 1) * 4},
              {l.slot_e, slots * 2},
          };
          for (std::size_t i = 0; i + 1 < regions.size(); ++i)
            EXPECT_LE(regions[i].first + regions[i].second, regions[i + 1].first) << "region " << i;
          EXPECT_LE(regions.back().first + regions.back().second + 1024, l.bytes);  // alignment slack
        }
      }
    }
  }
  // The largest tables the support check takes still fit with the largest h (16-bit, four slices).
  EXPECT_LE(em::smem_layout(em::kMaxExperts, em::kMaxSlots, em::kMaxHChunks).bytes, em::kSmemLimit);
}

TEST(CpuExpertMlpLayout, PerChannelScalesFollowTheSlotTable) {
  // fp8_per_channel (one CTA a unit, e4m3's one h chunk): the unit's w13 scales (2 kN) and w2
  // scales (K padded to whole 256-column tiles) after slot_e, 4-byte aligned (its 4-byte cp.async;
  // 8 at odd E), inside the layout; qwen3-30b TP8 (K = 2048) fits with the largest tables the
  // support check takes.
  EXPECT_EQ(em::channel_scale_floats(2048), 2 * em::kN + 2048);
  EXPECT_EQ(em::channel_scale_floats(2000), 2 * em::kN + 2048);
  const int hc = em::slice_shape(96, true).h_chunks;
  for (int E : {7, 128}) {
  for (int slots : {1, 2048, em::kMaxSlots}) {
    const int floats = em::channel_scale_floats(2048);
    const em::SmemLayout l = em::smem_layout(E, slots, hc, floats);
    const em::SmemLayout plain = em::smem_layout(E, slots, hc);
    EXPECT_EQ(l.scales % 4, 0);
    EXPECT_GE(l.scales, l.slot_e + slots * 2);
    EXPECT_EQ(l.scales, plain.scales);             // the same regions before it
    EXPECT_EQ(l.bytes, plain.bytes + floats * 4);  // and only its floats more
    EXPECT_LE(l.scales + floats * 4 + 1024, l.bytes);
    // On a cluster its row absmaxes ([2][kMaxSlices][kBlockM] in red_cluster) before the tables:
    // those floats more.
    const em::SmemLayout c = em::smem_layout(E, slots, hc, floats, /*row_absmax=*/true);
    EXPECT_EQ(c.counts, c.red_cluster + em::red_cluster_floats(true) * 4);
    EXPECT_EQ(c.bytes, l.bytes + (em::red_cluster_floats(true) - em::red_cluster_floats(false)) * 4);
    EXPECT_EQ(c.scales % 4, 0);
  }
  }
  EXPECT_LE(em::smem_layout(em::kMaxExperts, em::kMaxSlots, hc, em::channel_scale_floats(2048)).bytes, em::kSmemLimit);
  // The cluster form: qwen3-235b TP8 (N = 192, K = 4096, E = 128) fits with the largest slot table.
  EXPECT_LE(em::smem_layout(128, em::kMaxSlots, em::slice_shape(192, true).h_chunks, em::channel_scale_floats(4096), true)
                .bytes,
            em::kSmemLimit);
}

TEST(CpuExpertMlpLayout, WarmWarpZerosAfterEverythingAndFit) {
  // The one-CTA form's warm warp reads kWarmFloats zeros of its own (SmemLayout::warm): after the
  // raw biases, 4-byte aligned, only where asked for (the cluster forms and fp8_per_channel take
  // none), and the one-CTA form's largest layout fits with them, with and without biases.
  const int hc = em::slice_shape(96, false).h_chunks;
  const em::SmemLayout plain = em::smem_layout(em::kMaxExperts, em::kMaxSlots, hc);
  const em::SmemLayout warm = em::smem_layout(em::kMaxExperts, em::kMaxSlots, hc, 0, false, 0, false, true);
  EXPECT_EQ(warm.warm, plain.warm);
  EXPECT_EQ(warm.warm, warm.bias_raw);  // no biases: right after the (empty) raw biases
  EXPECT_EQ(warm.warm % 4, 0);
  EXPECT_EQ(warm.bytes, plain.bytes + em::kWarmFloats * 4);
  EXPECT_LE(warm.bytes, em::kSmemLimit);
  const int floats = em::bias_floats(768, 1);  // the one-CTA form's largest K with biases (3 tiles)
  EXPECT_LE(floats, em::kMaxBiasFloats);
  const em::SmemLayout biased = em::smem_layout(em::kMaxExperts, em::kMaxSlots, hc, 0, false, floats, false, true);
  EXPECT_EQ(biased.warm, biased.bias_raw + floats * 4);
  EXPECT_LE(biased.bytes, em::kSmemLimit);
  EXPECT_LE(em::smem_layout(em::kMaxExperts, em::kMaxSlots, em::slice_shape(96, true).h_chunks, 0, false, 0, false, true)
                .bytes,
            em::kSmemLimit);
}

TEST(CpuExpertMlpLayout, BiasesFollowTheScalesAndGptOssFits) {
  // The biases (gpt-oss): b13 of the slice (2 kN) and b2 of the rank's output tiles as fp32, then
  // the same count of raw words (their cp.async target), 4-byte aligned after the scales, inside
  // the layout. gpt-oss TP8 (N = 360: four ranks, K = 2880: 12 tiles, 3 a rank) stages 960 floats
  // and fits at 256 tokens x 4 slots in bf16 (h: six 128-byte chunks) and with fp8_per_channel's
  // scales in e4m3.
  EXPECT_EQ(em::bias_tiles_per_rank(2880, 4), 3);
  EXPECT_EQ(em::bias_tiles_per_rank(2048, 1), 8);
  EXPECT_EQ(em::bias_floats(2880, 4), 2 * em::kN + 3 * em::kOutTile);
  EXPECT_GT(em::bias_floats(2048, 1), em::kMaxBiasFloats);  // qwen3-30b's K on one CTA: declined with biases
  const int floats = em::bias_floats(2880, 4);
  for (bool fp8 : {false, true}) {
    const int hc = em::slice_shape(360, fp8).h_chunks;
    const int scales = fp8 ? em::channel_scale_floats(2880) : 0;
    const em::SmemLayout l = em::smem_layout(128, 1024, hc, scales, fp8, floats);
    const em::SmemLayout plain = em::smem_layout(128, 1024, hc, scales, fp8);
    EXPECT_EQ(l.bias, plain.bias);
    EXPECT_EQ(l.bias, l.scales + scales * 4);
    EXPECT_EQ(l.bias_raw, l.bias + floats * 4);
    EXPECT_EQ(l.bias % 4, 0);
    EXPECT_EQ(l.bytes, plain.bytes + 2 * floats * 4);
    EXPECT_LE(l.bytes, em::kSmemLimit) << (fp8 ? "e4m3, per channel" : "bf16");
  }
  EXPECT_EQ(em::slice_shape(360, false).h_chunks, 6);
  EXPECT_EQ(em::slice_shape(360, true).g2_chunks, 3);
  EXPECT_EQ(em::slice_shape(360, true).g2_last_steps, 4);  // 104 bytes in the last chunk: 4 k32 steps
  EXPECT_EQ(em::slice_shape(360, false).g2_last_steps, 3);  // 80 bytes: 3 k16 steps
}

TEST(CpuExpertMlpLayout, RowPairsPutH2AfterHAndGptOssFp8Fits) {
  // e4m3 at N % 16 = 8 (gpt-oss TP8's 360): w2 as row pairs, h2 (h shifted by 8 columns, the odd
  // rows' A) right after h, 1024-aligned, as many chunks; nothing else moves but by h2's size.
  // gpt-oss TP8 fp8_per_tensor with its biases fits at every slot count the kernel takes.
  for (int n : {104, 200, 360, 376}) {
    EXPECT_TRUE(em::slice_shape(n, true).pairs) << n;
    EXPECT_FALSE(em::slice_shape(n, false).pairs) << n;
    EXPECT_FALSE(em::slice_shape(n + 8, true).pairs) << n + 8;
    // The odd rows' N + 8 shifted columns need no more chunks or k steps than N.
    EXPECT_LE(n + em::kPairShift, 32 * (4 * (em::slice_shape(n, true).g2_chunks - 1) + em::slice_shape(n, true).g2_last_steps)) << n;
  }
  const int hc = em::slice_shape(360, true).h_chunks;
  EXPECT_EQ(hc, 3);
  const int floats = em::bias_floats(2880, 4);
  for (int slots : {4, 1024, em::kMaxSlots}) {
    const em::SmemLayout l = em::smem_layout(128, slots, hc, 0, false, floats, /*pairs=*/true);
    const em::SmemLayout plain = em::smem_layout(128, slots, hc, 0, false, floats);
    EXPECT_EQ(l.h2, l.h + hc * em::kHChunkBytes);
    EXPECT_EQ(l.h2 % 1024, 0);
    EXPECT_EQ(l.full_bar, l.h2 + hc * em::kHChunkBytes);
    EXPECT_EQ(l.bytes, plain.bytes + hc * em::kHChunkBytes);
    EXPECT_LE(l.bytes, em::kSmemLimit) << slots;
  }
}

}  // namespace
}  // namespace moekit
