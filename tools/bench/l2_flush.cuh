// The L2 flush moekit-bench and moekit-launch-floor time calls after: every 16-byte word of a
// buffer of twice the L2 read once (ld.global.cg), which evicts what the previous replay left and
// leaves clean lines. The sum is stored only when it equals a value the zeroed buffer cannot
// give, which keeps the loads.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

static __global__ void flush_read_kernel(const uint4* buf, std::size_t n16, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
