// Sizing constants of the routing + permutation kernels (host-visible): when the permutation
// leaves the single CTA and how large the multi-CTA count table is (the workspace reserves it:
// cuda/workspace.hpp), and the CTA shapes the launcher sizes grids and shared memory with.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace moekit::cuda {

// Above this many slots (M*k) the permutation runs on a grid (a count launch, then a scatter
// launch) instead of one CTA. 1024 = 128 tokens x k = 8: one chunk of the one-CTA path (the
// 1024-thread CTA), so every decode-sized call (and fused_moe's one-launch routing of up to 128
// tokens at k = 8) keeps the single CTA. Measured on the H200 against 4096 (session 18, same-run
// A/B, graph replay, L2 flushed, check on; bench/results/2026-12-02-51072f0-h200-permute-multi-1024-ab*):
// the calls it moves to the grid, k = 8 at M = 256 and 512, gained 1.01-1.04x and 1.01-1.13x
// (qwen3-30b TP8 bf16 M = 512 97.5 -> 87.3 us): the two grid launches cost less than 2-4 chunks
// of 1024 slots in one CTA. (Below 1024 slots not measured.)
inline constexpr std::int64_t kPermuteMultiCtaMinSlots = 1024;
// Bound on the CTAs a routing launch adds for hidden's absmax (RoutingParams::absmax_ctas): the
// workspace's absmax_partials slice holds this many floats. Each takes at least
// kAbsmaxElemsPerCta elements.
inline constexpr int kMaxAbsmaxCtas = 256;
inline constexpr std::int64_t kAbsmaxElemsPerCta = 8192;
// The multi-CTA permutation's count launch hosts the absmax CTAs only while each of those that fit
// beside the count CTAs (SMs - count CTAs) takes at most this many elements (~64 KB of bf16, about
// a microsecond of one SM's stream); past it (prefill with routing on 100+ count CTAs) the absmax
// launch's full grid is faster.
inline constexpr std::int64_t kAbsmaxMaxElemsPerCountLaunchCta = 4 * kAbsmaxElemsPerCta;
// Bound on count CTAs x E: every scatter CTA reads the whole [count CTAs][E] table from L2
// (128 KiB, ~1 us of one SM's L2 bandwidth). The launcher keeps count CTAs <= max(1, this / E).
inline constexpr std::int64_t kPermuteMaxCountWords = 32768;

// int32 words of the [count CTAs][E] table the multi-CTA permutation needs (RoutingParams::
// chunk_counts) for `num_experts` local experts: count CTAs x E <= max(E, kPermuteMaxCountWords).
inline std::size_t permute_chunk_count_words(std::int64_t num_experts) {
  return static_cast<std::size_t>(std::max<std::int64_t>(num_experts, kPermuteMaxCountWords));
}

// Bytes a call of `slots` slots reserves for chunk_counts (cuda/workspace.hpp): none up to
// kPermuteMultiCtaMinSlots, where PermutePath::kAuto always takes the one-CTA path.
inline std::size_t permute_chunk_count_bytes(std::int64_t slots, std::int64_t num_experts) {
  return slots > kPermuteMultiCtaMinSlots ? permute_chunk_count_words(num_experts) * sizeof(std::int32_t) : 0;
}

}  // namespace moekit::cuda

namespace moekit::cuda::routing {

inline constexpr int kThreads = 1024;          // 32 warps: the permutation handles 1024 slots per chunk
inline constexpr int kWarps = kThreads / 32;
// Decode: at most kSmallThreads slots (and at most 2 tokens per warp to route) run on a CTA of
// 8 warps: one chunk either way, but the per-expert column scan of pass 2 walks 8 warp counts
// instead of 32 and the CTA-wide barriers are cheaper.
inline constexpr int kSmallThreads = 256;
inline constexpr std::int64_t kSmallMaxRouteTokens = 2 * (kSmallThreads / 32);
inline constexpr int kMaxRouteBlocks = 1024;   // route-only grid cap (warps grid-stride over tokens)
// Above this many tokens fused_moe routes on a full grid and permutes in a second launch.
inline constexpr std::int64_t kFusedRouteMaxTokens = 512;

}  // namespace moekit::cuda::routing
