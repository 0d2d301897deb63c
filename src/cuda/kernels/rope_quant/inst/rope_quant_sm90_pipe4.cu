// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantPipe4: the pipelined kernel, 8 warps x 4 stages, compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_pipe_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_pipe_sm90<InvRopeQuantPipe4>(const InvRopeQuantParams&, int, void*);
template int inv_rope_quant_pipe_ctas_per_sm<InvRopeQuantPipe4>();

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_pipe_sm90_kernel<InvRopeQuantPipe4>);

}  // namespace moekit::cuda
