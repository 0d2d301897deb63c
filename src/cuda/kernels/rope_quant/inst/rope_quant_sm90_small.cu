// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantSmall: the latency-first kernel, one warp a row, compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_small_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_small_sm90<InvRopeQuantSmall>(const InvRopeQuantParams&, unsigned, void*);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_small_sm90_kernel<InvRopeQuantSmall>);

}  // namespace moekit::cuda
