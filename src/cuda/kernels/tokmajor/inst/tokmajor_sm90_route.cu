// Instantiations of the token-major GEMM1 with the routing in the kernel (kernel_sm90.cuh,
// route_table and place_unit_slots; the chain takes them where it drops the routing launch,
// docs/tokmajor.md "Routing in GEMM1"), bf16, fp16 and e4m3 (fp8_per_tensor), compiled on their own
// so they build in parallel with the others.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/tokmajor/kernel_sm90.cuh"

namespace moekit::cuda::tokmajor {

template void run_tokmajor_sm90<Operand::kBf16, true, false, false, true>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kF16, true, false, false, true>(const KernelParams&, int, void*, bool);
template void run_tokmajor_sm90<Operand::kE4m3, true, false, false, true>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kBf16, true, false, false, true>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kF16, true, false, false, true>);
MOEKIT_REGISTER_KERNEL(tokmajor_sm90_kernel<Operand::kE4m3, true, false, false, true>);

}  // namespace moekit::cuda::tokmajor
