// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantPipe8: the pipelined kernel, 4 warps x 8 stages, compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_pipe_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_pipe_sm90<InvRopeQuantPipe8>(const InvRopeQuantParams&, int, void*);
template int inv_rope_quant_pipe_ctas_per_sm<InvRopeQuantPipe8>();

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_pipe_sm90_kernel<InvRopeQuantPipe8>);

}  // namespace moekit::cuda
