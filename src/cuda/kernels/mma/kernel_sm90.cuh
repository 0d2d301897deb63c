// Device code of the sm_90 grouped expert GEMMs, correct-first path: mma.sync tensor cores
// (bf16/fp16 m16n8k16, e4m3 m16n8k32) fed by ldmatrix from a swizzled 4-stage cp.async
// pipeline. Each CTA finds its (expert, row tile) from the device-side row offsets, so the
// launch needs no host synchronization and is CUDA-graph safe.
// On sm_90a, ptxas lowers mma.sync e4m3 to F2FP.F16.E4M3.UNPACK_B + HMMA.16816.F32 (f16): exact
// (e4m3 -> f16 is lossless) but at f16 mma.sync rate; fp8 tensor-core rate on Hopper needs wgmma.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/kernels/mma/config.hpp"
#include "cuda/kernels/mma/params.hpp"
#include "cuda/numerics/activation.cuh"
#include "cuda/numerics/bias.cuh"
#include "cuda/numerics/quant.cuh"

namespace moekit::cuda::mma_sm90 {

using Cfg = TileConfig;

// Loads one 16-byte smem chunk from bytes [k_off, k_off + 16) of a global row, in pieces of
// kVec bytes (16, 8 or 4: the widest that divides the row pitch). Pieces past k_bytes, and
// every piece of a row outside the tile (row_ok false), are zero-filled without a global read.
template <int kVec>
__device__ __forceinline__ void load_chunk(std::uint32_t dst, const std::uint8_t* row_ptr, std::int64_t k_off,
                                           std::int64_t k_bytes, bool row_ok) {
#pragma unroll
  for (int j = 0; j < 16 / kVec; ++j) {
    const bool ok = row_ok && k_off + kVec * j < k_bytes;
    const std::uint8_t* src = ok ? row_ptr + k_off + kVec * j : row_ptr;
    if constexpr (kVec == 16) {
      sm90::cp_async_16_zfill(dst, src, ok ? 16 : 0);
    } else if constexpr (kVec == 8) {
      sm90::cp_async_8_zfill(dst + 8 * j, src, ok ? 8 : 0);
    } else {
      sm90::cp_async_4_zfill(dst + 4 * j, src, ok ? 4 : 0);
    }
  }
}

// Two adjacent output columns (col even, so the pair is 4- or 8-byte aligned).
__device__ __forceinline__ void store_pair(void* out, DType dtype, std::int64_t i, float v0, float v1) {
  switch (dtype) {
    case DType::kBf16:
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(out) + i) = __floats2bfloat162_rn(v0, v1);
      break;
    case DType::kFp16:
      *reinterpret_cast<__half2*>(static_cast<__half*>(out) + i) = __floats2half2_rn(v0, v1);
      break;
    default: *reinterpret_cast<float2*>(static_cast<float*>(out) + i) = make_float2(v0, v1); break;
  }
}

// Tile layout. Smem holds, per stage, A [64 rows][128 B] then B [128 rows][128 B]; 16-byte
// chunk c of row r sits at chunk c ^ (r & 7), so the 8 rows one ldmatrix phase reads (same
// logical chunk) land on 8 distinct bank groups. Warps form 2 (rows) x 2 (B rows): warp (wm, wn)
// computes rows [32wm, 32wm+32) against B rows [32wn, 32wn+32) of both 64-row halves, so in
// GEMM1 a thread holds each gate value and its matching up value (acc[i][j] and acc[i][j+4]).
template <Operand kOp, bool kBlock128>
__global__ void __launch_bounds__(Cfg::kThreads)
    mma_sm90_kernel(const __grid_constant__ KernelArgs args) {
  constexpr bool kFp8 = kOp == Operand::kE4m3;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int BM = Cfg::kBlockM, BK = Cfg::kBlockKBytes, kHalf = Cfg::kHalfRowsB;
  extern __shared__ __align__(128) std::uint8_t smem[];
  __shared__ int s_expert, s_tile;

  const GroupedGemmParams& p = args.p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // PDL (cuda/common/pdl.cuh): the first global read (the row offsets, just below) needs the
  // previous kernel's output, and this kernel has no prologue to overlap (no barriers, no TMA), so
  // it waits first, in every CTA, also the surplus ones that exit below. Then its dependents
  // (quant of the intermediate, GEMM2, combine) may launch: every CTA that gets here is resident
  // and the later waves' CTAs trigger as they start.
  pdl_wait();
  pdl_launch_dependents();

  // ---- Which (expert, row tile)? Tiles are numbered expert by expert; the grid has
  // ceil(max_rows / BM) + E >= sum_e ceil(rows_e / BM) CTAs along x, the surplus exits. ----
  if (warp == 0) {
    if (lane == 0) s_expert = -1;
    __syncwarp();
    const int bid = static_cast<int>(blockIdx.x);
    int running = 0;  // tiles of the experts before this 32-expert window
    for (int base = 0; base < p.num_experts; base += 32) {
      const int e = base + lane;
      int tiles = 0;
      if (e < p.num_experts) {
        const int rows = p.row_offsets[e + 1] - p.row_offsets[e];
        tiles = rows > 0 ? rows / BM + (rows % BM != 0) : 0;
      }
      const int incl = warp_inclusive_sum(tiles, lane);
      const int start = running + incl - tiles;
      if (bid >= start && bid < start + tiles) {
        s_expert = e;
        s_tile = bid - start;
      }
      running += __shfl_sync(kFull, incl, 31);
      if (running > bid) break;  // warp-uniform
    }
  }
  __syncthreads();
  const int expert = s_expert;
  if (expert < 0) return;
  const int row_begin = p.row_offsets[expert] + s_tile * BM;
  const int row_end = p.row_offsets[expert + 1];

  const bool gemm1 = p.epilogue == GemmEpilogue::kGateUpActivation;
  const std::int64_t n_out = p.n_out;
  const std::int64_t k_bytes = args.k_bytes;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.y) * (gemm1 ? kHalf : 2 * kHalf);
  const int vec = args.vec_bytes;

  // ---- Loader: thread t copies chunk t % 8 of tile rows t / 8 + 16 i. ----
  const int ld_row = tid >> 3, ld_chunk = tid & 7;
  const std::uint32_t ld_dst = ld_row * BK + ((ld_chunk ^ (ld_row & 7)) << 4);  // (r + 16 i) & 7 == r & 7
  const std::uint8_t* const a_base = static_cast<const std::uint8_t*>(p.a);
  const std::uint8_t* const b_base = static_cast<const std::uint8_t*>(p.b);
  // A rows as 32-bit indices (-1: outside the tile), B rows as one base and two strides: fewer
  // live registers through the main loop than one 64-bit pointer per loaded row.
  int a_row[BM / 16];
#pragma unroll
  for (int i = 0; i < BM / 16; ++i) {
    const int r = row_begin + ld_row + 16 * i;
    a_row[i] = r < row_end ? (p.gather_a_by_token ? p.sorted_slots[r] / p.top_k : r) : -1;
  }
  const std::int64_t b_first_row = static_cast<std::int64_t>(expert) * args.rows_b + n0 + ld_row;
  unsigned b_ok = 0;
#pragma unroll
  for (int i = 0; i < 2 * kHalf / 16; ++i) {
    const int half = i / (kHalf / 16), in_half = ld_row + 16 * (i % (kHalf / 16));
    if (n0 + in_half + half * args.half_col_step < n_out) b_ok |= 1u << i;
  }
  const std::uint32_t smem_base = sm90::smem_addr(smem);
  auto load_stage_vec = [&](auto vec_tag, int slot, int kt) {
    constexpr int kVec = decltype(vec_tag)::value;
    // The row pitch goes through an empty asm so the 12 row addresses are recomputed each stage
    // (a few IMADs) instead of being hoisted into 24 live registers for the whole main loop.
    std::int64_t pitch = k_bytes;
    asm volatile("" : "+l"(pitch));
    const std::uint32_t sa = smem_base + slot * Cfg::kStageBytes + ld_dst;
    const std::uint32_t sb = sa + BM * BK;
    const std::int64_t k_off = static_cast<std::int64_t>(kt) * BK + ld_chunk * 16;
#pragma unroll
    for (int i = 0; i < BM / 16; ++i) {
      const bool ok = a_row[i] >= 0;
      load_chunk<kVec>(sa + i * 16 * BK, ok ? a_base + a_row[i] * pitch : a_base, k_off, k_bytes, ok);
    }
#pragma unroll
    for (int i = 0; i < 2 * kHalf / 16; ++i) {
      const bool ok = (b_ok >> i) & 1;
      const std::int64_t row = b_first_row + 16 * (i % (kHalf / 16)) + (i / (kHalf / 16)) * args.half_row_step;
      load_chunk<kVec>(sb + i * 16 * BK, ok ? b_base + row * pitch : b_base, k_off, k_bytes, ok);
    }
  };
  auto load_stage = [&](int slot, int kt) {
    if (vec == 16) {
      load_stage_vec(std::integral_constant<int, 16>{}, slot, kt);
    } else if (vec == 8) {
      load_stage_vec(std::integral_constant<int, 8>{}, slot, kt);
    } else {
      load_stage_vec(std::integral_constant<int, 4>{}, slot, kt);
    }
  };

  // ---- Fragment addresses (ldmatrix.x4). A: m16 tile rows lane & 15, chunk +(lane >> 4).
  // B: two n8 tiles per x4, rows (lane & 7) + 8 (lane >> 4), chunk +((lane >> 3) & 1). ----
  const int wm = warp >> 1, wn = warp & 1;
  const int x7 = lane & 7;
  std::uint32_t a_frag_row[2], b_frag_row[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) a_frag_row[i] = (wm * 32 + i * 16 + (lane & 15)) * BK;
#pragma unroll
  for (int jp = 0; jp < 4; ++jp)
    b_frag_row[jp] = ((jp >> 1) * kHalf + wn * 32 + (jp & 1) * 16 + x7 + (lane >> 4) * 8) * BK;
  const int a_hi = lane >> 4, b_hi = (lane >> 3) & 1;

  // ---- Per-thread output rows: 32wm + 16i + 8h + lane/4 of the tile (sorted row index). ----
  auto thread_row = [&](int i, int h) { return row_begin + wm * 32 + i * 16 + h * 8 + (lane >> 2); };
  auto a_row_of = [&](int r, int slot) { return p.gather_a_by_token ? slot / p.top_k : r; };
  // Output column of tile j, pair element 0: B rows 32wn + 8(j%4) + 2(lane%4) of half j/4.
  auto col_of = [&](int j) -> std::int64_t {
    return n0 + (j >> 2) * args.half_col_step + wn * 32 + (j & 3) * 8 + (lane & 3) * 2;
  };

  float acc[2][8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;

  // block128 scale lookups, kept in smem (not registers) across the main loop: the activation
  // scale row of each tile row (-1 outside the tile) and, per local B row, the offset of its
  // 128-row weight-scale block in this expert's scales (a column pair never straddles a block:
  // its first row is even).
  __shared__ int s_scale_a_row[kBlock128 ? BM : 1];
  __shared__ int s_scale_b_off[kBlock128 ? 2 * kHalf : 1];
  if constexpr (kBlock128) {
    if (tid < BM) {
      const int r = row_begin + tid;
      s_scale_a_row[tid] = r < row_end ? a_row_of(r, p.gather_a_by_token ? p.sorted_slots[r] : 0) : -1;
    }
    for (int lb = tid; lb < 2 * kHalf; lb += Cfg::kThreads) {
      const int half = lb / kHalf, in_half = lb % kHalf;
      const bool ok = n0 + in_half + half * args.half_col_step < n_out;
      const std::int64_t b_row = n0 + in_half + half * args.half_row_step;
      s_scale_b_off[lb] = ok ? static_cast<int>(b_row / 128) * args.num_k_groups : 0;
    }
  }

  // MMAs of one stage for the n8 tiles [j0, j0 + kNJ) (kNJ even) into d[i][j - j0].
  auto compute_stage = [&](auto j0_tag, int slot, auto& d) {
    constexpr int j0 = decltype(j0_tag)::value;
    constexpr int kNJ = static_cast<int>(sizeof(d[0]) / sizeof(d[0][0]));
    const std::uint32_t sa = smem_base + slot * Cfg::kStageBytes;
    const std::uint32_t sb = sa + BM * BK;
    // block128 keeps 64 accumulators plus 32 partials: unrolling all 4 k-steps there lets the
    // scheduler hoist fragments past 255 registers (spills); by 2 it stays near 180.
#pragma unroll(kBlock128 ? 2 : BK / 32)
    for (int ks = 0; ks < BK / 32; ++ks) {  // 32 bytes of K per mma: k16 bf16/fp16 or k32 e4m3
      std::uint32_t af[2][4], bfr[kNJ / 2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) sm90::ldmatrix_x4(af[i], sa + a_frag_row[i] + (((2 * ks + a_hi) ^ x7) << 4));
#pragma unroll
      for (int jp = 0; jp < kNJ / 2; ++jp)
        sm90::ldmatrix_x4(bfr[jp], sb + b_frag_row[j0 / 2 + jp] + (((2 * ks + b_hi) ^ x7) << 4));
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kNJ; ++j) sm90::mma_m16n8<kOp>(d[i][j], af[i], bfr[j >> 1][(j & 1) * 2], bfr[j >> 1][(j & 1) * 2 + 1]);
    }
  };

  // ---- Main loop: kStages - 1 tiles in flight; tile kt + kStages - 1 goes into the slot that
  // every thread finished reading before this iteration's barrier. ----
  const int num_k_tiles = args.num_k_tiles;
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < num_k_tiles) load_stage(s, s);
    sm90::cp_async_commit();
  }
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    sm90::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    const int next = kt + Cfg::kStages - 1;
    if (next < num_k_tiles) load_stage(next % Cfg::kStages, next);
    sm90::cp_async_commit();
    if constexpr (kBlock128) {
      // One stage == one 128-wide K group g = kt: acc += (partial * a_scale[row, g]) * b_scale[e, n/128, g].
      const float* a_sc = p.a_scale + kt;
      const float* b_sc = p.b_scale + static_cast<std::int64_t>(expert) * args.num_b_blocks * args.num_k_groups + kt;
      float sa[2][2], sbv[8];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int a_row = s_scale_a_row[wm * 32 + i * 16 + h * 8 + (lane >> 2)];
          sa[i][h] = a_row >= 0 ? a_sc[static_cast<std::int64_t>(a_row) * args.num_k_groups] : 0.f;
        }
#pragma unroll
      for (int j = 0; j < 8; ++j)
        sbv[j] = b_sc[s_scale_b_off[(j >> 2) * kHalf + wn * 32 + (j & 3) * 8 + (lane & 3) * 2]];
      // One 64-row half of the B tile at a time: 32 partial registers instead of 64 (the A
      // fragments are read twice from smem).
      auto fold_half = [&](auto j0_tag) {
        constexpr int j0 = decltype(j0_tag)::value;
        float part[2][4][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) part[i][j][c] = 0.f;
        compute_stage(j0_tag, kt % Cfg::kStages, part);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j0 + j][c] += part[i][j][c] * sa[i][c >> 1] * sbv[j0 + j];
      };
      fold_half(std::integral_constant<int, 0>{});
      fold_half(std::integral_constant<int, 4>{});
    } else {
      compute_stage(std::integral_constant<int, 0>{}, kt % Cfg::kStages, acc);
    }
  }
  sm90::cp_async_wait<0>();

  // ---- Epilogue (registers straight to global; pairs of columns per store). ----
  const bool per_tensor = p.scheme == Scheme::kFp8PerTensor;
  const std::int64_t e_rows_b = static_cast<std::int64_t>(expert) * args.rows_b;
  const bool use_weight = gemm1 ? p.weight_on_input : !p.weight_on_input;
  // out_absmax (fp8_per_tensor GEMM1, fp32 out): |h| of every value this thread stores. Only the
  // e4m3 per-tensor / per-channel instantiation folds it; the others compile as before.
  constexpr bool kAbsmax = kFp8 && !kBlock128;
  float hmax = 0.f;
  // The bias of this thread's columns, the same for each of its rows: loaded once, all together
  // (numerics::load_bias_gather), before the rows. GEMM1: [0, 8) the gate columns col_of(j) + c
  // (j < 4), [8, 16) the up columns; GEMM2: col_of(j) + c (j < 8). n_out is even (can_implement),
  // so a column pair is live or not together.
  float bcol[16];
  if (p.bias != nullptr) {
    std::int64_t idx[16];
    bool live[16];
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const std::int64_t col = col_of(gemm1 ? (q >> 1) & 3 : q >> 1) + (q & 1);
      live[q] = col < n_out;
      idx[q] = e_rows_b + (gemm1 && q >= 8 ? n_out : 0) + col;
    }
    numerics::load_bias_gather<16>(p.bias, numerics::bias_type_of(true, p.bias_dtype), idx, live, bcol);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = thread_row(i, h);
      if (r >= row_end) continue;
      const int slot = p.sorted_slots != nullptr ? p.sorted_slots[r] : 0;
      float sa = 1.f;
      if constexpr (kFp8 && !kBlock128) sa = per_tensor ? p.a_scale[0] : p.a_scale[a_row_of(r, slot)];
      const float w = use_weight ? p.topk_weights[slot] : 1.f;
      // (sum * a_scale) * b_scale for per-tensor / per-channel fp8; identity otherwise.
      auto scaled = [&](float x, std::int64_t b_row) -> float {
        if constexpr (kFp8 && !kBlock128) {
          const float sb = per_tensor ? p.b_scale[expert] : p.b_scale[e_rows_b + b_row];
          return x * sa * sb;
        } else {
          return x;
        }
      };
      if (gemm1) {
        const std::int64_t out_base = static_cast<std::int64_t>(r) * n_out;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const std::int64_t col = col_of(j);
          if (col >= n_out) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float g = scaled(acc[i][j][2 * h + c], col + c);
            float u = scaled(acc[i][j + 4][2 * h + c], n_out + col + c);
            if (p.weight_on_input) {
              g *= w;
              u *= w;
            }
            if (p.bias != nullptr) {
              g += bcol[2 * j + c];
              u += bcol[8 + 2 * j + c];
            }
            v[c] = numerics::activate<numerics::ActMath::kIeee>(p.activation, g, u);
            if constexpr (kAbsmax) hmax = numerics::fold_absmax(hmax, v[c]);
          }
          store_pair(p.out, p.out_dtype, out_base + col, v[0], v[1]);
        }
      } else {
        const std::int64_t out_base = static_cast<std::int64_t>(slot) * n_out;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const std::int64_t col = col_of(j);
          if (col >= n_out) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float x = scaled(acc[i][j][2 * h + c], col + c);
            if (p.bias != nullptr) x += bcol[2 * j + c];
            v[c] = x * w;
          }
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + out_base + col) = make_float2(v[0], v[1]);
        }
      }
    }
  // The rows and columns skipped above (past row_end, past n_out) were not stored and are not
  // folded: every live (row, column) of out is stored by exactly one thread of the grid. The
  // warp's lanes are converged again here (the loops above only skip iterations).
  if constexpr (kAbsmax) {
    if (p.out_absmax != nullptr) numerics::warp_absmax_to_word(p.out_absmax, hmax);
  }
}

// Host side of one instantiation: raise the dynamic smem limit (once per device) and launch.
template <Operand kOp, bool kBlock128>
void launch_kernel(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl) {
  auto* kernel = &mma_sm90_kernel<kOp, kBlock128>;
  static std::atomic<std::uint64_t> raised{0};
  raise_smem_limit_once(reinterpret_cast<const void*>(kernel), static_cast<int>(Cfg::kSmemBytes), raised);
  launch_kernel_pdl(kernel, dim3(grid_x, grid_y, 1), dim3(Cfg::kThreads), Cfg::kSmemBytes,
                    static_cast<cudaStream_t>(stream), pdl, args);
}

}  // namespace moekit::cuda::mma_sm90
