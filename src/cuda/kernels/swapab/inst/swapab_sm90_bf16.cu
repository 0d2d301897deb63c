// Instantiations of the Swap-AB decode GEMM (general and kPlain) for operand bf16 (GEMM1 and GEMM2),
// compiled on their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/swapab/kernel_sm90.cuh"

namespace moekit::cuda::swapab {

template void run_swapab_sm90<Operand::kBf16, true, false>(const KernelParams&, int, void*, bool);
template void run_swapab_sm90<Operand::kBf16, false, false>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(swapab_sm90_kernel<sm90::Bf16Tag, true, false>);
MOEKIT_REGISTER_KERNEL(swapab_sm90_kernel<sm90::Bf16Tag, false, false>);
// The kPlain kernels (the common small call: wide stages only, its features at compile time).
MOEKIT_REGISTER_KERNEL(swapab_sm90_kernel<sm90::Bf16Tag, true, false, true>);
MOEKIT_REGISTER_KERNEL(swapab_sm90_kernel<sm90::Bf16Tag, false, false, true>);

}  // namespace moekit::cuda::swapab
