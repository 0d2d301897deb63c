// Instantiation of the single-launch decode kernel for operand bf16, compiled on its own so the
// instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/decode/kernel_sm90.cuh"

namespace moekit::cuda::decode {

template void launch_decode_sm90<Operand::kBf16>(const DecodeParams&, int, void*, bool);
template int decode_max_active_clusters<Operand::kBf16>(int);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kBf16>::Tag, OperandTypes<Operand::kBf16>::Act, 8, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kBf16>::Tag, OperandTypes<Operand::kBf16>::Act, 16, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kBf16>::Tag, OperandTypes<Operand::kBf16>::Act, 32, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kBf16>::Tag, OperandTypes<Operand::kBf16>::Act, 64, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_combine_kernel<OperandTypes<Operand::kBf16>::Tag, OperandTypes<Operand::kBf16>::Act>);

}  // namespace moekit::cuda::decode
