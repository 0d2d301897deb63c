// Instantiations of the static K-short GEMM2 (kernel_sm90.cuh), one per operand.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/kshort/kernel_sm90.cuh"

namespace moekit::cuda::kshort {

template void run_kshort_sm90<Operand::kBf16>(const KernelParams&, int, void*, bool);
template void run_kshort_sm90<Operand::kF16>(const KernelParams&, int, void*, bool);
template void run_kshort_sm90<Operand::kE4m3>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(kshort_sm90_kernel<Operand::kBf16>);
MOEKIT_REGISTER_KERNEL(kshort_sm90_kernel<Operand::kF16>);
MOEKIT_REGISTER_KERNEL(kshort_sm90_kernel<Operand::kE4m3>);

}  // namespace moekit::cuda::kshort
