// Instantiations of the token-major prefill GEMM for operand e4m3 (GEMM1 and GEMM2), compiled on
// their own so the instantiations build in parallel.
#include "cuda/kernels/tokmajor/kernel_sm90.cuh"

namespace moekit::cuda::tokmajor {

template void run_tokmajor_sm90<Operand::kE4m3, true, false>(const KernelParams&, int, void*);
template void run_tokmajor_sm90<Operand::kE4m3, false, false>(const KernelParams&, int, void*);

}  // namespace moekit::cuda::tokmajor
