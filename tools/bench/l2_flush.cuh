// The L2 flush moekit-bench and moekit-launch-floor time calls after: every 16-byte word of a
// buffer of twice the L2 read once (ld.global.cg), which evicts what the previous replay left and
// leaves clean lines. The sum is stored only when it equals a value the zeroed buffer cannot
// give, which keeps the loads.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

static __global__ void flush_read_kernel(const uint4* buf, std::size_t n16, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// MOEKIT_BENCH_FLUSH: "read" (or unset: the default) or "write" (a memset: dirty lines whose
// write-back the timed call pays, the benches' method before 2026-12-01); anything else throws.
inline bool bench_flush_writes() {
  const char* v = std::getenv("MOEKIT_BENCH_FLUSH");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "read") == 0) return false;
  if (std::strcmp(v, "write") == 0) return true;
  throw std::runtime_error(std::string("MOEKIT_BENCH_FLUSH is '") + v + "', expected read or write");
}

// One flush of `buf` (bytes, twice the L2 or more) on `stream`: read by 2 CTAs a SM, or with
// `write` memset to the next byte of *value. The launch's error.
inline cudaError_t flush_l2(cudaStream_t stream, void* buf, std::size_t bytes, bool write, int* value, int sms) {
  if (write) return cudaMemsetAsync(buf, ++*value & 0xff, bytes, stream);
  flush_read_kernel<<<static_cast<unsigned>(2 * sms), 1024, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16,
                                                                         static_cast<unsigned*>(buf));
  return cudaGetLastError();
}
