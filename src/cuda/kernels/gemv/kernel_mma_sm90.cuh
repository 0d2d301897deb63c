// The GEMV decode kernel on the tensor cores (sm_90a): the same one cooperative launch as
// kernel_sm90.cuh (routing in every CTA, GEMM1, one grid barrier, GEMM2 + combine over the
// CTA's own output columns), with the dot products on mma.sync instead of fp32 FMAs, so that
// an expert's weights are read once for up to 16 of its tokens and the instruction count per
// weight byte does not grow with the tokens (docs/gemv.md, "The tensor-core kernel").
//
// Fragments straight from memory. A lane (g = lane / 4, c = lane % 4) loads 16 bytes of a weight
// row at byte 16c of a 64-byte k-block (rows g and g + 8 of a 16-row tile) and 16 bytes of its
// token's (or slot's) row at the same byte: registers 0, 1 feed the first m16n8 k-step (32 bytes
// of K: 16 bf16 or 32 e4m3), registers 2, 3 the second. That assigns the tile's K elements to the
// mma's k positions in a permuted order, the same for A and B, so the sums are the dot products.
// No shared-memory staging of weights, no ldmatrix, 16-byte coalesced loads (a row's 64 bytes by
// four lanes).
//
//   0. routing and token rows as the CUDA-core kernel (prologue.cuh; rows at a padded pitch: 64 mod 128 bytes,
//      so a quarter warp's fragment loads of two rows hit different banks); GEMM2's slot groups
//      (an expert's slots, 8 at a time) listed once;
//   1. GEMM1: tasks (touched expert, 16 columns; 32 in the wide fp8 form) split evenly over the
//      CTAs; a CTA's 16 warps split a task's K, each keeps the gate and up accumulators of
//      8 x kMmaTokenGroups tokens (8 in the wide form, so an expert of 9-16 tokens reads its
//      weights twice there, the second time mostly from L2),
//      adds them to shared memory; then the warps' sums in warp order, the fp8 scales, router
//      weight (on input), bias and activation: h to the workspace (bf16 / fp16: rounded to the
//      activation dtype; fp8: fp32). bf16 / fp16: one warp a unit sums it
//      behind two mbarriers while the others go on; e4m3: the whole CTA between two barriers
//      (finish_pass says why);
//   2. the grid barrier;
//   3. GEMM2: CTA j owns 16-column blocks [CB j / G, CB (j + 1) / G) of the output. It stages
//      every slot's h (activation dtype, or e4m3 with the intermediate scale: static, per slot
//      for fp8_per_channel, or the absmax of every h, which each CTA folds from the h it stages:
//      no grid-wide reduction), and runs a warp
//      per (column block, slot group): the w2 tile's N in 64-byte k-blocks, each slot's result
//      times its coefficient into the slot outputs in shared memory; then each (token, column)
//      sums its k slots in slot order, adds the b2 terms, rounds once. fp8 w2 rows of N % 16 == 8
//      bytes (gpt-oss at TP8: 360) are read as 8-byte pairs, the last 16-byte chunk half zeros,
//      and the staged h rows are zero up to it.
//
// No allocation, no host synchronization, nothing zeroed before the launch. Every sum has a fixed
// order independent of the grid: bitwise reproducible run to run.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/mma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/gemv/kernel_sm90.cuh"

namespace moekit::cuda::gemv {

// kGeneral: the e4m3 instantiation that also runs fp8_per_channel and w2 rows of N % 16 == 8
// bytes (gpt-oss at TP8); the plain one has both off at compile time. With them as run-time
// branches in one kernel, the fp8_per_tensor points on it measured 2-5 % slower (same-run grid at
// 466afab against 306a423, before either existed), so launch_sm90.cu takes the plain kernel
// wherever it can run the call.
//
// kWide: GEMM1 tasks of 32 columns (two 16-row tiles of gate and of up rows) in rounds of one
// k-block, with 8 tokens a pass: the same registers (8 loads of 16 bytes a lane a round, 16
// accumulators) and the same mmas a column in the same order as the plain kernel (bitwise equal),
// but a task carries twice the bytes to each per-task barrier and reduction. Where fp8's tasks of
// 16 columns are two rounds a warp (K = 4096), those weigh twice per byte: docs/gemv.md.
//
// kE4m3Decoupled: the plain e4m3 form with GEMM1's units on the mbarriers of the bf16 / fp16 forms
// (finish_pass) instead of two CTA barriers a unit; the same sums in the same order (bitwise
// equal). Measured as the only e4m3 form (05d3c32 against 5b54c61, docs/gemv.md session 31):
// 1.02-1.085x at K >= 4096, M = 2..8, 0.97-0.99x at M = 1 and at K = 2048; its own kernel
// (MOEKIT_GEMV_FP8_DECOUPLED=1) until a rule is measured.
//
// kQg: the plain e4m3 form with GEMM1 on the warpgroup tensor-core instruction (wgmma, QGMMA)
// instead of mma.sync: sm_90 runs an e4m3 mma.sync as e4m3 -> f16 unpacks (F2FP, 12 per m16n8k32
// a lane, both operands, again for every token group) and f16 HMMAs (docs/gemv.md, session 30),
// where wgmma takes e4m3 natively. The weights still go straight from memory into registers (the
// A operand of wgmma may be registers, in mma.m16n8k32's A layout per warp: a lane's same two
// 16-byte loads); B is every token of the call (M <= kQgTokens) staged once as one wgmma tile in
// the K order of those loads (prologue.cuh, stage_rows_e4m3_qg), so any rows of any expert can
// share an instruction and no per-expert gather exists. A warpgroup takes a quarter of K; its four
// warps the four 16-row tiles of two consecutive 16-column tasks (gate, up of task q; gate, up of
// q + 1); an expert's columns of token t are accumulator column t. The four warpgroups' sums add
// in warpgroup order: bitwise reproducible, not bitwise equal to the mma.sync forms. Taken where a
// CTA has many tasks (launch_sm90.cu gemv_qgmma): a CTA with one task leaves half its warps idle.
template <Operand kOp, bool kGeneral = false, bool kWide = false, bool kE4m3Decoupled = false, bool kQg = false>
struct GemvMma {
  using W = typename OperandTypes<kOp>::W;
  using ActT = typename OperandTypes<kOp>::Act;
  static constexpr bool kFp8 = std::is_same<W, E4m3>::value;
  static constexpr int kEs = kFp8 ? 1 : 2;  // bytes of a weight (and staged operand) element
  static constexpr ::moekit::cuda::Operand kMma =
      kFp8 ? ::moekit::cuda::Operand::kE4m3
           : (std::is_same<W, __half>::value ? ::moekit::cuda::Operand::kF16 : ::moekit::cuda::Operand::kBf16);
  static constexpr int kTg = kWide ? 1 : kMmaTokenGroups;  // token groups of 8 a GEMM1 pass carries
  static constexpr int kTiles = kWide ? 2 : 1;             // 16-column tiles of a GEMM1 task
  static constexpr int kRound1 = kWide ? 1 : 2;            // GEMM1: 64-byte k-blocks of a round (x2 buffers)
  static constexpr bool kDecoupled = !kFp8 || kE4m3Decoupled;  // GEMM1's units without CTA barriers (finish_pass)
  static_assert(!kE4m3Decoupled || (kFp8 && !kGeneral && !kWide), "the decoupled e4m3 form is the plain one");
  static_assert(!kQg || (kFp8 && !kGeneral && !kWide && !kE4m3Decoupled), "the QGMMA form is the plain e4m3 one");
  static constexpr int kQgRound = 4;  // QGMMA GEMM1: 64-byte k-blocks of a round (x2 buffers: 16 loads a lane)
  // GEMM1's partial sums, [kWarps][2 kTiles][16][8 kTg] floats, fit the bytes the host sizes for
  // them (launch_sm90.cu mma_smem_layout: kWarps x 2 x 16 x 8 kMmaTokenGroups floats).
  static_assert(2 * kTiles * kTg <= 2 * kMmaTokenGroups, "GEMM1's partial sums outgrow their shared memory");
  static constexpr int kRound2 = 4;            // GEMM2: the same
  // fp8 staging with the dynamic intermediate scale: h words a thread holds in registers between
  // the absmax and the quantization (4096 words a CTA: qwen3-30b TP8 to M = 16, deepseek-v3 to
  // M = 8; at most one a thread, M = 1 on the TP8 shards, in a one-word form of its own); more
  // are read twice from L2.
  static constexpr int kHoldH = 8;
  // Two m16n8 k-steps of a 64-byte k-block: lo / hi the lane's 16 bytes of rows g and g + 8, b
  // the lane's 16 bytes of column g of B.
  static __device__ __forceinline__ void mma_block(float (&d)[4], const uint4& lo, const uint4& hi, const uint4& b) {
    const std::uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
    sm90::mma_m16n8<kMma>(d, a0, b.x, b.y);
    const std::uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
    sm90::mma_m16n8<kMma>(d, a1, b.z, b.w);
  }

  static __device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

  // 16 bytes of an 8-byte aligned row as two 8-byte loads; `last`: the row's half chunk, its
  // upper 8 bytes zero.
  static __device__ __forceinline__ uint4 ld_half_rows(const std::uint8_t* a, bool last) {
    const uint2 x = sm90::ld_stream_8(a);
    const uint2 y = last ? make_uint2(0u, 0u) : sm90::ld_stream_8(a + 8);
    return make_uint4(x.x, x.y, y.x, y.y);
  }

  // The QGMMA GEMM1 (kQg): the CTA's 16-column tasks [q0, q1) two at a time. Warpgroup wg reduces
  // k-blocks [nkb wg / 4, nkb (wg + 1) / 4) of the unit's 64 rows: warp rs = warp % 4 loads tile rs
  // (task q + rs / 2, gate rows when rs is even, else up rows; g and g + 8 of its 16, a lane 16
  // bytes of each at byte 16 c of a k-block) and the warpgroup issues two m64n16k32 per k-block,
  // A = those registers, B = the staged token tile at the k-block's two steps. The next round's
  // loads (the next unit's first at a unit's end) go out before this round's instructions. Then
  // the sums through shared memory, as finish_pass's barrier form: part[warp][16 rows][16 tokens],
  // a CTA barrier, one (slot, column) a thread adds the four warpgroups' sums in order, applies
  // the scales, router weight (on input), bias and activation: h (fp32) to the workspace, and
  // a CTA barrier before the next unit overwrites part.
  static __device__ void gemm1_qg(const GemvParams& p, std::uint8_t* smem, int U, int NB1, std::int64_t q0,
                                  std::int64_t q1, float xscale) {
    const SmemLayout& L = p.smem;
    const int* sorted = reinterpret_cast<const int*>(smem + L.sorted_off);
    const int* ue = reinterpret_cast<const int*>(smem + L.ue_off);
    const int* uoff = reinterpret_cast<const int*>(smem + L.uoff_off);
    const float* tw = reinterpret_cast<const float*>(smem + L.tw_off);
    float* part = reinterpret_cast<float*>(smem + L.work_off);
    const std::uint32_t tile = sm90::smem_addr(smem + L.region_off);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int wg = warp >> 2, rs = warp & 3;
    const int k = p.top_k;
    const std::int64_t N = p.inter_size;
    const std::int64_t row_bytes = p.hidden_size;  // e4m3
    const int cpr = static_cast<int>(row_bytes / 16);
    const int nkb = (cpr + 3) / 4;
    const int kq0 = nkb * wg / 4, kq1 = nkb * (wg + 1) / 4;
    const int R = (kq1 - kq0 + kQgRound - 1) / kQgRound;  // rounds a unit takes this warpgroup
    const std::uint8_t* w13 = static_cast<const std::uint8_t*>(p.w13);
    // This warp's rows of the unit starting at task q: rows g and g + 8 of tile rs.
    auto issue = [&](uint4 (&a)[kQgRound][2], std::int64_t q, int r) {
      const std::int64_t qq = q + (rs >> 1);
      const bool in = qq < q1;
      const int u = in ? static_cast<int>(qq / NB1) : 0, cb = in ? static_cast<int>(qq % NB1) : 0;
      const int r0 = cb * 16 + g;
      const bool vlo = in && r0 < N, vhi = in && r0 + 8 < N;
      const std::uint8_t* base = w13 + (static_cast<std::int64_t>(ue[u]) * 2 * N + (rs & 1) * N) * row_bytes;
      const std::uint8_t* rlo = base + (vlo ? r0 : 0) * row_bytes;
      const std::uint8_t* rhi = base + (vhi ? r0 + 8 : 0) * row_bytes;
#pragma unroll
      for (int i = 0; i < kQgRound; ++i) {
        const int kb = kq0 + r * kQgRound + i;
        const int ch = kb * 4 + c;
        const bool ok = kb < kq1 && ch < cpr;
        const std::int64_t off = static_cast<std::int64_t>(ch) * 16;
        a[i][0] = ok && vlo ? sm90::ld_stream_16(rlo + off) : zero4();
        a[i][1] = ok && vhi ? sm90::ld_stream_16(rhi + off) : zero4();
      }
    };
    uint4 cur[kQgRound][2], nxt[kQgRound][2];
    if (q0 < q1 && R > 0) issue(cur, q0, 0);
    for (std::int64_t q = q0; q < q1; q += 2) {
      // acc: a round's sums in the tensor core (its first instruction overwrites them); tot: the
      // rounds added in fp32. Hopper's e4m3 wgmma keeps its accumulator at reduced precision:
      // over 1024 positive products it loses ~4e-3 of the sum, promoted every round (256 of K)
      // ~4e-4 (moekit-accum-probe, docs/gemv.md session 34).
      float acc[8], tot[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = tot[i] = 0.0f;
      for (int r = 0; r < R; ++r) {
        if (r + 1 < R) {
          issue(nxt, q, r + 1);
        } else if (q + 2 < q1) {
          issue(nxt, q + 2, 0);
        }
        sm90::wgmma_fence();
#pragma unroll
        for (int i = 0; i < kQgRound; ++i) {
          // Past the warpgroup's k-blocks (its last round) A is zeros: the instruction reads the
          // warpgroup's last k-block of the tile and adds zero products (no branch around a wgmma).
          const int kb = min(kq0 + r * kQgRound + i, kq1 - 1);
          const std::uint32_t a0[4] = {cur[i][0].x, cur[i][1].x, cur[i][0].y, cur[i][1].y};
          sm90::wgmma_rs_m64n16k32_e4m3(
              acc, a0, sm90::make_smem_desc_interleave(tile + (2 * kb) * kQgStepBytes, 128, 256), i == 0 ? 0 : 1);
          const std::uint32_t a1[4] = {cur[i][0].z, cur[i][1].z, cur[i][0].w, cur[i][1].w};
          sm90::wgmma_rs_m64n16k32_e4m3(
              acc, a1, sm90::make_smem_desc_interleave(tile + (2 * kb + 1) * kQgStepBytes, 128, 256), 1);
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs<8>(acc);
#pragma unroll
        for (int i = 0; i < 8; ++i) tot[i] += acc[i];
        // cur's registers stay cur's until the instructions that read them are done (the wait).
#pragma unroll
        for (int i = 0; i < kQgRound; ++i)
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            asm volatile("" : "+r"(cur[i][x].x), "+r"(cur[i][x].y), "+r"(cur[i][x].z), "+r"(cur[i][x].w)::"memory");
            cur[i][x] = nxt[i][x];
          }
      }
      // The warp's sums: accumulator d[4 j + 2 h + e] = row g + 8 h of tile rs, token 8 j + 2 c + e.
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(part + (warp * 16 + g + 8 * h) * kQgTokens + 8 * j + 2 * c) =
              make_float2(tot[4 * j + 2 * h], tot[4 * j + 2 * h + 1]);
      __syncthreads();
      // The unit's two tasks: (slot, column) pairs of task q, then of task q + 1, over the threads.
      const int u0 = static_cast<int>(q / NB1), u1 = q + 1 < q1 ? static_cast<int>((q + 1) / NB1) : u0;
      const int T0 = uoff[u0 + 1] - uoff[u0];
      const int T1 = q + 1 < q1 ? uoff[u1 + 1] - uoff[u1] : 0;
      for (int o = tid; o < 16 * (T0 + T1); o += kThreads) {
        const int th = o < 16 * T0 ? 0 : 1;
        const int oo = th == 0 ? o : o - 16 * T0;
        const int T = th == 0 ? T0 : T1, u = th == 0 ? u0 : u1;
        const int tok = oo % T, col = oo / T;
        const std::int64_t qq = q + th;
        const int cc = static_cast<int>(qq % NB1) * 16 + col;
        if (cc >= N) continue;
        const int e = ue[u];
        const int slot = sorted[uoff[u] + tok];
        const int tc = slot / k;  // the token: its accumulator column
        float gv = 0.0f, uv = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          gv += part[((w * 4 + 2 * th) * 16 + col) * kQgTokens + tc];
          uv += part[((w * 4 + 2 * th + 1) * 16 + col) * kQgTokens + tc];
        }
        const float ws = xscale * p.w13_scale[e];
        const float h = gemm1_finish(p, tw, slot, e, N, cc, gv * ws, uv * ws);
        p.h_buf[static_cast<std::int64_t>(slot) * N + cc] = h;
      }
      __syncthreads();
    }
  }

  static __device__ void run(const GemvParams& p, std::uint8_t* smem) {
    const bool per_channel = kGeneral && p.per_channel;  // compile-time false in the plain kernel
    namespace cg = cooperative_groups;
    const SmemLayout& L = p.smem;
    int* slot_e = reinterpret_cast<int*>(smem + L.slot_e_off);
    int* sorted = reinterpret_cast<int*>(smem + L.sorted_off);
    int* ue = reinterpret_cast<int*>(smem + L.ue_off);
    int* uoff = reinterpret_cast<int*>(smem + L.uoff_off);
    int* cnt = reinterpret_cast<int*>(smem + L.cnt_off);
    float* scratch = reinterpret_cast<float*>(smem + L.scratch_off);
    float* tw = reinterpret_cast<float*>(smem + L.tw_off);
    float* coef = reinterpret_cast<float*>(smem + L.coef_off);
    int* gfirst = reinterpret_cast<int*>(smem + L.gfirst_off);
    int* gu = reinterpret_cast<int*>(smem + L.gu_off);
    float* work = reinterpret_cast<float*>(smem + L.work_off);
    std::uint8_t* region = smem + L.region_off;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int M = p.num_tokens, k = p.top_k, P = M * k;
    const std::int64_t K = p.hidden_size, N = p.inter_size;
    const std::int64_t row_bytes = K * kEs;           // a w13 row
    const std::int64_t w2_row = N * kEs;              // a w2 row, and a staged h row's data
    const int px = L.x_pitch, ph = L.h_pitch;
    const int G = static_cast<int>(gridDim.x), j = static_cast<int>(blockIdx.x);
    std::uint64_t* stamps = (p.phases != nullptr && j < p.phase_ctas && tid == 0)
                                ? p.phases + static_cast<std::int64_t>(j) * kPhaseWords : nullptr;
    auto stamp = [stamps](int w) {
      if (stamps != nullptr) stamps[w] = sm90::globaltimer_ns();
    };
    stamp(kPhaseEntry);
    // ---- 0a. the token rows into shared memory (bf16 / fp16, padded pitch), or hidden's first
    // chunks into registers (fp8), in flight during the routing ----
    const int cpr = static_cast<int>(row_bytes / 16);  // 16-byte chunks of a w13 / token row
    uint4 hx[kHiddenAhead];
    if constexpr (!kFp8) stage_rows_async(p, region, px);
    else load_hidden_ahead<ActT>(p, hx);

    // ---- 0b. routing (prologue.cuh): every slot's local expert, the touched experts, their slots;
    // by warp 0 alone where the call has few slots (route_warp), the other warps going on ----
    const RouteTables rt{slot_e, sorted, ue, uoff, cnt, tw};
    // GEMM2's slot groups: each touched expert's entries of sorted, 8 at a time (one warp).
    auto list_slot_groups = [&](int U) {
      int run_s = 0;
      for (int u0 = 0; u0 < U; u0 += 32) {
        const int u = u0 + lane;
        const int n = u < U ? (uoff[u + 1] - uoff[u] + 7) / 8 : 0;
        int s = n;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int v = __shfl_up_sync(0xffffffffu, s, d);
          if (lane >= d) s += v;
        }
        for (int i = 0; i < n; ++i) {
          gfirst[run_s + s - n + i] = uoff[u] + 8 * i;
          gu[run_s + s - n + i] = u;
        }
        run_s += __shfl_sync(0xffffffffu, s, 31);
      }
      if (lane == 0) reinterpret_cast<int*>(scratch)[kWarps + 1] = run_s;  // S
    };
    const bool by_warp = p.warp_route != 0 && P <= kWarpRouteSlots;
    if (by_warp) {
      if (warp == 0) {
        route_warp(p, rt, reinterpret_cast<int*>(scratch));
        __syncwarp();  // the lanes' ue / uoff entries and U, for the slot groups below
      }
    } else {
      route_and_scan(p, rt, reinterpret_cast<int*>(scratch));
      if (warp == 0) place_slots(rt, P);
    }
    if (warp == (by_warp ? 0 : 1)) list_slot_groups(reinterpret_cast<const int*>(scratch)[kWarps]);

    // ---- 0c. fp8: the activation scale, then the token rows as e4m3 ----
    // fp8_per_channel (p.per_channel): a scale per token row instead, kept in `coef` until GEMM2
    // (coef holds P >= M floats and is first written after the grid barrier).
    float xscale = 1.0f;
    float* row_scale = coef;
    if constexpr (kFp8) {
      if (per_channel) stage_rows_e4m3_per_row<ActT>(p, region, px, row_scale);
      else if constexpr (kQg) xscale = stage_rows_e4m3_qg<ActT>(p, region, scratch, hx);
      else xscale = stage_rows_e4m3<ActT>(p, region, px, scratch, hx);
    } else {
      sm90::cp_async_wait_all_groups();
    }
    if (kDecoupled && tid == 0) {  // GEMM1's unit barriers (finish_pass); scratch[0, kWarps + 2) is taken
      sm90::mbar_init(sm90::smem_addr(scratch + kWarps + 2), kThreads);  // filled: every lane a unit
      sm90::mbar_init(sm90::smem_addr(scratch + kWarps + 4), 32);        // freed: the reducing warp
    }
    __syncthreads();  // token rows staged, slots placed, slot groups listed, unit barriers set
    stamp(kPhaseRouted);
    const int U = reinterpret_cast<const int*>(scratch)[kWarps];               // touched experts
    const int NB1 = static_cast<int>((N + 16 * kTiles - 1) / (16 * kTiles));  // GEMM1 tasks of an expert
    constexpr int kTok = 8 * kTg;                                              // tokens of one GEMM1 pass

    // ---- 1. GEMM1: this CTA's tasks (expert, 16 kTiles columns), the warps splitting K ----
    const std::uint8_t* w13 = static_cast<const std::uint8_t*>(p.w13);
    const int nkb = (cpr + 3) / 4;  // 64-byte k-blocks of a w13 row
    const int kw0 = nkb * warp / kWarps, kw1 = nkb * (warp + 1) / kWarps;
    const std::int64_t Q = static_cast<std::int64_t>(U) * NB1;
    const std::int64_t q0 = Q * j / G, q1 = Q * (j + 1) / G;
    float* part = work;  // [kWarps][2 kTiles][16][kTok] (the same bytes in both forms)
    // A pass's start: the staged rows of its tokens (t0 + 8 i + g of the expert's T, from entry b
    // of sorted) as this lane's B rows, and zero accumulators.
    auto start_pass = [&](int b, int T, int t0, const std::uint8_t* (&xrow)[kTg], bool (&xv)[kTg],
                          float (&acc)[2 * kTiles][kTg][4]) {
#pragma unroll
      for (int i = 0; i < kTg; ++i) {
        const int tt = t0 + 8 * i + g;
        xv[i] = tt < T;
        xrow[i] = region + static_cast<std::int64_t>(xv[i] ? sorted[b + tt] / k : 0) * px;
      }
#pragma unroll
      for (int t = 0; t < 2 * kTiles; ++t)
#pragma unroll
        for (int i = 0; i < kTg; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[t][i][r] = 0.0f;
    };
    // A unit's end (unit n of the CTA, counted from 0): the warps' partial sums to shared memory,
    // then their sum in warp order and the activation, one (token, column) a thread: h to the
    // workspace. Two forms:
    //   kDecoupled (bf16 / fp16; e4m3 in its decoupled kernel): no CTA barrier. A warp writes its sums once unit n - 1's are
    //     summed (mbarrier `freed`, one phase a unit) and counts itself in (mbarrier `filled`,
    //     every lane arrives) and goes on to its next unit; warp n % kWarps alone waits for unit
    //     n's sums, reduces them over its lanes and arrives on `freed`. A warp runs up to a unit
    //     ahead of the slowest one, and the sums cost one warp instead of stopping all sixteen;
    //   else (the plain, wide and general e4m3 kernels): a CTA barrier before the sums and one
    //     after, the sums over all threads. With fp8's shorter units (half the rounds a warp) the
    //     decoupled form measured 0.97-0.99x at M = 1 and at qwen3-30b TP8 (docs/gemv.md, session 31).
    // Tokens fastest over the threads: a warp's load of part hits its banks 1-2-way from 8 tokens
    // a unit (4 in the wide form), where columns fastest were 8-way; at 1-2 tokens still 8-way.
    // The order of each sum is the same.
    static_assert((kWarps + 2) % 2 == 0 && kWarps + 6 <= 64, "the unit mbarriers: 8-byte aligned, inside scratch's 64 words");
    const std::uint32_t filled = sm90::smem_addr(reinterpret_cast<std::uint64_t*>(scratch + kWarps + 2));
    const std::uint32_t freed = filled + 8;
    auto finish_pass = [&](const float (&acc)[2 * kTiles][kTg][4], int e, int cb, int b, int t0, int nt,
                           std::uint32_t n) {
      if constexpr (kDecoupled) sm90::mbar_wait(freed, (n - 1u) & 1u);  // part free (unit 0: at once)
      // The warp's partial sums: part[warp][tile * 2 + gate / up][row][token].
#pragma unroll
      for (int t = 0; t < 2 * kTiles; ++t)
#pragma unroll
        for (int i = 0; i < kTg; ++i) {
          float* pt = part + ((warp * 2 * kTiles + t) * 16) * kTok + 8 * i + 2 * c;
          *reinterpret_cast<float2*>(pt + g * kTok) = make_float2(acc[t][i][0], acc[t][i][1]);
          *reinterpret_cast<float2*>(pt + (g + 8) * kTok) = make_float2(acc[t][i][2], acc[t][i][3]);
        }
      int first = tid, stride = kThreads;
      if constexpr (kDecoupled) {
        sm90::mbar_arrive(filled);
        if (static_cast<std::uint32_t>(warp) != n % kWarps) return;
        sm90::mbar_wait(filled, n & 1u);  // every warp's sums of unit n
        first = lane;
        stride = 32;
      } else {
        __syncthreads();
      }
      const float ws = kFp8 && !per_channel ? xscale * p.w13_scale[e] : 1.0f;
      for (int o = first; o < 16 * kTiles * nt; o += stride) {
        const int tok = o % nt, col = o / nt;
        const int cc = cb * 16 * kTiles + col;
        if (cc >= N) continue;
        const int tr = (col >> 4) * 2, row = col & 15;  // the column's tile (gate plane), its row
        float gv = 0.0f, uv = 0.0f;
#pragma unroll 4
        for (int w = 0; w < kWarps; ++w) {
          gv += part[((w * 2 * kTiles + tr + 0) * 16 + row) * kTok + tok];
          uv += part[((w * 2 * kTiles + tr + 1) * 16 + row) * kTok + tok];
        }
        const int slot = sorted[b + t0 + tok];
        if (kFp8 && per_channel) {  // the token's scale, then each output channel's weight scale
          const float xs = row_scale[slot / k];
          gv = gv * xs * p.w13_scale[static_cast<std::int64_t>(e) * 2 * N + cc];
          uv = uv * xs * p.w13_scale[static_cast<std::int64_t>(e) * 2 * N + N + cc];
        } else if (kFp8) {
          gv *= ws;
          uv *= ws;
        }
        const float h = gemm1_finish(p, tw, slot, e, N, cc, gv, uv);
        if constexpr (kFp8) {
          p.h_buf[static_cast<std::int64_t>(slot) * N + cc] = h;
        } else {
          reinterpret_cast<ActT*>(p.h_buf)[static_cast<std::int64_t>(slot) * N + cc] = from_float<ActT>(h);
        }
      }
      if constexpr (kDecoupled) {
        sm90::mbar_arrive(freed);  // part free again
      } else {
        __syncthreads();
      }
    };
    // The CTA's units are (task q, pass t0) in order; a unit is this warp's rounds of kRound1
    // k-blocks over its K range. The loads of the next round (the next unit's first one at a
    // unit's end) are issued before the mmas of the current one, so they are in flight through the
    // unit's partial-sum barrier and reduction: the SM's stream does not stop between tasks.
    const int R1 = (kw1 - kw0 + kRound1 - 1) / kRound1;  // rounds a unit takes this warp (0: none)
    // Tile j of task q: gate rows g, g + 8 and up rows g, g + 8 of its 16 columns (rp[4 j + 0..3]).
    auto task_rows = [&](std::int64_t q, const std::uint8_t* (&rp)[4 * kTiles], bool (&vlo)[kTiles],
                         bool (&vhi)[kTiles]) {
      const int u = static_cast<int>(q / NB1), cb = static_cast<int>(q % NB1);
      const std::uint8_t* ebase = w13 + static_cast<std::int64_t>(ue[u]) * 2 * N * row_bytes;
#pragma unroll
      for (int jt = 0; jt < kTiles; ++jt) {
        const int rlo = (cb * kTiles + jt) * 16 + g, rhi = rlo + 8;
        vlo[jt] = rlo < N;
        vhi[jt] = rhi < N;
        rp[4 * jt + 0] = ebase + (vlo[jt] ? rlo : 0) * row_bytes;
        rp[4 * jt + 1] = ebase + (vhi[jt] ? rhi : 0) * row_bytes;
        rp[4 * jt + 2] = rp[4 * jt + 0] + N * row_bytes;
        rp[4 * jt + 3] = rp[4 * jt + 1] + N * row_bytes;
      }
    };
    auto issue1 = [&](uint4 (&a)[kRound1][4 * kTiles], std::int64_t q, int r) {
      const std::uint8_t* rp[4 * kTiles];
      bool vlo[kTiles], vhi[kTiles];
      task_rows(q, rp, vlo, vhi);
#pragma unroll
      for (int i = 0; i < kRound1; ++i) {
        const int kbi = kw0 + r * kRound1 + i;
        const int ch = kbi * 4 + c;
        const bool ok = kbi < kw1 && ch < cpr;
        const std::int64_t off = static_cast<std::int64_t>(ch) * 16;
#pragma unroll
        for (int jt = 0; jt < kTiles; ++jt) {
          a[i][4 * jt + 0] = ok && vlo[jt] ? sm90::ld_stream_16(rp[4 * jt + 0] + off) : zero4();
          a[i][4 * jt + 1] = ok && vhi[jt] ? sm90::ld_stream_16(rp[4 * jt + 1] + off) : zero4();
          a[i][4 * jt + 2] = ok && vlo[jt] ? sm90::ld_stream_16(rp[4 * jt + 2] + off) : zero4();
          a[i][4 * jt + 3] = ok && vhi[jt] ? sm90::ld_stream_16(rp[4 * jt + 3] + off) : zero4();
        }
      }
    };
    if constexpr (kQg) {
      gemm1_qg(p, smem, U, NB1, q0, q1, xscale);
    } else {
    uint4 cur[kRound1][4 * kTiles], nxt[kRound1][4 * kTiles];
    if (q0 < q1 && R1 > 0) issue1(cur, q0, 0);
    // The CTA's units in order: every thread runs finish_pass for every unit (the mbarriers count
    // each thread's arrival once a unit), so nothing in this loop may skip a unit in some warps.
    std::uint32_t unit = 0;
    for (std::int64_t q = q0; q < q1; ++q) {
      const int u = static_cast<int>(q / NB1), cb = static_cast<int>(q % NB1);
      const int e = ue[u], b = uoff[u], T = uoff[u + 1] - b;
      for (int t0 = 0; t0 < T; t0 += kTok) {
        const int nt = min(kTok, T - t0);
        const std::uint8_t* xrow[kTg];
        bool xv[kTg];
        float acc[2 * kTiles][kTg][4];
        start_pass(b, T, t0, xrow, xv, acc);
        for (int r = 0; r < R1; ++r) {
          // The next round: this unit's, else the next pass's or the next task's first.
          if (r + 1 < R1) {
            issue1(nxt, q, r + 1);
          } else if (t0 + kTok < T) {
            issue1(nxt, q, 0);
          } else if (q + 1 < q1) {
            issue1(nxt, q + 1, 0);
          }
#pragma unroll
          for (int i = 0; i < kRound1; ++i) {
            const int kbi = kw0 + r * kRound1 + i;
            const int ch = kbi * 4 + c;
            const bool ok = kbi < kw1 && ch < cpr;
#pragma unroll
            for (int gi = 0; gi < kTg; ++gi) {
              if (8 * gi >= nt) continue;
              const uint4 bx = ok && xv[gi] ? *reinterpret_cast<const uint4*>(xrow[gi] + ch * 16) : zero4();
#pragma unroll
              for (int jt = 0; jt < kTiles; ++jt) {
                mma_block(acc[2 * jt + 0][gi], cur[i][4 * jt + 0], cur[i][4 * jt + 1], bx);
                mma_block(acc[2 * jt + 1][gi], cur[i][4 * jt + 2], cur[i][4 * jt + 3], bx);
              }
            }
          }
#pragma unroll
          for (int i = 0; i < kRound1; ++i)
#pragma unroll
            for (int x = 0; x < 4 * kTiles; ++x) cur[i][x] = nxt[i][x];
        }
        finish_pass(acc, e, cb, b, t0, nt, unit++);
      }
    }
    }  // the mma.sync forms
    if (kDecoupled && p.phases != nullptr) __syncthreads();  // the phase timer: the last unit summed too
    stamp(kPhaseGemm1);

    // ---- 2. every h of the call exists (the launch is cooperative: its own barrier) ----
    cg::this_grid().sync();
    stamp(kPhaseBarrier);

    // ---- 3. GEMM2 + combine over this CTA's column blocks ----
    float hscale = 1.0f;  // fp8_per_tensor's intermediate scale (static or dynamic, below)
    // Every placed slot's h as GEMM2's B operand into the region (the token rows are done).
    // 16-byte chunks of an h row and a w2 row, the last one half (8 bytes) where fp8 rows of
    // N % 16 == 8 (gpt-oss at TP8: N = 360) are 8-byte but not 16-byte multiples.
    const int cph = static_cast<int>((w2_row + 15) / 16);
    const bool half_rows = kGeneral && kFp8 && (w2_row & 15) != 0;  // plain kernel, bf16 / fp16: 16-byte rows
    if (kFp8 && per_channel) {
      // fp8_per_channel: a warp a slot: its row's absmax gives the slot's scale (the reference's
      // per-row intermediate scale), then the row as e4m3, zero past N up to the chunk's end. The
      // slot's coefficient is its scale (and router weight unless it went in); the output
      // channel's w2 scale is applied with it in GEMM2.
      const int r4 = cph * 4;
      for (int slot = warp; slot < P; slot += kWarps) {
        const int e = slot_e[slot];
        if (e < 0) {
          if (lane == 0) coef[slot] = 0.0f;
          continue;
        }
        const float4* hrow = reinterpret_cast<const float4*>(p.h_buf + static_cast<std::int64_t>(slot) * N);
        float a = 0.0f;
        for (int q4 = lane; q4 * 4 < N; q4 += 32) {
          const float4 v = __ldcg(hrow + q4);
          a = numerics::fold_absmax4(a, v);
        }
        const float s2 = numerics::dynamic_scale(warp_max(a));
        const float inv = 1.0f / s2;
        for (int q4 = lane; q4 < r4; q4 += 32) {
          std::uint32_t w = 0u;
          if (q4 * 4 < N) {
            w = numerics::e4m3x4(__ldcg(hrow + q4), inv);
          }
          *reinterpret_cast<std::uint32_t*>(region + static_cast<std::int64_t>(slot) * ph + q4 * 4) = w;
        }
        if (lane == 0) coef[slot] = p.weight_on_input ? s2 : s2 * tw[slot];
      }
    } else if constexpr (kFp8) {
      // Word q4 of a staged row: 4 e4m3 of h, or zero past N up to the 16-byte chunk's end (the
      // half chunk's mma then multiplies zeros by zeros). The dynamic scale is the absmax of every
      // h of the call: every CTA stages all of them, so it folds them as they arrive (in registers
      // where a thread has one word, or at most kHoldH, else read twice from L2), reduces over the CTA
      // and then quantizes: the same max (order-free) as a grid-wide reduction, without one more
      // round trip after the barrier.
      const int r4 = cph * 4, n4 = P * r4;
      auto word_ok = [&](int i) {  // word i holds h: a placed slot, before N
        const int slot = i / r4;
        return i < n4 && slot_e[slot] >= 0 && (i - slot * r4) * 4 < N;
      };
      auto h4 = [&](int i) {
        const int slot = i / r4;
        return __ldcg(reinterpret_cast<const float4*>(p.h_buf + static_cast<std::int64_t>(slot) * N) + (i - slot * r4));
      };
      auto put = [&](int i, std::uint32_t w) {
        const int slot = i / r4;
        if (slot_e[slot] >= 0)
          *reinterpret_cast<std::uint32_t*>(region + static_cast<std::int64_t>(slot) * ph + (i - slot * r4) * 4) = w;
      };
      const bool dynamic = p.a2_scale == nullptr;
      if (dynamic && n4 <= kThreads) {
        // At most one word a thread (M = 1 on the TP8 shards): no held loop's dead blocks.
        const bool ok = word_ok(tid);
        const float4 v = ok ? h4(tid) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        hscale = numerics::dynamic_scale(block_absmax(numerics::fold_absmax4(0.0f, v), scratch));
        if (tid < n4) put(tid, ok ? numerics::e4m3x4(v, 1.0f / hscale) : 0u);
      } else if (dynamic && n4 <= kHoldH * kThreads) {
        float4 held[kHoldH];
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < kHoldH; ++c) {
          const int i = tid + c * kThreads;
          held[c] = word_ok(i) ? h4(i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          a = numerics::fold_absmax4(a, held[c]);
        }
        hscale = numerics::dynamic_scale(block_absmax(a, scratch));
        const float inv = 1.0f / hscale;
#pragma unroll
        for (int c = 0; c < kHoldH; ++c) {
          const int i = tid + c * kThreads;
          if (i < n4) put(i, word_ok(i) ? numerics::e4m3x4(held[c], inv) : 0u);
        }
      } else {
        if (dynamic) {
          float a = 0.0f;
          for (int i = tid; i < n4; i += kThreads) {
            if (!word_ok(i)) continue;
            const float4 v = h4(i);
            a = numerics::fold_absmax4(a, v);
          }
          hscale = numerics::dynamic_scale(block_absmax(a, scratch));
        } else {
          hscale = p.a2_scale[0];
        }
        const float inv = 1.0f / hscale;
        for (int i = tid; i < n4; i += kThreads) put(i, word_ok(i) ? numerics::e4m3x4(h4(i), inv) : 0u);
      }
    } else {
      const std::uint8_t* hb = reinterpret_cast<const std::uint8_t*>(p.h_buf);
      const int n16 = P * cph;
      for (int i = tid; i < n16; i += kThreads) {
        const int slot = i / cph, q = i - slot * cph;
        if (slot_e[slot] < 0) continue;
        sm90::cp_async_16_zfill(sm90::smem_addr(region + static_cast<std::int64_t>(slot) * ph + q * 16),
                                hb + static_cast<std::int64_t>(slot) * w2_row + q * 16, 16);
      }
      sm90::cp_async_commit();
    }
    // Each slot's GEMM2 coefficient: the fp8 scales, and the router weight unless it went in
    // (fp8_per_channel: written with the slot's row above).
    for (int sl = tid; sl < P && !(kFp8 && per_channel); sl += kThreads) {
      const int e = slot_e[sl];
      const float scale = kFp8 && e >= 0 ? hscale * p.w2_scale[e] : 1.0f;
      coef[sl] = e < 0 ? 0.0f : (p.weight_on_input ? scale : scale * tw[sl]);
    }
    if constexpr (!kFp8) sm90::cp_async_wait_all_groups();
    __syncthreads();
    stamp(kPhaseStaged);

    const std::uint8_t* w2 = static_cast<const std::uint8_t*>(p.w2);
    const int S = reinterpret_cast<const int*>(scratch)[kWarps + 1];
    const int CB = static_cast<int>((K + 15) / 16);
    const int cb0 = static_cast<int>(static_cast<std::int64_t>(CB) * j / G);
    const int cb1 = static_cast<int>(static_cast<std::int64_t>(CB) * (j + 1) / G);
    const int nkb2 = (cph + 3) / 4;  // 64-byte k-blocks of a w2 row
    float* ys = work;                // [P][cols]: each slot's result, coefficient applied
    for (int pb = cb0; pb < cb1; pb += L.cb_pass) {
      const int ncb = min(L.cb_pass, cb1 - pb);
      const int cols = ncb * 16;
      const int tasks = ncb * S;
      // A warp's tasks (column block, slot group) are rounds of kRound2 k-blocks of N; the next
      // round's w2 loads (the next task's first at a task's end) are issued before this round's mmas.
      const int R2 = (nkb2 + kRound2 - 1) / kRound2;
      auto issue2 = [&](uint4 (&a)[kRound2][2], int task, int r) {
        const int cbl = task / S, s = task - cbl * S;
        const int e = ue[gu[s]];
        const int rlo = (pb + cbl) * 16 + g, rhi = rlo + 8;
        const bool vlo = rlo < K, vhi = rhi < K;
        const std::uint8_t* alo = w2 + (static_cast<std::int64_t>(e) * K + (vlo ? rlo : 0)) * w2_row;
        const std::uint8_t* ahi = w2 + (static_cast<std::int64_t>(e) * K + (vhi ? rhi : 0)) * w2_row;
#pragma unroll
        for (int i = 0; i < kRound2; ++i) {
          const int ch = (r * kRound2 + i) * 4 + c;
          const bool ok = ch < cph;
          const std::int64_t off = static_cast<std::int64_t>(ch) * 16;
          if (!kFp8 || !half_rows) {
            a[i][0] = ok && vlo ? sm90::ld_stream_16(alo + off) : zero4();
            a[i][1] = ok && vhi ? sm90::ld_stream_16(ahi + off) : zero4();
          } else {
            a[i][0] = ok && vlo ? ld_half_rows(alo + off, off + 16 > w2_row) : zero4();
            a[i][1] = ok && vhi ? ld_half_rows(ahi + off, off + 16 > w2_row) : zero4();
          }
        }
      };
      uint4 c2[kRound2][2], n2[kRound2][2];
      if (warp < tasks) issue2(c2, warp, 0);
      for (int task = warp; task < tasks; task += kWarps) {
        const int cbl = task / S, s = task - cbl * S;
        const int u = gu[s], first = gfirst[s];
        const int ng = min(8, uoff[u + 1] - first);
        const bool bv = g < ng;
        const std::uint8_t* brow = region + static_cast<std::int64_t>(bv ? sorted[first + g] : 0) * ph;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int r = 0; r < R2; ++r) {
          if (r + 1 < R2) issue2(n2, task, r + 1);
          else if (task + kWarps < tasks) issue2(n2, task + kWarps, 0);
#pragma unroll
          for (int i = 0; i < kRound2; ++i) {
            const int kbi = r * kRound2 + i;
            if (kbi * 4 >= cph) break;  // warp-uniform
            const int ch = kbi * 4 + c;
            const uint4 bx = ch < cph && bv ? *reinterpret_cast<const uint4*>(brow + ch * 16) : zero4();
            mma_block(acc, c2[i][0], c2[i][1], bx);
          }
#pragma unroll
          for (int i = 0; i < kRound2; ++i) {
            c2[i][0] = n2[i][0];
            c2[i][1] = n2[i][1];
          }
        }
        // acc: columns g, g + 8 of the block, the group's slots 2c, 2c + 1.
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int n = 2 * c + q;
            if (n < ng) {
              const int slot = sorted[first + n];
              const int r = (pb + cbl) * 16 + g + 8 * h2;  // the output column
              float v = acc[2 * h2 + q] * coef[slot];
              if (kFp8 && per_channel && r < K) v *= p.w2_scale[static_cast<std::int64_t>(ue[gu[s]]) * K + r];
              ys[static_cast<std::int64_t>(slot) * cols + cbl * 16 + g + 8 * h2] = v;
            }
          }
      }
      __syncthreads();
      // One (token, column) a thread: the k slots in slot order, then the b2 terms, rounded once.
      for (int o = tid; o < M * cols; o += kThreads) {
        const int t = o / cols, col = o - t * cols;
        const int r = pb * 16 + col;
        if (r >= K) continue;
        float acc = 0.0f;
        for (int jj = 0; jj < k; ++jj) {
          const int sl = t * k + jj;
          if (slot_e[sl] >= 0) acc += ys[static_cast<std::int64_t>(sl) * cols + col];
        }
        if (p.b2 != nullptr) acc = add_b2_terms(p, acc, t, r, slot_e, tw);
        static_cast<ActT*>(p.out)[static_cast<std::int64_t>(t) * K + r] = from_float<ActT>(acc);
      }
      __syncthreads();  // ys free for the next pass
    }
    if (p.phases != nullptr && j < p.phase_ctas) {
      __syncthreads();  // thread 0 stamps when every warp is done
      stamp(kPhaseExit);
    }
  }
};

template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  GemvMma<kOp>::run(p, smem_raw);
#endif
}

// The general e4m3 kernel (GemvMma<kOp, true>): fp8_per_channel, w2 rows of N % 16 == 8 bytes.
template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_general_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  GemvMma<kOp, true>::run(p, smem_raw);
#endif
}

// The wide e4m3 kernel (GemvMma<kOp, false, true>): GEMM1 tasks of 32 columns.
template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_wide_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  GemvMma<kOp, false, true>::run(p, smem_raw);
#endif
}

// The plain e4m3 kernel with GEMM1's units on mbarriers (GemvMma<kOp, false, false, true>).
template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_decoupled_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  GemvMma<kOp, false, false, true>::run(p, smem_raw);
#endif
}

// The plain e4m3 kernel with GEMM1 on wgmma (GemvMma<kOp, false, false, false, true>).
template <Operand kOp>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_qg_sm90_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(16) std::uint8_t smem_raw[];
  GemvMma<kOp, false, false, false, true>::run(p, smem_raw);
#endif
}

// ---- host side of one instantiation (inst/*.cu) ----

template <Operand kOp>
int gemv_mma_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_mma_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_mma_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_mma_sm90_kernel<kOp>, p, grid, stream);
}

template <Operand kOp>
int gemv_mma_general_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_mma_general_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_mma_general_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_mma_general_sm90_kernel<kOp>, p, grid, stream);
}

template <Operand kOp>
int gemv_mma_wide_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_mma_wide_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_mma_wide_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_mma_wide_sm90_kernel<kOp>, p, grid, stream);
}

template <Operand kOp>
int gemv_mma_decoupled_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_mma_decoupled_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_mma_decoupled_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_mma_decoupled_sm90_kernel<kOp>, p, grid, stream);
}

template <Operand kOp>
int gemv_mma_qg_max_coresident_ctas(int device) {
  static std::atomic<int> cached[64];
  return coresident_ctas(&gemv_mma_qg_sm90_kernel<kOp>, device, cached);
}

template <Operand kOp>
void launch_gemv_mma_qg_sm90(const GemvParams& p, int grid, void* stream) {
  launch_cooperative(&gemv_mma_qg_sm90_kernel<kOp>, p, grid, stream);
}

}  // namespace moekit::cuda::gemv
