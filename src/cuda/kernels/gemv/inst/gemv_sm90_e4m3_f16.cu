// Instantiation of the GEMV decode kernels (CUDA-core and tensor-core) for
// operand e4m3_f16, compiled on its own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/gemv/kernel_mma_sm90.cuh"
#include "cuda/kernels/gemv/kernel_sm90.cuh"

namespace moekit::cuda::gemv {

template void launch_gemv_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_fast_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_fast_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_mma_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_mma_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_mma_general_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_mma_general_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_mma_wide_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_mma_wide_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_mma_decoupled_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_mma_decoupled_max_coresident_ctas<Operand::kE4m3F16>(int);
template void launch_gemv_mma_qg_sm90<Operand::kE4m3F16>(const GemvParams&, int, void*);
template int gemv_mma_qg_max_coresident_ctas<Operand::kE4m3F16>(int);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(gemv_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_fast_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_mma_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_mma_general_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_mma_wide_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_mma_decoupled_sm90_kernel<Operand::kE4m3F16>);
MOEKIT_REGISTER_KERNEL(gemv_mma_qg_sm90_kernel<Operand::kE4m3F16>);

}  // namespace moekit::cuda::gemv
