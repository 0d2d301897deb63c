// The fused single-pass MoE kernel for operand fp16, compiled on its own so the instantiations
// build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/fused_moe/kernel_sm90.cuh"

namespace moekit::cuda::fused_moe {

template void run_fused_moe_sm90<Operand::kF16>(const FusedArgs&, int, void*, int);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(fused_moe_sm90_kernel<Operand::kF16>);

}  // namespace moekit::cuda::fused_moe
