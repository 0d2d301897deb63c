// The operand element type a GEMM kernel is instantiated for (host-safe: launchers pick the
// instantiation with it; wgmma.cuh maps it to the instruction tag).
#pragma once

namespace moekit::cuda {

// kBf16 / kF16: the bf16 scheme's activation dtype; kE4m3: every fp8 scheme.
enum class Operand : int { kBf16, kF16, kE4m3 };

}  // namespace moekit::cuda
