// Host side of the activation quantization: picks the kernel for the scheme and the vector width
// for the input's alignment, sizes the grid and launches one of the explicit instantiations of
// inst/ (this file includes no kernel body).
#include "cuda/kernels/quant/launch_sm90.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/kernels/quant/config.hpp"
#include "cuda/kernels/quant/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using quant::QuantKernel;

std::int64_t blocks_for(std::int64_t work_items, std::int64_t per_block, std::int64_t cap) {
  const std::int64_t b = (work_items + per_block - 1) / per_block;
  return std::max<std::int64_t>(1, std::min<std::int64_t>(b, cap));
}

// Dynamic per tensor: the scale comes from this launch's own absmax (not static, no complete word,
// no routing partials).
bool dynamic_per_tensor(const QuantParams& p) {
  return p.scheme == Scheme::kFp8PerTensor && p.static_scale == nullptr && !p.absmax_ready &&
         p.absmax_partials == nullptr;
}

// ... taken by the one-CTA kernel: small enough, or asked for (QuantParams::one_cta).
bool one_cta_quant(const QuantParams& p) {
  return dynamic_per_tensor(p) && (p.one_cta || p.rows * p.cols <= quant::kSmallTensorMaxElems);
}

template <DType kX, int kVec>
void launch_typed(const QuantParams& p, void* stream, bool pdl) {
  using quant::kThreads;
  using quant::kWarpsPerBlock;
  switch (p.scheme) {
    case Scheme::kFp8PerTensor: {
      // A complete absmax word (GEMM1's epilogue wrote it) or the routing launch's partials: pass
      // 2 alone, whatever the size; the one-CTA kernel would compute the same absmax again.
      const bool dynamic = dynamic_per_tensor(p);
      if (one_cta_quant(p)) {
        quant::run_quant_sm90<kX, kVec>(QuantKernel::kQuantTensorSmall, p, 1, stream, pdl);
        break;
      }
      const int grid = static_cast<int>(blocks_for(p.rows * p.cols / kVec, kThreads, quant::kMaxTensorBlocks));
      if (dynamic) {
        quant::run_quant_sm90<kX, kVec>(QuantKernel::kAbsmaxTensor, p, grid, stream, pdl);
      }
      quant::run_quant_sm90<kX, kVec>(QuantKernel::kQuantTensor, p, grid, stream, pdl);
      break;
    }
    case Scheme::kFp8PerChannel: {
      const std::int64_t grid = blocks_for(p.rows, kWarpsPerBlock, 0x7fffffffLL);
      quant::run_quant_sm90<kX, kVec>(QuantKernel::kQuantRow, p, static_cast<unsigned>(grid), stream, pdl);
      break;
    }
    case Scheme::kFp8Block128: {
      const std::int64_t groups = (p.cols + kBlockQuant - 1) / kBlockQuant;
      const std::int64_t grid = blocks_for(p.rows * groups, kWarpsPerBlock, 0x7fffffffLL);
      quant::run_quant_sm90<kX, kVec>(QuantKernel::kQuantGroup, p, static_cast<unsigned>(grid), stream, pdl);
      break;
    }
    case Scheme::kBf16:
      throw Error(Status::kInternal, "launch_quant_sm90 called for the bf16 scheme");
  }
}

template <DType kX>
void launch_dtype(const QuantParams& p, void* stream, bool pdl) {
  constexpr std::uintptr_t kBytes = kX == DType::kFp32 ? 4 : 2;
  const bool vec4 = p.cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.x) % (4 * kBytes) == 0 &&
                    reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0;
  if (vec4)
    launch_typed<kX, 4>(p, stream, pdl);
  else
    launch_typed<kX, 1>(p, stream, pdl);
}

}  // namespace

bool quant_needs_zeroed_absmax(const QuantParams& p) { return dynamic_per_tensor(p) && !one_cta_quant(p); }

void launch_quant_sm90(const QuantParams& p, void* stream, bool pdl) {
  if (p.rows <= 0 || p.cols <= 0) return;
  switch (p.x_dtype) {
    case DType::kBf16: launch_dtype<DType::kBf16>(p, stream, pdl); break;
    case DType::kFp16: launch_dtype<DType::kFp16>(p, stream, pdl); break;
    case DType::kFp32: launch_dtype<DType::kFp32>(p, stream, pdl); break;
    default:
      throw Error(Status::kInternal, std::string("launch_quant_sm90: unsupported input dtype ") + dtype_name(p.x_dtype));
  }
}

}  // namespace moekit::cuda
