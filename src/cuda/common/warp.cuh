// Warp-wide integer scans shared by the kernels that build per-expert prefixes (the persistent
// GEMMs' work prefix, routing's expert offsets, the EP plan's per-rank positions).
#pragma once

namespace moekit::cuda {

// Inclusive prefix sum of v over the lanes of a full warp (all 32 lanes call it): lane l gets
// v_0 + ... + v_l. Five shfl.up steps.
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

}  // namespace moekit::cuda
