// Launch constants of the activation quantization kernels (host-visible): the launcher sizes the
// grids with them, the kernels their loops and reductions.
#pragma once

#include <cstdint>

namespace moekit::cuda::quant {

inline constexpr int kThreads = 256;
inline constexpr int kWarpsPerBlock = kThreads / 32;
inline constexpr int kMaxTensorBlocks = 2048;  // grid-stride cap for the whole-tensor kernels
// Dynamic per-tensor quantization of at most this many elements runs in one CTA (one launch):
// 32 K elements are 32 per thread, ~1 us of one SM, less than the launch it saves.
inline constexpr int kSmallTensorThreads = 1024;
inline constexpr std::int64_t kSmallTensorMaxElems = 32 * 1024;

}  // namespace moekit::cuda::quant
