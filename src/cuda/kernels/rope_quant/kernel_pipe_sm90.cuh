// The pipelined inv_rope_fp8_quant kernel (config.hpp InvRopeQuantPipeConfig): a persistent grid
// whose warps stream (token, head) rows through a per-warp cp.async ring in shared memory. Same
// float operations per element as the register kernel (kernel_sm90.cuh: inverse_rotate,
// scale_exponent, e4m3x2), so the same bytes; only the lanes' channel layout differs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"
#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {
namespace rope_quant {

// The pipelined kernel's lane layout of a 512-channel row (w = 32-bit word = channels 2w, 2w + 1):
// - part 0: lane L holds words 4L..4L+3 (channels 8L..8L+7): blocks 0 / 1 = half-warps.
// - part 1: lane L < 16 holds words 128 + 4L..+3 (block 2); lane L = 16 + j holds words
//   192 + 2j, +1 and 224 + 2j, +1 (block 3). Block 3's half-warp still holds exactly block 3, and
//   the last 64 channels (the rotated ones for rope_dim <= 64) are spread over 16 lanes, 2 pairs
//   each, instead of 8 lanes x 4 pairs: half the float64 instructions a warp issues per row.
// Shared-memory byte offsets of the two 8-byte halves of part 1 (the staged row is the global
// row's image: byte b of the row at offset b); the e4m3 output byte of a channel is half its
// bf16 byte offset.
__device__ __forceinline__ int part1_offset(int lane, int half_idx) {
  return lane < 16 ? 512 + 16 * lane + 8 * half_idx : 768 + 128 * half_idx + 8 * (lane - 16);
}

// e4m3 bytes 0xff (-NaN from cvt) -> 0x7f, exactly what canonicalizing every NaN input to +NaN
// before the cvt gives (cvt.satfinite maps every NaN to 0x7f / 0xff by sign; nothing else gives
// 0xff: -Inf and large negatives saturate to 0xfe). Carry-free per-byte test: a byte is 0xff iff
// ((~b & 0x7f) + 0x7f) has bit 7 clear and b has bit 7 set.
__device__ __forceinline__ std::uint32_t canonical_nan_bytes(std::uint32_t w) {
  const std::uint32_t all_ones = ~(((~w & 0x7f7f7f7fu) + 0x7f7f7f7fu)) & w & 0x80808080u;
  return w & ~all_ones;
}

// Row quantization in the pipelined layout: x[0] = part 0, x[1] = part 1 (words in the order
// above), cs = cos[2] then sin[2] of a block-3 lane's two rotated-candidate pairs (words 224 + 2j,
// +1); the rest as rope_quant::quantize_row. scol[m] = the lane's scale column of part m (fp32:
// block 2m + lane / 16, written by lanes 0 and 16; packed: scol[0] = the head's word column,
// written by lane 0), indexed by token t.
__device__ __forceinline__ void quantize_row_pipe(bool packed_ue8m0, const uint4 (&x)[2], const float (&cs)[4], bool ok,
                                                  std::uint8_t* qrow, std::uint32_t* const (&scol)[2], int t, int nope,
                                                  int lane) {
  float y[2][8];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const std::uint32_t w[4] = {x[m].x, x[m].y, x[m].z, x[m].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      y[m][2 * k] = bf16_lo(w[k]);
      y[m][2 * k + 1] = bf16_hi(w[k]);
    }
  }
  // Words 224 + 2j + k (k = 0, 1) of block-3 lanes: rotated where 2 * word >= nope.
  if (lane >= 16) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (2 * (224 + 2 * (lane - 16) + k) >= nope) inverse_rotate(y[1][4 + 2 * k], y[1][5 + 2 * k], cs[k], cs[2 + k]);
  }

  std::uint32_t E[2];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    float a = absmax8(y[m]);  // fmaxf: a NaN never wins
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));  // half-warp = block
    E[m] = scale_exponent(a);
    const float inv = __uint_as_float((254u - E[m]) << 23);  // 1 / scale, exact
    std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k)  // exact products (powers of two); RNE, satfinite: +-Inf -> +-448
      packed[k >> 1] |= static_cast<std::uint32_t>(numerics::e4m3x2(y[m][2 * k] * inv, y[m][2 * k + 1] * inv)) << (16 * (k & 1));
    const std::uint32_t lo = ok ? canonical_nan_bytes(packed[0]) : 0x7f7f7f7fu;
    const std::uint32_t hi = ok ? canonical_nan_bytes(packed[1]) : 0x7f7f7f7fu;
    if (m == 0) {
      *reinterpret_cast<uint2*>(qrow + lane * 8) = make_uint2(lo, hi);
    } else {
      *reinterpret_cast<std::uint32_t*>(qrow + part1_offset(lane, 0) / 2) = lo;
      *reinterpret_cast<std::uint32_t*>(qrow + part1_offset(lane, 1) / 2) = hi;
    }
  }

  // Scales: lane 0 holds blocks 0 / 2, lane 16 blocks 1 / 3. fp32 scale bits = E << 23; a NaN
  // row gets the NaN 0x7fffffff (fp32) / 0xffffffff (packed).
  if (packed_ue8m0) {
    const std::uint32_t e1 = __shfl_sync(0xffffffffu, E[0], 16), e3 = __shfl_sync(0xffffffffu, E[1], 16);
    if (lane == 0) scol[0][t] = ok ? (E[0] | (e1 << 8) | (E[1] << 16) | (e3 << 24)) : 0xffffffffu;
  } else if ((lane & 15) == 0) {
#pragma unroll
    for (int m = 0; m < 2; ++m) scol[m][t] = ok ? E[m] << 23 : 0x7fffffffu;
  }
}

// A warp's ring: every slot is written and read by the same lane (each lane copies the bytes it
// later reads: issue_data below), so cp.async.wait_group alone orders them; no barrier. (Until
// session 41 lanes 16..31 read part 1 from other lanes' 16-byte copies: racecheck reported it.)
// cos/sin and position slots exist for the block-3 lanes (16..31) only.
template <int kStages>
struct PipeWarpSmem {
  static constexpr int kCsLanes = 16;
  uint4 data[kStages][64];               // [stage][16-byte chunk]: the row's 1 KB, as in global
  float4 cs[kStages][kCsLanes];          // [stage][lane - 16]: cos[i], cos[i + 1], sin[i], sin[i + 1]
  long long pos[2 * kStages][kCsLanes];  // [ring of 2 kStages][lane - 16]: positions[t]
};

// The ring's group schedule (below), shared with the half-warp kernel (kernel_half_sm90.cuh):
// issue_pos(j), issue_data(j), issue_cs(j) copy row j's position, data and cos/sin (each a no-op
// past the row list). ring_prologue fills groups G_{-S+1}..G_{-1}; ring_step(j) waits for row j
// and commits G_j.
template <int kS, class Pos, class Data, class Cs>
__device__ __forceinline__ void ring_prologue(Pos& issue_pos, Data& issue_data, Cs& issue_cs) {
  // Positions of rows 0..S-2 (group P); the data of rows 0..S-2 and the positions of rows
  // S-1..2S-3 (G_{-S+1}); wait for P only; cos/sin of rows 0..S-3 (G_{-S+2}); S-3 empty groups
  // (G_{-S+3}..G_{-1}).
#pragma unroll
  for (int k = 0; k <= kS - 2; ++k) issue_pos(k);
  sm90::cp_async_commit();
#pragma unroll
  for (int k = 0; k <= kS - 2; ++k) issue_data(k);
#pragma unroll
  for (int k = kS - 1; k <= 2 * kS - 3; ++k) issue_pos(k);
  sm90::cp_async_commit();
  sm90::cp_async_wait<1>();
#pragma unroll
  for (int k = 0; k <= kS - 3; ++k) issue_cs(k);
  sm90::cp_async_commit();
#pragma unroll
  for (int k = 0; k < kS - 3; ++k) sm90::cp_async_commit();
}
template <int kS, class Pos, class Data, class Cs>
__device__ __forceinline__ void ring_step(int j, Pos& issue_pos, Data& issue_data, Cs& issue_cs) {
  sm90::cp_async_wait<kS - 3>();
  issue_cs(j + kS - 2);
  issue_data(j + kS - 1);
  issue_pos(j + 2 * kS - 2);
  sm90::cp_async_commit();
}

}  // namespace rope_quant

// The ring, for a warp's row sequence j = 0, 1, ... (row r_j = warp_id + j * W): group G_i,
// committed at iteration i, holds the data of row i + S - 1, the cos/sin of row i + S - 2 (whose
// position landed with G_{i-S}) and the position of row i + 2S - 2. At iteration j, with G_{j-1}
// the newest, cp.async.wait_group(S - 3) completes G_{j-S+2} and older: row j's data (G_{j-S+1})
// and cos/sin (G_{j-S+2}) and row j + S - 2's position (G_{j-S}). Slot reuse: data slot j % S is
// refilled at iteration j + 1, cos/sin slot j % S at j + 2, position slot j % 2S at j + 2, each
// after iteration j consumed it (its values fed the stores). The prologue fills G_{-S+1}..G_{-1}
// with the same or earlier contents (a group completing earlier than needed is harmless), and
// issues the first rows' data before it waits for their positions, so at small T (one row a
// warp) the critical path is max(data, position -> cos/sin) latency, not their sum.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kWarps * 32, Cfg::kMinBlocksPerSm)
    inv_rope_quant_pipe_sm90_kernel(const __grid_constant__ InvRopeQuantParams p) {
  using namespace rope_quant;
  using namespace sm90;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kS = Cfg::kStages;
  constexpr int kWarps = Cfg::kWarps;
  constexpr int kBlocksPerHead = kD / 128;
  static_assert(kD == 512 && Cfg::kMaxRopeDim == 64, "the rotated pairs are words 224..255 (block-3 lanes)");
  __shared__ PipeWarpSmem<kS> smem_all[kWarps];

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  PipeWarpSmem<kS>& sm = smem_all[warp];
  const int H = p.num_heads, T = static_cast<int>(p.num_tokens);
  const int nope = kD - p.rope_dim, half = p.rope_dim >> 1;
  const bool cs_lane = lane >= 16;
  const int cl = lane - 16;                 // cos/sin and position slot of a cs_lane
  const int i0 = 224 + 2 * cl - nope / 2;   // cos index of its first candidate pair (< 0: not rotated)
  // Per-lane shared-memory addresses (stage 0) and the stage strides.
  const std::uint32_t data0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.data[0][0]));
  const std::uint32_t cs0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.cs[0][cs_lane ? cl : 0]));
  const std::uint32_t pos0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(&sm.pos[0][cs_lane ? cl : 0]));
  constexpr std::uint32_t kDataStage = sizeof(sm.data[0]), kCsStage = sizeof(sm.cs[0]), kPosStage = sizeof(sm.pos[0]);
  const int off1a = part1_offset(lane, 0), off1b = part1_offset(lane, 1);

  // Padded token rows [T, Tp) of every head's scale columns get 0 (CTA 0).
  if (blockIdx.x == 0) zero_padding_all_heads(p, static_cast<int>(threadIdx.x), kWarps * 32);

  // The warp's head is fixed (the grid's warp count W is a multiple of H: launch_sm90.cu), its
  // tokens are t0, t0 + dt, ...: rows r = warp_id + j * W of the token-major order r = t * H + h,
  // so the warps of a CTA hold the heads of one token (its position and cos/sin row come from
  // DRAM once, from L1 for the other heads) and a row's addresses advance by constant strides.
  const int wg = static_cast<int>(blockIdx.x) * kWarps + warp;  // warp-uniform
  const int h = wg % H, t0 = wg / H, dt = static_cast<int>(gridDim.x) * kWarps / H;
  const int g = h / p.heads_per_group, hh = h % p.heads_per_group;
  const std::int64_t o_step = static_cast<std::int64_t>(dt) * p.o_stride_t * 2;  // bytes
  const std::int64_t pos_step = static_cast<std::int64_t>(dt) * p.pos_stride;
  const std::int64_t q_step = static_cast<std::int64_t>(dt) * p.q_stride_t;
  // Cursors of the four streams (data, position, cos/sin, compute), each one row apart in j.
  int td = t0, tp = t0, tc = t0, tq = t0;
  const char* od = reinterpret_cast<const char*>(p.o + static_cast<std::int64_t>(t0) * p.o_stride_t + h * p.o_stride_h);
  const std::int64_t* pp = p.positions + static_cast<std::int64_t>(t0) * p.pos_stride;
  std::uint8_t* qp = p.q + g * p.q_stride_g + static_cast<std::int64_t>(t0) * p.q_stride_t + hh * kD;
  // The lane's scale columns (quantize_row_pipe), at token 0.
  std::uint32_t* const scol[2] = {
      static_cast<std::uint32_t*>(p.scale) + g * p.s_stride_g +
          (p.packed_ue8m0 ? hh : hh * kBlocksPerHead + (lane >> 4)) * p.s_stride_b,
      static_cast<std::uint32_t*>(p.scale) + g * p.s_stride_g + (hh * kBlocksPerHead + 2 + (lane >> 4)) * p.s_stride_b};

  // Each issue_* handles its stream's row and advances it; a row past T issues nothing (the
  // group is still committed, so the counting above holds).
  // Predicated copies, no branches (one basic block for the whole issue step); an address whose
  // predicate is off is never dereferenced.
  // Part 0 as one 16-byte copy, part 1 as the two 8-byte pieces this lane reads (part1_offset:
  // lanes 16..31 read bytes other lanes' 16-byte copies would have brought), so that every lane
  // copies exactly what it reads and cp.async.wait_group alone orders its reads.
  auto issue_data = [&](int j) {
    const std::uint32_t dst = data0 + (j & (kS - 1)) * kDataStage;
    cp_async_16_if(td < T, dst + 16 * lane, od + 16 * lane);
    cp_async_8_if(td < T, dst + off1a, od + off1a);
    cp_async_8_if(td < T, dst + off1b, od + off1b);
    td += dt;
    od += o_step;
  };
  auto issue_pos = [&](int j) {
    cp_async_8_if(cs_lane && tp < T, pos0 + (j & (2 * kS - 1)) * kPosStage, pp);
    tp += dt;
    pp += pos_step;
  };
  // Needs row j's position landed (see the group schedule above); a lane's slot of a row past T
  // holds a stale position, read but not used.
  auto issue_cs = [&](int j) {
    const long long pos = cs_lane ? sm.pos[j & (2 * kS - 1)][cs_lane ? cl : 0] : -1;  // lane-private slots only
    const bool go = cs_lane && tc < T && pos >= 0 && pos < p.max_pos;
    const float* c = p.cos_sin + pos * p.cache_stride + i0;
    const std::uint32_t dst = cs0 + (j & (kS - 1)) * kCsStage;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      cp_async_4_if(go && i0 + k >= 0, dst + 4 * k, c + k);
      cp_async_4_if(go && i0 + k >= 0, dst + 8 + 4 * k, c + half + k);
    }
    tc += dt;
  };

  ring_prologue<kS>(issue_pos, issue_data, issue_cs);
  for (int j = 0; tq < T; ++j) {  // warp-uniform: every shuffle has the whole warp
    ring_step<kS>(j, issue_pos, issue_data, issue_cs);

    const int s = j & (kS - 1);
    uint4 x[2];
    x[0] = sm.data[s][lane];
    const uint2 a = *reinterpret_cast<const uint2*>(reinterpret_cast<const char*>(sm.data[s]) + off1a);
    const uint2 b = *reinterpret_cast<const uint2*>(reinterpret_cast<const char*>(sm.data[s]) + off1b);
    x[1] = make_uint4(a.x, a.y, b.x, b.y);
    long long pos = cs_lane ? sm.pos[j & (2 * kS - 1)][cs_lane ? cl : 0] : 0;
    pos = __shfl_sync(0xffffffffu, pos, 31);
    const bool ok = pos >= 0 && pos < p.max_pos;
    float cs[4] = {1.0f, 1.0f, 0.0f, 0.0f};
    if (ok && cs_lane) {
      // The floats of a pair that is not rotated were never written, and are not used.
      const float4 v = sm.cs[s][cl];
      cs[0] = v.x;
      cs[1] = v.y;
      cs[2] = v.z;
      cs[3] = v.w;
    }
    quantize_row_pipe(p.packed_ue8m0, x, cs, ok, qp, scol, tq, nope, lane);
    tq += dt;
    qp += q_step;
  }
  cp_async_wait_all_groups();  // nothing lands in shared memory after the CTA exits
}

// ---- host side of one instantiation (inst/*.cu) ----

template <class Cfg>
void run_inv_rope_quant_pipe_sm90(const InvRopeQuantParams& p, int blocks, void* stream) {
  inv_rope_quant_pipe_sm90_kernel<Cfg><<<blocks, Cfg::kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
int inv_rope_quant_pipe_ctas_per_sm() {
  const void* fn = reinterpret_cast<const void*>(&inv_rope_quant_pipe_sm90_kernel<Cfg>);
  // kMinBlocksPerSm x 48 KB of static shared memory needs the largest shared-memory carveout.
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  int per_sm = 0;
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, Cfg::kWarps * 32, 0));
  return per_sm;
}

}  // namespace moekit::cuda
