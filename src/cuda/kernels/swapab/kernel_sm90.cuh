// Swap-AB grouped expert GEMM for decode on sm_90a: per (expert, 64-row weight tile, chunk of
// <= 64 tokens) work item, weight tiles stream through TMA into an mbarrier pipeline and are
// wgmma's A operand; the item's gathered token rows are the B operand (wgmma N = 8..64).
#pragma once

#include <cuda.h>  // CUtensorMap (header only: the encode entry point comes from the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/gemm_common/gather.cuh"
#include "cuda/kernels/gemm_common/expert_table.cuh"
#include "cuda/kernels/swapab/config.hpp"
#include "cuda/kernels/swapab/params.hpp"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::swapab {


// ---------------------------------------------------------------------------------------------
// Work items: (expert e, tile group, token chunk) with the chunk index fastest, so neighbouring
// CTAs read the same weight tiles (L2 hits) when an expert has more than 64 rows. A tile group is
// T = tiles_per_item consecutive 64-row tiles (the last group of an expert may be shorter): when
// K is short (GEMM2 at TP8: 1.5 to 6 K stages per tile) one item walks T tiles over the same
// tokens, so the per-item work (item search, token metadata, gather addresses) is paid once per
// T tiles. With split-K, the S CTAs of a cluster take the same item and split its K stages.
// ---------------------------------------------------------------------------------------------
struct Item {
  int e;
  int tile;       // first tile of the item
  int tile_end;   // one past its last tile
  int row_begin;  // first sorted row of the chunk
  int count;      // tokens in the chunk, 1..64
};

// s_prefix[e] = work items of experts < e (s_prefix[0] = 0, s_prefix[E] = all items).
__device__ __forceinline__ bool find_item(int w, const int* s_off, const int* s_prefix, int E,
                                          int num_tiles, int tiles_per_item, Item& it) {
  int lo;
  if (!gemm_common::find_expert(w, s_prefix, E, lo)) return false;
  const int rows = s_off[lo + 1] - s_off[lo];
  const int chunks = (rows + kMaxTokens - 1) / kMaxTokens;
  const int local = w - s_prefix[lo];
  const int chunk = local % chunks;
  it.e = lo;
  it.tile = local / chunks * tiles_per_item;
  it.tile_end = min(num_tiles, it.tile + tiles_per_item);
  it.row_begin = s_off[lo] + chunk * kMaxTokens;
  it.count = min(kMaxTokens, rows - chunk * kMaxTokens);
  return true;
}

// wgmma N used for an item: the smallest of 8, 16, 32, 64 that holds its tokens.
__device__ __forceinline__ int token_width(int count) {
  return count <= 8 ? 8 : count <= 16 ? 16 : count <= 32 ? 32 : 64;
}

// ---------------------------------------------------------------------------------------------
// The kernel.
// ---------------------------------------------------------------------------------------------
// kPlain: the decode kernel of the common small call (launch_sm90.cu swapab_plain: at most
// kWideMaxTokens rows in all, so every expert's rows fit a wide stage's token tile; split 1; the
// operand's own scale mode, e4m3 per tensor or 16-bit unscaled; the router weight not on the input;
// TMA rows; GEMM2's direct epilogue): the wide stage loop only, with those features at compile
// time, so that the kernel carries none of the code of the others (the one-block loop's four token
// widths, split-K's exchange, per-channel scales, the 8-byte-row producer, the staged GEMM2
// epilogue): 53-55 KB for GEMM1 and 36-37 KB for GEMM2 against ~275 KB. The activation, the bias
// and GEMM1's output type stay run-time values. The same instructions on that call's path as the
// general kernel's, so the same bits.
template <class Tag, bool kGateUp, bool kBlock128, bool kPlain = false>
struct SwapAb {
  static_assert(!kPlain || !kBlock128, "kPlain: not fp8_block128 (it has no wide stages)");
  static constexpr std::uint32_t kTmaBytes = (kGateUp ? 2 : 1) * kTileBytes;  // one K block
  static constexpr int kPlanes = planes(kGateUp);
  static constexpr int kWideB = wide_kblocks(kGateUp);  // K blocks of a wide stage (config.hpp)
  static constexpr int kElemsPerBlock = kStageKBytes / (std::is_same<Tag, sm90::E4m3Tag>::value ? 1 : 2);
  // GEMM1 of the e4m3 per-tensor / per-channel instantiation folds |h| of its stores for
  // out_absmax (params.hpp); the other instantiations compile as before.
  static constexpr bool kAbsmax = kGateUp && !kBlock128 && std::is_same<Tag, sm90::E4m3Tag>::value;
  // The call's features, compile-time constants in the kPlain kernel (launch_sm90.cu swapab_plain).
  static constexpr int kOwnScaleMode = std::is_same<Tag, sm90::E4m3Tag>::value ? kScalePerTensor : kScaleNone;
  static __device__ __forceinline__ int scale_mode(const KernelParams& p) { return kPlain ? kOwnScaleMode : p.scale_mode; }
  static __device__ __forceinline__ bool on_input(const KernelParams& p) { return !kPlain && p.weight_on_input; }
  static __device__ __forceinline__ bool direct(const KernelParams& p) { return kPlain || p.direct_epilogue; }

  struct Smem {
    std::uint32_t tiles;   // stage s (stage_bytes(kGateUp, kB) each): the weight tiles [block][plane], then the token tiles [block]
    float* a_scale;        // [stages][64]
    float* b_scale;        // [stages][2]
    int* slot_meta;        // [stages][64]
    std::uint32_t full;    // barrier addresses (8 bytes apart)
    std::uint32_t empty;
    std::uint32_t red;     // [2] split-K receive barriers
    int* tok_slot;         // [2][64]
    float* tok_weight;     // [2][64]
    float* tok_scale;      // [2][64]
    float* out_stage;      // [planes][64][kOutStride]
    float* recv;           // [2][recv_buffer_floats]
    int* off;              // [E+1]
    int* prefix;           // [E+1]
    int stages;
    int out_plane;         // floats of one out_stage plane
    int k_stages;          // K stages of an item (of kblocks 128-byte blocks each)
    int split;             // S (read through splits(): 1 at compile time in the kPlain kernel)
    int rank;              // this CTA's rank in the cluster
    int recv_floats;       // recv_buffer_floats(kGateUp, S)
  };

  // Stage st of a layout of kB K blocks: the weight tile of K block blk and plane g (gate / w2 =
  // 0, up = 1), and the token tile of block blk.
  template <int kB>
  static __device__ __forceinline__ std::uint32_t a_addr(const Smem& s, int st, int blk, int g) {
    return s.tiles + st * stage_bytes(kGateUp, kB) + (blk * kPlanes + g) * kTileBytes;
  }
  template <int kB>
  static __device__ __forceinline__ std::uint32_t b_addr(const Smem& s, int st, int blk) {
    return s.tiles + st * stage_bytes(kGateUp, kB) + kB * kPlanes * kTileBytes + blk * token_rows(kB) * kStageKBytes;
  }
  static __device__ __forceinline__ int splits(const Smem& s) { return kPlain ? 1 : s.split; }
  // This CTA's share of an item's K stages.
  static __device__ __forceinline__ void k_range(const Smem& s, int& begin, int& end) {
    const int per = (s.k_stages + splits(s) - 1) / splits(s);
    begin = min(s.k_stages, s.rank * per);
    end = min(s.k_stages, begin + per);
  }

  // ---- producer warpgroup: TMA for the weight tiles, cp.async gather of the token rows ----
  template <int kB>
  static __device__ void produce(const KernelParams& p, const Smem& s) {
    const int t = threadIdx.x;      // 0..127
    const int chunk16 = t & 7;      // 16-byte chunk of the 128-byte K slice this thread copies
    const int row0 = t >> 3;        // token rows row0 + 16 i, i = 0..3
    // GEMM2 on rows of 8 but not 16 bytes (params.hpp b_rows8): no TMA; the other
    // instantiations compile without this path.
    const bool rows8 = !kPlain && !kGateUp && !kBlock128 && p.b_rows8 != nullptr;
    int ks_begin, ks_end;
    k_range(s, ks_begin, ks_end);
    int stage = 0;
    std::uint32_t phase = 0;
    const int num_clusters = gridDim.x / splits(s);
    for (int w = blockIdx.x / splits(s);; w += num_clusters) {
      Item it;
      if (!find_item(w, s.off, s.prefix, p.num_experts, p.num_col_tiles, p.tiles_per_item, it)) break;
      const int width = token_width(it.count);
      const std::uint8_t* src[4];
      bool has_row[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = row0 + 16 * i;
        has_row[i] = rr < it.count;
        src[i] = p.a;
        if (has_row[i]) {
          const int r = it.row_begin + rr;
          const std::int64_t arow = gemm_common::a_row_of(p, r);
          src[i] = p.a + arow * p.a_row_bytes + chunk16 * 16;
        }
      }
      // block128: thread t < count copies token t's scale of each K group.
      const float* tok_scale_src = p.a_scale;
      if (kBlock128 && t < it.count) {
        const int r = it.row_begin + t;
        const std::int64_t arow = gemm_common::a_row_of(p, r);
        tok_scale_src = p.a_scale + arow * p.k_groups;
      }
      // The item's tiles, each a full pass over this rank's K stages with the same tokens.
      for (int tile = it.tile; tile < it.tile_end; ++tile) {
        const int row_gate = tile * kTileRows;
        const int row_up = static_cast<int>(p.n_out) + tile * kTileRows;
        for (int ks = ks_begin; ks < ks_end; ++ks) {
          const std::uint32_t full = s.full + 8 * stage;
          sm90::mbar_wait(s.empty + 8 * stage, phase ^ 1);
          if (rows8) {
            // 8-byte rows (params.hpp b_rows8): the warpgroup copies the weight tiles below; this
            // is the arrival that the TMA thread's expect_tx makes otherwise.
            if (t == 0) sm90::mbar_arrive(full);
          } else if (t == 0) {
            sm90::mbar_arrive_expect_tx(full, kB * kTmaBytes);
            // K coordinate in elements: kB blocks of 128 bytes per stage. A block past K (the
            // last stage of a wide layout) is a box wholly out of bounds: TMA fills it with zeros
            // and still counts its bytes; its token tile is zero-filled too.
#pragma unroll
            for (int blk = 0; blk < kB; ++blk) {
              const int k0 = (ks * kB + blk) * kElemsPerBlock;
              sm90::tma_load_3d(a_addr<kB>(s, stage, blk, 0), &p.tmap_b, full, k0, row_gate, it.e);
              if (kGateUp) sm90::tma_load_3d(a_addr<kB>(s, stage, blk, 1), &p.tmap_b, full, k0, row_up, it.e);
            }
          }
          if (tile == it.tile && ks == ks_begin) {
            // The item's token metadata rides on its first K stage: this stage's full barrier
            // counts every producer thread's cp.async arrival, so the consumer reads it from
            // shared memory after its wait instead of chaining global loads (sorted_slots, then
            // topk_weights[slot]) in front of its epilogue.
            if (t < it.count) {
              const int r = it.row_begin + t;
              sm90::cp_async_4_zfill(sm90::smem_addr(s.slot_meta + stage * kMaxTokens + t), p.sorted_slots + r, 4);
              if (!kBlock128 && p.sorted_weights)
                sm90::cp_async_4_zfill(sm90::smem_addr(s.a_scale + stage * kMaxTokens + t), p.sorted_weights + r, 4);
            }
            if (!kBlock128 && t == 96 && scale_mode(p) == kScalePerTensor)
              sm90::cp_async_4_zfill(sm90::smem_addr(s.b_scale + stage * 2), p.b_scale + it.e, 4);
          }
#pragma unroll
          for (int blk = 0; blk < kB; ++blk) {
            const std::int64_t kblock = static_cast<std::int64_t>(ks) * kB + blk;
            const bool k_in = kblock * kStageKBytes + chunk16 * 16 < p.a_row_bytes;
            const std::uint32_t b = b_addr<kB>(s, stage, blk);
#pragma unroll
            for (int i = 0; i < token_rows(kB) / 16; ++i) {
              const int rr = row0 + 16 * i;
              if (rr < width) {
                const std::uint32_t dst = b + rr * 128 + ((chunk16 ^ (rr & 7)) << 4);
                if (rows8) {
                  // Rows 8-byte aligned only: the 16-byte chunk as two halves, each zero past K.
#pragma unroll
                  for (int h = 0; h < 2; ++h) {
                    const bool ld = has_row[i] && kblock * kStageKBytes + chunk16 * 16 + 8 * h < p.a_row_bytes;
                    sm90::cp_async_8_zfill(dst + 8 * h,
                                           ld ? static_cast<const void*>(src[i] + kblock * kStageKBytes + 8 * h) : p.a,
                                           ld ? 8 : 0);
                  }
                } else {
                  const bool ld = has_row[i] && k_in;
                  sm90::cp_async_16_zfill(dst, ld ? static_cast<const void*>(src[i] + kblock * kStageKBytes) : p.a,
                                          ld ? 16 : 0);
                }
              }
            }
            if (rows8) {
              // The weight tile: 64 rows x 128 bytes of K, thread t the 8-byte column c8 = t % 16
              // of rows r0 + 8 j (r0 = t / 16), in the 128-byte swizzle TMA would write (16-byte
              // chunk c of row r at c ^ (r % 8); r % 8 = r0). Rows past rows_b and bytes past the
              // row are zeros, as TMA's out-of-bounds fill.
              const int c8 = t & 15, r0 = t >> 4;
              const std::int64_t kb = kblock * kStageKBytes + c8 * 8;
              const bool k_ok = kb < p.b_row_bytes;
              const std::uint32_t dst = a_addr<kB>(s, stage, blk, 0) + r0 * 128 + ((((c8 >> 1) ^ r0) << 4) | ((c8 & 1) << 3));
              const std::uint8_t* w =
                  p.b_rows8 + (static_cast<std::int64_t>(it.e) * p.rows_b + row_gate + r0) * p.b_row_bytes + kb;
#pragma unroll
              for (int j = 0; j < kTileRows / 8; ++j) {
                const bool ld = k_ok && row_gate + r0 + 8 * j < p.rows_b;
                sm90::cp_async_8_zfill(dst + j * 8 * 128, ld ? static_cast<const void*>(w + 8 * j * p.b_row_bytes) : p.b_rows8,
                                       ld ? 8 : 0);
              }
            }
          }
          if (kBlock128) {
            if (t < width) {
              const bool ld = t < it.count;
              sm90::cp_async_4_zfill(sm90::smem_addr(s.a_scale + stage * kMaxTokens + t),
                         ld ? static_cast<const void*>(tok_scale_src + ks) : p.a_scale, ld ? 4 : 0);
            }
            if (t == 64 || (kGateUp && t == 65)) {
              const int rb = (t == 64 ? row_gate : row_up) / 128;
              sm90::cp_async_4_zfill(sm90::smem_addr(s.b_scale + stage * 2 + (t - 64)),
                         p.b_scale + (static_cast<std::int64_t>(it.e) * p.row_blocks + rb) * p.k_groups + ks, 4);
            }
          }
          sm90::cp_async_mbar_arrive_noinc(full);
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
      }
    }
    sm90::cp_async_wait_all_groups();
  }

  // ---- consumer warpgroup: wgmma main loop over K, split-K reduction, epilogue ----
  // The item's token values for the epilogue (thread t < 64 holds token t's) into buffer `buf`
  // of the warpgroup's double buffer; a CTA barrier publishes them.
  static __device__ __forceinline__ void publish_tokens(const Smem& s, int buf, int t, int slot, float tw, float ts) {
    if (t < kMaxTokens) {
      s.tok_slot[buf * kMaxTokens + t] = slot;
      s.tok_weight[buf * kMaxTokens + t] = tw;
      s.tok_scale[buf * kMaxTokens + t] = ts;
    }
  }
  // GEMM2's value of y from an accumulator: the scales (per tensor / per channel), then the bias,
  // then the router weight on the output. Both epilogues (staged and direct) call it: the same
  // operations in the same order, the same bits.
  static __device__ __forceinline__ float y_value(const KernelParams& p, bool scaled, float acc, float tscale,
                                                  float bscale, float bias, float tweight) {
    // The products rounded on their own (__fmul_rn: never fused into an FMA with the bias add), so
    // that the kPlain kernel, where `scaled` is a constant, gives the general kernel's bits.
    if (scaled) acc = __fmul_rn(__fmul_rn(acc, tscale), bscale);
    acc += bias;
    if (!on_input(p)) acc *= tweight;
    return acc;
  }

  template <int W, int kB>
  static __device__ __forceinline__ void consume_item(const KernelParams& p, const Smem& s,
                                                      const Item& it, int& stage,
                                                      std::uint32_t& phase, int& round, int item_no,
                                                      float a_scale0, float& hmax) {
    const int t = threadIdx.x - kProducerThreads;  // 0..127
    const int warp = t >> 5, lane = t & 31;
    int ks_begin, ks_end;
    k_range(s, ks_begin, ks_end);

    // Per-token values for the epilogue (thread t < count holds token t), read once per item and
    // stored to shared memory after each tile's main loop. The producer staged the slots (and,
    // with sorted_weights, the routed weights; per tensor, b_scale[e]) at the item's first K
    // stage: they are read once that stage is full. A split-K rank without K stages (forced
    // split on a short K) has no stage: it loads them from global memory.
    int slot = 0;
    float tw = 1.0f, ts = 1.0f;
    float bsc_e = 1.0f;  // per tensor: b_scale[e]
    const bool staged = ks_begin < ks_end;

    // The item's tiles [it.tile, it.tile_end) share its tokens: one main loop, split-K exchange
    // and epilogue per tile; `round` counts tiles over the whole walk (it indexes the double
    // buffers and the split-K barrier parity, the same in every CTA of a cluster).
    for (int tile = it.tile; tile < it.tile_end; ++tile, ++round) {
      const int buf = round & 1;
      // Per-row values (this thread's tile rows rloc = 16 warp + lane/4 + 8h): independent global
      // loads, issued first so that their latency hides behind the main loop. Only where the call
      // has them (one uniform test: the code is neither run nor fetched otherwise), all four
      // issued back to back and the bias dtype dispatched once (load_bias_gather); a switch per
      // element had a jump table and waited for each load before the next (stall sampling at
      // gpt-oss TP1 M = 1: the most sampled instructions of the kernel, instruction fetch).
      float bsc[2][2], bia[2][2];  // [gate/up][h]; index 2g + h below
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        bsc[i >> 1][i & 1] = 1.0f;
        bia[i >> 1][i & 1] = 0.0f;
      }
      if (scale_mode(p) == kScalePerChannel || p.bias != nullptr) {
        std::int64_t idx[4];
        bool live[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int g = i >> 1, h = i & 1;
          const std::int64_t n = static_cast<std::int64_t>(tile) * kTileRows + warp * 16 + (lane >> 2) + 8 * h;
          live[i] = (g == 0 || kGateUp) && n < p.n_out;
          idx[i] = static_cast<std::int64_t>(it.e) * p.rows_b + (g == 1 ? p.n_out : 0) + n;
        }
        if (scale_mode(p) == kScalePerChannel) {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (live[i]) bsc[i >> 1][i & 1] = p.b_scale[idx[i]];
        }
        if (p.bias != nullptr) {
          float b[4];
          numerics::load_bias_gather<4>(p.bias, p.bias_type, idx, live, b);
#pragma unroll
          for (int i = 0; i < 4; ++i) bia[i >> 1][i & 1] = b[i];
        }
      }

      if (tile == it.tile) {  // the item's first tile: its token values
        if (staged) {
          // The main loop's wait on this stage then returns at once: the phase cannot move on
          // before this warpgroup releases the stage.
          sm90::mbar_wait(s.full + 8 * stage, phase);
          if (t < it.count) {
            slot = s.slot_meta[stage * kMaxTokens + t];
            if (!kBlock128 && p.sorted_weights) tw = s.a_scale[stage * kMaxTokens + t];
          }
          if (!kBlock128 && scale_mode(p) == kScalePerTensor) bsc_e = s.b_scale[stage * 2];
          // Every thread's reads precede its own arrival on the stage's empty barrier.
        } else {
          if (t < it.count) slot = p.sorted_slots[it.row_begin + t];
          if (scale_mode(p) == kScalePerTensor) bsc_e = p.b_scale[it.e];
        }
        if (t < it.count) {
          const int r = it.row_begin + t;
          if (p.sorted_weights) {
            if (kBlock128 || !staged) tw = p.sorted_weights[r];
          } else if (p.topk_weights) {
            tw = p.topk_weights[slot];
          }
          if (scale_mode(p) == kScalePerTensor) ts = a_scale0;
          else if (scale_mode(p) == kScalePerChannel) ts = p.a_scale[p.gather_a ? slot / p.top_k : r];
        }
      }
      if (scale_mode(p) == kScalePerTensor) {
        bsc[0][0] = bsc[0][1] = bsc_e;
        if (kGateUp) bsc[1][0] = bsc[1][1] = bsc_e;
      }

      float acc0[32], acc1[32];  // gate (or w2) and up accumulators; [0, W/2) used
#pragma unroll
      for (int i = 0; i < W / 2; ++i) { acc0[i] = 0.0f; acc1[i] = 0.0f; }
      if (!kBlock128) {
        int prev = 0;
        for (int ks = ks_begin; ks < ks_end; ++ks) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          sm90::fence_regs<W / 2>(acc0);
          if (kGateUp) sm90::fence_regs<W / 2>(acc1);
          sm90::wgmma_fence();
#pragma unroll
          for (int blk = 0; blk < kB; ++blk) {
            const std::uint64_t da0 = sm90::make_smem_desc_sw128(a_addr<kB>(s, stage, blk, 0));
            const std::uint64_t da1 = sm90::make_smem_desc_sw128(a_addr<kB>(s, stage, blk, kGateUp ? 1 : 0));
            const std::uint64_t db = sm90::make_smem_desc_sw128(b_addr<kB>(s, stage, blk));
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
              const int accumulate = (ks > ks_begin || blk > 0 || kk > 0) ? 1 : 0;
              sm90::Wgmma<Tag, W>::mma(acc0, da0 + 2 * kk, db + 2 * kk, accumulate);
              if (kGateUp) sm90::Wgmma<Tag, W>::mma(acc1, da1 + 2 * kk, db + 2 * kk, accumulate);
            }
          }
          sm90::wgmma_commit();
          sm90::fence_regs<W / 2>(acc0);
          if (kGateUp) sm90::fence_regs<W / 2>(acc1);
          if (ks > ks_begin) {
            // The previous stage's group is done: its shared memory can be refilled.
            sm90::wgmma_wait<1>();
            sm90::mbar_arrive(s.empty + 8 * prev);
          }
          prev = stage;
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
        sm90::wgmma_wait<0>();
        sm90::fence_regs<W / 2>(acc0);
        if (kGateUp) sm90::fence_regs<W / 2>(acc1);
        sm90::mbar_arrive(s.empty + 8 * prev);
      } else {
        // block128: each stage is one 128-wide K group; its partial sum is scaled by the token's
        // group scale and the weight block's scale, then added (fp32) to the accumulator.
        float tmp0[32], tmp1[32];
#pragma unroll
        for (int i = 0; i < W / 2; ++i) { tmp0[i] = 0.0f; tmp1[i] = 0.0f; }
        for (int ks = ks_begin; ks < ks_end; ++ks) {
          sm90::mbar_wait(s.full + 8 * stage, phase);
          sm90::fence_regs<W / 2>(tmp0);
          if (kGateUp) sm90::fence_regs<W / 2>(tmp1);
          sm90::wgmma_fence();
          // block128 layouts are never wide (kB == 1): a stage is one scale group.
          const std::uint64_t da0 = sm90::make_smem_desc_sw128(a_addr<kB>(s, stage, 0, 0));
          const std::uint64_t da1 = sm90::make_smem_desc_sw128(a_addr<kB>(s, stage, 0, kGateUp ? 1 : 0));
          const std::uint64_t db = sm90::make_smem_desc_sw128(b_addr<kB>(s, stage, 0));
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            sm90::Wgmma<Tag, W>::mma(tmp0, da0 + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
            if (kGateUp) sm90::Wgmma<Tag, W>::mma(tmp1, da1 + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
          }
          sm90::wgmma_commit();
          sm90::wgmma_wait<0>();
          sm90::fence_regs<W / 2>(tmp0);
          if (kGateUp) sm90::fence_regs<W / 2>(tmp1);
          const float* as = s.a_scale + stage * kMaxTokens;
          const float bs0 = s.b_scale[stage * 2 + 0];
          const float bs1 = kGateUp ? s.b_scale[stage * 2 + 1] : 0.0f;
#pragma unroll
          for (int j = 0; j < W / 8; ++j) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float sa = as[8 * j + 2 * (lane & 3) + c];
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int i = 4 * j + 2 * h + c;
                acc0[i] += tmp0[i] * sa * bs0;
                if (kGateUp) acc1[i] += tmp1[i] * sa * bs1;
              }
            }
          }
          sm90::mbar_arrive(s.empty + 8 * stage);
          if (++stage == s.stages) { stage = 0; phase ^= 1; }
        }
      }

      // Split-K: row group g = 2 warp + h (8 rows) belongs to rank g*S/8. Its other ranks store
      // their partial sums into the owner's recv[buf][source slot][group slot][plane][reg][lane]
      // with st.async, which completes bytes on the owner's red[buf] barrier; one owner thread
      // posts the expected byte count (the barrier's single arrival); the owner adds the partial
      // sums in ascending rank order (deterministic).
      // Reuse safety (parity-indexed buffers and barriers): a rank sends item i+2 only after it
      // passed item i+1's first named barrier, which follows its own wait for item i+1's partial
      // sums, which its peers send only after finishing item i (their receive included); so item
      // i+2's bytes reach a peer's red[buf] only after that peer has waited for item i's phase.
      const int S = splits(s);
      const int groups_per_rank = 8 / S;
      if (S > 1) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int g = 2 * warp + h;
          const int owner = g / groups_per_rank;
          if (owner == s.rank) continue;
          const int src_slot = s.rank < owner ? s.rank : s.rank - 1;
          const int gslot = g - owner * groups_per_rank;
          const float* block = s.recv + buf * s.recv_floats +
                               ((src_slot * groups_per_rank + gslot) * kPlanes) * kRecvBlockFloats;
          const std::uint32_t remote = sm90::map_to_rank(sm90::smem_addr(block), owner);
          const std::uint32_t remote_bar = sm90::map_to_rank(s.red + 8 * buf, owner);
#pragma unroll
          for (int j = 0; j < W / 8; ++j) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int r = 2 * j + c;        // register slot of this half
              const int i = 4 * j + 2 * h + c;
              sm90::st_async_f32(remote + 4 * (r * 32 + lane), acc0[i], remote_bar);
              if (kGateUp) sm90::st_async_f32(remote + 4 * (kRecvBlockFloats + r * 32 + lane), acc1[i], remote_bar);
            }
          }
        }
        const bool owns_any = (2 * warp) / groups_per_rank == s.rank || (2 * warp + 1) / groups_per_rank == s.rank;
        if (owns_any) {
          // The first owning warp's lane 0 posts this item's bytes: (S-1) sources x owned groups x
          // planes x W/4 registers x 32 lanes x 4 bytes. Bytes that land earlier leave the
          // transaction count negative until then, which the barrier allows.
          if (lane == 0 && warp == (s.rank * groups_per_rank) / 2)
            sm90::mbar_arrive_expect_tx(s.red + 8 * buf, (S - 1) * groups_per_rank * kPlanes * (W / 4) * 32 * 4);
          sm90::mbar_wait_cluster(s.red + 8 * buf, (round >> 1) & 1);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int g = 2 * warp + h;
            if (g / groups_per_rank != s.rank) continue;
            const int gslot = g - s.rank * groups_per_rank;
            for (int src = 0; src < S; ++src) {
              if (src == s.rank) continue;
              const int src_slot = src < s.rank ? src : src - 1;
              const float* block = s.recv + buf * s.recv_floats +
                                   ((src_slot * groups_per_rank + gslot) * kPlanes) * kRecvBlockFloats;
#pragma unroll
              for (int j = 0; j < W / 8; ++j) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  const int r = 2 * j + c;
                  const int i = 4 * j + 2 * h + c;
                  acc0[i] += block[r * 32 + lane];
                  if (kGateUp) acc1[i] += block[kRecvBlockFloats + r * 32 + lane];
                }
              }
            }
          }
        }
      }

      if constexpr (!kGateUp) {
        if (direct(p)) {
          // GEMM2's direct epilogue (params.hpp; split 1): the item's token values go to shared
          // memory once, at its first tile, double-buffered by item parity (a warp writes buffer
          // b for item n + 2 only after item n + 1's barrier, which every warp reaches after its
          // reads of item n); then each thread stores its own accumulators, with the staged
          // epilogue's arithmetic in its order (the same bits), and no barrier a tile.
          const int ibuf = item_no & 1;
          if (tile == it.tile) {
            publish_tokens(s, ibuf, t, slot, tw, ts);
            sm90::named_barrier_sync(1, kConsumerThreads);
          }
          const bool scaled = scale_mode(p) == kScalePerTensor || scale_mode(p) == kScalePerChannel;
          const std::int64_t n0 = static_cast<std::int64_t>(tile) * kTileRows;
          const int valid_rows = p.n_out - n0 < kTileRows ? static_cast<int>(p.n_out - n0) : kTileRows;
          float* const out = static_cast<float*>(p.out);
#pragma unroll
          for (int j = 0; j < W / 8; ++j) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = 8 * j + 2 * (lane & 3) + c;  // token of the item
              if (col >= it.count) continue;
              const float tweight = s.tok_weight[ibuf * kMaxTokens + col];
              const float tscale = s.tok_scale[ibuf * kMaxTokens + col];
              float* const orow = out + static_cast<std::int64_t>(s.tok_slot[ibuf * kMaxTokens + col]) * p.n_out + n0;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int rloc = warp * 16 + (lane >> 2) + 8 * h;
                if (rloc >= valid_rows) continue;
                orow[rloc] = y_value(p, scaled, acc0[4 * j + 2 * h + c], tscale, bsc[0][h], bia[0][h], tweight);
              }
            }
          }
          continue;
        }
      }

      // Publish the token values to the warpgroup (double-buffered by item parity: a warp writes
      // buffer b for item i+2 only after the first barrier of item i+1, which every warp reaches
      // after finishing item i). The same barrier orders the out_stage writes below after every
      // warp's reads of the previous item.
      publish_tokens(s, buf, t, slot, tw, ts);
      sm90::named_barrier_sync(1, kConsumerThreads);

      // Epilogue phase 1, in registers: scales, router weight, bias, for the row groups this CTA
      // owns; the values go to out_stage [token][tile row]. GEMM1 keeps gate and up (the
      // activation needs both); GEMM2's values are final.
      float* so0 = s.out_stage;
      float* so1 = s.out_stage + s.out_plane;
      const bool scaled = scale_mode(p) == kScalePerTensor || scale_mode(p) == kScalePerChannel;
#pragma unroll
      for (int j = 0; j < W / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = 8 * j + 2 * (lane & 3) + c;  // token of the item
          if (col >= it.count) continue;
          const float tweight = s.tok_weight[buf * kMaxTokens + col];
          const float tscale = s.tok_scale[buf * kMaxTokens + col];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if ((2 * warp + h) / groups_per_rank != s.rank) continue;
            const int rloc = warp * 16 + (lane >> 2) + 8 * h;
            const int i = 4 * j + 2 * h + c;
            if (kGateUp) {
              float v0 = acc0[i];
              if (scaled) v0 = __fmul_rn(__fmul_rn(v0, tscale), bsc[0][h]);  // not fused with the bias add (y_value)
              float v1 = acc1[i];
              if (scaled) v1 = __fmul_rn(__fmul_rn(v1, tscale), bsc[1][h]);
              if (on_input(p)) { v0 *= tweight; v1 *= tweight; }
              so0[col * kOutStride + rloc] = v0 + bia[0][h];
              so1[col * kOutStride + rloc] = v1 + bia[1][h];
            } else {
              so0[col * kOutStride + rloc] = y_value(p, scaled, acc0[i], tscale, bsc[0][h], bia[0][h], tweight);
            }
          }
        }
      }
      sm90::named_barrier_sync(1, kConsumerThreads);

      // Phase 2: activation and stores of the owned rows [64 rank / S, 64 (rank + 1) / S),
      // consecutive threads on consecutive output columns.
      const int rows_owned = kTileRows / S;
      const int r_lo = s.rank * rows_owned;
      const std::int64_t n0 = static_cast<std::int64_t>(tile) * kTileRows;
      const int valid_rows = p.n_out - n0 < kTileRows ? static_cast<int>(p.n_out - n0) : kTileRows;
      if (kGateUp) {
        // The output dtype dispatched once per tile (uniform), not per element: a switch inside
        // the loop was an indirect branch per store.
        auto phase2 = [&](auto out) {
          for (int idx = t; idx < it.count * rows_owned; idx += kConsumerThreads) {
            const int tok = idx / rows_owned, rr = r_lo + idx % rows_owned;
            if (rr >= valid_rows) continue;
            const float hval = numerics::activate<numerics::ActMath::kIeeeRsqrt2>(
                p.act, so0[tok * kOutStride + rr], so1[tok * kOutStride + rr], p.alpha, p.limit);
            if constexpr (kAbsmax) hmax = numerics::fold_absmax(hmax, hval);
            out[static_cast<std::int64_t>(it.row_begin + tok) * p.n_out + n0 + rr] =
                from_float<std::remove_pointer_t<decltype(out)>>(hval);
          }
        };
        if (p.out_type == kOutBf16) phase2(static_cast<__nv_bfloat16*>(p.out));
        else if (p.out_type == kOutF16) phase2(static_cast<__half*>(p.out));
        else phase2(static_cast<float*>(p.out));
      } else {
        for (int idx = t; idx < it.count * rows_owned; idx += kConsumerThreads) {
          const int tok = idx / rows_owned, rr = r_lo + idx % rows_owned;
          if (rr >= valid_rows) continue;
          const int tslot = s.tok_slot[buf * kMaxTokens + tok];
          static_cast<float*>(p.out)[static_cast<std::int64_t>(tslot) * p.n_out + n0 + rr] = so0[tok * kOutStride + rr];
        }
      }
    }
  }

  template <int kB>
  static __device__ void consume(const KernelParams& p, const Smem& s) {
    int stage = 0;
    std::uint32_t phase = 0;
    int round = 0;
    int item_no = 0;  // items this CTA walked (the direct epilogue's buffer parity)
    // Per tensor: the activation scale, once per CTA.
    const float a_scale0 = scale_mode(p) == kScalePerTensor ? p.a_scale[0] : 1.0f;
    // out_absmax: |h| of every value this thread stores, over all its items (one atomic per warp
    // per CTA). Phase 2 stores each live (row, column) of out once in the grid: rows past the
    // item's count, columns past n_out and the rows other split-K ranks own are skipped there.
    float hmax = 0.0f;
    const int num_clusters = gridDim.x / splits(s);
    for (int w = blockIdx.x / splits(s);; w += num_clusters) {
      Item it;
      if (!find_item(w, s.off, s.prefix, p.num_experts, p.num_col_tiles, p.tiles_per_item, it)) break;
      if constexpr (kB > 1) {  // wide stages: items of at most kWideMaxTokens tokens
        if (it.count <= 8) consume_item<8, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax);
        else consume_item<16, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax);
      } else {
        switch (token_width(it.count)) {
          case 8: consume_item<8, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax); break;
          case 16: consume_item<16, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax); break;
          case 32: consume_item<32, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax); break;
          default: consume_item<64, kB>(p, s, it, stage, phase, round, item_no, a_scale0, hmax); break;
        }
      }
      ++item_no;
    }
    // Every consumer thread walks the same items, so its warps leave the loop together.
    if constexpr (kAbsmax) {
      if (p.out_absmax != nullptr) numerics::warp_absmax_to_word(p.out_absmax, hmax);
    }
  }
};

// Persistent: cluster c (CTAs c*S .. c*S+S-1) takes items c, c + gridDim.x/S, ... Every thread
// walks the same item list; launched with cluster dimension S when S > 1. GEMM2 fits two CTAs an
// SM (128 registers a thread: ptxas 127, no spill; launch_sm90.cu gemm2_two_ctas); GEMM1 takes
// 205-225.
template <class Tag, bool kGateUp, bool kBlock128, bool kPlain = false>
__global__ void __launch_bounds__(kThreads, kGateUp ? 1 : 2)
    swapab_sm90_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using K = SwapAb<Tag, kGateUp, kBlock128, kPlain>;
  extern __shared__ std::uint8_t smem_raw[];
  const SmemLayout& L = p.smem;
  // 1024-aligned base: TMA destinations and 128-byte swizzle atoms need it. The dynamic shared
  // window starts at the same offset in every CTA, so DSMEM addresses match across the cluster.
  // Pointer arithmetic on the shared array (not an integer cast): pointers derived from base stay
  // known as shared memory (LDS / STS, not generic LD / ST).
  std::uint8_t* base = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  typename K::Smem s;
  // The barriers have the same offsets in both layouts (config.hpp): initialized before the wait.
  s.full = sm90::smem_addr(base + L.full_bar_off);
  s.empty = sm90::smem_addr(base + L.empty_bar_off);
  s.red = sm90::smem_addr(base + L.red_bar_off);
  s.split = kPlain ? 1 : p.split_k;
  s.rank = !kPlain && p.split_k > 1 ? static_cast<int>(sm90::cluster_ctarank()) : 0;
  s.recv_floats = recv_buffer_floats(kGateUp, p.split_k);

  const int E = p.num_experts;
  if (threadIdx.x == 0) {
    if (p.b_rows8 == nullptr) sm90::prefetch_tensormap(&p.tmap_b);  // else not encoded (params.hpp)
    const int bar_stages = max(L.stages, p.allow_wide ? p.smem_wide.stages : 0);
    for (int i = 0; i < bar_stages; ++i) {
      // full: the TMA thread's expect_tx arrival + one cp.async arrival per producer thread.
      sm90::mbar_init(s.full + 8 * i, 1 + kProducerThreads);
      // empty: one arrival per consumer thread once its wgmma reads of the stage completed (and
      // its reads of the item's token metadata there: each thread's own arrival releases them).
      sm90::mbar_init(s.empty + 8 * i, kConsumerThreads);
    }
    if (K::splits(s) > 1) {
      // red: one arrival (the owner's expect_tx) per item, plus the st.async bytes of the peers.
      sm90::mbar_init(s.red, 1);
      sm90::mbar_init(s.red + 8, 1);
    }
    sm90::fence_mbarrier_init_cluster();
    sm90::fence_proxy_async_shared_cta();
  }
  // PDL (cuda/common/pdl.cuh): the tensormap prefetch and the barrier init above overlap the
  // previous kernel; the row offsets (routing's) and everything after need it complete. Every
  // thread waits, then lets the next kernel launch: this grid is one persistent wave, all of it
  // resident by the time its CTAs get here, so the dependents' CTAs only take SMs it leaves free.
  pdl_wait();
  pdl_launch_dependents();
  // The expert table goes to the end of the larger layout's bytes (the same offset in both), so
  // that it is read before the layout is chosen.
  const int table_off = p.allow_wide ? max(L.table_off, p.smem_wide.table_off) : L.table_off;
  s.off = reinterpret_cast<int*>(base + table_off);
  s.prefix = s.off + (p.num_experts + 1);
  gemm_common::load_expert_offsets<kThreads>(p, E, s.off);
  // Item prefix over experts: items(e) = ceil(rows_e / 64) * ceil(tiles / T). Warp 0, 32
  // experts a step.
  const int tile_groups = (p.num_col_tiles + p.tiles_per_item - 1) / p.tiles_per_item;
  MOEKIT_BUILD_EXPERT_PREFIX_STEPPED(E, s.off, s.prefix, rows, (rows + kMaxTokens - 1) / kMaxTokens * tile_groups);
  // Wide stages (config.hpp) where no expert has more than kWideMaxTokens rows: every CTA decides
  // from the same offsets, so the ranks of a cluster agree on the layout and the K split.
  bool wide = kPlain;  // kPlain: every expert has at most kWideMaxTokens rows (its launch's rule)
  if (!kPlain && !kBlock128 && p.allow_wide) {
    bool many = false;
    for (int e = threadIdx.x; e < E; e += kThreads) many |= s.off[e + 1] - s.off[e] > kWideMaxTokens;
    wide = __syncthreads_or(many) == 0;
  }
  const SmemLayout& U = wide ? p.smem_wide : L;
  s.tiles = sm90::smem_addr(base + U.tiles_off);
  s.stages = U.stages;
  s.out_plane = U.out_plane_floats;
  s.k_stages = wide ? (p.num_k_stages + K::kWideB - 1) / K::kWideB : p.num_k_stages;
  s.a_scale = reinterpret_cast<float*>(base + U.a_scale_off);
  s.b_scale = reinterpret_cast<float*>(base + U.b_scale_off);
  s.slot_meta = reinterpret_cast<int*>(base + U.slot_off);
  s.tok_slot = reinterpret_cast<int*>(base + U.token_off);
  s.tok_weight = reinterpret_cast<float*>(base + U.token_off + 2 * kMaxTokens * 4);
  s.tok_scale = reinterpret_cast<float*>(base + U.token_off + 4 * kMaxTokens * 4);
  s.out_stage = reinterpret_cast<float*>(base + U.out_off);
  s.recv = reinterpret_cast<float*>(base + U.recv_off);
  // Peers' barriers must be initialized before any DSMEM store or remote arrive.
  if (K::splits(s) > 1) sm90::cluster_sync_relaxed();

  // The consumers' branch first: ptxas then lays the producer's code right after the entry instead
  // of past the consumers' epilogues (~150 KB), so the path to the first weight TMA is fetched in
  // sequence when the launch starts with its code cold (docs/tokmajor.md, session 17).
  if (threadIdx.x >= kProducerThreads) {
    if constexpr (kBlock128) K::template consume<1>(p, s);
    else if constexpr (kPlain) K::template consume<K::kWideB>(p, s);
    else if (!wide) K::template consume<1>(p, s);
    else K::template consume<K::kWideB>(p, s);
  } else {
    if constexpr (kBlock128) K::template produce<1>(p, s);
    else if constexpr (kPlain) K::template produce<K::kWideB>(p, s);
    else if (!wide) K::template produce<1>(p, s);
    else K::template produce<K::kWideB>(p, s);
  }
  // No CTA leaves while a peer may still write into its shared memory.
  if (K::splits(s) > 1) sm90::cluster_sync_relaxed();
#endif
}

// ---- host side of one instantiation (inst/*.cu) ----
// The instantiation, its shared-memory limit raised once a process and device. GEMM2 may run two
// CTAs an SM (launch_sm90.cu gemm2_two_ctas): the whole 228 KB as shared memory.
template <Operand kOp, bool kGateUp, bool kBlock128, bool kPlain>
auto* raised_kernel() {
  auto* kernel = &swapab_sm90_kernel<typename sm90::TagOf<kOp>::type, kGateUp, kBlock128, kPlain>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), kSmemLimit, raised, /*max_carveout=*/!kGateUp);
  return kernel;
}

template <Operand kOp, bool kGateUp, bool kBlock128>
void run_swapab_sm90(const KernelParams& kp, int grid, void* stream, bool pdl) {
  // kp.plain (launch_sm90.cu swapab_plain): the kPlain instantiation; only the one launched is raised.
  const auto pick = [&kp] {
    if constexpr (!kBlock128) {
      if (kp.plain) return raised_kernel<kOp, kGateUp, false, true>();
    }
    return raised_kernel<kOp, kGateUp, kBlock128, false>();
  };
  auto* kernel = pick();
  cudaLaunchAttribute attr[2];  // the cluster dimension, PDL
  const int smem_bytes = kp.allow_wide ? std::max(kp.smem.bytes, kp.smem_wide.bytes) : kp.smem.bytes;
  cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(grid), kThreads, smem_bytes,
                                                 static_cast<cudaStream_t>(stream), kp.split_k, attr);
  add_pdl_attribute(cfg, attr, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, kp));
}

}  // namespace moekit::cuda::swapab
