// moekit-tlb-probe: whether the first weight access of a kernel after the L2 flush pays for the
// address translation (a TLB miss) or only for DRAM. The question behind it (docs/perf.md, session
// 41): the token-major GEMMs' phase timer has 4.8-6.9 us from the first weight TMA to the first
// full stage. 132 CTAs, lane 0 of each: one 4-byte ld.global.cg from its own 2 MB page, timed by
// %globaltimer, after a read of 256 MB (the L2 flush), 24 rounds (the first 4 dropped):
//   S1: the same 132 pages every round (their translations warm), a line not read before;
//   S2: 132 pages not touched since the buffer's memset (8 GB: a fresh set every round);
//   S3: as S2, with another line of each page prefetched to L2 by one CTA right before;
//   S4: as S2, with the same line prefetched right before (an L2 hit: the floor of the probe).
//
//   moekit-tlb-probe
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ std::uint64_t gt() { std::uint64_t t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }

__global__ void flush(const uint4* f, size_t n, unsigned* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint4 v = __ldcg(f + i); acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) sink[0] = 1;
}
// Lane 0 of each CTA: one 4-byte load from page (page0 + cta * page_step), offset `line` in it.
__global__ void probe(const char* w, long long page0, long long page_step, long long line, unsigned long long* out, unsigned* sink) {
  if (threadIdx.x != 0) return;
  const char* a = w + (page0 + blockIdx.x * page_step) * (2ll << 20) + line;
  std::uint64_t t0 = gt();
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  if (v == 0x12345678u) sink[1] = v;  // use it
  asm volatile("" ::: "memory");
  std::uint64_t t1 = gt();
  out[blockIdx.x] = (t1 - t0) + (v == 0xdeadbeefu ? 1 : 0);
}
// 1 CTA: prefetch.global.L2 of one line per page for `n` pages (the TLB touch), at offset `line`.
__global__ void touch(const char* w, long long page0, long long page_step, int n, long long line) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const char* a = w + (page0 + i * page_step) * (2ll << 20) + line;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  }
}

int main() {
  const long long kPages = 4096;  // 8 GB
  char* w; CK(cudaMalloc(&w, kPages * (2ll << 20)));
  CK(cudaMemset(w, 1, kPages * (2ll << 20)));
  const size_t fbytes = 256ull << 20; uint4* f; CK(cudaMalloc(&f, fbytes)); CK(cudaMemset(f, 2, fbytes));
  unsigned* sink; CK(cudaMalloc(&sink, 64));
  unsigned long long* out; CK(cudaMalloc(&out, 132 * 8));
  std::vector<unsigned long long> h(132);
  auto run = [&](const char* name, int mode) {
    std::vector<double> all;
    for (int it = 0; it < 24; ++it) {
      long long page0 = 0, step = 1;
      if (mode == 0) { page0 = 0; step = 1; }                    // same 132 pages every iteration
      else { page0 = 200 + (long long)it * 160; step = 1; }      // fresh pages every iteration
      const long long line = (it % 16) * 4096 + 128;              // a line not loaded before in S1
      flush<<<264, 512>>>(f, fbytes / 16, sink);
      if (mode == 2) touch<<<1, 256>>>(w, page0, step, 132, line + 65536 * 8);  // other line, same page
      if (mode == 3) touch<<<1, 256>>>(w, page0, step, 132, line);              // the same line
      probe<<<132, 32>>>(w, page0, step, line, out, sink);
      cudaDeviceSynchronize();
      cudaMemcpy(h.data(), out, 132 * 8, cudaMemcpyDeviceToHost);
      if (it >= 4) for (auto v : h) all.push_back(v / 1000.0);
    }
    std::sort(all.begin(), all.end());
    printf("%-58s median %6.2f us  p10 %6.2f  p90 %6.2f  max %6.2f\n", name, all[all.size() / 2], all[all.size() / 10],
           all[all.size() * 9 / 10], all.back());
  };
  for (int rep = 0; rep < 2; ++rep) {
    run("S1 pages touched the iteration before (TLB warm), L2 flushed", 0);
    run("S2 pages never touched since the memset (TLB cold)", 1);
    run("S3 cold pages, another line of each prefetched just before", 2);
    run("S4 cold pages, the same line prefetched just before (L2 hit)", 3);
  }
  return 0;
}
