// Instantiations of the activation quantization kernels for fp16 input (loads of 4 aligned
// elements and of one), compiled on their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/quant/kernel_sm90.cuh"

namespace moekit::cuda::quant {

template void run_quant_sm90<DType::kFp16, 4>(QuantKernel, const QuantParams&, unsigned, void*, bool);
template void run_quant_sm90<DType::kFp16, 1>(QuantKernel, const QuantParams&, unsigned, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily. Every kernel
// run_quant_sm90 can pick, at both vector widths.
MOEKIT_REGISTER_KERNEL(absmax_tensor_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(quant_tensor_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(quant_tensor_small_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(quant_row_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(quant_group_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(absmax_tensor_sm90_kernel<__half, 1>);
MOEKIT_REGISTER_KERNEL(quant_tensor_sm90_kernel<__half, 1>);
MOEKIT_REGISTER_KERNEL(quant_tensor_small_sm90_kernel<__half, 1>);
MOEKIT_REGISTER_KERNEL(quant_row_sm90_kernel<__half, 1>);
MOEKIT_REGISTER_KERNEL(quant_group_sm90_kernel<__half, 1>);

}  // namespace moekit::cuda::quant
