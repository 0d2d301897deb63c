// Instantiations of the combine kernel for bf16 output (y fp32 or bf16, 16-byte or scalar loads),
// compiled on their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/combine/kernel_sm90.cuh"

namespace moekit::cuda::combine {

template void run_combine_sm90<DType::kBf16, DType::kFp32, 4>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kBf16, DType::kFp32, 1>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kBf16, DType::kBf16, 8>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kBf16, DType::kBf16, 1>(const CombineParams&, unsigned, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, float, 4>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, float, 1>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, __nv_bfloat16, 8>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, __nv_bfloat16, 1>);

}  // namespace moekit::cuda::combine
