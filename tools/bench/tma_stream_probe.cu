// moekit-tma-stream-probe: how fast one CTA, and the CTAs of a cluster, pull weights through a TMA
// ring when few CTAs stream (the expert_mlp one-CTA form's pattern), and on which SMs / TPCs they
// sit (docs/perf.md "Session 75").
//
// Each CTA streams its own 3 MB (4 "experts" of 192 rows x 4096 bytes, bf16 K = 2048) through a
// ring of 5 stages of 24 KB, a stage being, by mode:
//   0: six 32-row x 128-byte boxes (expert_mlp's w13 stage), 1: three 64-row boxes,
//   2: one 192-row box, 3: one contiguous 24 KB bulk copy (no tensor map), 4: two 96-row boxes.
// The consumer only waits for a stage and frees it (math 0: one warp; the rate is the copy
// path's), or, as expert_mlp's one-CTA GEMM1 does, a warpgroup runs bf16 wgmma over each stage
// before freeing it (math 1: the kernel's form, m64n128 + m64n64 a k16 step with a 64-row token
// tile as A; math 2: Swap-AB, the stage's three 64-row blocks as A and 8 token rows as B, m64n8):
// whether the tensor work a stage costs the stream rate a CTA (math 1 with every mode but 0, math 2
// with modes 1 and 3: it ran level with math 1 there, docs/perf.md "Session 78").
// Reported per configuration (mode, cluster size, CTAs): each CTA's GB/s from its first issue to
// its last stage landed (median, min, max), the call's TB/s, how many CTAs share a TPC (SM id / 2)
// with another streaming CTA, and the first 8 CTAs' SM ids. L2 is flushed before each run by a
// 256 MB write (dirty lines, whose write-back the stream may pay: compare rows with each other,
// not with moekit-bench's read flush), the best of three runs kept.
//
//   build/cuda-release/tools/bench/moekit-tma-stream-probe
//   (or, from the repository root: nvcc -std=c++17 -O2 -arch=sm_90a -Isrc -Iinclude tools/bench/tma_stream_probe.cu)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/common/check.cuh"  // MOEKIT_CUDA_CHECK: a failed call throws moekit::Error naming it
#include "cuda/common/tma.cuh"  // sm90: the PTX layer (mbarriers, TMA, bulk copies) and the map encoder
#include "cuda/common/wgmma.cuh"  // sm90::Wgmma, descriptors, fences

constexpr int kStages = 5;
constexpr int kStageBytes = 192 * 128;  // 24 KB
constexpr int kRowBytes = 4096;         // bf16 K = 2048
constexpr int kRowsPerExpert = 192;
constexpr int kExpertsPerCta = 4;
constexpr int kKSteps = kRowBytes / 128;  // 32 stages an expert
constexpr int kStagesPerCta = kKSteps * kExpertsPerCta;
constexpr std::int64_t kCtaBytes = std::int64_t(kRowsPerExpert) * kExpertsPerCta * kRowBytes;
// TMA boxes a stage by mode (mode 3: none, one bulk copy).
__host__ __device__ constexpr int boxes_of(int mode) { return mode == 0 ? 6 : mode == 1 ? 3 : mode == 4 ? 2 : 1; }

struct Rec {
  unsigned long long t0, t1;
  unsigned smid, pad;
};

namespace sm90 = moekit::cuda::sm90;

// The consumer warpgroup of math 1 / 2 (see the top): wait for each stage, run its wgmmas (one
// group a stage, the previous stage freed once its group is done, as expert_mlp's GEMM1), free it.
template <int kMath>
__device__ void consume_math(std::uint8_t* ring, std::uint32_t tok, unsigned long long* full,
                             unsigned long long* empty) {
  using Tag = sm90::Bf16Tag;
  const int lane = threadIdx.x % 32;
  float a1[kMath == 1 ? 64 : 32] = {}, a2[32] = {}, a3[32] = {};  // Wgmma<Tag, 8> takes 32 registers (uses 4)
  int prev = 0;
  for (int i = 0; i < kStagesPerCta; ++i) {
    const int st = i % kStages;
    sm90::mbar_wait(sm90::smem_addr(&full[st]), (i / kStages) & 1);
    sm90::wgmma_fence();
    const std::uint32_t s = sm90::smem_addr(ring + st * kStageBytes);
    const std::uint64_t dt = sm90::make_smem_desc_sw128(tok);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (kMath == 1) {
        sm90::Wgmma<Tag, 128>::mma(a1, dt + 2 * kk, sm90::make_smem_desc_sw128(s) + 2 * kk, 1);
        sm90::Wgmma<Tag, 64>::mma(a2, dt + 2 * kk, sm90::make_smem_desc_sw128(s + 128 * 128) + 2 * kk, 1);
      } else {
        sm90::Wgmma<Tag, 8>::mma(a1, sm90::make_smem_desc_sw128(s) + 2 * kk, dt + 2 * kk, 1);
        sm90::Wgmma<Tag, 8>::mma(a2, sm90::make_smem_desc_sw128(s + 64 * 128) + 2 * kk, dt + 2 * kk, 1);
        sm90::Wgmma<Tag, 8>::mma(a3, sm90::make_smem_desc_sw128(s + 128 * 128) + 2 * kk, dt + 2 * kk, 1);
      }
    }
    sm90::wgmma_commit();
    if (i > 0) {
      sm90::wgmma_wait<1>();
      if (lane == 0) sm90::mbar_arrive(sm90::smem_addr(&empty[prev]));
    }
    prev = st;
  }
  sm90::wgmma_wait<0>();
  if (lane == 0) sm90::mbar_arrive(sm90::smem_addr(&empty[prev]));
}

// Lane 0 of warp 0 (math 1 / 2: warp 4) issues the stages (w as a 3D map [1 plane][rows][K] for
// the boxes); warp 1 (math 1 / 2: warps 0-3) waits for each and frees it.
__global__ void __launch_bounds__(160, 1) stream(const __grid_constant__ CUtensorMap map, const std::uint8_t* flat,
                                                 int mode, int math, Rec* out) {
  extern __shared__ std::uint8_t raw[];
  std::uint8_t* ring = raw + ((1024u - (sm90::smem_addr(raw) & 1023u)) & 1023u);
  std::uint8_t* tok = ring + kStages * kStageBytes;  // math 1 / 2: 64 token rows of 128 bytes (zeros)
  __shared__ alignas(8) unsigned long long full[kStages], empty[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int producer = math != 0 ? 4 : 0;
  if (math != 0)
    for (int i = threadIdx.x; i < 64 * 128 / 4; i += blockDim.x) reinterpret_cast<std::uint32_t*>(tok)[i] = 0u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(sm90::smem_addr(&full[s]), 1);
      sm90::mbar_init(sm90::smem_addr(&empty[s]), math != 0 ? 4 : 1);
    }
    sm90::fence_mbarrier_init_cluster();
  }
  sm90::fence_proxy_async_shared_cta();  // the token tile's zeros before wgmma reads them
  __syncthreads();
  const int cta = blockIdx.x;
  if (warp == producer && lane == 0) {
    const unsigned long long t0 = sm90::globaltimer_ns();
    const int row_base = cta * kRowsPerExpert * kExpertsPerCta;
    for (int i = 0; i < kStagesPerCta; ++i) {
      const int st = i % kStages;
      sm90::mbar_wait(sm90::smem_addr(&empty[st]), ((i / kStages) & 1) ^ 1);
      const std::uint32_t fb = sm90::smem_addr(&full[st]);
      sm90::mbar_arrive_expect_tx(fb, kStageBytes);
      const std::uint32_t dst = sm90::smem_addr(ring + st * kStageBytes);
      if (mode == 3) {
        sm90::bulk_copy_g2s(dst, flat + std::int64_t(cta) * kCtaBytes + std::int64_t(i) * kStageBytes, kStageBytes, fb);
      } else {
        const int boxes = boxes_of(mode);
        const int rows = kRowsPerExpert / boxes;
        const int k0 = (i % kKSteps) * 64;  // bf16 elements
        const int r0 = row_base + (i / kKSteps) * kRowsPerExpert;
        for (int x = 0; x < boxes; ++x) sm90::tma_load_3d(dst + x * rows * 128, &map, fb, k0, r0 + x * rows, 0);
      }
    }
    out[cta].t0 = t0;
  }
  if (math != 0 && warp < 4) {
    if (math == 1) consume_math<1>(ring, sm90::smem_addr(tok), full, empty);
    else consume_math<2>(ring, sm90::smem_addr(tok), full, empty);
  }
  if (math == 0 && warp == 1) {
    for (int i = 0; i < kStagesPerCta; ++i) {
      const int st = i % kStages;
      sm90::mbar_wait(sm90::smem_addr(&full[st]), (i / kStages) & 1);
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(sm90::smem_addr(&empty[st]));
    }
  }
  if (warp == (math != 0 ? 0 : 1)) {
    if (lane == 0) {
      out[cta].t1 = sm90::globaltimer_ns();
      out[cta].smid = sm90::smid();
    }
  }
}

int main() {
  int sms = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  MOEKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int max_ctas = sms;
  const std::int64_t bytes = kCtaBytes * max_ctas;
  std::uint8_t* w = nullptr;
  MOEKIT_CUDA_CHECK(cudaMalloc(&w, bytes));
  MOEKIT_CUDA_CHECK(cudaMemset(w, 1, bytes));
  std::uint8_t* flush = nullptr;
  const std::size_t flush_bytes = 256u << 20;
  MOEKIT_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  Rec* rec = nullptr;
  MOEKIT_CUDA_CHECK(cudaMalloc(&rec, sizeof(Rec) * max_ctas));

  const sm90::EncodeTiledFn encode = sm90::encode_tiled_fn();
  if (encode == nullptr) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not available from the driver\n");
    return 1;
  }
  CUtensorMap map;
  const cuuint64_t rows_all = cuuint64_t(kRowsPerExpert) * kExpertsPerCta * max_ctas;
  const cuuint64_t dims[3] = {kRowBytes / 2, rows_all, 1};
  const cuuint64_t strides[2] = {kRowBytes, kRowBytes * rows_all};
  const cuuint32_t elem[3] = {1, 1, 1};

  const int smem = kStages * kStageBytes + 64 * 128 + 1024;
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(stream, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("%s, %d SMs; a CTA streams %.1f MB (%d stages of %d KB, ring of %d)\n", prop.name, sms, kCtaBytes / 1e6,
              kStagesPerCta, kStageBytes / 1024, kStages);
  std::printf("| mode | math | cluster | CTAs | a CTA GB/s median | min | max | the call TB/s | CTAs sharing a TPC | (first SM ids)\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  const char* names[5] = {"6 x 32-row boxes", "3 x 64-row boxes", "1 x 192-row box", "1 bulk 24 KB",
                          "2 x 96-row boxes"};
  const char* maths[3] = {"none", "m64n128+n64", "swap 3 x m64n8"};
  for (int mode = 0; mode < 5; ++mode) {
   for (int math = 0; math < 3; ++math) {
    if ((math == 1 && mode == 0) || (math == 2 && mode != 1 && mode != 3)) continue;
    const int boxes = boxes_of(mode);
    const cuuint32_t box[3] = {64, cuuint32_t(kRowsPerExpert / boxes), 1};
    if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, w, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      std::fprintf(stderr, "tensor map encode failed (mode %d)\n", mode);
      return 1;
    }
    for (int cluster : {1, 2, 4}) {
      if (math != 0 && cluster != 1) continue;
      for (int n : {1, 2, 4, 8, 16, 32, 64, 128}) {
        if (n < cluster || n > max_ctas || n % cluster) continue;
        std::vector<double> best_rates;
        double best_call = 0;
        int best_shared = 0;
        std::vector<unsigned> best_sms;
        for (int rep = 0; rep < 3; ++rep) {
          MOEKIT_CUDA_CHECK(cudaMemset(flush, rep, flush_bytes));
          MOEKIT_CUDA_CHECK(cudaMemset(rec, 0, sizeof(Rec) * max_ctas));
          cudaLaunchConfig_t cfg{};
          cudaLaunchAttribute at[1];
          cfg.gridDim = dim3(n);
          cfg.blockDim = dim3(math != 0 ? 160 : 64);
          cfg.dynamicSmemBytes = smem;
          at[0].id = cudaLaunchAttributeClusterDimension;
          at[0].val.clusterDim.x = cluster;
          at[0].val.clusterDim.y = 1;
          at[0].val.clusterDim.z = 1;
          cfg.attrs = at;
          cfg.numAttrs = 1;
          MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, stream, map, static_cast<const std::uint8_t*>(w), mode, math, rec));
          MOEKIT_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<Rec> h(n);
          MOEKIT_CUDA_CHECK(cudaMemcpy(h.data(), rec, sizeof(Rec) * n, cudaMemcpyDeviceToHost));
          std::vector<double> rates;
          unsigned long long a = ~0ull, b = 0;
          std::vector<int> tpc(1024, 0);
          for (const Rec& r : h) {
            rates.push_back(double(kCtaBytes) / double(r.t1 - r.t0));  // bytes / ns = GB/s
            a = std::min(a, r.t0);
            b = std::max(b, r.t1);
            ++tpc[r.smid / 2];
          }
          int shared = 0;
          for (const Rec& r : h) shared += tpc[r.smid / 2] > 1;
          std::sort(rates.begin(), rates.end());
          const double call = double(kCtaBytes) * n / double(b - a) / 1e3;  // TB/s
          if (call > best_call) {
            best_call = call, best_rates = rates, best_shared = shared;
            best_sms.clear();
            for (const Rec& r : h) best_sms.push_back(r.smid);
          }
        }
        std::printf("| %s | %s | %d | %d | %.1f | %.1f | %.1f | %.2f | %d |", names[mode], maths[math], cluster, n,
                    best_rates[best_rates.size() / 2], best_rates.front(), best_rates.back(), best_call, best_shared);
        for (int i = 0; i < n && i < 8; ++i) std::printf("%s%u", i ? " " : " SMs ", best_sms[i]);
        std::printf("\n");
      }
    }
   }
  }
  return 0;
}
