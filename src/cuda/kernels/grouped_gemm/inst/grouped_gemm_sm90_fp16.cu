// One instantiation of the sm_90 grouped GEMM kernel (operand fp16), compiled on its own so
// the instantiations build in parallel.
#include "cuda/common/preload.cuh"
#include "cuda/kernels/grouped_gemm/kernel_sm90.cuh"

namespace moekit::cuda::grouped_gemm_sm90 {

void run_sm90_fp16(const KernelArgs& args, unsigned grid_x, unsigned grid_y, void* stream, bool pdl) {
  launch_kernel<Operand::kFp16, false>(args, grid_x, grid_y, stream, pdl);
}

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(grouped_gemm_sm90_kernel<Operand::kFp16, false>);

}  // namespace moekit::cuda::grouped_gemm_sm90
