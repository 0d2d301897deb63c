// moekit-launch-floor: what one timed call costs before moekit's kernels do anything, and how fast
// a bare weight stream of a decode call's size can be, measured the way moekit-bench times a
// call (CUDA-graph replay between two events, L2 flushed before each replay outside the events,
// median), and each also timed inside its graph (graph_timing.cuh: events as graph nodes after the
// flush node, no graph launch in the interval). The floors the decode paths are judged against:
//   - an empty kernel (1 CTA), the same with the decode kernel's launch shape (clusters of 8,
//     210 KB of shared memory), a memset node + kernel, and a kernel + a PDL-launched kernel;
//   - a stream: CTAs that only pull B bytes through cp.async.bulk into a 12-stage ring of 16 KB
//     stages (one thread issuing, mbarrier completion), as the decode kernel's producer does;
//   - inv_rope_fp8_quant's movement with no math (docs/rope_quant.md): 1 KB rows read, 512 B rows
//     written, at DeepSeek-V4-Flash / Pro TP8 T = 16384, and cudaMemcpyAsync of the same bytes;
//   - the cost of a kernel's code: one CTA (and a CTA on every SM) running kN straight-line
//     instructions (4 to 64 KB of SASS) twice in a loop, each pass timed with clock64 in the
//     kernel: the first pass fetches the code, the second runs it from the instruction caches;
//     after the L2 flush alone and after the flush plus 256 KB of other code on every SM (which
//     also evicts the SMs' instruction caches): the fetch cost per KB that a once-a-call kernel
//     (routing, decode) pays;
//   - the token-major GEMM1's weight stream with no math (docs/tokmajor.md): mixtral TP8 at M = 64
//     is 112 units of 256 weight rows x K = 4096 bf16, one a CTA, read as 2D TMA boxes of 128 B of
//     K x 128 rows (the kernel's boxes), as 256 B boxes, and as contiguous 2 MB a CTA: whether
//     the box pattern itself keeps the kernel's GEMM1 at 3.3 TB/s (Nsight Compute, session 15);
//     with the kernel's token-row gather and a held stage; and the kernel's warp-specialized
//     pipeline rebuilt part by part (pipe_stream_kernel).
//   - Swap-AB GEMM1's weight stream at gpt-oss-120b TP1 fp8 M = 1 (item_stream_kernel): its 180
//     items in the kernel's CTA order through its ring, other stage shapes, the same bytes as
//     contiguous copies, and on the balanced-wave grid (90 CTAs of two items).
//   - The decode kernel's GEMM1 and GEMM2 weight streams (decode_box_stream_kernel) at qwen3-30b
//     TP8's shapes: the rate a CTA of each box pattern. --only-swapab runs these and the Swap-AB
//     cases alone (sessions 23, 24).
//
//   - the L2 prefetch (--only-prefetch runs these alone; session 26): bulk pieces and 128-byte
//     line prefetches of 8 and 24 MB from 128 CTAs, alone, before a whole-grid reader, and beside a
//     1-CTA kernel of 8 us (the routing launch's stand-in) before it.
//
//   - the one-launch decode call's skeleton (--only-skeleton; session 34): ids, GEMM1's bytes, a
//     grid barrier (cooperative or a counter on a plain launch), h, GEMM2's bytes (after the
//     barrier, or copied to shared memory before GEMM1), the output; no math: the floor of the
//     GEMV path's structure at TP8 fp8 M = 1.
//
//   - the same skeleton at any grid point's bytes (--skeleton-points; session 50): per point, the
//     experts it touches and their GEMM1 and GEMM2 bytes at its TP and scheme, through the same
//     three structures (no barrier, a lower bound for any design whose weights wait on a routing
//     read; the cooperative grid sync of the GEMV path; a counter barrier with w2 copied early
//     where a CTA's share fits in shared memory). tools/scripts/skeleton_floor.py writes the point
//     list from a moekit-bench grid (its touched experts) and joins the floors to its rows: which
//     misses of BRIEF §4's target the one-launch structure itself cannot reach.
//
//   - Swap-AB GEMM2's weight movement at gpt-oss fp8 TP8 M = 64 (--only-gemm2-tiles; session 67):
//     the 23,040-byte contiguous tiles of 360-byte w2 rows through a producer / consumer ring, by
//     one bulk copy a tile, 8-byte and 16-byte cp.async, on one and two CTAs an SM, against a
//     contiguous stream of the same bytes: what the kernel's ~62 µs could come down to.
//     Session 68 added the kernel's own copy pattern (three swizzled 128-byte K blocks a stage,
//     8-byte copies of rows 8 apart), bare and with the token rows and item metadata beside it.
//
//   moekit-launch-floor [--iters N] [--json PATH]
//                       [--only-swapab | --only-prefetch | --only-skeleton | --only-gemm2-tiles |
//                        --skeleton-points LIST]
//   LIST: comma-separated PRESET:TP:SCHEME:M:EXPERTS (SCHEME bf16 or fp8; EXPERTS touched, 1..256),
//   e.g. qwen3-30b-a3b:8:fp8:1:8,deepseek-v3:8:bf16:16:74
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "graph_timing.cuh"
#include "l2_flush.cuh"
#include "moekit/presets.hpp"
#include "moekit/version.hpp"

namespace {

#define LF_CHECK(x)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

__global__ void empty_kernel(int* sink) {
  if (sink != nullptr && threadIdx.x == 1023) *sink = 0;  // never true: keeps the kernel alive
}

__global__ void pdl_trigger_kernel(int* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (sink != nullptr && threadIdx.x == 1023) *sink = 0;
}

__global__ void pdl_wait_kernel(int* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (sink != nullptr && threadIdx.x == 1023) *sink = 0;
}

// The L2 prefetch cases (--only-prefetch; session 26: a bulk prefetch of GEMM1's weights from the
// routing launch made the TP8 chains 0.33-0.88x). CTA 0 stands in for the routing launch when
// busy_ns > 0: it spins for busy_ns on %globaltimer. The other CTAs (all of them when busy_ns is 0)
// start L2 prefetches of their share of [src, src + bytes) and exit: kBulk, 64 KB
// cp.async.bulk.prefetch.L2 pieces from thread 0..; else prefetch.global.L2 of every 128-byte line,
// spread over all threads.
template <bool kBulk>
__global__ void __launch_bounds__(512) prefetch_kernel(const std::uint8_t* src, std::int64_t bytes,
                                                       long long busy_ns, int* sink) {
  int b = static_cast<int>(blockIdx.x), nb = static_cast<int>(gridDim.x);
  if (busy_ns > 0) {
    if (b == 0) {
      const std::uint64_t t0 = moekit::cuda::sm90::globaltimer_ns();
      while (moekit::cuda::sm90::globaltimer_ns() - t0 < static_cast<std::uint64_t>(busy_ns)) {
      }
      if (sink != nullptr && threadIdx.x == 1023) *sink = 0;
      return;
    }
    --b;
    --nb;
  }
  if (kBulk) {
    constexpr std::int64_t kPiece = 64 * 1024;
    const std::int64_t pieces = (bytes + kPiece - 1) / kPiece;
    for (std::int64_t i = static_cast<std::int64_t>(b) * blockDim.x + threadIdx.x; i < pieces;
         i += static_cast<std::int64_t>(nb) * blockDim.x) {
      const std::int64_t len = bytes - i * kPiece < kPiece ? bytes - i * kPiece : kPiece;
      moekit::cuda::sm90::bulk_prefetch_l2(src + i * kPiece, static_cast<std::uint32_t>(len));
    }
  } else {
    const std::int64_t lines = bytes / 128;
    for (std::int64_t i = static_cast<std::int64_t>(b) * blockDim.x + threadIdx.x; i < lines;
         i += static_cast<std::int64_t>(nb) * blockDim.x)
      moekit::cuda::sm90::prefetch_l2(src + i * 128);
  }
}

// The skeletons' middle (skeleton_kernel, skeleton_grid_kernel): the CTA's GEMM1 word x reduced
// to one partial, the crossing of the grid (kSync: 0 none (a lower bound, not a valid call), 1
// cooperative_groups grid sync, 2 a counter barrier on a plain launch), then every CTA's partial
// read back (h): the word GEMM2's part goes on from.
__device__ __forceinline__ void skeleton_write_partial(unsigned x, float* part, unsigned* s_red) {
  const int t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if ((t & 31) == 0) s_red[t >> 5] = x;
  __syncthreads();
  if (t == 0) {
    unsigned y = 0;
    for (int w = 0; w < nt / 32; ++w) y ^= s_red[w];
    part[blockIdx.x] = static_cast<float>(y & 0xffff);
  }
}
__device__ __forceinline__ unsigned skeleton_read_h(const float* part) {
  float h = 0.f;  // every CTA's partial: the h every GEMM2 needs
  for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(gridDim.x); i += static_cast<int>(blockDim.x))
    h += __ldcg(part + i);
  return __float_as_uint(h);
}
template <int kSync>
__device__ __forceinline__ unsigned skeleton_cross_grid(unsigned x, float* part, unsigned* counter, unsigned* s_red) {
  const int t = static_cast<int>(threadIdx.x);
  const int nb = static_cast<int>(gridDim.x);
  skeleton_write_partial(x, part, s_red);
  if (kSync == 1) {
    cooperative_groups::this_grid().sync();
  } else if (kSync == 2) {
    __syncthreads();
    if (t == 0) {
      __threadfence();
      const unsigned old = atomicAdd(counter, 1u);
      const unsigned target = (old / static_cast<unsigned>(nb) + 1) * static_cast<unsigned>(nb);
      while (static_cast<int>(moekit::cuda::sm90::ld_acquire_gpu(counter) - target) < 0) {
      }
    }
    __syncthreads();
  }
  return skeleton_read_h(part);
}

// The skeletons' w2 share copied to shared memory before GEMM1 (kW2Early), read after the barrier.
__device__ __forceinline__ unsigned skeleton_read_w2_early(const uint4* s_w2, std::int64_t chunks) {
  moekit::cuda::sm90::cp_async_wait_all_groups();
  __syncthreads();
  unsigned y = 0;
  for (std::int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const uint4 v = s_w2[c];
    y ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return y;
}

// The skeleton of a one-launch decode call (--only-skeleton; session 34): what the GEMV path's
// structure costs with its math taken out. Every CTA loads the call's k expert ids (a DRAM round
// trip after the flush), streams its share of GEMM1's bytes of those experts (16-byte loads, 8 a
// thread in flight), writes one partial, crosses the grid (kSync: 0 none (a lower bound, not a
// valid call), 1 cooperative_groups grid sync, 2 a counter barrier on a plain launch), reads every
// CTA's partial (h) and streams its share of GEMM2's bytes, then writes its output. kW2Early: the
// GEMM2 share is copied to shared memory (cp.async) right after the ids, before GEMM1, and read
// from there after the barrier.
template <int kSync, bool kW2Early>
__global__ void __launch_bounds__(512, 1) skeleton_kernel(const int* ids, int k, const uint4* w1, std::int64_t per1,
                                                          const uint4* w2, std::int64_t per2, float* part,
                                                          unsigned* counter, float* out) {
  extern __shared__ uint4 s_w2[];
  __shared__ int s_ids[64];
  __shared__ unsigned s_red[16];
  const int t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int b = static_cast<int>(blockIdx.x), nb = static_cast<int>(gridDim.x);
  if (t < k) s_ids[t] = ids[t];
  __syncthreads();
  // Expert e's region of a GEMM: [e][nb * per] 16-byte chunks; CTA b reads chunks [b per, b per + per)
  // of it, the runs of 32 chunks (512 bytes, a warp's loads) going to the k experts in turn.
  const std::int64_t row1 = static_cast<std::int64_t>(nb) * per1, row2 = static_cast<std::int64_t>(nb) * per2;
  if (kW2Early) {
    for (std::int64_t c = t; c < per2; c += nt)
      moekit::cuda::sm90::cp_async_16_zfill(moekit::cuda::sm90::smem_addr(s_w2 + c),
                                            w2 + s_ids[(c >> 5) % k] * row2 + b * per2 + c, 16);
    moekit::cuda::sm90::cp_async_commit();
  }
  // CTA b's share of a GEMM's region (w, per chunks of each expert's row of nb * per), 8 loads a
  // thread in flight; the xor of the words keeps the loads live.
  auto stream_share = [&](const uint4* w, std::int64_t per, std::int64_t row) {
    constexpr int kR = 8;
    unsigned x = 0;
    for (std::int64_t c0 = 0; c0 < per; c0 += static_cast<std::int64_t>(kR) * nt) {
      uint4 v[kR];
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        const std::int64_t c = c0 + i * nt + t;
        v[i] = c < per ? moekit::cuda::sm90::ld_stream_16(w + s_ids[(c >> 5) % k] * row + b * per + c)
                       : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kR; ++i) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
    }
    return x;
  };
  unsigned y = skeleton_cross_grid<kSync>(stream_share(w1, per1, row1), part, counter, s_red);
  y ^= kW2Early ? skeleton_read_w2_early(s_w2, per2) : stream_share(w2, per2, row2);
  out[static_cast<std::int64_t>(b) * nt + t] = static_cast<float>(y & 0xff);
}

// The skeleton at a grid point's bytes (--skeleton-points; session 50): the same phases as
// skeleton_kernel, for n <= kSkeletonMaxExperts experts of any size. Expert e's GEMM bytes are c
// 16-byte chunks at w + ids[e] * c; CTA b reads chunks [b pe, b pe + pe) of every expert (pe =
// ceil(c / gridDim)), as one flat index over (expert, chunk), 8 loads a thread in flight. kHalf:
// 0 the whole call in one launch; 1 GEMM1's half alone (ids, w1, the partials: the first of two
// launches), 2 GEMM2's alone (ids, h from the partials, w2: the second), so that two launches in
// a row time what one launch spanning both GEMMs saves over them.
constexpr int kSkeletonMaxExperts = 256;
template <int kSync, bool kW2Early, int kHalf = 0>
__global__ void __launch_bounds__(512, 1) skeleton_grid_kernel(const int* ids, int n, const uint4* w1, int c1,
                                                               const uint4* w2, int c2, float* part,
                                                               unsigned* counter, float* out) {
  extern __shared__ uint4 s_w2[];
  __shared__ int s_ids[kSkeletonMaxExperts];
  __shared__ unsigned s_red[16];
  const int t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int b = static_cast<int>(blockIdx.x), nb = static_cast<int>(gridDim.x);
  for (int i = t; i < n; i += nt) s_ids[i] = ids[i];
  __syncthreads();
  const int pe1 = (c1 + nb - 1) / nb, pe2 = (c2 + nb - 1) / nb;
  // The chunk of flat index i of this CTA's share (-1: past the expert's end).
  auto chunk = [&](const uint4* w, int c, int pe, int i) -> const uint4* {
    const int e = i / pe, cc = b * pe + (i - e * pe);
    return cc < c ? w + static_cast<std::int64_t>(s_ids[e]) * c + cc : nullptr;
  };
  if (kW2Early) {
    for (int i = t; i < n * pe2; i += nt) {
      const uint4* src = chunk(w2, c2, pe2, i);
      moekit::cuda::sm90::cp_async_16_zfill(moekit::cuda::sm90::smem_addr(s_w2 + i), src != nullptr ? src : w2,
                                            src != nullptr ? 16 : 0);
    }
    moekit::cuda::sm90::cp_async_commit();
  }
  auto stream_share = [&](const uint4* w, int c, int pe) {
    constexpr int kR = 8;
    unsigned x = 0;
    const int total = n * pe;
    for (int i0 = 0; i0 < total; i0 += kR * nt) {
      uint4 v[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int i = i0 + r * nt + t;
        const uint4* src = i < total ? chunk(w, c, pe, i) : nullptr;
        v[r] = src != nullptr ? moekit::cuda::sm90::ld_stream_16(src) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) x ^= v[r].x ^ v[r].y ^ v[r].z ^ v[r].w;
    }
    return x;
  };
  unsigned y = 0;
  if constexpr (kHalf == 1) {
    skeleton_write_partial(stream_share(w1, c1, pe1), part, s_red);
  } else if constexpr (kHalf == 2) {
    y = skeleton_read_h(part) ^ stream_share(w2, c2, pe2);
  } else {
    y = skeleton_cross_grid<kSync>(stream_share(w1, c1, pe1), part, counter, s_red);
    y ^= kW2Early ? skeleton_read_w2_early(s_w2, static_cast<std::int64_t>(n) * pe2) : stream_share(w2, c2, pe2);
  }
  out[static_cast<std::int64_t>(b) * nt + t] = static_cast<float>(y & 0xff);
}

// Reads [src, src + 16 * n16) once with 16-byte streaming loads over the whole grid (the weights a
// GEMM reads after the prefetch); the xor of the words keeps the loads live.
__global__ void __launch_bounds__(512) read_kernel(const uint4* src, std::int64_t n16, int* sink) {
  unsigned x = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = moekit::cuda::sm90::ld_stream_16(src + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u && sink != nullptr) *sink = static_cast<int>(x);  // never true for the fill below
}

constexpr int kStages = 12;
constexpr int kStageBytes = 16384;

// Each CTA pulls bytes [blockIdx.x * per_cta, +per_cta) of src through a ring of kStages stages:
// thread 0 issues one 16 KB bulk copy per stage and re-issues a stage once the CTA has "used" it
// (here: waited for it); the sum of one word per stage keeps the loads live.
__global__ void __launch_bounds__(128, 1) stream_kernel(const std::uint8_t* src, std::int64_t per_cta, int* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[kStages];
  const std::uint32_t sbase = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::int64_t chunks = per_cta / kStageBytes;
  const std::uint8_t* base = src + static_cast<std::int64_t>(blockIdx.x) * per_cta;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      const std::uint32_t b = static_cast<std::uint32_t>(__cvta_generic_to_shared(&full[s]));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](std::int64_t c) {
    const int s = static_cast<int>(c % kStages);
    const std::uint32_t b = static_cast<std::uint32_t>(__cvta_generic_to_shared(&full[s]));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(kStageBytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            sbase + s * kStageBytes),
        "l"(base + c * kStageBytes), "r"(kStageBytes), "r"(b)
        : "memory");
  };
  if (threadIdx.x == 0)
    for (std::int64_t c = 0; c < chunks && c < kStages; ++c) issue(c);
  int acc = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const int s = static_cast<int>(c % kStages);
    const std::uint32_t b = static_cast<std::uint32_t>(__cvta_generic_to_shared(&full[s]));
    const std::uint32_t parity = static_cast<std::uint32_t>((c / kStages) & 1);
    std::uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(b), "r"(parity)
          : "memory");
    }
    acc += reinterpret_cast<const int*>(smem + s * kStageBytes)[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0 && c + kStages < chunks) issue(c + kStages);
  }
  if (acc == 0x7fffffff) *sink = acc;
}

// The ring of the --only-gemm2-tiles kernels below: thread 0 sets up `stages` full barriers of
// `full_count` arrivals and empty barriers of one arrival a consumer warp (4); and the consumer's
// turn at a stage: wait for it, read one word (the sum keeps the copies live), release it.
__device__ __forceinline__ void w2_ring_init(std::uint64_t* full, std::uint64_t* empty, int stages, int full_count) {
  namespace sm90 = moekit::cuda::sm90;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      sm90::mbar_init(sm90::smem_addr(&full[s]), full_count);
      sm90::mbar_init(sm90::smem_addr(&empty[s]), 4);
    }
    sm90::fence_mbarrier_init_cluster();
  }
  __syncthreads();
}
__device__ __forceinline__ int w2_ring_consume(std::uint32_t fb, std::uint32_t eb, std::uint32_t phase,
                                               const std::uint8_t* stage_smem, int t) {
  namespace sm90 = moekit::cuda::sm90;
  sm90::mbar_wait(fb, phase);
  const int v = reinterpret_cast<const int*>(stage_smem)[t];
  __syncwarp();
  if ((t & 31) == 0) sm90::mbar_arrive(eb);
  return v;
}

// Swap-AB GEMM2's weight movement at gpt-oss fp8 TP8 with no math (--only-gemm2-tiles; session 67):
// w2 rows of 360 bytes, so a 64-row tile is 23,040 contiguous bytes; items of three consecutive
// tiles walked round robin over the grid, a ring of `stages` tiles between a producer warpgroup
// and a consumer warpgroup (each consumer warp's lane 0 releases a stage, as the kernel's do). kMode
// 0: one cp.async.bulk a tile (one thread; TMA cannot take the 360-byte pitch as 2D boxes, but the
// whole tile is one 16-byte-aligned run); 1: the producer's 128 threads copy it in 8-byte cp.async
// (the kernel's rows8 producer, without the swizzle); 2: in 16-byte cp.async.
template <int kMode>
__global__ void __launch_bounds__(256) w2_tile_kernel(const std::uint8_t* src, int items, int tiles_per_item,
                                                      int tile_bytes, int stages, int* sink) {
  namespace sm90 = moekit::cuda::sm90;
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[8], empty[8];
  const int t = threadIdx.x & 127;
  const std::uint32_t sbase = sm90::smem_addr(smem);
  w2_ring_init(full, empty, stages, kMode == 0 ? 1 : 128);
  int stage = 0;
  std::uint32_t phase = 0;
  int acc = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    for (int j = 0; j < tiles_per_item; ++j) {
      const std::uint32_t fb = sm90::smem_addr(&full[stage]), eb = sm90::smem_addr(&empty[stage]);
      const std::uint32_t dst = sbase + stage * tile_bytes;
      if (threadIdx.x < 128) {
        const std::uint8_t* g = src + (static_cast<std::int64_t>(w) * tiles_per_item + j) * tile_bytes;
        sm90::mbar_wait(eb, phase ^ 1);
        if (kMode == 0) {
          if (t == 0) {
            sm90::mbar_arrive_expect_tx(fb, static_cast<std::uint32_t>(tile_bytes));
            sm90::bulk_copy_g2s(dst, g, static_cast<std::uint32_t>(tile_bytes), fb);
          }
        } else {
          constexpr int kBytes = kMode == 1 ? 8 : 16;
          for (int i = t; i < tile_bytes / kBytes; i += 128) {
            if (kMode == 1) sm90::cp_async_8_zfill(dst + kBytes * i, g + kBytes * i, 8);
            else sm90::cp_async_16_zfill(dst + kBytes * i, g + kBytes * i, 16);
          }
          sm90::cp_async_mbar_arrive_noinc(fb);
        }
      } else {
        acc += w2_ring_consume(fb, eb, phase, smem + stage * tile_bytes, t);
      }
      if (++stage == stages) { stage = 0; phase ^= 1; }
    }
  }
  if (kMode != 0) sm90::cp_async_wait_all_groups();
  if (acc == 0x7fffffff) *sink = acc;
}

// The same tiles copied as Swap-AB's 8-byte-row producer copies them (--only-gemm2-tiles; session
// 68): a stage is three 128-byte K blocks of the 64-row tile in the 128-byte swizzle (24,576 bytes
// of shared memory, bytes past the 360-byte row zero-filled), thread t the 8-byte column t % 16 of
// rows t / 16 + 8 j. kTokens adds what the kernel copies beside the weights: 16 token rows of 360
// bytes a stage (8-byte halves, from a 64-row buffer that stays in L2) and, at an item's first
// stage, 4-byte copies of 16 slots and 16 router weights (the item's metadata).
template <bool kTokens>
__global__ void __launch_bounds__(256) w2_tile_layout_kernel(const std::uint8_t* src, const std::uint8_t* tok,
                                                             const int* meta, int items, int tiles_per_item,
                                                             int stages, int* sink) {
  namespace sm90 = moekit::cuda::sm90;
  constexpr int kRowBytes = 360, kTileBytes = 64 * kRowBytes, kBlockBytes = 64 * 128;
  constexpr int kTokBytes = 16 * 3 * 128, kStage = 3 * kBlockBytes + (kTokens ? kTokBytes + 128 : 0);
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[8], empty[8];
  const int t = threadIdx.x & 127;
  const std::uint32_t sbase = sm90::smem_addr(smem);
  w2_ring_init(full, empty, stages, 128);
  int stage = 0;
  std::uint32_t phase = 0;
  int acc = 0;
  const int c8 = t & 15, r0 = t >> 4;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    for (int j = 0; j < tiles_per_item; ++j) {
      const std::uint32_t fb = sm90::smem_addr(&full[stage]), eb = sm90::smem_addr(&empty[stage]);
      const std::uint32_t dst = sbase + stage * kStage;
      if (threadIdx.x < 128) {
        const std::uint8_t* g = src + (static_cast<std::int64_t>(w) * tiles_per_item + j) * kTileBytes;
        sm90::mbar_wait(eb, phase ^ 1);
        if (kTokens) {
          if (j == 0 && t < 32) sm90::cp_async_4_zfill(dst + 3 * kBlockBytes + kTokBytes + 4 * t, meta + (w * 16 + t) % 4096, 4);
          // 16 token rows x 3 blocks x 16 chunks of 16 bytes, as two 8-byte halves each.
          for (int i = t; i < 16 * 3 * 8; i += 128) {
            const int row = i / 24, blk = (i / 8) % 3, ch = i % 8;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int kb = blk * 128 + ch * 16 + 8 * h;
              const std::uint32_t d = dst + 3 * kBlockBytes + blk * 2048 + row * 128 + (((ch ^ (row & 7)) << 4) | (h << 3));
              sm90::cp_async_8_zfill(d, kb < kRowBytes ? static_cast<const void*>(tok + (w % 4) * 16 * kRowBytes + row * kRowBytes + kb) : tok,
                                     kb < kRowBytes ? 8 : 0);
            }
          }
        }
#pragma unroll
        for (int blk = 0; blk < 3; ++blk) {
          const int kb = blk * 128 + c8 * 8;
          const std::uint32_t d = dst + blk * kBlockBytes + r0 * 128 + ((((c8 >> 1) ^ r0) << 4) | ((c8 & 1) << 3));
#pragma unroll
          for (int r = 0; r < 8; ++r)
            sm90::cp_async_8_zfill(d + r * 1024, kb < kRowBytes ? static_cast<const void*>(g + (r0 + 8 * r) * kRowBytes + kb) : g,
                                   kb < kRowBytes ? 8 : 0);
        }
        sm90::cp_async_mbar_arrive_noinc(fb);
      } else {
        acc += w2_ring_consume(fb, eb, phase, smem + stage * kStage, t);
      }
      if (++stage == stages) { stage = 0; phase ^= 1; }
    }
  }
  sm90::cp_async_wait_all_groups();
  if (acc == 0x7fffffff) *sink = acc;
}

// kN dependent 32-bit integer instructions in straight-line code (16 bytes of SASS each: an add and
// an xor of values only known at run time, alternating, so that ptxas cannot fold the chain). The
// chain runs at ~4.5 cycles an instruction, which hides the fetch: it bounds what cold code costs
// dependent code only (independent code, like an unrolled epilogue, measured fetch-bound cold in
// session 17: docs/perf.md). Run
// twice by a loop that is not unrolled (the second pass runs the same instructions, from the
// instruction caches). Thread 0 of each CTA writes its two passes' clock64 cycles to
// cycles[2 * CTA ..+2] (null: not written).
template <int kN>
__global__ void code_kernel(long long* cycles) {
  unsigned x = threadIdx.x;
  const unsigned r = blockIdx.x | 1u, q = gridDim.x + 0x9e37u;
  const long long t0 = clock64();
  long long t1 = t0;
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) t1 = clock64();
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      asm volatile("add.u32 %0, %0, %1;" : "+r"(x) : "r"(r));
      asm volatile("xor.b32 %0, %0, %1;" : "+r"(x) : "r"(q));
    }
  }
  const long long t2 = clock64();
  if (cycles != nullptr && threadIdx.x == 0) {
    cycles[2 * blockIdx.x] = t1 - t0;
    cycles[2 * blockIdx.x + 1] = t2 - t1;
  }
  if (x == 0x7fffffffu && cycles != nullptr) cycles[0] = x;  // never true: keeps the chain live
}

// The consuming side of the stream kernels below: waits for each of `total` stages of a ring of
// kStages in turn (mbarriers `full`, stages of `stage_bytes` at `smem`), reads one word of it (the
// sum keeps the loads live), holds it kSpin cycles (a stand-in for the MMAs), and, once every
// thread is done with it, lets the `issuer` threads refill it kStages stages ahead. Returns the sum.
template <int kStages, int kSpin, class Issue>
__device__ __forceinline__ int drain_ring(std::int64_t total, std::uint64_t* full, const std::uint8_t* smem,
                                          int stage_bytes, bool issuer, Issue&& issue) {
  using namespace moekit::cuda::sm90;
  int acc = 0;
  for (std::int64_t c = 0; c < total; ++c) {
    const int st = static_cast<int>(c % kStages);
    mbar_wait(smem_addr(&full[st]), static_cast<std::uint32_t>((c / kStages) & 1));
    acc += reinterpret_cast<const int*>(smem + st * stage_bytes)[threadIdx.x];
    if constexpr (kSpin > 0) {
      const long long t0 = clock64();
      while (clock64() - t0 < kSpin) {
      }
    }
    __syncthreads();
    if (issuer && c + kStages < total) issue(c + kStages);
  }
  return acc;
}

// The ring's full barriers (one arrival each: the issuing thread's expect_tx), before any use.
template <int kStages>
__device__ __forceinline__ void ring_init(std::uint64_t* full) {
  using namespace moekit::cuda::sm90;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) mbar_init(smem_addr(&full[st]), 1);
    fence_mbarrier_init_cluster();
  }
  __syncthreads();
}

// Thread 0 fills the ring's first kStages stages, then the CTA drains all `total` (drain_ring,
// no hold), thread 0 refilling; the sum goes to `sink` only in a case that never happens.
template <int kStages, class Issue>
__device__ __forceinline__ void stream_ring(std::int64_t total, std::uint64_t* full, const std::uint8_t* smem,
                                            int stage_bytes, int* sink, Issue&& issue) {
  if (threadIdx.x == 0)
    for (std::int64_t c = 0; c < total && c < kStages; ++c) issue(c);
  const int acc = drain_ring<kStages, 0>(total, full, smem, stage_bytes, threadIdx.x == 0, issue);
  if (acc == 0x7fffffff) *sink = acc;
}

// The token-major GEMM1's weight stream without the MMAs: a 3D map [E][rows][K] of bf16 in units
// of 256 rows (unit u: expert u / tiles, rows (u % tiles) * 256 ..+256) walked K fastest; CTA c
// takes the contiguous range [c, c + 1) * total / gridDim.x of the units x K stages (with a grid
// of one CTA a unit, exactly unit c; with a grid of the SM count, an even split of the stream
// across every SM, as a stream-K schedule would); each stage is two boxes of kBoxK x 128 rows
// (the token-major kernel's two boxes a stage at kBoxK = 64: 128 B of K); thread 0 issues, the
// CTA waits for each stage before reusing it.
// kA (the token rows the kernel gathers with the weights, 16 rows of 128 B a stage from `a`, a
// [64][k_dim] bf16 buffer standing for hidden at M = 64, row (u * 5 + i) % 64): 0 none; 1 a 16-byte
// cp.async per thread (thread t: row t / 8, 16 B chunk t % 8) that arrives on the stage's barrier
// once landed (cp.async.mbarrier.arrive.noinc), as the token-major producer does; 2 one
// cp.async.bulk of 128 B per row (threads 0..15), completing as transaction bytes on the barrier.
// kSpin: cycles each stage is held after it lands before it is handed back (the token-major
// consumer's wgmma of a decode tile, ~450 cycles a stage at mixtral TP8: Nsight Compute's tensor
// pipe 22 % of a ~1.1 us stage).
template <int kBoxK, int kStages, int kA = 0, int kSpin = 0>
__global__ void __launch_bounds__(128, 1)
    tile_stream_kernel(const __grid_constant__ CUtensorMap map, int units, int tiles, int k_dim, int* sink,
                       const std::uint8_t* a) {
  using namespace moekit::cuda::sm90;
  constexpr int kStage = 2 * 128 * kBoxK * 2 + (kA ? 16 * 128 : 0);  // bytes: B tile, then the A rows
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[kStages];
  const std::uint32_t sbase = smem_addr(smem);
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) mbar_init(smem_addr(&full[st]), kA == 1 ? 1 + 128 : 1);
    fence_mbarrier_init_cluster();
  }
  __syncthreads();
  const int ks = k_dim / kBoxK;  // stages a unit
  const std::int64_t all = static_cast<std::int64_t>(units) * ks;
  const std::int64_t first = all * blockIdx.x / gridDim.x, total = all * (blockIdx.x + 1) / gridDim.x - first;
  auto issue = [&](std::int64_t c) {
    const int st = static_cast<int>(c % kStages);
    const std::int64_t g = first + c;  // global stage: unit g / ks, K step g % ks
    const int u = static_cast<int>(g / ks);
    const int k0 = static_cast<int>(g % ks) * kBoxK, e = u / tiles, r0 = (u % tiles) * 256;
    const std::uint32_t b = smem_addr(&full[st]), dst = sbase + st * kStage;
    constexpr int kB = 2 * 128 * kBoxK * 2;
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(b, kA == 2 ? kB + 16 * 128 : kB);
      tma_load_3d(dst, &map, b, k0, r0, e);
      tma_load_3d(dst + kB / 2, &map, b, k0, r0 + 128, e);
    }
    const std::int64_t kbyte = static_cast<std::int64_t>(k0) * 2;
    if constexpr (kA == 1) {
      const int row = threadIdx.x >> 3, chunk = threadIdx.x & 7;
      cp_async_16_zfill(dst + kB + row * 128 + chunk * 16,
                        a + static_cast<std::int64_t>((u * 5 + row) % 64) * k_dim * 2 + kbyte + chunk * 16, 16);
      cp_async_mbar_arrive_noinc(b);
    } else if constexpr (kA == 2) {
      if (threadIdx.x < 16)
        bulk_copy_g2s(dst + kB + threadIdx.x * 128,
                      a + static_cast<std::int64_t>((u * 5 + threadIdx.x) % 64) * k_dim * 2 + kbyte, 128, b);
    }
  };
  // kA == 2: thread 0's expect_tx must precede the other threads' bulk copies on a stage's first
  // use only in phase terms (complete_tx before expect_tx is allowed within a phase), so every
  // thread may issue its share at once.
  if (kA == 1 || threadIdx.x == 0 || (kA == 2 && threadIdx.x < 16))
    for (std::int64_t c = 0; c < total && c < kStages; ++c) issue(c);
  const int acc = drain_ring<kStages, kSpin>(total, full, smem, kStage,
                                             kA == 1 || threadIdx.x == 0 || (kA == 2 && threadIdx.x < 16), issue);
  if (kA == 1) cp_async_wait_all_groups();
  if (acc == 0x7fffffff) *sink = acc;
}

// The token-major kernel's pipeline without its bookkeeping (no expert table, schedule or
// epilogue), on the same [E][rows][K] map and units as tile_stream_kernel: 384 threads, a stage of
// 16 KB of token rows + the two 16 KB weight boxes (the kernel's 48 KB stage, 4 stages); warpgroup
// 0 produces (thread 0 the two boxes by TMA, the second `up_off` rows below the first: 128 as
// tile_stream_kernel, rows / 2 for the kernel's gate and up rows; with kA every thread a 16-byte
// cp.async of one of 16 token rows into the 128-byte swizzle, arriving on the stage's full
// barrier once landed); warpgroups 1 and 2 consume (every warp waits for the stage; with kMma
// warpgroup 1 runs the kernel's four wgmma m64n256k16 on it, as on a decode tile of <= 64 rows,
// and warpgroup 2 passes; lane 0 of each warp arrives on the stage's empty barrier once done).
// setmaxnreg as the kernel (64 / 216). Between tile_stream_kernel and the kernel: which of the
// kernel's parts costs its GEMM1 the 10-15 % it trails the boxes alone by.
template <bool kA, bool kMma>
__global__ void __launch_bounds__(384, 1)
    pipe_stream_kernel(const __grid_constant__ CUtensorMap map, int units, int tiles, int k_dim, int up_off, int* sink,
                       const std::uint8_t* a) {
  using namespace moekit::cuda;
  using namespace moekit::cuda::sm90;
  constexpr int kStages = 4, kATile = 16 * 1024, kStage = kATile + 2 * 16 * 1024;
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[kStages], empty[kStages];
  const std::uint32_t sbase = smem_addr(smem);
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(smem_addr(&full[st]), kA ? 1 + 128 : 1);
      mbar_init(smem_addr(&empty[st]), 8);
    }
    fence_mbarrier_init_cluster();
  }
  __syncthreads();
  const int ks = k_dim / 64;  // 128-byte K stages a unit
  const std::int64_t all = static_cast<std::int64_t>(units) * ks;
  const std::int64_t first = all * blockIdx.x / gridDim.x, total = all * (blockIdx.x + 1) / gridDim.x - first;
  if (threadIdx.x < 128) {
    setmaxnreg_dec<64>();
    const int t = threadIdx.x, row = t >> 3, chunk = t & 7;
    for (std::int64_t c = 0; c < total; ++c) {
      const int st = static_cast<int>(c % kStages);
      const std::uint32_t parity = static_cast<std::uint32_t>((c / kStages) & 1);
      mbar_wait(smem_addr(&empty[st]), parity ^ 1);
      const std::int64_t g = first + c;
      const int u = static_cast<int>(g / ks), k0 = static_cast<int>(g % ks) * 64;
      // Units of 256 rows when the boxes are adjacent (up_off 128, as tile_stream_kernel); of 128
      // gate rows and the up rows up_off below them otherwise (the kernel's GEMM1 tiles).
      const int e = u / tiles, r0 = (u % tiles) * (up_off == 128 ? 256 : 128);
      const std::uint32_t bar = smem_addr(&full[st]), dst = sbase + st * kStage;
      if (t == 0) {
        mbar_arrive_expect_tx(bar, 2 * 16 * 1024);
        tma_load_3d(dst + kATile, &map, bar, k0, r0, e);
        tma_load_3d(dst + kATile + 16 * 1024, &map, bar, k0, r0 + up_off, e);
      }
      if constexpr (kA) {
        cp_async_16_zfill(dst + row * 128 + ((chunk ^ (row & 7)) << 4),
                          a + static_cast<std::int64_t>((u * 5 + row) % 64) * k_dim * 2 + k0 * 2 + chunk * 16, 16);
        cp_async_mbar_arrive_noinc(bar);
      }
    }
    if constexpr (kA) cp_async_wait_all_groups();
  } else {
    setmaxnreg_inc<216>();
    const int ct = threadIdx.x - 128, wg = ct >> 7, lane = ct & 31;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    // As the kernel's consumer: a stage goes back once the next stage's wgmma group is issued and
    // its own has completed (wait 1), so consecutive groups overlap; warpgroup 2 passes at once.
    int held = -1;
    for (std::int64_t c = 0; c < total; ++c) {
      const int st = static_cast<int>(c % kStages);
      mbar_wait(smem_addr(&full[st]), static_cast<std::uint32_t>((c / kStages) & 1));
      if (kMma && wg == 0) {
        fence_regs<128>(acc);
        wgmma_fence();
        const std::uint32_t base = sbase + st * kStage;
        const std::uint64_t da = make_smem_desc_sw128(base), db = make_smem_desc_sw128(base + kATile);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) Wgmma<Bf16Tag, 256>::mma(acc, da + 2 * kk, db + 2 * kk, 1);
        wgmma_commit();
        fence_regs<128>(acc);
        if (held >= 0) {
          wgmma_wait<1>();
          __syncwarp();
          if (lane == 0) mbar_arrive(smem_addr(&empty[held]));
        }
        held = st;
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(smem_addr(&empty[st]));
      }
    }
    if (held >= 0) {
      wgmma_wait<0>();
      fence_regs<128>(acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty[held]));
    }
    if (acc[0] + acc[127] == 12345.0f) *sink = 1;  // never true for these inputs: keeps the MMAs live
  }
}

// Swap-AB GEMM1's weight stream without the MMAs or the token rows (gpt-oss-120b TP1 fp8 at M = 1:
// 4 experts x 45 items of 64 gate + 64 up rows of K = 2880 e4m3). An e4m3 map [E][rows][K] with
// boxes of 128 B x 64 rows; item u: expert u / tiles, gate rows (u % tiles) * 64, up rows
// up_off + the same; CTA c takes items c, c + gridDim.x, ... (Swap-AB's persistent order); a
// stage holds kBlocks 128-byte K blocks of both planes (kBlocks = 2: the wide stages), the last
// block past K zero-filled by TMA (counted, as in the kernel). kContig: the same items' bytes as
// contiguous 16 KB bulk copies of their gate and up row ranges (each 64 x K bytes, one range in
// memory), the access pattern with no 2D boxes.
template <int kBlocks, int kStages, bool kContig = false>
__global__ void __launch_bounds__(128, 1)
    item_stream_kernel(const __grid_constant__ CUtensorMap map, const std::uint8_t* w, int items, int tiles,
                       int rows, int k_dim, int up_off, int* sink) {
  using namespace moekit::cuda::sm90;
  constexpr int kBox = 64 * 128;
  constexpr int kStage = kContig ? 16384 : kBlocks * 2 * kBox;
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[kStages];
  const std::uint32_t sbase = smem_addr(smem);
  ring_init<kStages>(full);
  const int per_item = kContig ? 2 * ((64 * k_dim + 16383) / 16384)
                               : (k_dim + 128 * kBlocks - 1) / (128 * kBlocks);
  const int mine = items > static_cast<int>(blockIdx.x) ? (items - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const std::int64_t total = static_cast<std::int64_t>(mine) * per_item;
  auto issue = [&](std::int64_t c) {
    const int st = static_cast<int>(c % kStages);
    const int u = static_cast<int>(blockIdx.x + (c / per_item) * gridDim.x);
    const int j = static_cast<int>(c % per_item);
    const int e = u / tiles, r0 = (u % tiles) * 64;
    const std::uint32_t b = smem_addr(&full[st]), dst = sbase + st * kStage;
    if constexpr (kContig) {
      const int half = per_item / 2, plane = j / half, chunk = j % half;
      const std::int64_t range = 64LL * k_dim;
      const std::int64_t off = chunk * 16384LL;
      const int n = static_cast<int>(range - off < 16384 ? range - off : 16384);
      mbar_arrive_expect_tx(b, static_cast<std::uint32_t>(n));
      bulk_copy_g2s(dst, w + (static_cast<std::int64_t>(e) * rows + (plane ? up_off : 0) + r0) * k_dim + off, n, b);
    } else {
      mbar_arrive_expect_tx(b, kStage);
      for (int blk = 0; blk < kBlocks; ++blk) {
        const int k0 = (j * kBlocks + blk) * 128;
        tma_load_3d(dst + (2 * blk) * kBox, &map, b, k0, r0, e);
        tma_load_3d(dst + (2 * blk + 1) * kBox, &map, b, k0, up_off + r0, e);
      }
    }
  };
  stream_ring<kStages>(total, full, smem, kStage, sink, issue);
}

// A [E][rows][cols] map of `elem` bytes per element, row-major and contiguous, with boxes of
// box_cols x box_rows (one expert deep); the 128-byte swizzle where a box row is 128 bytes, none
// otherwise. Exits on failure (a measurement tool). The maps of the cases below:
//   token-major GEMM1: bf16 [E][rows][K], boxes of box_k x 128 rows;
//   Swap-AB: e4m3 [E][rows][K], boxes of 128 B x 64 rows;
//   decode: bf16 [E][rows][cols], boxes of 64 elements x 32 or 64 rows.
CUtensorMap map3d(const void* w, CUtensorMapDataType type, int elem, int E, int rows, int cols, int box_cols,
                  int box_rows) {
  CUtensorMap m{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(E)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * elem, static_cast<cuuint64_t>(rows) * cols * elem};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  auto fn = moekit::cuda::sm90::encode_tiled_fn();
  const CUresult r =
      fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED
                    : fn(&m, type, 3, const_cast<void*>(w), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         box_cols * elem == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for a [%d][%d][%d] map, boxes %d x %d\n",
                 static_cast<int>(r), E, rows, cols, box_cols, box_rows);
    std::exit(2);
  }
  return m;
}

// The decode kernel's two weight streams without its math (src/cuda/kernels/decode/): one thread
// issues 16 KB stages into a 12-stage ring, the CTA drains them. CTA c streams experts c,
// c + gridDim.x, ... of a bf16 map. kGemm2 false: GEMM1's stages of an item (per 32 columns of N,
// the K chunks two at a time, each a gate box and an up box of 64 elements x 32 rows, N rows apart)
// over the whole expert's w13 [2N][K]; true: GEMM2's stages (per 64-row tile of w2 [K][N], two
// boxes of 64 elements x 64 rows, columns 0 and 64; past N zero-filled and counted, as the kernel).
// The phase timer has GEMM2 at about half GEMM1's rate a CTA (session 24): is it the boxes?
// GEMM1 variants (kChunks K chunks x kPlanes planes x kRows rows = 16 KB a stage): 2 x 2 x 32 is
// the kernel's (gate and up boxes of the same 32 columns); 4 x 1 x 32 takes 512 bytes of each row a
// stage (gate rows, then up rows); 2 x 1 x 64 boxes of 64 rows (map box_rows 64).
template <bool kGemm2, int kChunks = 2, int kPlanes = 2, int kRows = 32>
__global__ void __launch_bounds__(128, 1)
    decode_box_stream_kernel(const __grid_constant__ CUtensorMap map, int E, int K, int N, int* sink) {
  static_assert(kGemm2 || kChunks * kPlanes * kRows * 128 == 16384, "a 16 KB stage");
  using namespace moekit::cuda::sm90;
  constexpr int kStages = 12, kStage = 16384;
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t full[kStages];
  const std::uint32_t sbase = smem_addr(smem);
  ring_init<kStages>(full);
  const int k_steps = (K + 64 * kChunks - 1) / (64 * kChunks);  // GEMM1: kChunks 64-element K chunks a stage
  const int per_expert = kGemm2 ? (K + 63) / 64 : ((N + kRows - 1) / kRows) * (2 / kPlanes) * k_steps;
  const int mine = E > static_cast<int>(blockIdx.x) ? (E - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const std::int64_t total = static_cast<std::int64_t>(mine) * per_expert;
  auto issue = [&](std::int64_t c) {
    const int st = static_cast<int>(c % kStages);
    const int e = static_cast<int>(blockIdx.x + (c / per_expert) * gridDim.x);
    const int j = static_cast<int>(c % per_expert);
    const std::uint32_t b = smem_addr(&full[st]), dst = sbase + st * kStage;
    mbar_arrive_expect_tx(b, kStage);
    if constexpr (kGemm2) {
      tma_load_3d(dst, &map, b, 0, j * 64, e);
      tma_load_3d(dst + 8192, &map, b, 64, j * 64, e);
    } else {
      const int k0 = (j % k_steps) * 64 * kChunks, rest = j / k_steps;
      const int t = rest / (2 / kPlanes), plane0 = kPlanes == 2 ? 0 : rest % 2;
      for (int u = 0; u < kChunks; ++u)
        for (int pl = 0; pl < kPlanes; ++pl)
          tma_load_3d(dst + (u * kPlanes + pl) * kRows * 128, &map, b, k0 + 64 * u, (plane0 + pl) * N + kRows * t, e);
    }
  };
  stream_ring<kStages>(total, full, smem, kStage, sink, issue);
}

// The data movement of inv_rope_fp8_quant (docs/rope_quant.md) with no math: rows of `in_row`
// bytes read, rows of in_row / 2 bytes written, a warp a row, 16-byte loads and stores; each warp
// takes kRows rows of a grid-stride walk at once (all their loads issued before any store). What a
// kernel with that read / write mix can reach on this GPU, against the roof's 4.8 TB/s.
template <int kRows>
__global__ void __launch_bounds__(256) read_write_kernel(const uint4* in, uint2* out, std::int64_t rows, int in_row) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  const int per_lane = in_row / 16 / 32;  // 16-byte loads a lane a row (1 KB rows: 2)
  for (std::int64_t r0 = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); r0 < rows; r0 += warps * kRows) {
    uint4 v[kRows][2];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const std::int64_t r = r0 + i * warps;
#pragma unroll
      for (int q = 0; q < 2; ++q)
        if (r < rows && q < per_lane)
          asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v[i][q].x), "=r"(v[i][q].y), "=r"(v[i][q].z), "=r"(v[i][q].w)
                       : "l"(in + r * (in_row / 16) + q * 32 + lane));
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const std::int64_t r = r0 + i * warps;
#pragma unroll
      for (int q = 0; q < 2; ++q)
        if (r < rows && q < per_lane)
          out[r * (in_row / 16) + q * 32 + lane] = make_uint2(v[i][q].x ^ v[i][q].y, v[i][q].z ^ v[i][q].w);
    }
  }
}

struct Timer {
  cudaStream_t stream = nullptr;
  void* flush = nullptr;
  std::size_t flush_bytes = 0;
  int flush_value = 0;
  int iters = 200;
  bool write_flush = false;  // memset (dirty L2 lines) instead of the read flush
  int sms = 132;
  // Run after the flush, before the timed call, when set (the code-fetch control below).
  std::function<void()> after_flush;

  void flush_l2() {
    LF_CHECK(::flush_l2(stream, flush, flush_bytes, write_flush, &flush_value, sms));
    if (after_flush) after_flush();
  }

  // Both timings of the call `enqueue` captures: the outer one (below) and inside its graph.
  struct Times {
    double us, in_graph_us;
  };
  template <class F>
  Times times(F&& enqueue) {
    const double us = graph_us(enqueue);
    return {us, moekit_bench::in_graph_us(stream, [&] { flush_l2(); }, enqueue, iters)};
  }

  // Median event time of replaying the graph captured from `enqueue`, L2 flushed before each.
  template <class F>
  double graph_us(F&& enqueue) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t x = nullptr;
    LF_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    LF_CHECK(cudaStreamEndCapture(stream, &g));
    LF_CHECK(cudaGraphInstantiate(&x, g, 0));
    LF_CHECK(cudaGraphLaunch(x, stream));
    LF_CHECK(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> ev(2 * iters);
    for (auto& e : ev) LF_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < iters; ++i) {
      flush_l2();
      LF_CHECK(cudaEventRecord(ev[2 * i], stream));
      LF_CHECK(cudaGraphLaunch(x, stream));
      LF_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
    }
    LF_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      float ms = 0;
      LF_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      t.push_back(1e3 * ms);
    }
    for (auto& e : ev) cudaEventDestroy(e);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

void launch(const void* kernel, dim3 grid, dim3 block, std::size_t smem, cudaStream_t s, int cluster, bool pdl,
            void** args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  LF_CHECK(cudaLaunchKernelExC(&cfg, kernel, args));
}

// A skeleton kernel on `grid` CTAs of 512 threads, cooperatively (every CTA co-resident, as the
// GEMV path launches) or not.
void skeleton_launch(const void* kernel, int grid, std::size_t smem, bool coop, cudaStream_t s, void** args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = coop ? 1 : 0;
  LF_CHECK(cudaLaunchKernelExC(&cfg, kernel, args));
}

}  // namespace

int main(int argc, char** argv) {
  Timer T;
  std::string json;
  bool only_swapab = false;  // only the Swap-AB item-stream cases (session 23) and the decode box streams (24)
  bool only_prefetch = false;  // only the L2 prefetch cases (session 26)
  bool only_skeleton = false;  // only the one-launch decode skeleton (session 34)
  bool only_gemm2_tiles = false;  // only Swap-AB GEMM2's tile movement at gpt-oss fp8 TP8 (session 67)
  std::string skeleton_points;  // --skeleton-points: the skeleton at these grid points (session 50)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc && std::atoi(argv[i + 1]) >= 1) T.iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--only-swapab")) only_swapab = true;
    else if (!std::strcmp(argv[i], "--only-prefetch")) only_prefetch = true;
    else if (!std::strcmp(argv[i], "--only-skeleton")) only_skeleton = true;
    else if (!std::strcmp(argv[i], "--only-gemm2-tiles")) only_gemm2_tiles = true;
    else if (!std::strcmp(argv[i], "--skeleton-points") && i + 1 < argc && argv[i + 1][0] != '\0')
      skeleton_points = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: moekit-launch-floor [--iters N] [--json PATH] [--only-swapab | --only-prefetch | "
                   "--only-skeleton | --only-gemm2-tiles | --skeleton-points PRESET:TP:SCHEME:M:EXPERTS,...]\n");
      return 2;
    }
  }
  if (!skeleton_points.empty() && (only_swapab || only_prefetch || only_skeleton || only_gemm2_tiles)) {
    std::fprintf(stderr, "moekit-launch-floor: --skeleton-points runs alone (not with --only-*)\n");
    return 2;
  }
  // --skeleton-points: PRESET:TP:SCHEME:M:EXPERTS, comma-separated; checked before the device is.
  struct SkeletonPoint {
    std::string text, preset;
    int tp = 0, es = 0, m = 0, experts = 0;
    std::int64_t w13 = 0, w2 = 0;  // one expert's bytes
  };
  std::vector<SkeletonPoint> skel;
  for (std::size_t pos = 0; pos < skeleton_points.size();) {
    std::size_t end = skeleton_points.find(',', pos);
    if (end == std::string::npos) end = skeleton_points.size();
    SkeletonPoint sp;
    sp.text = skeleton_points.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string> f;
    for (std::size_t a = 0;;) {
      const std::size_t c = sp.text.find(':', a);
      f.push_back(sp.text.substr(a, c == std::string::npos ? std::string::npos : c - a));
      if (c == std::string::npos) break;
      a = c + 1;
    }
    const char* bad = nullptr;
    if (f.size() != 5) bad = "expected PRESET:TP:SCHEME:M:EXPERTS";
    if (bad == nullptr) {
      sp.preset = f[0];
      sp.tp = std::atoi(f[1].c_str());
      sp.es = f[2] == "bf16" ? 2 : f[2] == "fp8" ? 1 : 0;
      sp.m = std::atoi(f[3].c_str());
      sp.experts = std::atoi(f[4].c_str());
      const moekit::ModelPreset* pr = nullptr;
      for (const moekit::ModelPreset& x : moekit::model_presets())
        if (sp.preset == x.name) pr = &x;
      if (pr == nullptr) bad = "unknown preset (the names: include/moekit/presets.hpp, moekit-bench --preset)";
      else if (sp.tp < 1 || pr->intermediate_size % sp.tp != 0) bad = "TP must divide the preset's intermediate size";
      else if (sp.es == 0) bad = "SCHEME must be bf16 or fp8";
      else if (sp.m < 1) bad = "M must be >= 1";
      else if (sp.experts < 1 || sp.experts > kSkeletonMaxExperts || sp.experts > pr->num_experts)
        bad = "EXPERTS must be 1..min(256, E)";
      else {
        const std::int64_t n = pr->intermediate_size / sp.tp, k = pr->hidden_size;
        sp.w13 = 2 * n * k * sp.es;
        sp.w2 = k * n * sp.es;
        // The kernel's flat int index runs to n * per-CTA share + one round of 8 x 512 loads past it.
        if ((sp.w13 / 16 + 1) * sp.experts + (std::int64_t{1} << 20) >= (std::int64_t{1} << 31))
          bad = "too many bytes for the skeleton's int index";
      }
    }
    if (bad != nullptr) {
      std::fprintf(stderr, "moekit-launch-floor: --skeleton-points '%s': %s\n", sp.text.c_str(), bad);
      return 2;
    }
    skel.push_back(sp);
  }
  int dev = 0;
  cudaDeviceProp prop{};
  LF_CHECK(cudaGetDeviceProperties(&prop, dev));
  LF_CHECK(cudaStreamCreateWithFlags(&T.stream, cudaStreamNonBlocking));
  T.flush_bytes = std::max<std::size_t>(2 * static_cast<std::size_t>(prop.l2CacheSize), 128u << 20);
  LF_CHECK(cudaMalloc(&T.flush, T.flush_bytes));
  LF_CHECK(cudaMemset(T.flush, 0, T.flush_bytes));
  T.sms = prop.multiProcessorCount;
  int* sink = nullptr;
  LF_CHECK(cudaMalloc(&sink, 256));
  const int big_smem = 210 * 1024;
  LF_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&empty_kernel),
                                cudaFuncAttributeMaxDynamicSharedMemorySize, big_smem));
  LF_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&pdl_wait_kernel),
                                cudaFuncAttributeMaxDynamicSharedMemorySize, big_smem));
  const std::size_t ring = static_cast<std::size_t>(kStages) * kStageBytes;
  LF_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&stream_kernel),
                                cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ring)));
  void* args1[] = {&sink};

  struct Row {
    std::string name;
    double us, in_graph_us;
    double first_pass_us = -1, second_pass_us = -1;  // the code-fetch cases: in-kernel clock64
  };
  std::vector<Row> rows;
  // Writes the rows so far as JSON (--json), at either exit.
  auto write_json = [&]() -> int {
    if (!json.empty()) {
      // Written beside the file and renamed over it, after every row: a run cut short (a time
      // limit on a lent GPU, a failed check) leaves the rows it finished.
      const std::string tmp = json + ".tmp";
      FILE* f = std::fopen(tmp.c_str(), "w");
      if (f == nullptr) return 2;
      const moekit::BuildInfo& bi = moekit::build_info();
      char date[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
      std::fprintf(f, "{\"commit\": \"%s\", \"dirty\": %d, \"date\": \"%s\", \"gpu\": \"%s\", \"iters\": %d, \"rows\": [\n",
                   bi.commit, bi.dirty, date, prop.name, T.iters);
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::fprintf(f, "  {\"case\": \"%s\", \"us\": %.3f, \"in_graph_us\": %.3f%s}%s\n", rows[i].name.c_str(), rows[i].us,
                     rows[i].in_graph_us,
                     rows[i].first_pass_us < 0
                         ? ""
                         : (", \"first_pass_us\": " + std::to_string(rows[i].first_pass_us) +
                            ", \"second_pass_us\": " + std::to_string(rows[i].second_pass_us)).c_str(),
                     i + 1 < rows.size() ? "," : "");
      std::fprintf(f, "]}\n");
      if (std::fclose(f) != 0 || std::rename(tmp.c_str(), json.c_str()) != 0) return 2;
    }
    return 0;
  };
  auto add = [&](const std::string& name, Timer::Times t) {
    rows.push_back({name, t.us, t.in_graph_us});
    std::printf("%-72s %8.2f us %8.2f us in graph\n", name.c_str(), t.us, t.in_graph_us);
    std::fflush(stdout);
    if (write_json() != 0) std::fprintf(stderr, "moekit-launch-floor: cannot write %s\n", json.c_str());
  };
  std::printf("moekit-launch-floor on %s (%d SMs), graph replay, L2 flushed (read unless said), median of %d\n",
              prop.name, prop.multiProcessorCount, T.iters);
  // The one-launch decode call's skeleton (--only-skeleton; session 34): the GEMV path's structure
  // (ids, GEMM1's stream, a grid barrier, h, GEMM2's stream, the output) with no math, at the TP8
  // fp8 M = 1 bytes of three presets (8 experts of 16 distinct), on a CTA of 512 threads a SM.
  if (only_skeleton) {
    const int sms = prop.multiProcessorCount, k = 8;
    int* ids = nullptr;
    float *part = nullptr, *out = nullptr;
    unsigned* counter = nullptr;
    LF_CHECK(cudaMalloc(&ids, 64 * sizeof(int)));
    LF_CHECK(cudaMalloc(&part, sms * sizeof(float)));
    LF_CHECK(cudaMalloc(&out, static_cast<std::size_t>(sms) * 512 * sizeof(float)));
    LF_CHECK(cudaMalloc(&counter, sizeof(unsigned)));
    LF_CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    const int h_ids[8] = {3, 11, 0, 7, 14, 5, 9, 12};
    LF_CHECK(cudaMemcpy(ids, h_ids, sizeof h_ids, cudaMemcpyHostToDevice));
    struct Shape {
      const char* name;
      std::int64_t w13, w2;  // one expert's bytes
    };
    const Shape shapes[] = {{"qwen3-30b-a3b TP8 fp8 M=1", 2 * 96 * 2048, 2048 * 96},
                            {"qwen3-235b-a22b TP8 fp8 M=1", 2 * 192 * 4096, 4096 * 192},
                            {"deepseek-v3 TP8 fp8 M=1", 2 * 256 * 7168, 7168 * 256}};
    auto coop_launch = [&](const void* kernel, int grid, std::size_t smem, bool coop, void** args) {
      skeleton_launch(kernel, grid, smem, coop, T.stream, args);
    };
    {
      void* a[] = {&sink};
      add("empty kernel, 132 CTAs x 512 threads", T.times([&] { coop_launch((const void*)&empty_kernel, sms, 0, false, a); }));
      add("empty kernel, 132 CTAs x 512 threads, cooperative launch",
          T.times([&] { coop_launch((const void*)&empty_kernel, sms, 0, true, a); }));
    }
    for (const Shape& sh : shapes) {
      const std::int64_t per1 = (k * sh.w13 / 16 + sms - 1) / sms, per2 = (k * sh.w2 / 16 + sms - 1) / sms;
      const std::size_t region1 = static_cast<std::size_t>(sms) * per1 * 16, region2 = static_cast<std::size_t>(sms) * per2 * 16;
      uint4 *w1 = nullptr, *w2 = nullptr;
      LF_CHECK(cudaMalloc(&w1, 16 * region1));
      LF_CHECK(cudaMalloc(&w2, 16 * region2));
      LF_CHECK(cudaMemset(w1, 3, 16 * region1));
      LF_CHECK(cudaMemset(w2, 5, 16 * region2));
      const std::size_t early_smem = static_cast<std::size_t>(per2) * 16;
      struct Variant {
        const void* kernel;
        bool coop, early;
        const char* what;
      };
      const Variant variants[] = {
          {(const void*)&skeleton_kernel<0, false>, false, false, "no barrier (a lower bound, not a valid call)"},
          {(const void*)&skeleton_kernel<1, false>, true, false, "cooperative launch, grid sync"},
          {(const void*)&skeleton_kernel<1, true>, true, true, "cooperative launch, grid sync, w2 to smem before GEMM1"},
          {(const void*)&skeleton_kernel<2, false>, false, false, "plain launch, counter barrier"},
          {(const void*)&skeleton_kernel<2, true>, false, true, "plain launch, counter barrier, w2 to smem before GEMM1"},
      };
      for (const Variant& v : variants) {
        const std::size_t smem = v.early ? early_smem : 0;
        if (smem > 227 * 1024) continue;
        LF_CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        int kk = k;
        std::int64_t p1 = per1, p2 = per2;
        const uint4 *c1 = w1, *c2 = w2;
        const int* ci = ids;
        void* a[] = {&ci, &kk, &c1, &p1, &c2, &p2, &part, &counter, &out};
        char name[240];
        std::snprintf(name, sizeof name, "skeleton %s (%.1f + %.1f MB): %s", sh.name, k * sh.w13 / 1e6, k * sh.w2 / 1e6, v.what);
        add(name, T.times([&] { coop_launch(v.kernel, sms, smem, v.coop, a); }));
      }
      {  // the ids, h and the barrier alone
        int kk = k;
        std::int64_t zero = 0;
        const uint4 *c1 = w1, *c2 = w2;
        const int* ci = ids;
        void* a[] = {&ci, &kk, &c1, &zero, &c2, &zero, &part, &counter, &out};
        if (&sh == &shapes[0]) {
          add("skeleton with no weight bytes: ids, h, cooperative grid sync",
              T.times([&] { coop_launch((const void*)&skeleton_kernel<1, false>, sms, 0, true, a); }));
          add("skeleton with no weight bytes: ids, h, no barrier",
              T.times([&] { coop_launch((const void*)&skeleton_kernel<0, false>, sms, 0, false, a); }));
        }
      }
      LF_CHECK(cudaFree(w1));
      LF_CHECK(cudaFree(w2));
    }
    return write_json();
  }
  // The skeleton at grid points (--skeleton-points): per point, its experts' bytes through the
  // three structures. Rows are named "skeleton-point PRESET:TP:SCHEME:M:EXPERTS: <structure>"
  // (tools/scripts/skeleton_floor.py reads them back).
  if (!skel.empty()) {
    const int sms = prop.multiProcessorCount;
    int* ids = nullptr;
    float *part = nullptr, *out = nullptr;
    unsigned* counter = nullptr;
    LF_CHECK(cudaMalloc(&ids, kSkeletonMaxExperts * sizeof(int)));
    LF_CHECK(cudaMalloc(&part, sms * sizeof(float)));
    LF_CHECK(cudaMalloc(&out, static_cast<std::size_t>(sms) * 512 * sizeof(float)));
    LF_CHECK(cudaMalloc(&counter, sizeof(unsigned)));
    LF_CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    // The experts in a fixed shuffled order (ids[e] = (37 e + 11) mod n is a permutation of
    // 0..n-1 for n coprime to 37, else the identity): each GEMM's bytes are the n experts' regions.
    auto coop_launch = [&](const void* kernel, std::size_t smem, bool coop, void** args) {
      skeleton_launch(kernel, sms, smem, coop, T.stream, args);
    };
    for (const SkeletonPoint& sp : skel) {
      const int n = sp.experts;
      std::vector<int> h_ids(n);
      for (int e = 0; e < n; ++e) h_ids[e] = n % 37 != 0 ? (37 * e + 11) % n : e;
      LF_CHECK(cudaMemcpy(ids, h_ids.data(), n * sizeof(int), cudaMemcpyHostToDevice));
      const int c1 = static_cast<int>((sp.w13 + 15) / 16), c2 = static_cast<int>((sp.w2 + 15) / 16);
      uint4 *w1 = nullptr, *w2 = nullptr;
      LF_CHECK(cudaMalloc(&w1, static_cast<std::size_t>(n) * c1 * 16));
      LF_CHECK(cudaMalloc(&w2, static_cast<std::size_t>(n) * c2 * 16));
      LF_CHECK(cudaMemset(w1, 3, static_cast<std::size_t>(n) * c1 * 16));
      LF_CHECK(cudaMemset(w2, 5, static_cast<std::size_t>(n) * c2 * 16));
      const std::size_t early_smem = static_cast<std::size_t>(n) * ((c2 + sms - 1) / sms) * 16;
      struct Variant {
        const void* kernel;
        bool coop, early;
        const char* what;
      };
      const Variant variants[] = {
          {(const void*)&skeleton_grid_kernel<0, false>, false, false, "no barrier (a lower bound)"},
          {(const void*)&skeleton_grid_kernel<1, false>, true, false, "cooperative launch, grid sync"},
          {(const void*)&skeleton_grid_kernel<2, true>, false, true, "plain launch, counter barrier, w2 to smem before GEMM1"},
      };
      for (const Variant& v : variants) {
        const std::size_t smem = v.early ? early_smem : 0;
        // A CTA's w2 share does not fit beside the kernel's static shared memory (the ids, 1 KB):
        // the structure cannot copy it early.
        if (smem + 4096 > 227 * 1024) continue;
        LF_CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        int nn = n, cc1 = c1, cc2 = c2;
        const uint4 *a1 = w1, *a2 = w2;
        const int* ci = ids;
        void* a[] = {&ci, &nn, &a1, &cc1, &a2, &cc2, &part, &counter, &out};
        add("skeleton-point " + sp.text + ": " + v.what, T.times([&] { coop_launch(v.kernel, smem, v.coop, a); }));
      }
      {  // two launches in a row: GEMM1's half, then GEMM2's (stream order is the barrier)
        int nn = n, cc1 = c1, cc2 = c2;
        const uint4 *a1 = w1, *a2 = w2;
        const int* ci = ids;
        void* a[] = {&ci, &nn, &a1, &cc1, &a2, &cc2, &part, &counter, &out};
        add("skeleton-point " + sp.text + ": two launches, GEMM1's then GEMM2's", T.times([&] {
              coop_launch((const void*)&skeleton_grid_kernel<0, false, 1>, 0, false, a);
              coop_launch((const void*)&skeleton_grid_kernel<0, false, 2>, 0, false, a);
            }));
      }
      LF_CHECK(cudaFree(w1));
      LF_CHECK(cudaFree(w2));
    }
    return write_json();
  }
  // The L2 prefetch (--only-prefetch): what a prefetch of B bytes costs on its own (bulk pieces or
  // 128-byte lines, from 128 CTAs), how fast a whole-grid reader then reads them, and the question
  // the chain asks: does prefetching during a 1-CTA kernel of 8 us (the routing launch's stand-in)
  // make the reader after it faster than the same 1-CTA kernel without the prefetch?
  if (only_gemm2_tiles) {
    // gpt-oss-120b fp8 TP8 at M = 64: ~110 touched experts x 2880 w2 rows of 360 bytes (118 MB, the
    // Nsight Compute read of Swap-AB's GEMM2 there), 45 tiles of 64 rows an expert, items of 3
    // tiles (the kernel's tiles_per_item at K = 360). Two CTAs an SM with 4 tiles a ring (92 KB,
    // the kernel's layout holds 3 tiles at three K blocks a stage), one with 8; and a contiguous
    // stream of the same bytes (stream_kernel) for the floor.
    const int experts = 110, tile_rows = 64, row_bytes = 360, rows = 2880, tpi = 3;
    const int tile_bytes = tile_rows * row_bytes;
    const int items = experts * (rows / tile_rows) / tpi;
    const std::int64_t bytes = static_cast<std::int64_t>(items) * tpi * tile_bytes;
    std::uint8_t* w = nullptr;
    LF_CHECK(cudaMalloc(&w, static_cast<std::size_t>(bytes)));
    LF_CHECK(cudaMemset(w, 1, static_cast<std::size_t>(bytes)));
    const void* kernels[3] = {(const void*)&w2_tile_kernel<0>, (const void*)&w2_tile_kernel<1>,
                              (const void*)&w2_tile_kernel<2>};
    const char* modes[3] = {"one cp.async.bulk a tile", "8-byte cp.async", "16-byte cp.async"};
    for (const void* k : kernels)
      LF_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * tile_bytes));
    for (int mode = 0; mode < 3; ++mode) {
      for (int per_sm : {2, 1}) {
        const int ctas = T.sms * per_sm, stages = per_sm == 2 ? 4 : 8;
        const std::uint8_t* srcp = w;
        int it = items, tp = tpi, tb = tile_bytes, st = stages;
        void* args[] = {&srcp, &it, &tp, &tb, &st, &sink};
        const Timer::Times tm = T.times([&] {
          launch(kernels[mode], dim3(ctas), dim3(256), static_cast<std::size_t>(stages) * tile_bytes, T.stream, 1, false,
                 args);
        });
        char name[200];
        std::snprintf(name, sizeof name, "gpt-oss fp8 TP8 w2 tiles, %.1f MB, %s, %d CTAs, %d-tile ring: %.2f TB/s",
                      bytes / 1e6, modes[mode], ctas, stages, bytes / tm.us / 1e6);
        add(name, tm);
      }
    }
    {
      // Swap-AB's own copy pattern (w2_tile_layout_kernel), bare and with the token rows and the
      // item metadata, at the kernel's ring (three stages, two CTAs an SM) and one deeper.
      std::uint8_t* tok = nullptr;
      int* meta = nullptr;
      LF_CHECK(cudaMalloc(&tok, 4 * 16 * row_bytes));
      LF_CHECK(cudaMemset(tok, 2, 4 * 16 * row_bytes));
      LF_CHECK(cudaMalloc(&meta, 4096 * sizeof(int)));
      LF_CHECK(cudaMemset(meta, 0, 4096 * sizeof(int)));
      const void* lk[2] = {(const void*)&w2_tile_layout_kernel<false>, (const void*)&w2_tile_layout_kernel<true>};
      const int stage_smem[2] = {3 * 64 * 128, 3 * 64 * 128 + 16 * 3 * 128 + 128};
      for (int tk = 0; tk < 2; ++tk) {
        LF_CHECK(cudaFuncSetAttribute(lk[tk], cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * stage_smem[tk]));
        for (int stages : {3, 4}) {
          if (tk == 1 && stages == 4) continue;  // four stages of 30.8 KB leave one CTA an SM
          const int ctas = 2 * T.sms;
          const std::uint8_t* srcp = w;
          const std::uint8_t* tokp = tok;
          const int* metap = meta;
          int it = items, tp = tpi, st = stages;
          void* args[] = {&srcp, &tokp, &metap, &it, &tp, &st, &sink};
          const Timer::Times tm = T.times([&] {
            launch(lk[tk], dim3(ctas), dim3(256), static_cast<std::size_t>(stages) * stage_smem[tk], T.stream, 1, false, args);
          });
          char name[240];
          std::snprintf(name, sizeof name, "gpt-oss fp8 TP8 w2 tiles, %.1f MB, Swap-AB's 8-byte pattern%s, %d CTAs, %d-stage ring: %.2f TB/s",
                        bytes / 1e6, tk ? " + token rows + metadata" : "", ctas, stages, bytes / tm.us / 1e6);
          add(name, tm);
        }
      }
      LF_CHECK(cudaFree(tok));
      LF_CHECK(cudaFree(meta));
    }
    {
      const std::int64_t per = (bytes / T.sms + kStageBytes - 1) / kStageBytes * kStageBytes;
      LF_CHECK(cudaFree(w));
      LF_CHECK(cudaMalloc(&w, static_cast<std::size_t>(per * T.sms)));
      LF_CHECK(cudaMemset(w, 1, static_cast<std::size_t>(per * T.sms)));
      const std::uint8_t* srcp = w;
      void* args[] = {&srcp, const_cast<std::int64_t*>(&per), &sink};
      const Timer::Times tm = T.times([&] {
        launch((const void*)&stream_kernel, dim3(T.sms), dim3(128), ring, T.stream, 1, false, args);
      });
      char name[200];
      std::snprintf(name, sizeof name, "the same bytes contiguous, %d CTAs (stream_kernel): %.2f TB/s", T.sms,
                    per * T.sms / tm.us / 1e6);
      add(name, tm);
    }
    LF_CHECK(cudaFree(w));
    return write_json();
  }
  if (only_prefetch) {
    const int sms = prop.multiProcessorCount, pf_ctas = 128;
    for (const std::int64_t mb : {8, 24}) {
      const std::int64_t bytes = mb << 20, n16 = bytes / 16;
      std::uint8_t* w = nullptr;
      LF_CHECK(cudaMalloc(&w, bytes));
      LF_CHECK(cudaMemset(w, 0x5a, bytes));
      const std::uint8_t* src = w;
      const uint4* src16 = reinterpret_cast<const uint4*>(w);
      std::int64_t b = bytes, n = n16;
      long long none = 0, busy = 8000;
      void* pf_alone[] = {&src, &b, &none, &sink};
      void* pf_busy[] = {&src, &b, &busy, &sink};
      std::int64_t zero = 0;
      void* busy_no_pf[] = {&src, &zero, &busy, &sink};
      void* rd[] = {&src16, &n, &sink};
      const void* line = reinterpret_cast<const void*>(&prefetch_kernel<false>);
      const void* bulk = reinterpret_cast<const void*>(&prefetch_kernel<true>);
      const void* reader = reinterpret_cast<const void*>(&read_kernel);
      char name[240];
      auto named = [&](const char* what) {
        std::snprintf(name, sizeof name, "prefetch %lld MB: %s", static_cast<long long>(mb), what);
        return std::string(name);
      };
      add(named("the reader alone (132 CTAs x 512, 16-byte loads)"),
          T.times([&] { launch(reader, dim3(sms), dim3(512), 0, T.stream, 1, false, rd); }));
      add(named("line prefetch alone, 128 CTAs x 512"),
          T.times([&] { launch(line, dim3(pf_ctas), dim3(512), 0, T.stream, 1, false, pf_alone); }));
      add(named("bulk prefetch alone (64 KB pieces), 128 CTAs x 512"),
          T.times([&] { launch(bulk, dim3(pf_ctas), dim3(512), 0, T.stream, 1, false, pf_alone); }));
      add(named("line prefetch alone, then the reader"), T.times([&] {
            launch(line, dim3(pf_ctas), dim3(512), 0, T.stream, 1, false, pf_alone);
            launch(reader, dim3(sms), dim3(512), 0, T.stream, 1, false, rd);
          }));
      add(named("1 CTA busy 8 us, then the reader"), T.times([&] {
            launch(line, dim3(1), dim3(512), 0, T.stream, 1, false, busy_no_pf);
            launch(reader, dim3(sms), dim3(512), 0, T.stream, 1, false, rd);
          }));
      add(named("1 CTA busy 8 us + 128 CTAs of line prefetch in the same launch, then the reader"), T.times([&] {
            launch(line, dim3(1 + pf_ctas), dim3(512), 0, T.stream, 1, false, pf_busy);
            launch(reader, dim3(sms), dim3(512), 0, T.stream, 1, false, rd);
          }));
      add(named("1 CTA busy 8 us + 128 CTAs of bulk prefetch in the same launch, then the reader"), T.times([&] {
            launch(bulk, dim3(1 + pf_ctas), dim3(512), 0, T.stream, 1, false, pf_busy);
            launch(reader, dim3(sms), dim3(512), 0, T.stream, 1, false, rd);
          }));
      LF_CHECK(cudaFree(w));
    }
    return write_json();
  }
  // Swap-AB GEMM1's weight stream at gpt-oss-120b TP1 fp8 M = 1 (its kernel: 30.7 us under Nsight
  // Compute at 38bdcc0, 2.2 TB/s): the same items and CTA order, boxes of 128 B x 64 rows, one
  // or two K blocks a stage, and the same bytes as contiguous 16 KB copies.
  {
    const int E = 4, N = 2880, rows = 2 * N, K = 2880, tiles = (N + 63) / 64, items = E * tiles;
    const std::size_t bytes = static_cast<std::size_t>(E) * rows * K;
    void* w = nullptr;
    LF_CHECK(cudaMalloc(&w, bytes));
    LF_CHECK(cudaMemset(w, 1, bytes));
    const CUtensorMap map = map3d(w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, E, rows, K, 128, 64);
    const std::uint8_t* w8 = static_cast<const std::uint8_t*>(w);
    auto item_case = [&](const void* kernel, int smem, const char* what, int grid = 0) {
      if (grid == 0) grid = prop.multiProcessorCount;
      LF_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int it = items, t = tiles, r = rows, k = K, up = N;
      void* args[] = {const_cast<CUtensorMap*>(&map), &w8, &it, &t, &r, &k, &up, &sink};
      const Timer::Times tm = T.times([&] { launch(kernel, dim3(grid), dim3(128), smem, T.stream, 1, false, args); });
      char name[240];
      std::snprintf(name, sizeof name, "Swap-AB GEMM1 weights %.0f MB (%d items, %d CTAs) %s: %.2f TB/s in graph",
                    bytes / 1e6, items, grid, what, bytes / tm.in_graph_us / 1e6);
      add(name, tm);
    };
    item_case(reinterpret_cast<const void*>(&item_stream_kernel<2, 5>), 5 * 2 * 2 * 64 * 128,
              "boxes 128 B x 64 rows, 2 blocks x 2 planes a stage, 5 stages (the kernel's wide GEMM1 ring)");
    item_case(reinterpret_cast<const void*>(&item_stream_kernel<1, 10>), 10 * 2 * 64 * 128,
              "boxes 128 B x 64 rows, 1 block x 2 planes a stage, 10 stages");
    item_case(reinterpret_cast<const void*>(&item_stream_kernel<2, 6>), 6 * 2 * 2 * 64 * 128,
              "boxes 128 B x 64 rows, 2 blocks x 2 planes a stage, 6 stages");
    item_case(reinterpret_cast<const void*>(&item_stream_kernel<1, 12, true>), 12 * 16384,
              "contiguous 16 KB copies of each item's gate and up row ranges, 12 stages");
    // Balanced waves: as few CTAs as give each the same number of items (180 on 132 SMs: 90 CTAs
    // of two), the kernel's ring. 2026-12-02 (H200): 21.4 us against 21.8 on 132 CTAs, and the
    // Swap-AB kernel with the same schedule measured 1.00x (docs/perf.md, session 24).
    const int per_cta = (items + prop.multiProcessorCount - 1) / prop.multiProcessorCount;
    item_case(reinterpret_cast<const void*>(&item_stream_kernel<2, 5>), 5 * 2 * 2 * 64 * 128,
              "boxes 128 B x 64 rows, 2 blocks x 2 planes a stage, 5 stages, balanced waves",
              (items + per_cta - 1) / per_cta);
    LF_CHECK(cudaFree(w));
  }
  // The decode kernel's GEMM1 and GEMM2 weight streams (decode_box_stream_kernel) at qwen3-30b-a3b
  // TP8's shapes (K = 2048, N = 96: w2 rows of 192 bytes) and at N = 128 (256-byte rows, no
  // out-of-bounds half box), 64 CTAs of four experts each: the rate a CTA each pattern streams at.
  {
    const int E = 256, K = 2048, grid = 64;
    for (int N : {96, 128}) {
      for (int variant : {0, 1, 2, 3}) {  // GEMM1 2 x 2 x 32 (the kernel's), GEMM2, GEMM1 4 x 1 x 32, 2 x 1 x 64
        const bool gemm2 = variant == 1;
        if (N == 128 && variant > 1) continue;
        const std::size_t bytes = static_cast<std::size_t>(E) * (gemm2 ? K * N : 2 * N * K) * 2;
        void* w = nullptr;
        LF_CHECK(cudaMalloc(&w, bytes));
        LF_CHECK(cudaMemset(w, 1, bytes));
        const CUtensorMap map = gemm2 ? map3d(w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E, K, N, 64, 64)
                                       : map3d(w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E, 2 * N, K, 64, variant == 3 ? 64 : 32);
        const void* kernel = variant == 0   ? reinterpret_cast<const void*>(&decode_box_stream_kernel<false>)
                             : variant == 1 ? reinterpret_cast<const void*>(&decode_box_stream_kernel<true>)
                             : variant == 2 ? reinterpret_cast<const void*>(&decode_box_stream_kernel<false, 4, 1, 32>)
                                            : reinterpret_cast<const void*>(&decode_box_stream_kernel<false, 2, 1, 64>);
        const char* pattern = variant == 0   ? "GEMM1 (w13, 2 K chunks x gate and up boxes of 32 rows a stage)"
                              : variant == 1 ? "GEMM2 (w2, 2 boxes of 64 rows a stage)"
                              : variant == 2 ? "GEMM1 variant (w13, 4 K chunks x 32 rows of one plane a stage)"
                                             : "GEMM1 variant (w13, 2 K chunks x 64 rows of one plane a stage)";
        const int smem = 12 * 16384;
        LF_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int e = E, k = K, n = N;
        void* args[] = {const_cast<CUtensorMap*>(&map), &e, &k, &n, &sink};
        const Timer::Times tm = T.times([&] { launch(kernel, dim3(grid), dim3(128), smem, T.stream, 1, false, args); });
        // Bytes as TMA moves them (a GEMM2 stage counts its out-of-bounds half box as the kernel does).
        const int rows_a_stage = variant == 3 ? 64 : 32, chunks = variant == 2 ? 4 : 2, planes = variant == 0 ? 2 : 1;
        const int stages = gemm2 ? (K + 63) / 64
                                 : (N + rows_a_stage - 1) / rows_a_stage * (2 / planes) * ((K + 64 * chunks - 1) / (64 * chunks));
        const double moved = static_cast<double>(E) * stages * 16384.0;
        char name[240];
        std::snprintf(name, sizeof name,
                      "decode %s stream, K = %d, N = %d (%s), %d experts on %d CTAs, 12 x 16 KB stages: %.1f GB/s a CTA in graph",
                      pattern, K, N,
                      N * 2 % 128 == 0 ? "full boxes" : "w2 rows of 192 B", E, grid, moved / tm.in_graph_us / 1e3 / grid);
        add(name, tm);
        LF_CHECK(cudaFree(w));
      }
    }
  }
  if (only_swapab) return write_json();
  add("empty kernel, 1 CTA", T.times([&] {
        launch((const void*)&empty_kernel, dim3(1), dim3(32), 0, T.stream, 1, false, args1);
      }));
  add("empty kernel, 64 CTAs x 256 threads, clusters of 8, 210 KB smem", T.times([&] {
        launch((const void*)&empty_kernel, dim3(64), dim3(256), big_smem, T.stream, 8, false, args1);
      }));
  add("memset 256 B + the same kernel", T.times([&] {
        LF_CHECK(cudaMemsetAsync(sink, 0, 256, T.stream));
        launch((const void*)&empty_kernel, dim3(64), dim3(256), big_smem, T.stream, 8, false, args1);
      }));
  add("1-CTA kernel + the same kernel as its PDL dependent", T.times([&] {
        launch((const void*)&pdl_trigger_kernel, dim3(1), dim3(256), 0, T.stream, 1, false, args1);
        launch((const void*)&pdl_wait_kernel, dim3(64), dim3(256), big_smem, T.stream, 8, true, args1);
      }));
  add("1-CTA kernel + the same kernel, no PDL", T.times([&] {
        launch((const void*)&pdl_trigger_kernel, dim3(1), dim3(256), 0, T.stream, 1, false, args1);
        launch((const void*)&pdl_wait_kernel, dim3(64), dim3(256), big_smem, T.stream, 8, false, args1);
      }));

  // Straight-line code run twice in a loop, on 1 CTA and on a CTA a SM, each pass timed in the
  // kernel (the last replay's CTAs, median): after the L2 flush (the timed method) and after the
  // flush plus 256 KB of other straight-line code on every SM (the control: that also evicts the
  // SMs' instruction caches; if both read alike, the flush alone leaves the code cold).
  {
    long long* cycles = nullptr;
    LF_CHECK(cudaMalloc(&cycles, sizeof(long long) * 2 * T.sms));
    int clock_khz = 0;
    LF_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    long long* no_cycles = nullptr;
    void* evict_args[] = {&no_cycles};
    auto code_case = [&](auto kernel, int n_instr) {
      for (int evict = 0; evict < 2; ++evict) {
        T.after_flush = nullptr;
        if (evict)
          T.after_flush = [&] {
            launch((const void*)&code_kernel<16384>, dim3(T.sms), dim3(32), 0, T.stream, 1, false, evict_args);
          };
        for (int ctas : {1, T.sms}) {
          void* args[] = {&cycles};
          LF_CHECK(cudaMemset(cycles, 0, sizeof(long long) * 2 * T.sms));
          const Timer::Times tm =
              T.times([&] { launch((const void*)kernel, dim3(ctas), dim3(32), 0, T.stream, 1, false, args); });
          std::vector<long long> c(static_cast<std::size_t>(2 * ctas));
          LF_CHECK(cudaMemcpy(c.data(), cycles, c.size() * sizeof(long long), cudaMemcpyDeviceToHost));
          std::vector<double> p1, p2;
          for (int i = 0; i < ctas; ++i) {
            p1.push_back(1e3 * static_cast<double>(c[2 * i]) / clock_khz);
            p2.push_back(1e3 * static_cast<double>(c[2 * i + 1]) / clock_khz);
          }
          std::sort(p1.begin(), p1.end());
          std::sort(p2.begin(), p2.end());
          char name[220];
          std::snprintf(name, sizeof name, "%d straight-line instructions (%d KB) twice, %d CTA(s), after the flush%s",
                        n_instr, n_instr * 16 / 1024, ctas, evict ? " + 256 KB of other code a SM" : "");
          add(name, tm);
          rows.back().first_pass_us = p1[p1.size() / 2];
          rows.back().second_pass_us = p2[p2.size() / 2];
          std::printf("    in the kernel: first pass %.2f us, second pass %.2f us (median over CTAs, clock64 at %d MHz)\n",
                      rows.back().first_pass_us, rows.back().second_pass_us, clock_khz / 1000);
        }
      }
      T.after_flush = nullptr;
    };
    code_case(&code_kernel<256>, 256);
    code_case(&code_kernel<1024>, 1024);
    code_case(&code_kernel<4096>, 4096);
    LF_CHECK(cudaFree(cycles));
  }

  // Bare streams of a decode call's weight bytes (qwen3-30b TP8 M=1: 9.4 MB; qwen3-235b TP8 M=1:
  // 37.7 MB; deepseek-v3 TP8 M=1: 88 MB) over 64 / 128 / 132 CTAs.
  const std::int64_t sizes[] = {9437184, 37748736, 88080384};
  const std::size_t max_bytes = 88080384 + (std::size_t{4} << 20);
  std::uint8_t* src = nullptr;
  LF_CHECK(cudaMalloc(&src, max_bytes));
  LF_CHECK(cudaMemset(src, 1, max_bytes));
  for (int write_flush = 0; write_flush < 2; ++write_flush)
  for (std::int64_t bytes : sizes) {
    T.write_flush = write_flush != 0;
    for (int ctas : {64, 128}) {
      const std::int64_t per = (bytes / ctas + kStageBytes - 1) / kStageBytes * kStageBytes;
      const std::uint8_t* s = src;
      void* args[] = {&s, const_cast<std::int64_t*>(&per), &sink};
      const Timer::Times tm = T.times([&] {
        launch((const void*)&stream_kernel, dim3(ctas), dim3(128), ring, T.stream, 1, false, args);
      });
      char name[160];
      std::snprintf(name, sizeof name, "stream %.1f MB over %d CTAs (%.0f KB each), %s flush: %.2f TB/s", bytes / 1e6,
                    ctas, per / 1024.0, write_flush ? "write" : "read", (per * ctas) / tm.us / 1e6);
      add(name, tm);
    }
  }
  // inv_rope_fp8_quant's movement at T = 16384 of DeepSeek-V4-Flash / Pro at TP8 (8 / 16 heads of
  // 512 bf16 channels: 1 KB rows in, 512 B out; the kernel's scales, positions and cos / sin rows
  // add 1-2 % more): what a bare read + write stream of that mix takes, at 2 and 4 CTAs of 256
  // threads a SM, 2 and 4 rows in flight a warp; and cudaMemcpyAsync of the same bytes read.
  {
    const std::int64_t max_rows = 16384LL * 16;
    std::uint8_t* in = nullptr;
    std::uint8_t* out = nullptr;
    LF_CHECK(cudaMalloc(&in, max_rows * 1024));
    LF_CHECK(cudaMalloc(&out, max_rows * 1024));
    LF_CHECK(cudaMemset(in, 3, max_rows * 1024));
    LF_CHECK(cudaMemset(out, 0, max_rows * 1024));
    T.write_flush = false;
    LF_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&read_write_kernel<2>),
                                  cudaFuncAttributePreferredSharedMemoryCarveout, 0));
    LF_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&read_write_kernel<4>),
                                  cudaFuncAttributePreferredSharedMemoryCarveout, 0));
    for (const int heads : {8, 16}) {
      std::int64_t rows = 16384LL * heads;
      int in_row = 1024;
      const double bytes = rows * 1536.0;
      for (int per_sm : {2, 4, 8})
        for (int k_rows : {2, 4}) {
          const uint4* pi = reinterpret_cast<const uint4*>(in);
          uint2* po = reinterpret_cast<uint2*>(out);
          void* args[] = {&pi, &po, &rows, &in_row};
          const void* fn = k_rows == 2 ? (const void*)&read_write_kernel<2> : (const void*)&read_write_kernel<4>;
          const Timer::Times tm = T.times([&] {
            launch(fn, dim3(T.sms * per_sm), dim3(256), 0, T.stream, 1, false, args);
          });
          char name[200];
          std::snprintf(name, sizeof name,
                        "read %.0f MB + write %.0f MB (rope_quant T=16384, %d heads), %d CTAs/SM, %d rows/warp: %.2f TB/s",
                        rows * 1024 / 1e6, rows * 512 / 1e6, heads, per_sm, k_rows, bytes / tm.us / 1e6);
          add(name, tm);
        }
      const Timer::Times tm = T.times([&] { LF_CHECK(cudaMemcpyAsync(out, in, rows * 1024, cudaMemcpyDeviceToDevice, T.stream)); });
      char name[200];
      std::snprintf(name, sizeof name, "cudaMemcpyAsync D2D %.0f MB (%d heads' o): %.2f TB/s read + write", rows * 1024 / 1e6,
                    heads, 2.0 * rows * 1024 / tm.us / 1e6);
      add(name, tm);
    }
    LF_CHECK(cudaFree(in));
    LF_CHECK(cudaFree(out));
  }
  // The token-major GEMM1's weight stream (mixtral TP8, M = 64: 8 experts x 3584 rows x 4096, 112
  // units of 256 rows, one a CTA), without the MMAs: its 128-byte boxes, 256-byte boxes, and the
  // same 2 MB a CTA as one contiguous range.
  {
    const int E = 8, rows = 3584, K = 4096, tiles = rows / 256, units = E * tiles;
    const std::size_t bytes = static_cast<std::size_t>(E) * rows * K * 2;
    void* w = nullptr;
    LF_CHECK(cudaMalloc(&w, bytes));
    LF_CHECK(cudaMemset(w, 1, bytes));
    T.write_flush = false;
    void* a = nullptr;  // hidden at M = 64: 64 rows of K bf16
    LF_CHECK(cudaMalloc(&a, static_cast<std::size_t>(64) * K * 2));
    LF_CHECK(cudaMemset(a, 1, static_cast<std::size_t>(64) * K * 2));
    const std::uint8_t* a8 = static_cast<const std::uint8_t*>(a);
    // One case: `kernel` with `smem` bytes of shared memory, timed, named "GEMM1 weights <MB>
    // <what>: <rate>" (the rate from the in-graph time).
    auto weight_case = [&](const void* kernel, int grid, int block, int smem, void** args, const char* what) {
      LF_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      const Timer::Times tm = T.times([&] { launch(kernel, dim3(grid), dim3(block), smem, T.stream, 1, false, args); });
      char name[240];
      std::snprintf(name, sizeof name, "GEMM1 weights %.0f MB %s: %.2f TB/s in graph", bytes / 1e6, what,
                    bytes / tm.in_graph_us / 1e6);
      add(name, tm);
    };
    // tile_stream_kernel: `a_rows` token rows of 128 B a stage next to the boxes (0 or 16, as its kA).
    auto tile_case = [&](auto kernel, int box_k, int stages, int a_rows, const char* what, int grid = 0) {
      if (grid == 0) grid = units;
      const CUtensorMap map = map3d(w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E, rows, K, box_k, 128);
      int u = units, t = tiles, k = K;
      void* args[] = {const_cast<CUtensorMap*>(&map), &u, &t, &k, &sink, &a8};
      char label[200];
      std::snprintf(label, sizeof label, "as %s, %d stages, %d CTAs%s", what, stages, grid,
                    grid == units ? "" : " (even split of units x K)");
      weight_case(reinterpret_cast<const void*>(kernel), grid, 128, stages * (2 * 128 * box_k * 2 + a_rows * 128), args,
                  label);
    };
    tile_case(&tile_stream_kernel<64, 4>, 64, 4, 0, "2 boxes of 128 B x 128 rows a stage (token-major)");
    tile_case(&tile_stream_kernel<64, 6>, 64, 6, 0, "2 boxes of 128 B x 128 rows a stage");
    tile_case(&tile_stream_kernel<128, 3>, 128, 3, 0, "2 boxes of 256 B x 128 rows a stage");
    // The same boxes spread over every SM (112 units leave 20 of 132 SMs idle).
    tile_case(&tile_stream_kernel<64, 4>, 64, 4, 0, "2 boxes of 128 B x 128 rows a stage", prop.multiProcessorCount);
    tile_case(&tile_stream_kernel<64, 6>, 64, 6, 0, "2 boxes of 128 B x 128 rows a stage", prop.multiProcessorCount);
    // With the token rows the kernel gathers next to the weights (16 rows of 128 B a stage).
    tile_case(&tile_stream_kernel<64, 4, 1>, 64, 4, 16, "the boxes + 16 token rows by 16-byte cp.async (token-major)");
    tile_case(&tile_stream_kernel<64, 4, 2>, 64, 4, 16, "the boxes + 16 token rows by 128-byte cp.async.bulk");
    tile_case(&tile_stream_kernel<64, 4, 1, 450>, 64, 4, 16,
              "the boxes + 16 token rows by 16-byte cp.async, each stage held 450 cycles (the wgmma)");
    tile_case(&tile_stream_kernel<64, 4, 0, 450>, 64, 4, 0, "2 boxes of 128 B x 128 rows a stage, each held 450 cycles");
    // The kernel's warp-specialized pipeline (pipe_stream_kernel), part by part.
    {
      const CUtensorMap map = map3d(w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E, rows, K, 64, 128);
      auto pipe_case = [&](auto kernel, int up_off, const char* what) {
        int u = units, t = tiles, k = K, up = up_off;
        void* args[] = {const_cast<CUtensorMap*>(&map), &u, &t, &k, &up, &sink, &a8};
        char label[200];
        std::snprintf(label, sizeof label, "as the token-major pipeline (384 threads, 4 x 48 KB)%s, %d CTAs", what, units);
        weight_case(reinterpret_cast<const void*>(kernel), units, 384, 4 * 48 * 1024, args, label);
      };
      pipe_case(&pipe_stream_kernel<false, false>, 128, "");
      pipe_case(&pipe_stream_kernel<false, false>, rows / 2, ", gate and up boxes N rows apart");
      pipe_case(&pipe_stream_kernel<true, false>, rows / 2, ", gate / up + token rows by cp.async");
      pipe_case(&pipe_stream_kernel<true, true>, rows / 2, ", gate / up + token rows + wgmma (the main loop)");
      pipe_case(&pipe_stream_kernel<false, true>, rows / 2, ", gate / up + wgmma, no token rows");
    }
    LF_CHECK(cudaFree(a));
    {
      const std::int64_t per = static_cast<std::int64_t>(bytes / units);
      const std::uint8_t* src8 = static_cast<const std::uint8_t*>(w);
      void* args[] = {&src8, const_cast<std::int64_t*>(&per), &sink};
      char label[120];
      std::snprintf(label, sizeof label, "contiguous, 2 MB a CTA, 16 KB bulk copies, %d CTAs", units);
      weight_case(reinterpret_cast<const void*>(&stream_kernel), units, 128, static_cast<int>(ring), args, label);
    }
    LF_CHECK(cudaFree(w));
  }
  return write_json();
}
