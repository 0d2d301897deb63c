// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantStream: the streaming kernel, compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_stream_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_stream_sm90<InvRopeQuantStream>(const InvRopeQuantParams&, int, void*);
template int inv_rope_quant_stream_ctas_per_sm<InvRopeQuantStream>();

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_stream_sm90_kernel<InvRopeQuantStream>);

}  // namespace moekit::cuda
