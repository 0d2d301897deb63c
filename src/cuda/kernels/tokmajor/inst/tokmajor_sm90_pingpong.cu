// Instantiations of the token-major GEMM2 with ping-pong consumers (kernel_sm90.cuh,
// consume_pingpong; the launcher's use_pingpong picks them for K-short, decode-sized calls), one
// per operand, compiled on their own so they build in parallel with the others.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/tokmajor/kernel_sm90.cuh"

namespace moekit::cuda::tokmajor {

template void run_tokmajor_sm90<Operand::kBf16, false, false, true>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kF16, false, false, true>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kE4m3, false, false, true>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kBf16, false, false, true>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kF16, false, false, true>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kE4m3, false, false, true>);

}  // namespace moekit::cuda::tokmajor
