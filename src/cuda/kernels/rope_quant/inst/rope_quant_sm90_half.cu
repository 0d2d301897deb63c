// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantHalf: the half-warp kernel, 4 warps x 4 stages, compiled on
// its own so the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_half_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_half_sm90<InvRopeQuantHalf>(const InvRopeQuantParams&, int, void*);
template int inv_rope_quant_half_ctas_per_sm<InvRopeQuantHalf>();

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_half_sm90_kernel<InvRopeQuantHalf>);

}  // namespace moekit::cuda
