// Parameters of the activation quantization to e4m3 for the fp8 schemes (docs/design.md): per
// tensor (static or dynamic absmax), per row, or per 1x128 group of a row. Used for hidden [M, K]
// (bf16/fp16 in) and for the intermediate [P, N] (fp32 in). Plain struct shared by host and
// device, and the launch entry of each instantiation (inst/*.cu).
#pragma once

#include <cstdint>

#include "moekit/problem.hpp"  // Scheme
#include "moekit/tensor.hpp"   // DType

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
  // Dynamic per tensor: *absmax is already the absmax of x's live rows (GEMM1's epilogue wrote it,
  // GroupedGemmParams::out_absmax), so the launch is pass 2 alone, scaled from the word. Last, so
  // that the fields before it keep their offsets in the kernels.
  bool absmax_ready = false;
  // Dynamic per tensor: the absmax is the max of absmax_partials[0 .. num_partials) (the routing
  // launch's absmax CTAs wrote them, RoutingParams::absmax_partials), so the launch is pass 2
  // alone, scaled from their max. Null: not given.
  const float* absmax_partials = nullptr;
  int num_partials = 0;
  // Dynamic per tensor: the one-CTA kernel whatever the size (one launch, no absmax word to zero),
  // for a caller whose programmatic dependent overlaps the launch (backend.cu's expert_mlp path,
  // MOEKIT_EXPERT_MLP_QUANT_ONE_CTA).
  bool one_cta = false;
};

namespace quant {

// The five kernels of the family (kernel_sm90.cuh), one of which a launch runs.
enum class QuantKernel {
  kAbsmaxTensor,       // per tensor, pass 1: absmax into *absmax (grid, kThreads)
  kQuantTensor,        // per tensor, pass 2, or the only pass (static scale / absmax_ready) (grid, kThreads)
  kQuantTensorSmall,   // per tensor, dynamic, small tensors: one CTA of kSmallTensorThreads
  kQuantRow,           // per row: a warp per row (grid, kThreads)
  kQuantGroup,         // 1x128 groups: a warp per (row, group) (grid, kThreads)
};

// Launches `kernel` for input dtype kX and kVec elements per load (4 or 1) on `stream`
// (cudaStream_t) with `grid` CTAs of the kernel's thread count (config.hpp) (inst/*.cu); with
// `pdl` as the programmatic dependent of the kernel before it on the stream (cuda/common/pdl.cuh).
template <DType kX, int kVec>
void run_quant_sm90(QuantKernel kernel, const QuantParams& p, unsigned grid, void* stream, bool pdl);

}  // namespace quant
}  // namespace moekit::cuda
