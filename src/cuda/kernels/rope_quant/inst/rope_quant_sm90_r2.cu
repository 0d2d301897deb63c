// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantR2: the register kernel, 2 rows a warp (the fallback), compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_sm90<InvRopeQuantR2>(const InvRopeQuantParams&, unsigned, void*);

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_sm90_kernel<InvRopeQuantR2>);

}  // namespace moekit::cuda
