// The bandwidth inv_rope_fp8_quant kernel (config.hpp InvRopeQuantBulkConfig), for large T: a
// persistent grid of warp-specialized CTAs. One producer warp streams tiles of kRows (token, head)
// rows into a kStages-deep shared-memory ring with 1D bulk copies (cp.async.bulk, one instruction
// a 1 KB row, completing on the stage's mbarrier), the positions kPosAhead tiles ahead (cp.async),
// each tile's cos/sin rows right after its rows; consumer warps take two rows each a tile.
// The same float operations per element as the other kernels (kernel_sm90.cuh: inverse_rotate,
// scale_exponent, e4m3x2), so the same bytes; only the lanes' channel layout differs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/rope_quant/kernel_pipe_sm90.cuh"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {
namespace rope_quant {

// A staged row's pitch: 1 KB + 16 B, so the second row of a consumer warp's pair starts 4 banks
// over and the warp's 16-byte reads (quarter-warp = one block of both rows) are conflict-free.
constexpr int kBulkRowPitch = 1040;
constexpr int kBulkCsPitch = 256;  // floats of a cos/sin row: rope_dim <= 64
constexpr int kBulkPosRing = 4;    // producer's position ring (> kPosAhead)

template <int kRows, int kStages>
struct BulkSmem {
  alignas(128) unsigned char x[kStages][kRows * kBulkRowPitch];  // tile row i at i * kBulkRowPitch
  alignas(16) unsigned char cs[kStages][kRows][kBulkCsPitch];     // token slot j = t - first token of the tile
  unsigned okmask[kStages];  // bit j: token slot j's position lies in the cache (written by the arriving lane)
  alignas(8) unsigned long long full[kStages];   // 2 arrivals (rows, cos/sin) + their bytes
  unsigned long long empty[kStages];             // one arrival per consumer warp
  long long pos[kBulkPosRing][32];               // [ring][producer lane]: lane-private cp.async slots
};

// ld.shared of 16 / 8 bytes at a shared-window address.
__device__ __forceinline__ uint4 lds128(std::uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ uint2 lds64(std::uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
  return v;
}

// 8 bf16 channels (one 16-byte chunk) -> fp32.
__device__ __forceinline__ void unpack8(const uint4& w, float (&y)[8]) {
  const std::uint32_t v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    y[2 * k] = bf16_lo(v[k]);
    y[2 * k + 1] = bf16_hi(v[k]);
  }
}

// 8 values -> 8 e4m3 bytes (2 words) against 1 / scale = inv (exact products; RNE, satfinite;
// -NaN's 0xff made 0x7f as canonical_nan_bytes documents).
__device__ __forceinline__ uint2 quant8(const float (&y)[8], float inv) {
  std::uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k >> 1] |= static_cast<std::uint32_t>(numerics::e4m3x2(y[2 * k] * inv, y[2 * k + 1] * inv)) << (16 * (k & 1));
  return make_uint2(canonical_nan_bytes(w[0]), canonical_nan_bytes(w[1]));
}

__device__ __forceinline__ float absmax8(const float (&y)[8], float a) {
#pragma unroll
  for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(y[j]));  // fmaxf: a NaN never wins
  return a;
}

// The cos index of a tail lane's first pair (tail index ti: channels 448 + 4ti ..+4); the pair is
// rotated iff it is >= 0 (rope_dim <= 64).
__device__ __forceinline__ int tail_cos_index(int rope_dim, int ti) { return 2 * ti - ((512 - rope_dim) / 2 - 224); }

// One lane's share of two rows in the consumer layout (below): its main chunks a0, a1 (P0) and c0,
// c1 (P1) of block b, its 4 tail channels tw with the cos / sin of their pairs (cv, sv; ci: the
// first pair's cos index, rotated iff >= 0), ok = the row's position lies in the cache, valid =
// the row exists (t, h). Rotation, the block absmaxes, scales, e4m3 bytes and the stores.
// Warp-uniform: every lane of the warp calls it (the shuffles span both rows).
__device__ __forceinline__ void quantize_lane(const InvRopeQuantParams& p, const uint4& a0, const uint4& a1,
                                              const uint4& c0, const uint4& c1, const uint2& tw, float2 cv, float2 sv,
                                              int ci, bool ok, bool valid, int t, int h, int lane) {
  constexpr int kD = 512;
  const int jj = lane & 3, b = lane >> 3;
  const int ti = jj + 4 * b;          // tail index: channels 448 + 4ti ..+4
  const int src3 = 24 | (lane & 4);   // the lane of this row's block 3, jj = 0
  // Tail: rotate, absmax over the row's 16 lanes.
  float yt[4] = {bf16_lo(tw.x), bf16_hi(tw.x), bf16_lo(tw.y), bf16_hi(tw.y)};
  if (ci >= 0) {
    inverse_rotate(yt[0], yt[1], cv.x, sv.x);
    inverse_rotate(yt[2], yt[3], cv.y, sv.y);
  }
  float at = fmaxf(fmaxf(fabsf(yt[0]), fabsf(yt[1])), fmaxf(fabsf(yt[2]), fabsf(yt[3])));
  at = fmaxf(at, __shfl_xor_sync(0xffffffffu, at, 1));
  at = fmaxf(at, __shfl_xor_sync(0xffffffffu, at, 2));
  at = fmaxf(at, __shfl_xor_sync(0xffffffffu, at, 8));
  at = fmaxf(at, __shfl_xor_sync(0xffffffffu, at, 16));

  // Main: absmax over the block's 4 lanes (block 3 adds the tail).
  float y0[8], y1[8], y2[8], y3[8];
  unpack8(a0, y0);
  unpack8(a1, y1);
  unpack8(c0, y2);
  unpack8(c1, y3);
  float am = absmax8(y1, absmax8(y0, 0.0f));
  am = b < 3 ? absmax8(y3, absmax8(y2, am)) : fmaxf(am, at);
  am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
  am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
  const std::uint32_t E = scale_exponent(am);
  const std::uint32_t E3 = __shfl_sync(0xffffffffu, E, src3);

  const float inv = __uint_as_float((254u - E) << 23), inv3 = __uint_as_float((254u - E3) << 23);  // exact
  const uint2 q0 = quant8(y0, inv), q1 = quant8(y1, inv), q2 = quant8(y2, inv), q3 = quant8(y3, inv);
  std::uint32_t qt = static_cast<std::uint32_t>(numerics::e4m3x2(yt[0] * inv3, yt[1] * inv3)) |
                     (static_cast<std::uint32_t>(numerics::e4m3x2(yt[2] * inv3, yt[3] * inv3)) << 16);
  qt = canonical_nan_bytes(qt);

  std::uint32_t e1 = 0, e2 = 0;  // packed scales: blocks 1, 2 of the row (block 3 is E3)
  if (p.packed_ue8m0) {
    e1 = __shfl_sync(0xffffffffu, E, 8 | (lane & 4));
    e2 = __shfl_sync(0xffffffffu, E, 16 | (lane & 4));
  }
  if (valid) {
    const int g = h / p.heads_per_group, hh = h - g * p.heads_per_group;
    std::uint8_t* qrow = p.q + g * p.q_stride_g + static_cast<std::int64_t>(t) * p.q_stride_t + hh * kD;
    const uint4 nan4 = make_uint4(0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu);
    *reinterpret_cast<uint4*>(qrow + 128 * b + 16 * jj) = ok ? make_uint4(q0.x, q0.y, q1.x, q1.y) : nan4;
    if (b < 3) *reinterpret_cast<uint4*>(qrow + 128 * b + 64 + 16 * jj) = ok ? make_uint4(q2.x, q2.y, q3.x, q3.y) : nan4;
    *reinterpret_cast<std::uint32_t*>(qrow + 448 + 4 * ti) = ok ? qt : 0x7f7f7f7fu;
    std::uint32_t* sc = static_cast<std::uint32_t*>(p.scale) + g * p.s_stride_g + t;
    if (p.packed_ue8m0) {
      if (b == 0 && jj == 0) sc[hh * p.s_stride_b] = ok ? (E | (e1 << 8) | (e2 << 16) | (E3 << 24)) : 0xffffffffu;
    } else if (jj == 0) {
      sc[(hh * 4 + b) * p.s_stride_b] = ok ? E << 23 : 0x7fffffffu;
    }
  }
}

}  // namespace rope_quant

// Consumer lane layout (a warp holds rows 2w and 2w + 1 of the tile): lane l has jj = l & 3,
// row = (l >> 2) & 1, block b = l >> 3 (quarter-warp q = block q of both rows):
// - main: chunks 2jj, 2jj + 1 (P0: channels 128b + 16jj ..+16) and, for b < 3, chunks 8 + 2jj,
//   9 + 2jj (P1: 128b + 64 + 16jj ..+16) of block b: a block's absmax is 4 lanes (2 xor-shuffles),
//   each P is one 16-byte store of 16 e4m3 bytes.
// - tail: channels 448..511 (the rotated ones for rope_dim <= 64), spread over the row's 16 lanes,
//   tail index ti = jj + 4b: channels 448 + 4ti ..+4 (2 pairs), one 4-byte store. Block 3's
//   absmax = its lanes' P0 (channels 384..447) and the whole tail (4 more xor-shuffles over the
//   row's lanes: offsets 1, 2, 8, 16 keep bit 2, the row).
// The float64 rotation is 2 pairs on every lane (a warp issues it once per two rows).
//
// The tile schedule: CTA c takes tiles c, c + gridDim.x, ... (tile k = rows k * kRows ..+kRows of
// the token-major order r = t * H + h, so its rows share a few tokens' positions and cos/sin rows).
// Producer iteration k: wait for stage k % S to be empty, bulk-copy tile k's rows into it
// (arrival 1 of full[k % S], with their bytes); wait for tile k's positions (cp.async'd kAhead
// iterations earlier into a lane-private ring, one group an iteration), mark each token's position
// valid or not, bulk-copy the valid tokens' cos/sin rows (arrival 2, with their bytes); cp.async
// tile k + kAhead's positions. So a tile's rows and cos/sin rows are both in flight S - 1 tiles
// before they are used, and the position -> cos/sin chain costs the stream nothing once the
// positions run kAhead tiles ahead (at one tile a CTA, e.g. small T, the rows are issued before the
// wait: max(rows, position -> cos/sin) latency).
template <class Cfg>
__global__ void __launch_bounds__((Cfg::kConsumerWarps + 1) * 32, Cfg::kMinBlocksPerSm)
    inv_rope_quant_bulk_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  using namespace sm90;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kS = Cfg::kStages;
  constexpr int kC = Cfg::kConsumerWarps;
  constexpr int kR = Cfg::kRows;  // 2 rows a consumer warp
  constexpr int kAhead = Cfg::kPosAhead;
  static_assert(kD == 512 && Cfg::kMaxRopeDim == 64, "the tail is channels 448..511");
  static_assert(kR == 2 * kC && kR <= 32, "a producer lane per row and per token");
  static_assert(kAhead >= 1 && kAhead < kBulkPosRing, "a tile's position slot is refilled kAhead tiles after it was read");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  BulkSmem<kR, kS>& sm = *reinterpret_cast<BulkSmem<kR, kS>*>(smem_raw);

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int H = p.num_heads;
  const int TH = static_cast<int>(p.num_tokens) * H;  // < 2^31 (launcher)
  const int ntiles = (TH + kR - 1) / kR;
  const int first = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
  const int n = first < ntiles ? (ntiles - 1 - first) / stride + 1 : 0;  // this CTA's tiles

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      mbar_init(smem_addr(&sm.full[s]), 2);
      mbar_init(smem_addr(&sm.empty[s]), kC);
    }
    fence_mbarrier_init_cluster();  // visible to the async proxy (the bulk copies' complete_tx)
  }
  __syncthreads();

  if (warp == kC) {
    // ---- producer warp ----
    const std::uint64_t policy = createpolicy_evict_first();  // o is read once
    const int cs_bytes = p.rope_dim * 4;                        // a multiple of 16 (launcher)
    // Tile k's first row, its row count and its tokens [tf, tf + ntok).
    auto tile_rows = [&](int k, int& r0, int& nrows, int& tf, int& ntok) {
      r0 = (first + k * stride) * kR;
      nrows = min(kR, TH - r0);
      tf = r0 / H;
      ntok = (r0 + nrows - 1) / H - tf + 1;
    };
    // Tile k's positions into ring slot k: one cp.async a token lane, one group (empty past the
    // CTA's last tile, so that group i is always tile i's).
    auto issue_positions = [&](int k) {
      if (k < n) {
        int r0, nrows, tf, ntok;
        tile_rows(k, r0, nrows, tf, ntok);
        cp_async_8_if(lane < ntok, smem_addr(&sm.pos[k & (kBulkPosRing - 1)][lane]),
                      p.positions + static_cast<std::int64_t>(tf + (lane < ntok ? lane : 0)) * p.pos_stride);
      }
      cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < kAhead; ++k) issue_positions(k);
    for (int k = 0; k < n; ++k) {
      const int s = k & (kS - 1);
      int r0, nrows, tf, ntok;
      tile_rows(k, r0, nrows, tf, ntok);
      const std::uint32_t full = smem_addr(&sm.full[s]);
      // 1. The rows (arrival 1 of the stage), as soon as the stage is free.
      mbar_wait(smem_addr(&sm.empty[s]), ((k / kS) & 1) ^ 1);  // first round: returns at once
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<std::uint32_t>(nrows) * 1024u);
      if (lane < nrows) {
        const int r = r0 + lane, t = r / H, h = r - t * H;
        const std::uint16_t* src = p.o + static_cast<std::int64_t>(t) * p.o_stride_t + static_cast<std::int64_t>(h) * p.o_stride_h;
        bulk_copy_g2s_hint(smem_addr(&sm.x[s][lane * kBulkRowPitch]), src, 1024u, full, policy);
      }
      // 2. The cos/sin rows (arrival 2): tile k's positions were issued kAhead tiles ago.
      cp_async_wait<kAhead - 1>();  // groups 0..k landed
      const long long pos = lane < ntok ? sm.pos[k & (kBulkPosRing - 1)][lane] : -1;
      const bool ok = lane < ntok && pos >= 0 && pos < p.max_pos;
      const unsigned okmask = __ballot_sync(0xffffffffu, ok);
      // Lane 0 writes the mask and arrives: its own release orders the write (one word instead of
      // a flag a lane, as until session 41). racecheck still reports the consumers' reads of it,
      // and of the rows, against the producer's next fill of the stage: those reads are ordered
      // before lane 0's release of the stage by the warp barrier, which racecheck does not carry
      // to the arrival (the same limit as in tokmajor/kernel_sm90.cuh; docs/rope_quant.md).
      if (lane == 0) {
        sm.okmask[s] = okmask;
        mbar_arrive_expect_tx(full, static_cast<std::uint32_t>(__popc(okmask) * cs_bytes));
      }
      if (ok && cs_bytes > 0)
        bulk_copy_g2s(smem_addr(&sm.cs[s][lane][0]), p.cos_sin + pos * p.cache_stride, static_cast<std::uint32_t>(cs_bytes), full);
      // 3. The positions of tile k + kAhead (its ring slot was read kBulkPosRing - kAhead tiles ago).
      issue_positions(k + kAhead);
    }
    cp_async_wait_all_groups();
    return;
  }

  // ---- consumer warps ----
  const int jj = lane & 3, rb = (lane >> 2) & 1, b = lane >> 3;
  const int ti = jj + 4 * b;  // tail index: channels 448 + 4ti ..+4
  const int lr = 2 * warp + rb;
  const int half = p.rope_dim >> 1;
  const int ci = tail_cos_index(p.rope_dim, ti);
  for (int k = 0; k < n; ++k) {
    const int s = k & (kS - 1);
    mbar_wait(smem_addr(&sm.full[s]), (k / kS) & 1);
    const int r0 = (first + k * stride) * kR;
    const int r = r0 + lr;
    const bool valid = r < TH;
    const int t = static_cast<int>(static_cast<unsigned>(r) / static_cast<unsigned>(H)), h = r - t * H;
    const int tf = static_cast<int>(static_cast<unsigned>(r0) / static_cast<unsigned>(H));
    const int jt = min(t - tf, kR - 1);  // the token's slot (clamped for rows past T * H)
    const bool ok = valid && ((sm.okmask[s] >> jt) & 1u) != 0;

    // Everything this lane reads from the stage, then the stage goes back to the producer.
    const std::uint32_t xrow = smem_addr(&sm.x[s][lr * kBulkRowPitch]);
    const uint4 a0 = lds128(xrow + 256 * b + 32 * jj), a1 = lds128(xrow + 256 * b + 32 * jj + 16);
    const uint4 c0 = lds128(xrow + 256 * b + 128 + 32 * jj), c1 = lds128(xrow + 256 * b + 128 + 32 * jj + 16);
    const uint2 tw = lds64(xrow + 896 + 8 * ti);
    float2 cv = make_float2(1.0f, 1.0f), sv = make_float2(0.0f, 0.0f);
    if (ok && ci >= 0) {
      const std::uint32_t csrow = smem_addr(&sm.cs[s][jt][0]);
      const uint2 cw = lds64(csrow + 4 * ci), sw = lds64(csrow + 4 * (half + ci));
      cv = make_float2(__uint_as_float(cw.x), __uint_as_float(cw.y));
      sv = make_float2(__uint_as_float(sw.x), __uint_as_float(sw.y));
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&sm.empty[s]));  // release: orders the warp's reads before it

    quantize_lane(p, a0, a1, c0, c1, tw, cv, sv, ci, ok, valid, t, h, lane);
  }
  // Padded token rows [T, Tp) of the scales: CTA 0's consumers, after their rows (off the start).
  if (blockIdx.x == 0) zero_padding_all_heads(p, static_cast<int>(threadIdx.x), kC * 32);
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
constexpr int bulk_smem_bytes() {
  return static_cast<int>(sizeof(rope_quant::BulkSmem<Cfg::kRows, Cfg::kStages>));
}

template <class Cfg>
void run_inv_rope_quant_bulk_sm90(const InvRopeQuantParams& p, int blocks, void* stream) {
  inv_rope_quant_bulk_sm90_kernel<Cfg><<<blocks, (Cfg::kConsumerWarps + 1) * 32, bulk_smem_bytes<Cfg>(),
                                         static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
int inv_rope_quant_bulk_ctas_per_sm() {
  const void* fn = reinterpret_cast<const void*>(&inv_rope_quant_bulk_sm90_kernel<Cfg>);
  constexpr int kThreads = (Cfg::kConsumerWarps + 1) * 32;
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem_bytes<Cfg>()));
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  int per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, bulk_smem_bytes<Cfg>()));
  return per_sm;
}

}  // namespace moekit::cuda
