// The token gather of the TMA + wgmma GEMM families (swapab/, tokmajor/): which row of A an
// expert-sorted row reads.
#pragma once

namespace moekit::cuda::gemm_common {

// The A row of expert-sorted row r: GEMM1 gathers hidden by token (slot m*k+j -> token m), GEMM2
// reads the intermediate in sorted order (row r). P is the family's KernelParams (gather_a,
// sorted_slots, top_k).
template <class P>
__device__ __forceinline__ int a_row_of(const P& p, int r) {
  return p.gather_a ? p.sorted_slots[r] / p.top_k : r;
}

}  // namespace moekit::cuda::gemm_common
