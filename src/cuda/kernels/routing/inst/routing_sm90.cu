// Instantiations of the routing + permutation kernels: the one-launch kernel for {fp32, bf16}
// logits x {256, 1024} threads, the multi-CTA count launch for {fp32, bf16} logits and the scatter
// launch; the one-launch kernel (both sizes) and the count launch without the routing's code, for
// every permutation without routing (MOEKIT_ROUTING_PLAIN=0: on the fp32 ones, as before). One file: kernel_sm90.cuh
// defines the scatter kernel, which is not a template.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/routing/kernel_sm90.cuh"

namespace moekit::cuda::routing {

template void run_routing_sm90<DType::kFp32, kSmallThreads>(const RoutingParams&, std::size_t, int, void*, bool, bool);
template void run_routing_sm90<DType::kBf16, kSmallThreads>(const RoutingParams&, std::size_t, int, void*, bool, bool);
template void run_routing_sm90<DType::kFp32, kThreads>(const RoutingParams&, std::size_t, int, void*, bool, bool);
template void run_routing_sm90<DType::kBf16, kThreads>(const RoutingParams&, std::size_t, int, void*, bool, bool);
template void run_permute_count_sm90<DType::kFp32>(const RoutingParams&, std::size_t, int, void*, bool, bool);
template void run_permute_count_sm90<DType::kBf16>(const RoutingParams&, std::size_t, int, void*, bool, bool);

void run_permute_scatter_sm90(const RoutingParams& p, std::size_t smem, int grid, void* stream, bool pdl) {
  launch_routing_kernel(permute_scatter_sm90_kernel, p, smem, grid, kThreads, stream, pdl);
}

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<float, kSmallThreads>);
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<__nv_bfloat16, kSmallThreads>);
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<float, kThreads>);
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<__nv_bfloat16, kThreads>);
MOEKIT_REGISTER_KERNEL(permute_count_sm90_kernel<float>);
MOEKIT_REGISTER_KERNEL(permute_count_sm90_kernel<__nv_bfloat16>);
MOEKIT_REGISTER_KERNEL(permute_scatter_sm90_kernel);
// The permutation-only instantiations (calls without routing: kRoute false).
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<float, kSmallThreads, false>);
MOEKIT_REGISTER_KERNEL(routing_sm90_kernel<float, kThreads, false>);
MOEKIT_REGISTER_KERNEL(permute_count_sm90_kernel<float, false>);

}  // namespace moekit::cuda::routing
