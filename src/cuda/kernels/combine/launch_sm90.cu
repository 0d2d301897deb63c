// Host side of the combine: checks the dtypes, chooses the vector width, sizes the grid and
// launches one of the explicit instantiations of inst/ (this file includes no kernel body).
#include "cuda/kernels/combine/launch_sm90.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/kernels/combine/config.hpp"
#include "cuda/kernels/combine/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

template <DType kOut, DType kY>
void launch_typed(const CombineParams& p, void* stream, bool pdl) {
  // One 16-byte y load per slot and thread when rows and pointers allow it.
  constexpr int kWide = kY == DType::kFp32 ? 4 : 8;  // 4 fp32 or 8 16-bit values
  constexpr std::size_t kOutBytes = 2;               // bf16 / fp16
  const bool wide = p.hidden_size % kWide == 0 && reinterpret_cast<std::uintptr_t>(p.out) % (kWide * kOutBytes) == 0 &&
                    reinterpret_cast<std::uintptr_t>(p.y) % 16 == 0;
  const int vec = wide ? kWide : 1;
  const std::int64_t total = p.num_tokens * (p.hidden_size / vec);
  const unsigned grid = static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min(combine::kMaxBlocks, (total + combine::kThreads - 1) / combine::kThreads)));
  if (wide)
    combine::run_combine_sm90<kOut, kY, kWide>(p, grid, stream, pdl);
  else
    combine::run_combine_sm90<kOut, kY, 1>(p, grid, stream, pdl);
}

}  // namespace

void launch_combine_sm90(const CombineParams& p, void* stream, bool pdl) {
  if (p.num_tokens <= 0 || p.hidden_size <= 0) return;
  // y is fp32 or the output's own dtype (run_moe's y_dtype).
  if (p.y_dtype != DType::kFp32 && p.y_dtype != p.out_dtype)
    throw Error(Status::kInternal, std::string("launch_combine_sm90: y dtype ") + dtype_name(p.y_dtype) +
                                       " with out dtype " + dtype_name(p.out_dtype));
  const bool y32 = p.y_dtype == DType::kFp32;
  switch (p.out_dtype) {
    case DType::kBf16:
      y32 ? launch_typed<DType::kBf16, DType::kFp32>(p, stream, pdl)
          : launch_typed<DType::kBf16, DType::kBf16>(p, stream, pdl);
      break;
    case DType::kFp16:
      y32 ? launch_typed<DType::kFp16, DType::kFp32>(p, stream, pdl)
          : launch_typed<DType::kFp16, DType::kFp16>(p, stream, pdl);
      break;
    default:
      throw Error(Status::kInternal, std::string("launch_combine_sm90: unsupported out dtype ") + dtype_name(p.out_dtype));
  }
}

}  // namespace moekit::cuda
