// The CUDA backend's device workspace: every intermediate of one call is a 256-byte aligned
// slice of the caller's buffer, laid out from the problem's sizes alone (host-safe, no CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/routing/config.hpp"
#include "moekit/problem.hpp"

namespace moekit::cuda {

// Byte offsets of each slice from the workspace base. A slice a problem does not need has
// size 0 (its offset is still valid). P = M * k slots, G(x) = ceil(x / 128) groups.
struct WorkspaceLayout {
  static constexpr std::size_t kAlign = 256;
  // The words of `counters`; the routing kernel zeroes them at the start of every call. The
  // absmax words (uint32 bits of non-negative floats) for the absmax kernels' atomicMax; the tile
  // counters for the token-major GEMMs' dynamic schedule (GroupedGemmParams::tile_counter).
  static constexpr int kAbsmaxHidden = 0;
  static constexpr int kAbsmaxInter = 1;
  static constexpr int kTileGemm1 = 2;
  static constexpr int kTileGemm2 = 3;
  static constexpr int kNumCounters = 4;

  std::size_t topk_ids = 0;        // int32 [P]: fused_moe's routing output when the caller gave none
  std::size_t topk_weights = 0;    // fp32 [P]
  std::size_t counters = 0;        // uint32 [kNumCounters]
  std::size_t expert_offsets = 0;  // int32 [E + 1]; offsets[E] = local slots
  std::size_t sorted_slots = 0;    // int32 [P]: slot m*k+j of each row, grouped by local expert
  std::size_t sorted_weights = 0;  // fp32 [P]: topk_weights[sorted_slots[r]] (router weight per row)
  std::size_t chunk_counts = 0;    // int32 [count CTAs][E]: the multi-CTA permutation's per-CTA
                                   // expert counts, max(E, 32768) words when P > kPermuteMultiCtaMinSlots
                                   // (1024), else none
  std::size_t absmax_partials = 0; // fp32 [kMaxAbsmaxCtas]: hidden's absmax partials from the
                                   // routing launch (fp8_per_tensor; RoutingParams::absmax_partials)
  std::size_t a_q = 0;             // e4m3 [M, K] (fp8 schemes)
  std::size_t a_scale = 0;         // fp32: per tensor [1], per channel [M], block128 [M, G(K)]
  std::size_t inter = 0;           // [P, N]: act dtype (bf16 scheme) or fp32 (fp8 schemes)
  std::size_t inter_q = 0;         // e4m3 [P, N] (fp8 schemes)
  std::size_t inter_scale = 0;     // fp32: per tensor [1], per row [P], block128 [P, G(N)]
  std::size_t y = 0;               // [P, K]: GEMM2 output at row m*k+j, fp32 (act dtype when token-major)
  std::size_t total = 0;           // bytes; 0 when M == 0 (nothing is launched)
};

inline std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

inline WorkspaceLayout workspace_layout(const MoeProblem& p) {
  WorkspaceLayout w;
  if (p.num_tokens <= 0) return w;
  const std::size_t M = static_cast<std::size_t>(p.num_tokens);
  const std::size_t E = static_cast<std::size_t>(p.num_experts);
  const std::size_t P = M * static_cast<std::size_t>(p.top_k);
  const std::size_t K = static_cast<std::size_t>(p.hidden_size);
  const std::size_t N = static_cast<std::size_t>(p.intermediate_size);
  const std::size_t gK = (K + kBlockQuant - 1) / kBlockQuant;
  const std::size_t gN = (N + kBlockQuant - 1) / kBlockQuant;
  const bool fp8 = p.scheme != Scheme::kBf16;
  const std::size_t act_bytes = 2;  // bf16 or fp16

  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t off = at;
    at = align_up(at + bytes, WorkspaceLayout::kAlign);
    return off;
  };
  w.topk_ids = take(p.with_routing ? P * 4 : 0);
  w.topk_weights = take(p.with_routing ? P * 4 : 0);
  w.counters = take(WorkspaceLayout::kNumCounters * 4);
  w.expert_offsets = take((E + 1) * 4);
  w.sorted_slots = take(P * 4);
  w.sorted_weights = take(P * 4);
  w.chunk_counts = take(permute_chunk_count_bytes(static_cast<std::int64_t>(P), static_cast<std::int64_t>(E)));
  std::size_t a_scale_n = 0, inter_scale_n = 0;
  switch (p.scheme) {
    case Scheme::kBf16: break;
    case Scheme::kFp8PerTensor: a_scale_n = 1; inter_scale_n = 1; break;
    case Scheme::kFp8PerChannel: a_scale_n = M; inter_scale_n = P; break;
    case Scheme::kFp8Block128: a_scale_n = M * gK; inter_scale_n = P * gN; break;
  }
  w.absmax_partials = take(p.scheme == Scheme::kFp8PerTensor ? kMaxAbsmaxCtas * 4 : 0);
  w.a_q = take(fp8 ? M * K : 0);
  w.a_scale = take(a_scale_n * 4);
  w.inter = take(P * N * (fp8 ? 4 : act_bytes));
  w.inter_q = take(fp8 ? P * N : 0);
  w.inter_scale = take(inter_scale_n * 4);
  w.y = take(P * K * 4);
  w.total = at;
  return w;
}

}  // namespace moekit::cuda
