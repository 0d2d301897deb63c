// Instantiation of inv_rope_fp8_quant for config.hpp's InvRopeQuantBulk: the bulk-copy kernel (TMA 1D producer, consumer warps), compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_bulk_sm90.cuh"

namespace moekit::cuda {

template void run_inv_rope_quant_bulk_sm90<InvRopeQuantBulk>(const InvRopeQuantParams&, int, void*);
template int inv_rope_quant_bulk_ctas_per_sm<InvRopeQuantBulk>();

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(inv_rope_quant_bulk_sm90_kernel<InvRopeQuantBulk>);

}  // namespace moekit::cuda
