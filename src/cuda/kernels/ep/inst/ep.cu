// Instantiations of the expert-parallel bookkeeping kernels: the plan, pack and unpack with 16-
// and 2-byte row vectors, the combine for bf16 and fp16. One file: kernel.cuh defines the
// plan kernel, which is not a template.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/ep/kernel.cuh"

namespace moekit::cuda::ep {

void run_ep_plan(const EpPlanParams& p, std::size_t smem, void* stream) {
  ep_plan_kernel<<<1, kPlanThreads, smem, static_cast<cudaStream_t>(stream)>>>(
      p.ids, p.slots, p.num_experts, p.ep, p.capacity, p.route, p.counts, p.top_k, p.faults);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template void run_ep_pack<16>(const EpPackParams&, unsigned, void*);
template void run_ep_pack<2>(const EpPackParams&, unsigned, void*);
template void run_ep_unpack<16>(const EpUnpackParams&, unsigned, void*);
template void run_ep_unpack<2>(const EpUnpackParams&, unsigned, void*);
template void run_ep_combine<DType::kFp16>(const EpCombineParams&, unsigned, std::size_t, void*);
template void run_ep_combine<DType::kBf16>(const EpCombineParams&, unsigned, std::size_t, void*);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(ep_plan_kernel);
MOEKIT_REGISTER_KERNEL(ep_pack_kernel<uint4>);
MOEKIT_REGISTER_KERNEL(ep_pack_kernel<std::uint16_t>);
MOEKIT_REGISTER_KERNEL(ep_unpack_kernel<uint4>);
MOEKIT_REGISTER_KERNEL(ep_unpack_kernel<std::uint16_t>);
MOEKIT_REGISTER_KERNEL(ep_combine_kernel<__half>);
MOEKIT_REGISTER_KERNEL(ep_combine_kernel<__nv_bfloat16>);

}  // namespace moekit::cuda::ep
