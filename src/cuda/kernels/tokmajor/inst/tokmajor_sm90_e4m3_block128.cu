// Instantiations of the token-major prefill GEMM for fp8_block128 (GEMM1 and GEMM2), compiled on
// their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/tokmajor/kernel_sm90.cuh"

namespace moekit::cuda::tokmajor {

template void run_tokmajor_sm90<Operand::kE4m3, true, true>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kE4m3, false, true>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kE4m3, true, true>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kE4m3, false, true>);

}  // namespace moekit::cuda::tokmajor
