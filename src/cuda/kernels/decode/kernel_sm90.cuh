// The single-launch decode path on sm_90a: routing-to-combine of one MoE call in one kernel, no
// grid-wide barrier. Every CTA derives the routing itself (the slots fit in shared memory); a
// work item is (local expert, chunk of <= 64 of its tokens, chunk of 128 intermediate columns)
// and runs on a cluster of S CTAs:
//   1. GEMM1 (Swap-AB wgmma, weights streamed by TMA): rank r reduces its 1/S of K for the
//      chunk's gate and up rows (each 64-row tile = 32 gate rows + the 32 matching up rows);
//   2. the S partial sums are exchanged through distributed shared memory: rank r adds them (in
//      rank order) for its 1/S of the columns, applies bias and activation and writes the
//      intermediate h into every rank's shared memory;
//   3. GEMM2 (Swap-AB wgmma): rank r multiplies h by its 1/S of w2's rows (the output columns K),
//      reducing over the chunk's 128 columns: a partial output per (slot, chunk) in the workspace;
//   4. decode_combine_kernel, launched as this kernel's programmatic dependent (PDL), sums each
//      token's partials, slots j = 0..k-1 in order and chunks in order, and writes out.
// Every sum has a fixed order: bitwise reproducible run to run. docs/decode.md has the details.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/slot_routing.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/decode/config.hpp"
#include "cuda/kernels/decode/params.hpp"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"
#include "moekit/problem.hpp"

namespace moekit::cuda::decode {

using sm90::Bf16Tag;
using sm90::E4m3Tag;
using sm90::F16Tag;

// ---------------------------------------------------------------------------------------------
// Work items: (expert e, token chunk, N chunk), token chunk fastest (the items that read the
// same weights run side by side), then N chunks, experts in order.
// ---------------------------------------------------------------------------------------------
struct Item {
  int e;
  int nchunk;
  int row_begin;  // first entry of the chunk in the sorted slot list
  int count;      // tokens, 1..max_tokens
};

__device__ __forceinline__ bool find_item(int w, const int* off, const int* prefix, int E, int max_tokens,
                                          Item& it) {
  if (w >= prefix[E]) return false;
  int lo = 0, hi = E;  // prefix[lo] <= w < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= w) lo = mid; else hi = mid;
  }
  const int rows = off[lo + 1] - off[lo];
  const int tchunks = (rows + max_tokens - 1) / max_tokens;
  const int local = w - prefix[lo];
  const int tchunk = local % tchunks;
  it.e = lo;
  it.nchunk = local / tchunks;
  it.row_begin = off[lo] + tchunk * max_tokens;
  it.count = min(max_tokens, rows - tchunk * max_tokens);
  return true;
}

__device__ __forceinline__ int token_width(int count) {
  return count <= 8 ? 8 : count <= 16 ? 16 : count <= 32 ? 32 : 64;
}

// [begin, end) of `total` units that rank r of S owns (balanced, in rank order).
__device__ __forceinline__ void rank_range(int total, int S, int r, int& begin, int& end) {
  begin = static_cast<int>(static_cast<long long>(total) * r / S);
  end = static_cast<int>(static_cast<long long>(total) * (r + 1) / S);
}

// ---------------------------------------------------------------------------------------------
// Numerics: the shared formulas (cuda/numerics/); the activation with Swap-AB's rounding
// (expf, IEEE division, erf(g * (1 / sqrt 2))).
// ---------------------------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&v)[8]) {
  const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = to_float(x[i]);
}

// Phase timer (DecodeParams::phases; off when null): consumer thread 0 adds the time since its
// last stamp to word w of its CTA's record.
struct PhaseClock {
  std::uint64_t* rec = nullptr;
  std::uint64_t last = 0;
  __device__ __forceinline__ void start(const DecodeParams& p) {
    if (p.phases != nullptr && static_cast<int>(blockIdx.x) < p.phase_ctas) {
      rec = p.phases + static_cast<std::int64_t>(blockIdx.x) * kPhaseWords;
      last = sm90::globaltimer_ns();
    }
  }
  __device__ __forceinline__ void lap(int word) {
    if (rec == nullptr) return;
    const std::uint64_t now = sm90::globaltimer_ns();
    rec[word] += now - last;
    last = now;
  }
};

// ---------------------------------------------------------------------------------------------
// The kernel.
// ---------------------------------------------------------------------------------------------
// kMaxW: the widest token count of an item (the tiling's max_tokens: 8, 16, 32 or 64); kStage:
// what the launch runs of each item (params.hpp: kWhole, fp8's kUp / kDown pair, or kBlock128).
template <class Tag, class ActT, int kMaxW, int kStage>
struct Decode {
  static constexpr bool kFp8 = std::is_same<Tag, E4m3Tag>::value;
  static constexpr int kEs = kFp8 ? 1 : 2;                 // weight bytes
  static constexpr int kElemsPerStage = kStageKBytes / kEs;
  // K chunks of GEMM2's stage: the chunk's kChunkCols columns.
  static constexpr int kChunks2 = kChunkCols * kEs / kStageKBytes;
  // fp8_block128 (kBlock128): a K chunk of 128 e4m3 is one of the reference's 1x128 activation
  // groups and one column of w13's 128x128 scale blocks; GEMM1 scales each chunk's product
  // before adding it (docs/decode.md "Numerics").
  static constexpr bool kBlockScales = kStage == kBlock128;
  static_assert(!kBlockScales || kFp8, "fp8_block128 runs on e4m3 weights");
  // fp8_per_channel (kChannel, kChannelUp, kChannelDown): a scale per token over its row of K
  // (taken with the token's item, load_x), one per output channel of w13 and w2, one
  // per slot over its h row (local to the item at one N chunk: kChannel; else kChannelDown reads
  // the slot's whole row from the workspace).
  static constexpr bool kPerChannel = kStage == kChannel || kStage == kChannelUp || kStage == kChannelDown;
  static_assert(!kPerChannel || kFp8, "fp8_per_channel runs on e4m3 weights");
  // The two launches of a split call: GEMM1 + activation (h to the workspace), then GEMM2.
  static constexpr bool kUpHalf = kStage == kUp || kStage == kChannelUp;
  static constexpr bool kDownHalf = kStage == kDown || kStage == kChannelDown;
  // GEMM1 through GEMM2 of each item in this launch (kWhole, kBlock128, kChannel).
  static constexpr bool kOneLaunch = kStage == kWhole || kStage == kBlock128 || kStage == kChannel;
  // h's scale is per token over the item's N chunk (block128; per channel at one chunk).
  static constexpr bool kHScalePerChunk = kBlockScales || kStage == kChannel;

  struct Smem {
    std::uint32_t tiles;    // pipeline stage s at tiles + s * kStageBytes
    std::uint8_t* region;   // X tiles, aliased by h (fp32) and the GEMM2 B tiles
    std::uint32_t region_addr;
    float* h;               // [W][kChunkCols] fp32 (every rank writes its columns here)
    std::uint32_t h_addr;
    std::uint8_t* hb;       // [stages of the chunk][W][128 B], swizzled
    std::uint32_t hb_addr;
    float* p1;              // [kMaxTilesPerChunk][64][W] fp32
    std::uint32_t p1_addr;
    int* slot_e;
    int* sorted;
    int* off;
    int* cur;               // [E] slots of each local expert (the routing's counts)
    int* prefix;
    int* tok_slot;          // [64] slot m*k+j of the item's token t, -1 past the count
    float* tok_w;           // [64] router weight of the slot
    float* tok_xs;          // [64] fp8: the token's activation scale (this rank's K slice)
    float* tok_hs;          // [64] fp8: the token's intermediate scale (this chunk)
    int* warp_rows;         // [4] gather_slots: the item's expert's slots in each consumer warp's quarter
    float* scratch;         // [kScratchFloats]: dynamic scales, the consumer warps' absmaxes
    float* bs;              // fp8_block128: the item's w13 block scales, then its tokens' x scales
    std::uint32_t full;     // barriers, 8 bytes apart
    std::uint32_t empty;
    std::uint32_t b1;       // cluster exchange: partial sums written
    std::uint32_t b2;       // cluster exchange: h written
    int stages;
    int cluster;
    int rank;
  };

  // ---- producer: one thread streams every weight tile of the cluster's items through TMA ----
  // The weight tiles of one item (local expert e, N chunk nchunk) on this rank, stage after stage
  // of the ring (each waits for its stage to be free).
  static __device__ void produce_item(const DecodeParams& p, const Smem& s, int e, int nchunk, int& stage,
                                      std::uint32_t& phase) {
    const Tiling& T = p.tiling;
    int ks0, ks1, rt0, rt1;
    rank_range(T.k_stages, s.cluster, s.rank, ks0, ks1);
    ks0 *= kChunksPerStage;  // whole stages of K chunks; chunks past K are zero-filled
    ks1 *= kChunksPerStage;
    rank_range(T.row_tiles, s.cluster, s.rank, rt0, rt1);
    const int N = p.inter_size;
    auto next = [&]() {
      if (++stage == s.stages) { stage = 0; phase ^= 1; }
    };
    const int n0 = nchunk * kChunkCols;
    const int cw = min(kChunkCols, N - n0);
    const int tiles1 = kDownHalf ? 0 : (cw + kGateUpRows - 1) / kGateUpRows;
    for (int j = 0; j < tiles1; ++j) {
      for (int kc = ks0; kc < ks1; kc += kChunksPerStage) {
        const std::uint32_t full = s.full + 8 * stage;
        sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
        sm90::mbar_arrive_expect_tx(full, kStageBytes);
        for (int u = 0; u < kChunksPerStage; ++u) {
          const std::uint32_t dst = s.tiles + stage * kStageBytes + u * kTileBytes;
          const int k0 = (kc + u) * kElemsPerStage;
          sm90::tma_load_3d(dst, &p.tmap_w13, full, k0, n0 + kGateUpRows * j, e);
          sm90::tma_load_3d(dst + kTileBytes / 2, &p.tmap_w13, full, k0, N + n0 + kGateUpRows * j, e);
        }
        next();
      }
    }
    // GEMM2: one stage per 64-row tile, the chunk's 128 columns (bf16: 2 K chunks, e4m3: 1;
    // columns past N zero-filled). kUp: GEMM2 runs in the kDown launch.
    if constexpr (!kUpHalf) {
      constexpr int nsub2 = kChunks2;
      for (int rt = rt0; rt < rt1; ++rt) {
        const std::uint32_t full = s.full + 8 * stage;
        sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
        sm90::mbar_arrive_expect_tx(full, nsub2 * kTileBytes);
        for (int u = 0; u < nsub2; ++u)
          sm90::tma_load_3d(s.tiles + stage * kStageBytes + u * kTileBytes, &p.tmap_w2, full, n0 + u * kElemsPerStage,
                            rt * kTileRows, e);
        next();
      }
    }
  }

  // ---- producer: one thread streams the weight tiles of the cluster's items through TMA ----
  static __device__ void produce(const DecodeParams& p, const Smem& s) {
    int stage = 0;
    std::uint32_t phase = 0;
    const int num_clusters = gridDim.x / s.cluster;
    for (int w = blockIdx.x / s.cluster;; w += num_clusters) {
      Item it;
      if (!find_item(w, s.off, s.prefix, p.num_experts, p.tiling.max_tokens, it)) break;
      produce_item(p, s, it.e, it.nchunk, stage, phase);
    }
  }

  // ---- consumer warpgroup ----
  static __device__ __forceinline__ void consumer_sync() {
    sm90::named_barrier_sync(kConsumerBarrier, kConsumerThreads);
  }

  // Every rank's consumer warpgroup has passed this point (its shared-memory writes, local and
  // remote, before it are visible to the others after it). Parity: the item's round.
  static __device__ __forceinline__ void cluster_exchange(const Smem& s, std::uint32_t bar, int round) {
    // bar.sync orders every consumer thread's writes before the arriving thread's release at
    // cluster scope (cumulative), so no per-thread fence is needed.
    consumer_sync();
    if (s.cluster > 1) {
      // Consumer thread q arrives on rank q's barrier: the S remote arrivals (each a release at
      // cluster scope, ~0.2 µs) go out in parallel, not one after another.
      const int t = threadIdx.x - (kThreads - kConsumerThreads);
      if (t < s.cluster) sm90::mbar_arrive_cluster(sm90::map_to_rank(bar, t));
      sm90::mbar_wait_cluster(bar, round & 1);
    }
  }

  // acc = sum over `nstages` pipeline stages of kSub K chunks each: A (the stage's chunk u) x
  // B (chunk c at b_base + c * W * 128).
  template <int W, int kSub>
  static __device__ __forceinline__ void mainloop(const Smem& s, float (&acc)[32], int nstages, std::uint32_t b_base,
                                                  int& stage, std::uint32_t& phase) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < W / 2; ++i) acc[i] = 0.0f;
    int prev = 0;
    for (int st = 0; st < nstages; ++st) {
      sm90::mbar_wait(s.full + 8 * stage, phase);
      sm90::fence_regs<W / 2>(acc);
      sm90::wgmma_fence();
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        const std::uint64_t da = sm90::make_smem_desc_sw128(s.tiles + stage * kStageBytes + u * kTileBytes);
        const std::uint64_t db = sm90::make_smem_desc_sw128(b_base + (st * kSub + u) * (W * kStageKBytes));
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, W>::mma(acc, da + 2 * kk, db + 2 * kk, 1);
      }
      sm90::wgmma_commit();
      sm90::fence_regs<W / 2>(acc);
      if (st > 0) {
        sm90::wgmma_wait<1>();
        if (lane == 0) sm90::mbar_arrive(s.empty + 8 * prev);
      }
      prev = stage;
      if (++stage == s.stages) { stage = 0; phase ^= 1; }
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs<W / 2>(acc);
    if (nstages > 0 && lane == 0) sm90::mbar_arrive(s.empty + 8 * prev);
  }

  // fp8_block128, GEMM1: acc = sum over this rank's K chunks of (the chunk's wgmma product) x
  // (its w13 block scale of the thread's row) x (its token's x scale). Each chunk's product lands
  // in `part` (scale_d = 0 on its first wgmma) and is added once it is complete; the stage is
  // released after its last chunk. ws13 [kBlockRowSets][nks], xs [nks][W] (shared); set_h: the
  // row set of the thread's accumulator rows h = 0, 1.
  template <int W>
  static __device__ __forceinline__ void mainloop_block(const Smem& s, float (&acc)[32], int nstages,
                                                        std::uint32_t b_base, int& stage, std::uint32_t& phase,
                                                        const float* ws13, const float* xs, int nks, int set0,
                                                        int set1) {
    const int lane = threadIdx.x & 31;
    float part[32];
#pragma unroll
    for (int i = 0; i < W / 2; ++i) {
      acc[i] = 0.0f;
      part[i] = 0.0f;
    }
    for (int st = 0; st < nstages; ++st) {
      sm90::mbar_wait(s.full + 8 * stage, phase);
#pragma unroll
      for (int u = 0; u < kChunksPerStage; ++u) {
        const int ksl = st * kChunksPerStage + u;
        const std::uint64_t da = sm90::make_smem_desc_sw128(s.tiles + stage * kStageBytes + u * kTileBytes);
        const std::uint64_t db = sm90::make_smem_desc_sw128(b_base + ksl * (W * kStageKBytes));
        sm90::fence_regs<W / 2>(part);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::Wgmma<Tag, W>::mma(part, da + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
        sm90::wgmma_commit();
        // The scales' shared loads go out while the wgmmas run.
        const float w0 = ws13[set0 * nks + ksl], w1 = ws13[set1 * nks + ksl];
        float xv[W / 4];
#pragma unroll
        for (int jj = 0; jj < W / 8; ++jj) {
#pragma unroll
          for (int c = 0; c < 2; ++c) xv[2 * jj + c] = xs[ksl * W + 8 * jj + 2 * (lane & 3) + c];
        }
        sm90::wgmma_wait<0>();
        sm90::fence_regs<W / 2>(part);
#pragma unroll
        for (int jj = 0; jj < W / 8; ++jj) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            acc[4 * jj + c] += part[4 * jj + c] * (w0 * xv[2 * jj + c]);
            acc[4 * jj + 2 + c] += part[4 * jj + 2 + c] * (w1 * xv[2 * jj + c]);
          }
        }
      }
      if (lane == 0) sm90::mbar_arrive(s.empty + 8 * stage);
      if (++stage == s.stages) { stage = 0; phase ^= 1; }
    }
  }

  // fp8_block128: the w13 block scales of the item's rows over this rank's K chunks [kc0, kc0 +
  // nks) into ws13 [kBlockRowSets][nks]: set 0 the gate rows' block n0 / 128, sets 1 and 2 the up
  // rows' blocks (N + n0) / 128 and the next; 0 for a block past the tensor (chunks past K and
  // rows past 2N are zero-filled weights).
  static __device__ void load_w13_block_scales(const DecodeParams& p, const Smem& s, std::int64_t e, int n0, int kc0,
                                               int nks) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const int N = p.inter_size;
    const int RB = (2 * N + kBlockQuant - 1) / kBlockQuant, KB = (p.hidden_size + kBlockQuant - 1) / kBlockQuant;
    for (int idx = t; idx < kBlockRowSets * nks; idx += kConsumerThreads) {
      const int set = idx / nks, kb = kc0 + idx % nks;
      const int rb = set == 0 ? n0 / kBlockQuant : (N + n0) / kBlockQuant + set - 1;
      s.bs[idx] = (rb < RB && kb < KB) ? __ldg(p.w13_scale + (e * RB + rb) * KB + kb) : 0.0f;
    }
  }

  // The item's token rows of hidden, this rank's K stages, as wgmma B tiles [stage][W][128 B]
  // (128-byte swizzle); fp8 per tensor: quantized with the tensor's scale (kept per token in
  // tok_xs); per channel: with the token's scale over its whole row (kept in tok_xs); fp8_block128:
  // with a scale per token and K chunk (xs, after the w13 block scales).
  template <int W>
  static __device__ void load_x(const DecodeParams& p, const Smem& s, const Item& it, int ks0, int ks1) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const std::int64_t K = p.hidden_size;
    const int k = p.top_k;
    const int nks = ks1 - ks0;
    if constexpr (!kFp8) {
      const std::uint8_t* hidden = static_cast<const std::uint8_t*>(p.hidden);
      const std::int64_t row_bytes = K * 2;
      const int chunks = nks * 8;
      for (int idx = t; idx < W * chunks; idx += kConsumerThreads) {
        const int row = idx / chunks;
        const int rem = idx - row * chunks;
        const int ksl = rem >> 3, ch = rem & 7;
        const std::int64_t kbyte = static_cast<std::int64_t>(ks0 + ksl) * kStageKBytes + ch * 16;
        const int slot = row < it.count ? s.sorted[it.row_begin + row] : -1;
        const bool valid = slot >= 0 && kbyte < row_bytes;
        const void* src = valid ? static_cast<const void*>(hidden + (slot / k) * row_bytes + kbyte) : p.hidden;
        sm90::cp_async_16_zfill(s.region_addr + (ksl * W + row) * kStageKBytes + ((ch ^ (row & 7)) << 4), src,
                                valid ? 16 : 0);
      }
      sm90::cp_async_wait_all_groups();
    } else if constexpr (kBlockScales) {
      // One scale per token and K chunk (128 e4m3: one 1x128 group of the reference), from the
      // chunk's absmax: lanes 0-15 hold one chunk of a 256-element step, lanes 16-31 the next.
      // xs[ksl][row] (after the w13 scales, load_w13_block_scales).
      const int warp = t >> 5, lane = t & 31;
      const ActT* hidden = static_cast<const ActT*>(p.hidden);
      const std::int64_t k_lo = static_cast<std::int64_t>(ks0) * kStageKBytes;
      const std::int64_t k_end = static_cast<std::int64_t>(ks1) * kStageKBytes;  // a multiple of 256 past k_lo
      float* xs = s.bs + kBlockRowSets * (ks1 - ks0);
      for (int row = warp; row < W; row += kConsumerThreads / 32) {
        const int slot = row < it.count ? s.sorted[it.row_begin + row] : -1;
        const ActT* x = slot >= 0 ? hidden + static_cast<std::int64_t>(slot / k) * K : hidden;
        for (std::int64_t e8 = k_lo + lane * 8; e8 < k_end; e8 += 256) {
          float v[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] = 0.0f;
          if (slot >= 0 && e8 < K) unpack8<ActT>(*reinterpret_cast<const uint4*>(x + e8), v);
          float a = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) a = numerics::fold_absmax(a, v[i]);
#pragma unroll
          for (int d = 8; d >= 1; d >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, d));
          const float scale = numerics::dynamic_scale(a);
          const float inv = 1.0f / scale;
          uint2 q;
          q.x = static_cast<std::uint32_t>(numerics::e4m3x2(v[0] * inv, v[1] * inv)) |
                (static_cast<std::uint32_t>(numerics::e4m3x2(v[2] * inv, v[3] * inv)) << 16);
          q.y = static_cast<std::uint32_t>(numerics::e4m3x2(v[4] * inv, v[5] * inv)) |
                (static_cast<std::uint32_t>(numerics::e4m3x2(v[6] * inv, v[7] * inv)) << 16);
          const int b = static_cast<int>(e8 - k_lo);
          const int ksl = b >> 7, ch = (b & 127) >> 4, half = (b & 15) >> 3;
          if ((lane & 15) == 0) xs[ksl * W + row] = scale;
          *reinterpret_cast<uint2*>(s.region + (ksl * W + row) * kStageKBytes + ((ch ^ (row & 7)) << 4) + half * 8) = q;
        }
      }
    } else {
      const int warp = t >> 5, lane = t & 31;
      const ActT* hidden = static_cast<const ActT*>(p.hidden);
      const std::int64_t k_lo = static_cast<std::int64_t>(ks0) * kStageKBytes;
      const std::int64_t k_end = static_cast<std::int64_t>(ks1) * kStageKBytes;  // tile end (elements)
      // Per tensor: the static scale, or the dynamic one every CTA took over the whole hidden
      // (consume(), before the first item).
      const float tensor_scale = kPerChannel ? 1.0f : p.a13_scale != nullptr ? p.a13_scale[0] : s.scratch[0];
      // Per channel: each token's scale over its whole row of K (of which a cluster rank
      // quantizes its slice): one token, the four warps split the row; more, the warp of the
      // token's row (below) reads all of it first. The slice is read again to quantize it (L1).
      float one_scale = 1.0f;
      if constexpr (kPerChannel) {
        if (it.count == 1) {
          const ActT* x = hidden + static_cast<std::int64_t>(s.sorted[it.row_begin] / k) * K;
          float a = 0.0f;
#pragma unroll 4
          for (std::int64_t e8 = static_cast<std::int64_t>(t) * 8; e8 < K; e8 += kConsumerThreads * 8) {
            float v[8];
            unpack8<ActT>(*reinterpret_cast<const uint4*>(x + e8), v);
#pragma unroll
            for (int i = 0; i < 8; ++i) a = numerics::fold_absmax(a, v[i]);
          }
          one_scale = numerics::dynamic_scale(consumer_absmax(s, a));
        }
      }
      for (int row = warp; row < W; row += kConsumerThreads / 32) {
        const int slot = row < it.count ? s.sorted[it.row_begin + row] : -1;
        const ActT* x = slot >= 0 ? hidden + static_cast<std::int64_t>(slot / k) * K : hidden;
        float scale = tensor_scale;
        if constexpr (kPerChannel) {
          if (it.count == 1) {
            scale = row == 0 ? one_scale : 1.0f;
          } else {
            float a = 0.0f;
            if (slot >= 0) {
#pragma unroll 4
              for (std::int64_t e8 = lane * 8; e8 < K; e8 += 256) {
                float v[8];
                unpack8<ActT>(*reinterpret_cast<const uint4*>(x + e8), v);
#pragma unroll
                for (int i = 0; i < 8; ++i) a = numerics::fold_absmax(a, v[i]);
              }
            }
            a = warp_max(a);
            scale = slot >= 0 ? numerics::dynamic_scale(a) : 1.0f;
          }
        }
        const float inv = 1.0f / scale;
        if (lane == 0) s.tok_xs[row] = scale;
        for (std::int64_t e8 = k_lo + lane * 8; e8 < k_end; e8 += 256) {
          uint2 q = make_uint2(0u, 0u);
          if (slot >= 0 && e8 < K) {
            float v[8];
            unpack8<ActT>(*reinterpret_cast<const uint4*>(x + e8), v);
            q.x = static_cast<std::uint32_t>(numerics::e4m3x2(v[0] * inv, v[1] * inv)) |
                  (static_cast<std::uint32_t>(numerics::e4m3x2(v[2] * inv, v[3] * inv)) << 16);
            q.y = static_cast<std::uint32_t>(numerics::e4m3x2(v[4] * inv, v[5] * inv)) |
                  (static_cast<std::uint32_t>(numerics::e4m3x2(v[6] * inv, v[7] * inv)) << 16);
          }
          const int b = static_cast<int>(e8 - k_lo);
          const int ksl = b >> 7, ch = (b & 127) >> 4, half = (b & 15) >> 3;
          *reinterpret_cast<uint2*>(s.region + (ksl * W + row) * kStageKBytes + ((ch ^ (row & 7)) << 4) + half * 8) = q;
        }
      }
    }
  }

  // h [W][kChunkCols] fp32 -> GEMM2's B tiles: bf16 / fp16 (round_act), or e4m3 with a per-token
  // scale over the chunk. Tokens past the count and columns past the chunk are zeros.
  template <int W>
  static __device__ void convert_h(const DecodeParams& p, const Smem& s, int count, int cw) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    if constexpr (!kFp8) {
      for (int idx = t; idx < W * (kChunkCols / 8); idx += kConsumerThreads) {
        const int row = idx / (kChunkCols / 8);
        const int col = (idx % (kChunkCols / 8)) * 8;
        uint4 raw;
        ActT* o = reinterpret_cast<ActT*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float v = (row < count && col + i < cw) ? s.h[row * kChunkCols + col + i] : 0.0f;
          o[i] = from_float<ActT>(v);
        }
        const int tile = col / 64, ch = (col % 64) / 8;
        *reinterpret_cast<uint4*>(s.hb + (tile * W + row) * kStageKBytes + ((ch ^ (row & 7)) << 4)) = raw;
      }
    } else if constexpr (kHScalePerChunk) {
      // One scale per token over the chunk's 128 columns (block128: one 1x128 group of the
      // reference, n0 a multiple of 128; per channel at one N chunk: the slot's whole h row), from
      // their absmax; a warp per token, 4 columns a lane.
      const int warp = t >> 5, lane = t & 31;
      for (int row = warp; row < W; row += kConsumerThreads / 32) {
        float v[4];
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = lane * 4 + i;
          v[i] = (row < count && col < cw) ? s.h[row * kChunkCols + col] : 0.0f;
          a = numerics::fold_absmax(a, v[i]);
        }
        const float scale = numerics::dynamic_scale(warp_max(a));
        const float inv = 1.0f / scale;
        if (lane == 0) s.tok_hs[row] = scale;
        const std::uint32_t q = static_cast<std::uint32_t>(numerics::e4m3x2(v[0] * inv, v[1] * inv)) |
                                (static_cast<std::uint32_t>(numerics::e4m3x2(v[2] * inv, v[3] * inv)) << 16);
        const int ch = lane >> 2;
        *reinterpret_cast<std::uint32_t*>(s.hb + row * kStageKBytes + ((ch ^ (row & 7)) << 4) + (lane & 3) * 4) = q;
      }
    } else {
      const int warp = t >> 5, lane = t & 31;
      // Per tensor: the static scale, or (kDown) the dynamic one over every slot's h; per channel
      // (kChannelDown): the slot's, over its whole h row (load_h, in tok_hs).
      const float tensor_scale = kPerChannel ? 1.0f : p.a2_scale != nullptr ? p.a2_scale[0] : s.scratch[1];
      for (int row = warp; row < W; row += kConsumerThreads / 32) {
        const float scale = kPerChannel ? s.tok_hs[row] : tensor_scale;
        const float inv = 1.0f / scale;
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = lane * 4 + i;
          v[i] = (row < count && col < cw) ? s.h[row * kChunkCols + col] : 0.0f;
        }
        if (!kPerChannel && lane == 0) s.tok_hs[row] = scale;
        const std::uint32_t q = static_cast<std::uint32_t>(numerics::e4m3x2(v[0] * inv, v[1] * inv)) |
                                (static_cast<std::uint32_t>(numerics::e4m3x2(v[2] * inv, v[3] * inv)) << 16);
        const int ch = lane >> 2;
        *reinterpret_cast<std::uint32_t*>(s.hb + row * kStageKBytes + ((ch ^ (row & 7)) << 4) + (lane & 3) * 4) = q;
      }
    }
  }

  // g, u = the S ranks' partial sums at the shared-memory addresses ga, ua (rank order); every
  // load issued before the first add, so the DSMEM latencies overlap.
  static __device__ __forceinline__ void sum_ranks(std::uint32_t ga, std::uint32_t ua, int S, float& g, float& u) {
    float gv[kMaxCluster], uv[kMaxCluster];
#pragma unroll
    for (int q = 0; q < kMaxCluster; ++q) {
      if (q < S) {
        gv[q] = sm90::ld_cluster_f32(sm90::map_to_rank(ga, q));
        uv[q] = sm90::ld_cluster_f32(sm90::map_to_rank(ua, q));
      }
    }
#pragma unroll
    for (int q = 0; q < kMaxCluster; ++q) {
      if (q < S) {
        g += gv[q];
        u += uv[q];
      }
    }
  }

  // h of column n (global intermediate index) for the item's token tt from the summed gate and
  // up: router weight on the input, bias, activation (Swap-AB's rounding).
  static __device__ __forceinline__ float activation_input(const DecodeParams& p, const Smem& s, std::int64_t e, int n,
                                                           int tt, float g, float u) {
    const std::int64_t N = p.inter_size;
    if (p.weight_on_input) {
      g *= s.tok_w[tt];
      u *= s.tok_w[tt];
    }
    if (p.b13 != nullptr) {
      g += numerics::load_bias(p.b13, p.bias_type, e * 2 * N + n);
      u += numerics::load_bias(p.b13, p.bias_type, e * 2 * N + N + n);
    }
    return numerics::activate<numerics::ActMath::kIeeeRsqrt2>(p.act, g, u);
  }

  // kDown: the item's h (this chunk's columns of its tokens' rows, fp32, written by the kUp
  // launch) into s.h [W][kChunkCols]; zeros past the count and the chunk. kChannelDown: also each
  // token's intermediate scale from its slot's whole h row into tok_hs (a warp a token; 1 past
  // the count).
  template <int W>
  static __device__ void load_h(const DecodeParams& p, const Smem& s, const Item& it, int n0, int cw) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const std::int64_t N = p.inter_size;
    if constexpr (kPerChannel) {
      const int warp = t >> 5, lane = t & 31;
      for (int row = warp; row < W; row += kConsumerThreads / 32) {
        float a = 0.0f;
        if (row < it.count) {
          // N % 4 == 0 (16-byte fp8 rows): whole float4s.
          const float4* hrow = reinterpret_cast<const float4*>(p.h_buf + static_cast<std::int64_t>(s.sorted[it.row_begin + row]) * N);
          for (int q4 = lane; q4 * 4 < N; q4 += 32) {
            const float4 v = __ldcg(hrow + q4);
            a = numerics::fold_absmax4(a, v);
          }
        }
        a = warp_max(a);
        if (lane == 0) s.tok_hs[row] = row < it.count ? numerics::dynamic_scale(a) : 1.0f;
      }
    }
    for (int idx = t; idx < W * (kChunkCols / 4); idx += kConsumerThreads) {
      const int row = idx / (kChunkCols / 4);
      const int col = (idx % (kChunkCols / 4)) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row < it.count && col < cw) {
        // N % 4 == 0 (16-byte fp8 rows) and cw is N's remainder or 128: 4 columns in range or none.
        const int slot = s.sorted[it.row_begin + row];
        v = __ldcg(reinterpret_cast<const float4*>(p.h_buf + static_cast<std::int64_t>(slot) * N + n0 + col));
      }
      *reinterpret_cast<float4*>(s.h + row * kChunkCols + col) = v;
    }
  }

  // One item of the launch's stage (kWhole: all of it; kUp: (a)-(e), h to the workspace; kDown:
  // (a), h from the workspace, (f)-(g)). `hmax`: kUp's running absmax of the h it wrote.
  template <int W>
  static __device__ void consume_item(const DecodeParams& p, const Smem& s, const Item& it, int& stage,
                                      std::uint32_t& phase, int round, PhaseClock& clk, float& hmax) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const int warp = t >> 5, lane = t & 31;
    const Tiling& T = p.tiling;
    const int K = p.hidden_size, N = p.inter_size;
    const int n0 = it.nchunk * kChunkCols;
    const int cw = min(kChunkCols, N - n0);
    int ks0, ks1, rt0, rt1;
    rank_range(T.k_stages, s.cluster, s.rank, ks0, ks1);
    ks0 *= kChunksPerStage;  // whole stages of K chunks; chunks past K are zero-filled
    ks1 *= kChunksPerStage;
    rank_range(T.row_tiles, s.cluster, s.rank, rt0, rt1);
    const std::int64_t e = it.e;

    // Every consumer warp is done with the previous item: its GEMM2 epilogue read tok_slot /
    // tok_w, and its last wgmma read the h tiles that this item's token rows may overwrite.
    consumer_sync();
    // (a) The item's tokens and (b) their rows of hidden (this rank's K slice) as B tiles, in one
    // round trip: both read the slot list from shared memory (the routing's).
    if (t < W) {
      int slot = -1;
      float tw = 0.0f;
      if (t < it.count) {
        slot = s.sorted[it.row_begin + t];
        tw = p.topk_weights != nullptr ? p.topk_weights[slot] : 1.0f;
      }
      s.tok_slot[t] = slot;
      s.tok_w[t] = tw;
    }
    if constexpr (kDownHalf) {
      load_h<W>(p, s, it, n0, cw);
      consumer_sync();
      clk.lap(kPhaseTokens);
    } else {
      if constexpr (kBlockScales) load_w13_block_scales(p, s, e, n0, ks0, ks1 - ks0);
      load_x<W>(p, s, it, ks0, ks1);
      sm90::fence_proxy_async_shared_cta();
      consumer_sync();
      clk.lap(kPhaseTokens);

      // (c) GEMM1: per 64-row tile (32 gate + 32 up rows), this rank's partial sums -> p1.
      const int tiles1 = (cw + kGateUpRows - 1) / kGateUpRows;
      // fp8 per tensor: one w13 scale and the token's activation scale after the sum; per channel:
      // the row's w13 scale and the token's; block128: inside it, per K chunk (mainloop_block).
      const float w13s_e = kFp8 && !kBlockScales && !kPerChannel ? p.w13_scale[e] : 1.0f;
      for (int j = 0; j < tiles1; ++j) {
        float acc[32];
        // Per channel: the w13 scale of the thread's rows h = 0, 1 of the tile (gate rows n0 + 32 j
        // + r, up rows N + n0 + 32 j + r - 32; a row past the tensor has zero weights), loaded
        // before the main loop's waits.
        float w13s[2] = {w13s_e, w13s_e};
        if constexpr (kPerChannel) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + (lane >> 2) + 8 * h;
            const int grow = r < kGateUpRows ? n0 + kGateUpRows * j + r : N + n0 + kGateUpRows * j + r - kGateUpRows;
            w13s[h] = grow < 2 * N ? __ldg(p.w13_scale + e * 2 * N + grow) : 0.0f;
          }
        }
        if constexpr (kBlockScales) {
          // The row set (load_w13_block_scales) of this thread's rows 16 warp + lane / 4 + 8 h of
          // the tile: warps 0-1 hold gate rows (set 0), warps 2-3 up rows N + n0 + 32 j + r.
          int set[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + (lane >> 2) + 8 * h;
            set[h] = r < kGateUpRows ? 0
                                     : 1 + (N + n0 + kGateUpRows * j + r - kGateUpRows) / kBlockQuant - (N + n0) / kBlockQuant;
          }
          const int nks = ks1 - ks0;
          mainloop_block<W>(s, acc, nks / kChunksPerStage, s.region_addr, stage, phase, s.bs,
                            s.bs + kBlockRowSets * nks, nks, set[0], set[1]);
        } else {
          mainloop<W, kChunksPerStage>(s, acc, (ks1 - ks0) / kChunksPerStage, s.region_addr, stage, phase);
        }
#pragma unroll
        for (int jj = 0; jj < W / 8; ++jj) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = 8 * jj + 2 * (lane & 3) + c;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = 16 * warp + (lane >> 2) + 8 * h;
              float v = acc[4 * jj + 2 * h + c];
              if (kFp8 && !kBlockScales) v *= s.tok_xs[col] * w13s[h];
              s.p1[(j * kTileRows + row) * W + col] = v;
            }
          }
        }
      }

      clk.lap(kPhaseGemm1);
      // (d) Every rank's partial sums are in place.
      cluster_exchange(s, s.b1, round);
      clk.lap(kPhaseExchange1);

      // (e) Rank r sums the ranks' partials (rank order, the S loads of a column issued before the
      // first add) of its 1/S of the columns, router weight on the input, bias, activation; h goes
      // to every rank, then a second exchange. (A variant where every rank summed all columns
      // itself, saving the second exchange for few tokens, measured no faster: docs/decode.md.)
      const int cpr = (cw + s.cluster - 1) / s.cluster;
      const int c0 = min(cw, s.rank * cpr), c1 = min(cw, c0 + cpr);
      for (int idx = t; idx < (c1 - c0) * W; idx += kConsumerThreads) {
        const int tt = idx % W;
        const int n = c0 + idx / W;
        float hv = 0.0f;
        if (tt < it.count) {
          const int j = n / kGateUpRows, nn = n % kGateUpRows;
          const std::uint32_t ga = s.p1_addr + ((j * kTileRows + nn) * W + tt) * 4;
          const std::uint32_t ua = s.p1_addr + ((j * kTileRows + kGateUpRows + nn) * W + tt) * 4;
          float g = 0.0f, u = 0.0f;
          if (s.cluster > 1) {
            sum_ranks(ga, ua, s.cluster, g, u);
          } else {
            g = s.p1[(j * kTileRows + nn) * W + tt];
            u = s.p1[(j * kTileRows + kGateUpRows + nn) * W + tt];
          }
          hv = activation_input(p, s, e, n0 + n, tt, g, u);
          if constexpr (kUpHalf) {
            // h of a slot row to the workspace for the kDown launch; kUp: its absmax (fmaxf: a
            // NaN never wins, as in the reference) to the CTA's.
            p.h_buf[static_cast<std::int64_t>(s.tok_slot[tt]) * N + n0 + n] = hv;
            if constexpr (kStage == kUp) hmax = fmaxf(hmax, fabsf(hv));
          }
        }
        if constexpr (kOneLaunch) {
          const std::uint32_t ha = s.h_addr + (tt * kChunkCols + n) * 4;
          if (s.cluster > 1) {
            for (int q = 0; q < s.cluster; ++q) sm90::st_cluster_f32(sm90::map_to_rank(ha, q), hv);
          } else {
            s.h[tt * kChunkCols + n] = hv;
          }
        }
      }
      // kWhole: h is in every rank; both: no rank's next GEMM1 overwrites p1 while a peer reads it.
      cluster_exchange(s, s.b2, round);
      clk.lap(kPhaseActivation);
    }  // !kDownHalf
    if constexpr (!kUpHalf) {
      // (f) h -> GEMM2's B tiles.
      convert_h<W>(p, s, it.count, cw);
      sm90::fence_proxy_async_shared_cta();
      consumer_sync();
      clk.lap(kPhaseConvert);

      // (g) GEMM2: this rank's output rows, reduced over the chunk; partial sums to the workspace.
      // fp8_block128: the chunk is one column of w2's 128x128 scale blocks, a 64-row tile lies in
      // one row of them (rt / 2): one scale a tile, loaded before its wait.
      // Per channel: the output row's w2 scale.
      const float w2s_e = kFp8 && !kBlockScales && !kPerChannel ? p.w2_scale[e] : 1.0f;
      const int nch = T.num_chunks;
      const std::int64_t kb2 = (K + kBlockQuant - 1) / kBlockQuant;
      for (int rt = rt0; rt < rt1; ++rt) {
        float acc[32];
        const float w2s = kBlockScales ? __ldg(p.w2_scale + (e * kb2 + rt / 2) * nch + it.nchunk) : w2s_e;
        // Per channel: the w2 scales of the thread's output rows h = 0, 1, loaded before the wait.
        float w2r[2] = {w2s, w2s};
        if constexpr (kPerChannel) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = rt * kTileRows + 16 * warp + (lane >> 2) + 8 * h;
            w2r[h] = row < K ? __ldg(p.w2_scale + e * K + row) : 0.0f;
          }
        }
        mainloop<W, kChunks2>(s, acc, 1, s.hb_addr, stage, phase);
#pragma unroll
        for (int jj = 0; jj < W / 8; ++jj) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = 8 * jj + 2 * (lane & 3) + c;
            if (col >= it.count) continue;
            const int slot = s.tok_slot[col];
            float* dst = p.partials + (static_cast<std::int64_t>(slot) * nch + it.nchunk) * K;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = rt * kTileRows + 16 * warp + (lane >> 2) + 8 * h;
              if (row >= K) continue;
              float v = acc[4 * jj + 2 * h + c];
              if (kFp8) v *= s.tok_hs[col] * w2r[h];
              if (it.nchunk == 0 && p.b2 != nullptr) v += numerics::load_bias(p.b2, p.bias_type, e * K + row);
              if (!p.weight_on_input) v *= s.tok_w[col];
              dst[row] = v;
            }
          }
        }
      }

      clk.lap(kPhaseGemm2);
      // The partial outputs are summed by decode_combine_kernel (below), this kernel's dependent.
    }
  }

  // The item on the narrowest wgmma width that holds its tokens, among the widths <= W that this
  // instantiation compiles (W = the launch's max_tokens: at M <= 8 only the 8-wide code exists, so
  // the kernel is half the size and its cold instruction fetches fewer).
  template <int W>
  static __device__ __forceinline__ void consume_width(const DecodeParams& p, const Smem& s, const Item& it,
                                                       int& stage, std::uint32_t& phase, int round, PhaseClock& clk,
                                                       float& hmax) {
    if constexpr (W > 8) {
      if (it.count > W / 2) {
        consume_item<W>(p, s, it, stage, phase, round, clk, hmax);
        return;
      }
      consume_width<W / 2>(p, s, it, stage, phase, round, clk, hmax);
    } else {
      consume_item<8>(p, s, it, stage, phase, round, clk, hmax);
    }
  }

  // The absmax over the consumer warpgroup of each thread's `v` (fmaxf: NaN never wins), in
  // every consumer thread. Uses scratch[4..7].
  static __device__ float consumer_absmax(const Smem& s, float v) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    v = warp_max(v);
    if ((t & 31) == 0) s.scratch[4 + (t >> 5)] = v;
    consumer_sync();
    const float a = fmaxf(fmaxf(s.scratch[4], s.scratch[5]), fmaxf(s.scratch[6], s.scratch[7]));
    consumer_sync();  // scratch[4..7] free again
    return a;
  }

  // fp8, before the first item: the dynamic activation scale over the whole hidden (every CTA
  // takes it itself: M*K elements, a few KB to a few hundred at decode) -> scratch[0]; kDown: the
  // dynamic intermediate scale over the kUp CTAs' absmaxes -> scratch[1]. Per channel: nothing
  // (load_x takes each token's scale); kChannelDown: the wait for kChannelUp's h.
  static __device__ void dynamic_scales(const DecodeParams& p, const Smem& s) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    if constexpr (kStage == kChannelDown) {
      // kChannelUp's h is complete and visible after this wait (its grid ended).
      pdl_wait();
    } else if constexpr (kPerChannel) {
      // kChannel / kChannelUp: each token's scale is taken with its item (load_x).
    } else if constexpr (kStage != kDown) {
      if (p.a13_scale == nullptr) {
        const ActT* x = static_cast<const ActT*>(p.hidden);
        const std::int64_t n = static_cast<std::int64_t>(p.num_tokens) * p.hidden_size;  // K % 16 == 0
        float a = 0.0f;
        for (std::int64_t i = static_cast<std::int64_t>(t) * 8; i < n; i += kConsumerThreads * 8) {
          float v[8];
          unpack8<ActT>(*reinterpret_cast<const uint4*>(x + i), v);
#pragma unroll
          for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(v[j]));
        }
        a = consumer_absmax(s, a);
        if (t == 0) s.scratch[0] = numerics::dynamic_scale(a);
      }
    } else {
      // The kUp launch's h and absmaxes are complete and visible after this wait (its grid
      // ended); every kDown consumer reads h, whichever scale it takes.
      pdl_wait();
      float a = 0.0f;
      for (int i = t; i < p.amax_ctas; i += kConsumerThreads) a = fmaxf(a, __ldcg(p.h_amax + i));
      a = consumer_absmax(s, a);
      if (t == 0) s.scratch[1] = numerics::dynamic_scale(a);
    }
    consumer_sync();
  }

  static __device__ void consume(const DecodeParams& p, const Smem& s, std::uint64_t t_entry) {
    int stage = 0;
    std::uint32_t phase = 0;
    int round = 0;
    PhaseClock clk;
    // The phase timer records one launch: kUp of a split call (kDown's CTAs would add to the
    // same records while kUp runs).
    const bool stamp = threadIdx.x == kThreads - kConsumerThreads && !kDownHalf;
    if (stamp) {
      clk.start(p);
      if (clk.rec != nullptr) {
        clk.rec[kPhaseStart] = t_entry;
        clk.rec[kPhasePrologue] += clk.last - t_entry;
      }
    }
    const int num_clusters = gridDim.x / s.cluster;
    if constexpr (kFp8 && !kBlockScales) dynamic_scales(p, s);
    // The peers' barriers were initialized (the arrive after routing) before the first remote access.
    if (s.cluster > 1) sm90::cluster_wait_acquire();
    float hmax = 0.0f;
    for (int w = blockIdx.x / s.cluster;; w += num_clusters, ++round) {
      Item it;
      if (!find_item(w, s.off, s.prefix, p.num_experts, p.tiling.max_tokens, it)) break;
      gather_slots(p, s, it);  // its own barriers: a previous item's warps read other entries, or the same values
      consume_width<kMaxW>(p, s, it, stage, phase, round, clk, hmax);
    }
    if constexpr (kStage == kUp) {
      // One absmax per CTA (zero for a CTA without items): the kDown launch reduces them.
      hmax = consumer_absmax(s, hmax);
      if (threadIdx.x == kThreads - kConsumerThreads) p.h_amax[blockIdx.x] = hmax;
    }
    if (clk.rec != nullptr) {
      clk.rec[kPhaseItems] += static_cast<std::uint64_t>(round);
      clk.rec[kPhaseEnd] = sm90::globaltimer_ns();
    }
  }

  // ---- prologue (all threads): each CTA routes the call's slots in its own shared memory ----
  static __device__ void route(const DecodeParams& p, const Smem& s) {
    const int tid = threadIdx.x;
    const int P = p.num_tokens * p.top_k;
    const int E = p.num_experts;
    for (int i = tid; i < E; i += kThreads) s.cur[i] = 0;
    __syncthreads();
    // The local expert of every slot (-1: dropped) and the slots of each (common/slot_routing.cuh);
    // a bad id or map entry is recorded by CTA 0 (every CTA sees the same; the kDown launch of a
    // split call routes the same ids again and records nothing).
    const bool bad = slot_routing::map_and_count(p.topk_ids, p.expert_map, P, p.num_experts_global, E, tid, kThreads,
                                                 s.slot_e, s.cur);
    // (A thread's slots in map_and_count are not record_faults' slots of that thread: the CTA's
    // vote decides, and every thread of CTA 0 records.)
    if (__syncthreads_or(bad) && blockIdx.x == 0 && !kDownHalf)
      slot_routing::record_faults(p.topk_ids, p.expert_map, P, p.num_experts_global, E, p.top_k, p.faults, tid, kThreads);
    // Offsets and the work-item prefix (warp 0, 32 experts a step). Each item's consumers place
    // its slots themselves (gather_slots).
    if (tid < 32) {
      const int lane = tid;
      const int nch = p.tiling.num_chunks, mt = p.tiling.max_tokens;
      int run_rows = 0, run_items = 0;
      if (lane == 0) {
        s.off[0] = 0;
        s.prefix[0] = 0;
      }
      for (int e0 = 0; e0 < E; e0 += 32) {
        const int e = e0 + lane;
        const int rows = e < E ? s.cur[e] : 0;
        int items = (rows + mt - 1) / mt * nch;
        int r = rows;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int vr = __shfl_up_sync(0xffffffffu, r, d);
          const int vi = __shfl_up_sync(0xffffffffu, items, d);
          if (lane >= d) {
            r += vr;
            items += vi;
          }
        }
        if (e < E) {
          s.off[e + 1] = run_rows + r;
          s.prefix[e + 1] = run_items + items;
        }
        run_rows += __shfl_sync(0xffffffffu, r, 31);
        run_items += __shfl_sync(0xffffffffu, items, 31);
      }
    }
    __syncthreads();
  }

  // Consumers, at an item's start: its slots, ranks [row_begin - off[e], + count) of expert e's
  // slots in ascending slot order, into sorted[row_begin ..] (slot_routing::place_window: two
  // ballot passes of the four consumer warps, 2 P / 128 rounds a warp, not the P / 32 rounds of
  // one warp placing every slot of the call). Every CTA and cluster rank takes the same ones.
  static __device__ void gather_slots(const DecodeParams& p, const Smem& s, const Item& it) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const int e_begin = s.off[it.e];
    const int r0 = it.row_begin - e_begin;
    // Begins and ends with a consumer barrier: warp_rows and sorted are free for the next item.
    static_assert(kConsumerThreads == 128, "place_window runs on one warpgroup");
    slot_routing::place_window(s.slot_e, p.num_tokens * p.top_k, it.e, r0, r0 + it.count, t, kConsumerBarrier,
                               s.warp_rows, s.sorted + it.row_begin);
  }

  // Consumers, at kernel entry: the call's token rows and router weights into L2 (config.hpp,
  // kPrefetchLines); the loads of them after the routing then wait on L2, not HBM. kDown reads h,
  // not the token rows.
  static __device__ void prefetch_inputs(const DecodeParams& p, const Smem& s) {
    const int t = threadIdx.x - (kThreads - kConsumerThreads);
    const int P = p.num_tokens * p.top_k;
    if (p.topk_weights != nullptr)
      for (int i = t * 32; i < P; i += kConsumerThreads * 32) sm90::prefetch_l2(p.topk_weights + i);
    if constexpr (kDownHalf) return;
    const std::uint8_t* hidden = static_cast<const std::uint8_t*>(p.hidden);
    if (kFp8 && !kBlockScales && !kPerChannel && p.a13_scale == nullptr) {
      // dynamic_scales() reads all of hidden first.
      const std::int64_t all = (static_cast<std::int64_t>(p.num_tokens) * p.hidden_size * 2 + 127) / 128;
      if (all <= kPrefetchLinesAll)
        for (int l = t; l < all; l += kConsumerThreads) sm90::prefetch_l2(hidden + 128 * static_cast<std::int64_t>(l));
      return;
    }
    int ks0, ks1;
    rank_range(p.tiling.k_stages, s.cluster, s.rank, ks0, ks1);
    // Bytes of hidden per K chunk: bf16 weights 64 elements (128 B of hidden), e4m3 128 (256 B).
    constexpr int kHiddenChunkBytes = kStageKBytes * 2 / kEs;
    const std::int64_t row_bytes = static_cast<std::int64_t>(p.hidden_size) * 2;
    const std::int64_t b0 = static_cast<std::int64_t>(ks0) * kChunksPerStage * kHiddenChunkBytes;
    const std::int64_t b1 = min(row_bytes, static_cast<std::int64_t>(ks1) * kChunksPerStage * kHiddenChunkBytes);
    if (b1 <= b0) return;
    const int lines = static_cast<int>((b1 - b0 + 127) / 128);
    if (static_cast<std::int64_t>(lines) * p.num_tokens > kPrefetchLines) return;
    for (int i = t; i < lines * p.num_tokens; i += kConsumerThreads) {
      const int m = i / lines, l = i - m * lines;
      sm90::prefetch_l2(hidden + m * row_bytes + b0 + 128 * l);
    }
  }
};

// Persistent: cluster c (CTAs c*S .. c*S+S-1) takes items c, c + gridDim.x/S, ...; launched with
// cluster dimension S when S > 1.
template <class Tag, class ActT, int kMaxW, int kStage>
__global__ void __launch_bounds__(kThreads, 1) decode_sm90_kernel(const __grid_constant__ DecodeParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using D = Decode<Tag, ActT, kMaxW, kStage>;
  extern __shared__ std::uint8_t smem_raw[];
  const SmemLayout& L = p.tiling.smem;
  // 1024-aligned base; the same offset in every CTA, so DSMEM addresses match across the cluster.
  const std::uint64_t t_entry = p.phases != nullptr ? sm90::globaltimer_ns() : 0;
  // The combine kernel may launch now: its CTAs wait (pdl_wait) for this grid to complete.
  pdl_launch_dependents();
  std::uint8_t* base = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  typename D::Smem s;
  s.tiles = sm90::smem_addr(base);
  s.region = base + L.region_off;
  s.region_addr = sm90::smem_addr(s.region);
  s.h = reinterpret_cast<float*>(base + L.h_off);
  s.h_addr = sm90::smem_addr(s.h);
  s.hb = base + L.hb_off;
  s.hb_addr = sm90::smem_addr(s.hb);
  s.p1 = reinterpret_cast<float*>(base + L.p1_off);
  s.p1_addr = sm90::smem_addr(s.p1);
  s.slot_e = reinterpret_cast<int*>(base + L.slot_e_off);
  s.sorted = reinterpret_cast<int*>(base + L.sorted_off);
  s.off = reinterpret_cast<int*>(base + L.off_off);
  s.cur = reinterpret_cast<int*>(base + L.cur_off);
  s.prefix = reinterpret_cast<int*>(base + L.prefix_off);
  s.tok_slot = reinterpret_cast<int*>(base + L.meta_off);
  s.tok_w = reinterpret_cast<float*>(base + L.meta_off + kMaxTokens * 4);
  s.tok_xs = reinterpret_cast<float*>(base + L.meta_off + 2 * kMaxTokens * 4);
  s.tok_hs = reinterpret_cast<float*>(base + L.meta_off + 3 * kMaxTokens * 4);
  s.warp_rows = reinterpret_cast<int*>(base + L.meta_off + 4 * kMaxTokens * 4);
  s.scratch = reinterpret_cast<float*>(base + L.meta_off + 5 * kMaxTokens * 4);
  s.bs = reinterpret_cast<float*>(base + L.bs_off);
  s.full = sm90::smem_addr(base + L.bar_off);
  s.empty = s.full + 8 * L.stages;
  s.b1 = s.empty + 8 * L.stages;
  s.b2 = s.b1 + 8;
  s.stages = L.stages;
  s.cluster = p.tiling.cluster;
  s.rank = s.cluster > 1 ? static_cast<int>(sm90::cluster_ctarank()) : 0;

  if (threadIdx.x == 0) {
    sm90::prefetch_tensormap(&p.tmap_w13);
    sm90::prefetch_tensormap(&p.tmap_w2);
    for (int i = 0; i < s.stages; ++i) {
      sm90::mbar_init(s.full + 8 * i, 1);                        // the producer's expect_tx
      sm90::mbar_init(s.empty + 8 * i, kConsumerThreads / 32);   // one per consumer warp
    }
    sm90::mbar_init(s.b1, s.cluster);  // one arrival per rank
    sm90::mbar_init(s.b2, s.cluster);
    sm90::fence_mbarrier_init_cluster();
    sm90::fence_proxy_async_shared_cta();
  }
  if (threadIdx.x >= kThreads - kConsumerThreads) D::prefetch_inputs(p, s);
  D::route(p, s);
  // The peers' barriers are initialized before any remote arrival: every thread arrives here
  // (release), the consumers wait (acquire) just before their first remote access, so the
  // producer's first weight loads do not wait for the slowest rank's routing.
  if (s.cluster > 1) sm90::cluster_arrive_release();

  // The consumers' branch first: ptxas then lays the producer's code right after the routing
  // instead of past the consumers' code, so the path to the first weight TMA is fetched in
  // sequence when the launch starts with its code cold (docs/tokmajor.md, session 17).
  if (threadIdx.x >= kThreads - kConsumerThreads) {
    D::consume(p, s, t_entry);
  } else if (threadIdx.x == 0) {
    D::produce(p, s);
  }
#endif
}

// The combine: out[m, c] = sum over the token's slots j = 0..k-1 that have a local expert, in
// order, and over the N chunks in order inside one, of partials[(m*k + j) * nch + chunk][c]
// (fp32), rounded once to the activation dtype; zeros for a token with no local slot. Launched
// right after the decode kernel as its programmatic dependent (PDL): its CTAs launch while the
// decode kernel runs (that kernel triggers at its start) and wait for it in pdl_wait(). No
// tickets, no atomics: the one grid-wide dependency is the kernel boundary. Thread: 4 columns of
// one token, every partial of a batch loaded before the first add.
template <class Tag, class ActT>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  const int m = blockIdx.y;
  const int k = p.top_k;
  const int K = p.hidden_size;
  const int nch = p.tiling.num_chunks;
  const int c = (blockIdx.x * kCombineThreads + threadIdx.x) * 4;  // K % 16 == 0: 4 columns in range or none
  // The token's slots and their experts: inputs of the call, written by no kernel after the
  // decode kernel started (fused_moe's routing ran before it), so read before the wait. Bit j of
  // `valid`: slot j has a local expert (k <= kMaxExperts: can_implement_decode_sm90).
  __shared__ unsigned valid[kMaxExperts / 32];
  for (int w = threadIdx.x; w < (k + 31) / 32; w += kCombineThreads) valid[w] = 0u;
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += kCombineThreads) {
    const int id = p.topk_ids[static_cast<std::int64_t>(m) * k + j];
    int e = -1;
    if (id >= 0 && id < p.num_experts_global) e = p.expert_map != nullptr ? p.expert_map[id] : id;
    if (e >= 0 && e < p.num_experts) atomicOr(&valid[j >> 5], 1u << (j & 31));
  }
  __syncthreads();
  pdl_wait();
  if (c >= K) return;
  auto has_expert = [&](int i) { const int j = i / nch; return ((valid[j >> 5] >> (j & 31)) & 1u) != 0u; };
  const int J = k * nch;
  const float* base = p.partials + static_cast<std::int64_t>(m) * J * K + c;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i0 = 0; i0 < J; i0 += kCombineBatch) {
    float4 v[kCombineBatch];
#pragma unroll
    for (int u = 0; u < kCombineBatch; ++u) {
      const int i = i0 + u;
      if (i < J && has_expert(i)) v[u] = __ldcg(reinterpret_cast<const float4*>(base + static_cast<std::int64_t>(i) * K));
    }
#pragma unroll
    for (int u = 0; u < kCombineBatch; ++u) {
      const int i = i0 + u;
      if (i < J && has_expert(i)) {
        acc.x += v[u].x;
        acc.y += v[u].y;
        acc.z += v[u].z;
        acc.w += v[u].w;
      }
    }
  }
  ActT o[4] = {from_float<ActT>(acc.x), from_float<ActT>(acc.y), from_float<ActT>(acc.z), from_float<ActT>(acc.w)};
  *reinterpret_cast<uint2*>(static_cast<ActT*>(p.out) + static_cast<std::int64_t>(m) * K + c) =
      *reinterpret_cast<const uint2*>(o);
}

template <Operand kOp> struct OperandTypes;
template <> struct OperandTypes<Operand::kBf16> { using Tag = Bf16Tag; using Act = __nv_bfloat16; };
template <> struct OperandTypes<Operand::kF16> { using Tag = F16Tag; using Act = __half; };
template <> struct OperandTypes<Operand::kE4m3Bf16> { using Tag = E4m3Tag; using Act = __nv_bfloat16; };
template <> struct OperandTypes<Operand::kE4m3F16> { using Tag = E4m3Tag; using Act = __half; };

// One launch of the decode kernel of an operand, token width (W = p.tiling.max_tokens, or 64
// where the caller asks for the one instantiation that holds every width) and stage, in clusters
// of p.tiling.cluster; as the programmatic dependent of the kernel before it when `pdl`.
template <Operand kOp, int W, int kStage>
void launch_decode_kernel(const DecodeParams& p, int grid, cudaStream_t stream, bool pdl) {
  using Tag = typename OperandTypes<kOp>::Tag;
  using Act = typename OperandTypes<kOp>::Act;
  auto* kernel = &decode_sm90_kernel<Tag, Act, W, kStage>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised);
  cudaLaunchAttribute attr[2];  // the cluster dimension, PDL
  cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(grid), kThreads, p.tiling.smem.bytes, stream,
                                                 p.tiling.cluster, attr);
  add_pdl_attribute(cfg, attr, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <Operand kOp, int kStage>
void launch_decode_stage(const DecodeParams& p, int grid, cudaStream_t stream, bool wide, bool pdl) {
  switch (wide ? kMaxTokens : p.tiling.max_tokens) {
    case 8: launch_decode_kernel<kOp, 8, kStage>(p, grid, stream, pdl); break;
    case 16: launch_decode_kernel<kOp, 16, kStage>(p, grid, stream, pdl); break;
    case 32: launch_decode_kernel<kOp, 32, kStage>(p, grid, stream, pdl); break;
    default: launch_decode_kernel<kOp, 64, kStage>(p, grid, stream, pdl); break;
  }
}

// The combine, the programmatic dependent of the decode launch before it.
template <Operand kOp>
void launch_decode_combine(const DecodeParams& p, cudaStream_t stream) {
  const dim3 combine_grid(static_cast<unsigned>(ceil_div(p.hidden_size, kCombineThreads * 4)),
                          static_cast<unsigned>(p.num_tokens));
  launch_kernel_pdl(&decode_combine_kernel<typename OperandTypes<kOp>::Tag, typename OperandTypes<kOp>::Act>,
                    combine_grid, dim3(kCombineThreads), 0, stream, pdl_enabled(), p);
}

template <Operand kOp>
void launch_decode_sm90(const DecodeParams& p, int grid, void* stream, bool wide) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  launch_decode_stage<kOp, kWhole>(p, grid, st, wide, false);
  launch_decode_combine<kOp>(p, st);
}

template <Operand kOp>
void launch_decode_split_sm90(const DecodeParams& p, int grid, void* stream, bool wide) {
  static_assert(std::is_same<typename OperandTypes<kOp>::Tag, E4m3Tag>::value, "the split call is fp8's");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  launch_decode_stage<kOp, kUp>(p, grid, st, wide, false);
  // kDown's CTAs take the SMs kUp leaves free (at M = 1 most of its clusters) and stream w2 while
  // kUp runs; their consumers wait for kUp's grid (pdl_wait) before they read h.
  launch_decode_stage<kOp, kDown>(p, grid, st, wide, pdl_enabled());
  launch_decode_combine<kOp>(p, st);
}

template <Operand kOp>
void launch_decode_block128_sm90(const DecodeParams& p, int grid, void* stream, bool wide) {
  static_assert(std::is_same<typename OperandTypes<kOp>::Tag, E4m3Tag>::value, "fp8_block128 runs on e4m3 weights");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  launch_decode_stage<kOp, kBlock128>(p, grid, st, wide, false);
  launch_decode_combine<kOp>(p, st);
}

template <Operand kOp>
void launch_decode_channel_sm90(const DecodeParams& p, int grid, void* stream, bool wide) {
  static_assert(std::is_same<typename OperandTypes<kOp>::Tag, E4m3Tag>::value, "fp8_per_channel runs on e4m3 weights");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.tiling.num_chunks == 1) {
    launch_decode_stage<kOp, kChannel>(p, grid, st, wide, false);
  } else {
    launch_decode_stage<kOp, kChannelUp>(p, grid, st, wide, false);
    // As the per-tensor split call: kChannelDown's CTAs stream w2 while kChannelUp runs.
    launch_decode_stage<kOp, kChannelDown>(p, grid, st, wide, pdl_enabled());
  }
  launch_decode_combine<kOp>(p, st);
}

template <Operand kOp>
int decode_max_active_clusters(int cluster) {
  auto* kernel = &decode_sm90_kernel<typename OperandTypes<kOp>::Tag, typename OperandTypes<kOp>::Act, kMaxTokens, kWhole>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg =
      cluster_launch_config(static_cast<unsigned>(cluster), kThreads, kSmemLimit, nullptr, cluster, attr);
  cfg.numAttrs = 1;  // the query takes the cluster size from the attribute, also a cluster of 1
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query leaves no sticky error: the caller falls back
    return -1;
  }
  return n;
}

}  // namespace moekit::cuda::decode
