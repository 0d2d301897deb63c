// Launch constants of the combine kernel (host-visible): the launcher sizes the grid with them,
// the kernel its loops.
#pragma once

#include <cstdint>

namespace moekit::cuda::combine {

inline constexpr int kThreads = 256;
inline constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this
inline constexpr int kSlotBatch = 8;               // slots whose loads are in flight together (k <= 8 in every preset)

}  // namespace moekit::cuda::combine
