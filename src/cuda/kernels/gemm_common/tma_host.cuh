// Host steps shared by the TMA + wgmma GEMM families (swapab/, tokmajor/): whether the current
// device can run them, and the weights' TMA descriptor. Host code; nvcc-compiled launchers only.
#pragma once

#include <cuda.h>  // CUtensorMap (header only: the encode entry point comes from the runtime)
#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "cuda/common/tma.cuh"  // encode_tiled_fn
#include "cuda/kernels/gemm_common/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda::gemm_common {

// "" when the current device is an sm_90 GPU and the driver encodes TMA descriptors; otherwise
// why not. Never throws (a failed query is cleared).
inline std::string sm90_tma_unsupported_reason() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return "no usable CUDA device";
  }
  if (major != 9 || minor != 0) {
    std::ostringstream os;
    os << "needs an sm_90 GPU (wgmma, built for sm_90a), device " << dev << " is sm_" << major << minor;
    return os.str();
  }
  if (!sm90::encode_tiled_fn()) return "cuTensorMapEncodeTiled not available from the driver";
  return {};
}

// The weights B [E, rows_b, k_dim] of `p` as a 3D map (dims innermost first; strides in bytes of
// dims 1 and 2), box [128 bytes of K, box_rows rows, 1 expert], 128-byte swizzle, zeros outside
// the tensor. Throws Error(kCudaError) naming `who` when the driver refuses it.
inline void encode_weight_tmap(CUtensorMap* map, const GroupedGemmParams& p, std::int64_t rows_b, int box_rows,
                               const char* who) {
  const bool fp8 = p.scheme != Scheme::kBf16;
  const std::int64_t es = fp8 ? 1 : 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.k_dim), static_cast<cuuint64_t>(rows_b),
                              static_cast<cuuint64_t>(p.num_experts)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.k_dim * es), static_cast<cuuint64_t>(rows_b * p.k_dim * es)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / es), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType dtype = fp8                           ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                    : p.act_dtype == DType::kFp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult res = sm90::encode_tiled_fn()(map, dtype, 3, const_cast<void*>(p.b), dims, strides, box,
                                               elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    std::ostringstream os;
    os << who << ": cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(res) << ") for weights ["
       << p.num_experts << ", " << rows_b << ", " << p.k_dim << "]";
    throw Error(Status::kCudaError, os.str());
  }
}

}  // namespace moekit::cuda::gemm_common
