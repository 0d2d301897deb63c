// Activation quantization to e4m3 for the fp8 schemes (docs/design.md): per tensor (static or
// dynamic absmax), per row, or per 1x128 group of a row. Used for hidden [M, K] (bf16/fp16 in)
// and for the intermediate [P, N] (fp32 in). Plain parameters, no CUDA types.
#pragma once

#include <cstdint>

#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit::cuda {

struct QuantParams {
  Scheme scheme = Scheme::kFp8PerTensor;  // per tensor / per row (kFp8PerChannel) / 1x128 groups
  const void* x = nullptr;                // [rows, cols] row-major
  DType x_dtype = DType::kBf16;           // kBf16, kFp16 or kFp32
  std::int64_t rows = 0;                  // host bound on the rows (sizes the grid)
  const std::int32_t* rows_dev = nullptr; // rows actually present (device, <= rows), or null = rows
  std::int64_t cols = 0;
  // kFp8PerTensor: the static scale (device [1]), or null for dynamic absmax accumulated in
  // *absmax (float bits, zeroed earlier on the stream).
  const float* static_scale = nullptr;
  std::uint32_t* absmax = nullptr;
  std::uint8_t* q = nullptr;              // e4m3 [rows, cols]
  float* scale = nullptr;                 // [1] / [rows] / [rows, ceil(cols/128)]
};

/// Enqueue the quantization of params.x on `stream` (one launch; two for dynamic per tensor
/// above 32 K elements). With `pdl` every launch is the programmatic dependent of the kernel
/// before it on the stream (cuda/common/pdl.cuh).
void launch_quant_sm90(const QuantParams& params, void* stream, bool pdl = false);

}  // namespace moekit::cuda
