// Launch constants of the expert-parallel bookkeeping kernels (host-visible): the launcher sizes
// the grids with them, the kernels their bounds and reductions.
#pragma once

#include <cstdint>

namespace moekit::cuda::ep {

inline constexpr int kPlanThreads = 1024;  // 32 warps: one warp scans the 32 warp totals
inline constexpr int kRowThreads = 128;
inline constexpr int kCombineThreads = 256;
inline constexpr std::int64_t kMaxGrid = 1 << 20;  // grid-stride beyond this many blocks

}  // namespace moekit::cuda::ep
