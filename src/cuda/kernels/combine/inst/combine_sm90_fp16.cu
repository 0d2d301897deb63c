// Instantiations of the combine kernel for fp16 output (y fp32 or fp16, 16-byte or scalar loads),
// compiled on their own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/combine/kernel_sm90.cuh"

namespace moekit::cuda::combine {

template void run_combine_sm90<DType::kFp16, DType::kFp32, 4>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kFp16, DType::kFp32, 1>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kFp16, DType::kFp16, 8>(const CombineParams&, unsigned, void*, bool);
template void run_combine_sm90<DType::kFp16, DType::kFp16, 1>(const CombineParams&, unsigned, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, float, 4>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, float, 1>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, __half, 8>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, __half, 1>);

}  // namespace moekit::cuda::combine
