// Warp-level tensor-core wrappers (mma.sync, ldmatrix) for the correct-first GEMM paths.
// Fragments are the PTX ISA layouts; e4m3 m16n8k32 fragments have the byte layout of
// bf16 m16n8k16, so one ldmatrix scheme loads both (a 16-byte smem row = 8 bf16 or 16 e4m3).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"
#include "cuda/common/ptx.cuh"

namespace moekit::cuda::sm90 {

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A * B + D, fp32 accumulators; A row-major 16x16, B "col" (n-major) 16x8.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                              std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// e4m3 x e4m3, k = 32 (sm_89+).
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The m16n8 instruction of an operand type: k = 16 for bf16 / f16, 32 for e4m3 (32 bytes of K
// either way, so one fragment layout serves all three).
template <Operand kOp>
__device__ __forceinline__ void mma_m16n8(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (kOp == Operand::kBf16) {
    mma_bf16_16816(d, a, b0, b1);
  } else if constexpr (kOp == Operand::kF16) {
    mma_f16_16816(d, a, b0, b1);
  } else {
    mma_e4m3_16832(d, a, b0, b1);
  }
}

}  // namespace moekit::cuda::sm90
