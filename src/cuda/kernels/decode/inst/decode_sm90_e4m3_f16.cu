// Instantiation of the single-launch decode kernel for operand e4m3_f16, compiled on its own so the
// instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/decode/kernel_sm90.cuh"

namespace moekit::cuda::decode {

template void launch_decode_sm90<Operand::kE4m3F16>(const DecodeParams&, int, void*, bool);
template void launch_decode_split_sm90<Operand::kE4m3F16>(const DecodeParams&, int, void*, bool);
template void launch_decode_block128_sm90<Operand::kE4m3F16>(const DecodeParams&, int, void*, bool);
template void launch_decode_channel_sm90<Operand::kE4m3F16>(const DecodeParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kWhole>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kBlock128>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kBlock128>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kBlock128>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kBlock128>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kChannel>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kChannel>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kChannel>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kChannel>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kChannelUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kChannelUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kChannelUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kChannelUp>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 8, kChannelDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 16, kChannelDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 32, kChannelDown>);
MOEKIT_REGISTER_KERNEL(decode_sm90_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act, 64, kChannelDown>);
MOEKIT_REGISTER_KERNEL(decode_combine_kernel<OperandTypes<Operand::kE4m3F16>::Tag, OperandTypes<Operand::kE4m3F16>::Act>);

}  // namespace moekit::cuda::decode
