// moekit-accum-probe: how exactly the e4m3 tensor-core instructions moekit's fp8 kernels use add
// their products, against the exact dot products (double). The question behind it (docs/gemv.md,
// session 33, "Accuracy"): the GEMV kernel's QGMMA form and every other fp8 wgmma path land
// 0.006-0.05 from the CPU reference where the mma.sync forms land within 2e-4, and Hopper's e4m3
// wgmma is reported to keep its accumulator at reduced internal precision.
//
// One CTA, 64 weight rows x 16 tokens x K, e4m3 weights and activations from fixed seeds:
//   - qgmma/all: wgmma m64n16k32 with A from registers, fed exactly as the GEMV kernel's QGMMA form
//     feeds it (a lane's two 16-byte loads, the B tile staged with qg_offset), its accumulator
//     running over all of K;
//   - qgmma/P: the same, the accumulator added into fp32 registers after every P k-blocks of 64
//     elements (its first instruction of an interval overwrites it: scale_d = 0);
//   - mma.sync: mma.m16n8k32 e4m3 (the GEMV kernel's mma.sync forms: sm_90 runs it as f16 HMMAs
//     with fp32 accumulation), the same loads, B from the token rows.
// Two inputs: zero-mean values (sums stay small against the sum of |products|) and positive
// activations against weights of mean 0.5 (the sums grow with K: where an accumulator's width
// shows). Per case: max |error| / sum |products| and rms(error) / rms(exact) over the 1024 outputs.
//
//   moekit-accum-probe
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/common/mma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/kernels/gemv/prologue.cuh"

namespace {

namespace sm90 = moekit::cuda::sm90;
namespace gv = moekit::cuda::gemv;

constexpr int kRows = 64, kTokens = 16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "moekit-accum-probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A lane's 16 bytes of weight row `row` at 16-byte chunk `ch` (zeros past K).
__device__ uint4 load16(const std::uint8_t* w, int K, int row, int ch) {
  return ch < K / 16 ? *reinterpret_cast<const uint4*>(w + static_cast<std::int64_t>(row) * K + ch * 16) : uint4{};
}

// qgmma: 128 threads. promote = 0: one accumulator over K; else an fp32 sum every `promote` k-blocks.
__global__ void qgmma_kernel(const std::uint8_t* w, const std::uint8_t* x, int K, int promote, float* out) {
  extern __shared__ __align__(16) std::uint8_t tile[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int c8 = K / 8, kb8 = (c8 + 7) / 8 * 8, nkb = (K / 16 + 3) / 4;
  for (int i = tid; i < kTokens * kb8; i += 128) {  // the kernel's B tile, from e4m3 rows
    const int t = i / kb8, q8 = i - t * kb8;
    const uint2 q = q8 < c8 ? *reinterpret_cast<const uint2*>(x + static_cast<std::int64_t>(t) * K + q8 * 8) : uint2{};
    *reinterpret_cast<std::uint32_t*>(tile + gv::qg_offset(t, q8, 0)) = q.x;
    *reinterpret_cast<std::uint32_t*>(tile + gv::qg_offset(t, q8, 1)) = q.y;
  }
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  const std::uint32_t base = sm90::smem_addr(tile);
  float acc[8] = {}, sum[8] = {};
  for (int kb = 0; kb < nkb; ++kb) {
    const uint4 lo = load16(w, K, warp * 16 + g, kb * 4 + c), hi = load16(w, K, warp * 16 + g + 8, kb * 4 + c);
    const int fresh = promote > 0 && kb % promote == 0 ? 0 : 1;  // scale_d: 0 restarts the accumulator
    sm90::wgmma_fence();
    const std::uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
    sm90::wgmma_rs_m64n16k32_e4m3(acc, a0, sm90::make_smem_desc_interleave(base + 2 * kb * gv::kQgStepBytes, 128, 256),
                                  fresh);
    sm90::wgmma_rs_m64n16k32_e4m3(
        acc, a1, sm90::make_smem_desc_interleave(base + (2 * kb + 1) * gv::kQgStepBytes, 128, 256), 1);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs<8>(acc);
    if (promote > 0 && ((kb + 1) % promote == 0 || kb + 1 == nkb))
      for (int i = 0; i < 8; ++i) sum[i] += acc[i];
  }
  // d[4 j + 2 h + e] = row 16 warp + g + 8 h, token 8 j + 2 c + e.
  for (int j = 0; j < 2; ++j)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e)
        out[(warp * 16 + g + 8 * h) * kTokens + 8 * j + 2 * c + e] = promote > 0 ? sum[4 * j + 2 * h + e] : acc[4 * j + 2 * h + e];
}

// mma.sync: 128 threads, warp w the rows 16 w .. 16 w + 15, two token groups of 8.
__global__ void mma_kernel(const std::uint8_t* w, const std::uint8_t* x, int K, float* out) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int nkb = (K / 16 + 3) / 4;
  float acc[2][4] = {};
  for (int kb = 0; kb < nkb; ++kb) {
    const uint4 lo = load16(w, K, warp * 16 + g, kb * 4 + c), hi = load16(w, K, warp * 16 + g + 8, kb * 4 + c);
    for (int tg = 0; tg < 2; ++tg) {
      const uint4 b = load16(x, K, 8 * tg + g, kb * 4 + c);
      const std::uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
      sm90::mma_m16n8<moekit::cuda::Operand::kE4m3>(acc[tg], a0, b.x, b.y);
      sm90::mma_m16n8<moekit::cuda::Operand::kE4m3>(acc[tg], a1, b.z, b.w);
    }
  }
  for (int tg = 0; tg < 2; ++tg)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) out[(warp * 16 + g + 8 * h) * kTokens + 8 * tg + 2 * c + e] = acc[tg][2 * h + e];
}

struct Err {
  double max_rel = 0.0, rms_rel = 0.0;
};

Err compare(const std::vector<float>& got, const std::vector<float>& wf, const std::vector<float>& xf, int K) {
  double se = 0.0, sr = 0.0;
  Err r;
  for (int m = 0; m < kRows; ++m)
    for (int t = 0; t < kTokens; ++t) {
      double s = 0.0, a = 0.0;
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(wf[static_cast<std::size_t>(m) * K + k]) * xf[static_cast<std::size_t>(t) * K + k];
        s += p;
        a += std::fabs(p);
      }
      const double e = got[static_cast<std::size_t>(m) * kTokens + t] - s;
      r.max_rel = std::max(r.max_rel, std::fabs(e) / std::max(a, 1e-30));
      se += e * e;
      sr += s * s;
    }
  r.rms_rel = std::sqrt(se / std::max(sr, 1e-30));
  return r;
}

}  // namespace

int main() {
  int dev = 0, major = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
  if (major != 9) {
    std::fprintf(stderr, "moekit-accum-probe: needs an sm_90 GPU\n");
    return 1;
  }
  std::printf("| input | K | method | max err / sum |p| | rms err / rms exact |\n|---|---|---|---|---|\n");
  for (int input = 0; input < 2; ++input) {
    for (int K : {512, 1024, 2048, 4096, 7168}) {
      std::mt19937 rng(1234u + static_cast<unsigned>(K) + 7u * static_cast<unsigned>(input));
      std::normal_distribution<float> n01(0.0f, 1.0f);
      std::vector<std::uint8_t> w(static_cast<std::size_t>(kRows) * K), x(static_cast<std::size_t>(kTokens) * K);
      std::vector<float> wf(w.size()), xf(x.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        const __nv_fp8_e4m3 v(input == 0 ? 4.0f * n01(rng) : 4.0f * (n01(rng) + 0.5f));
        w[i] = v.__x;
        wf[i] = static_cast<float>(v);
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        const __nv_fp8_e4m3 v(input == 0 ? 4.0f * n01(rng) : 4.0f * std::fabs(n01(rng)));
        x[i] = v.__x;
        xf[i] = static_cast<float>(v);
      }
      std::uint8_t *dw = nullptr, *dx = nullptr;
      float* dout = nullptr;
      check(cudaMalloc(&dw, w.size()), "cudaMalloc");
      check(cudaMalloc(&dx, x.size()), "cudaMalloc");
      check(cudaMalloc(&dout, sizeof(float) * kRows * kTokens), "cudaMalloc");
      check(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice), "copy w");
      check(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice), "copy x");
      const int smem = kTokens * ((K + 63) / 64 * 64);
      check(cudaFuncSetAttribute(qgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem opt-in");
      std::vector<float> got(static_cast<std::size_t>(kRows) * kTokens);
      auto report = [&](const char* method) {
        check(cudaGetLastError(), method);
        check(cudaMemcpy(got.data(), dout, sizeof(float) * got.size(), cudaMemcpyDeviceToHost), method);
        const Err e = compare(got, wf, xf, K);
        std::printf("| %s | %d | %s | %.3g | %.3g |\n", input == 0 ? "zero-mean" : "positive", K, method, e.max_rel,
                    e.rms_rel);
      };
      for (int promote : {0, 4, 2, 1}) {
        qgmma_kernel<<<1, 128, smem>>>(dw, dx, K, promote, dout);
        char name[32];
        std::snprintf(name, sizeof(name), promote == 0 ? "qgmma/all" : "qgmma/%d", promote);
        report(name);
      }
      mma_kernel<<<1, 128>>>(dw, dx, K, dout);
      report("mma.sync");
      cudaFree(dw);
      cudaFree(dx);
      cudaFree(dout);
    }
  }
  return 0;
}
