// One instantiation of the mma.sync grouped GEMM kernel (operand e4m3), compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/mma/kernel_sm90.cuh"

namespace moekit::cuda::mma_sm90 {

void run_sm90_e4m3(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl) {
  launch_kernel<Operand::kE4m3, false>(args, grid_x, grid_y, stream, pdl);
}

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(mma_sm90_kernel<Operand::kE4m3, false>);

}  // namespace moekit::cuda::mma_sm90
