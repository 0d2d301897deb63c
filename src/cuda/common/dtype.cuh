// The element type of a moekit::DType on the device: inst/ files instantiate the non-GEMM kernels
// by DType, so that a host launcher names no CUDA half-precision type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "moekit/tensor.hpp"  // DType

namespace moekit::cuda {

template <DType kT> struct ElementOf;
template <> struct ElementOf<DType::kBf16> { using type = __nv_bfloat16; };
template <> struct ElementOf<DType::kFp16> { using type = __half; };
template <> struct ElementOf<DType::kFp32> { using type = float; };
template <DType kT> using element_t = typename ElementOf<kT>::type;

}  // namespace moekit::cuda
