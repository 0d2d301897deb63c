// Instantiations of the per-expert MLP kernel (kernel_sm90.cuh): bf16, fp16, e4m3 (fp8_per_tensor; its
// cluster form also with w2 as row pairs), and e4m3 per channel (fp8_per_channel, both forms).
#include "cuda/common/preload.cuh"
#include "cuda/kernels/expert_mlp/kernel_sm90.cuh"

namespace moekit::cuda::expert_mlp {

template bool run_expert_mlp_sm90<Operand::kBf16, false>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kF16, false>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kE4m3, false>(const KernelParams&, int, void*, bool);
template int max_active_clusters_sm90<Operand::kBf16>(int);
template int max_active_clusters_sm90<Operand::kF16>(int);
template int max_active_clusters_sm90<Operand::kE4m3>(int);
template bool run_expert_mlp_sm90<Operand::kBf16, true>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kF16, true>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kE4m3, true>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kE4m3, false, true>(const KernelParams&, int, void*, bool);
template bool run_expert_mlp_sm90<Operand::kE4m3, true, true>(const KernelParams&, int, void*, bool);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily. The one-CTA and
// the cluster form (kCluster), each untimed and timed.
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, false, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, false, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, true, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, true, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, false>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, true, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, true, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, true>);
// fp8_per_channel: the e4m3 one-CTA and cluster forms with kChannel, untimed and timed.
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, true, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, true, true>);
// The kPlain kernels (the common per-tensor call's features at compile time), one-CTA and cluster
// forms, untimed only.
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, false, false, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, false, false, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, false, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kBf16, true, false, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kF16, true, false, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, false, false, false, true>);
// The kChannel kPlain kernels (fp8_per_channel's common call; MOEKIT_EXPERT_MLP_PLAIN_CHANNEL), one-CTA
// and cluster forms, untimed only.
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, false, false, true, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, false, true, false, true>);
// w2 as row pairs (e4m3 per tensor at N % 16 = 8, gpt-oss TP8): the cluster form, untimed and timed.
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, false, false, true>);
MOEKIT_REGISTER_KERNEL(expert_mlp_sm90_kernel<Operand::kE4m3, true, true, false, true>);

}  // namespace moekit::cuda::expert_mlp
