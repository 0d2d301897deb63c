// Instantiations of the token-major prefill GEMM for operand fp16 (GEMM1 and GEMM2), compiled on
// their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/tokmajor/kernel_sm90.cuh"

namespace moekit::cuda::tokmajor {

template void run_tokmajor_sm90<Operand::kF16, true, false>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kF16, false, false>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kF16, true, false>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kF16, false, false>);

}  // namespace moekit::cuda::tokmajor
