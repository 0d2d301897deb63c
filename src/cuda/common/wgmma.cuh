// wgmma (sm_90a) helpers shared by the Hopper GEMM kernels: shared-memory matrix descriptors of
// the 128-byte-swizzled K-major layout, fences, commit/wait, and the m64nNk16 (bf16, fp16) /
// m64nNk32 (e4m3) instructions with fp32 accumulators for every N the kernels use (8 .. 256).
#pragma once

#include <cstdint>

#include "cuda/common/operand.hpp"

namespace moekit::cuda::sm90 {

// Element tags: they select the wgmma instruction (32 bytes of K per instruction for all three).
struct Bf16Tag {};
struct F16Tag {};
struct E4m3Tag {};

// The tag of an Operand (kernels instantiated per Operand by host launchers).
template <Operand kOp> struct TagOf;
template <> struct TagOf<Operand::kBf16> { using type = Bf16Tag; };
template <> struct TagOf<Operand::kF16> { using type = F16Tag; };
template <> struct TagOf<Operand::kE4m3> { using type = E4m3Tag; };

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma issue
// or wait (it cannot see that wgmma writes them asynchronously).
// Fences the first N registers of r (N = the array size for a full tile; Swap-AB's narrow
// items use the first W/2 of a 32-register array).
template <int N, int kSize>
__device__ __forceinline__ void fence_regs(float (&r)[kSize]) {
  static_assert(N <= kSize, "fence_regs: more registers than the array holds");
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Descriptor of a K-major operand tile in the 128-byte swizzle layout (what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B): row r of the tile occupies bytes [128 r, 128 r + 128); its 16-byte
// chunk c sits at chunk position c ^ (r % 8); 8 rows form a 1024-byte atom; the base is
// 1024-aligned. Fields (PTX ISA "matrix descriptor"): start address >> 4 (bits 0-13); leading
// byte offset >> 4 = 1 (unused when the instruction's 32 bytes of K fit in the swizzle width,
// bits 16-29); stride byte offset 1024 >> 4 between 8-row groups (bits 32-45); base offset 0;
// swizzle mode 1 = 128 bytes (bits 62-63). The k-th 32-byte K step inside the 128-byte row is
// addressed by adding 2k (32 bytes >> 4) to the descriptor: the hardware applies the XOR to
// the final address bits.
__device__ __forceinline__ std::uint64_t make_smem_desc_sw128(std::uint32_t smem_addr) {
  std::uint64_t desc = 0;
  desc |= static_cast<std::uint64_t>((smem_addr & 0x3FFFF) >> 4);
  desc |= static_cast<std::uint64_t>(1) << 16;
  desc |= static_cast<std::uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<std::uint64_t>(1) << 62;
  return desc;
}

// Descriptor of a K-major operand tile without swizzle (the "interleave" layout): a core matrix is
// 8 rows x 16 bytes stored as 128 contiguous bytes (row r at byte 16 r); `lbo` is the byte
// distance between core matrices adjacent in K, `sbo` between core matrices adjacent in M / N
// (PTX ISA "matrix descriptor"); swizzle mode 0. The start address is 16-byte aligned.
__device__ __forceinline__ std::uint64_t make_smem_desc_interleave(std::uint32_t smem_addr, std::uint32_t lbo,
                                                                   std::uint32_t sbo) {
  std::uint64_t desc = 0;
  desc |= static_cast<std::uint64_t>((smem_addr & 0x3FFFF) >> 4);
  desc |= static_cast<std::uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  desc |= static_cast<std::uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  return desc;
}

// wgmma.mma_async m64n16k32 e4m3 x e4m3 -> f32 with A from registers and B K-major in shared
// memory. A's fragment (warp w of the warpgroup holds rows 16 w .. 16 w + 15, lane l: g = l / 4,
// c = l % 4): a[0] = row g, k 4c .. 4c + 3; a[1] = row g + 8, the same k; a[2], a[3] the same rows
// at k + 16 (mma.m16n8k32's A layout). Accumulators as Wgmma<.., 16> below. The caller keeps a's
// registers live (and unchanged) until a wgmma_wait covers the instruction: the compiler sees the
// asm read them at issue only.
__device__ __forceinline__ void wgmma_rs_m64n16k32_e4m3(float (&d)[8], const std::uint32_t (&a)[4], std::uint64_t db,
                                                        int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// wgmma.mma_async m64nNk16 (bf16/f16) or m64nNk32 (e4m3), A and B K-major from shared memory,
// fp32 accumulators d[0 .. N/2). scale_d = 0 overwrites d, 1 accumulates.
// Accumulator layout (warp w of the warpgroup, lane l): d[4j + 2h + c] = D[16w + l/4 + 8h]
// [8j + 2(l%4) + c], j in [0, N/8), h, c in {0, 1}.
// Signatures: N = 8, 16, 32, 64 take a 32-register array and use its first N/2 registers (Swap-AB
// sizes one accumulator for its widest item and picks N per item: the allocation stays 32);
// N = 128, 256 take exactly N/2 registers.
template <class Tag, int N>
struct Wgmma;

// The instruction's accumulator operand list "{%0, ..., %R-1}" and its "+f" constraints, per
// register count R = N/2 (generated; the operands after them are %R = desc A, %R+1 = desc B,
// %R+2 = scale_d). The constraints four at a time (MOEKIT_WGMMA_D4(i): d[i] .. d[i + 3]), each
// list the one of half the size and the rest.
#define MOEKIT_WGMMA_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define MOEKIT_WGMMA_D_LIST_4 "{%0, %1, %2, %3}"
#define MOEKIT_WGMMA_D_OUT_4 MOEKIT_WGMMA_D4(0)
#define MOEKIT_WGMMA_D_LIST_8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define MOEKIT_WGMMA_D_OUT_8 MOEKIT_WGMMA_D_OUT_4, MOEKIT_WGMMA_D4(4)
#define MOEKIT_WGMMA_D_LIST_16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MOEKIT_WGMMA_D_OUT_16 MOEKIT_WGMMA_D_OUT_8, MOEKIT_WGMMA_D4(8), MOEKIT_WGMMA_D4(12)
#define MOEKIT_WGMMA_D_LIST_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MOEKIT_WGMMA_D_OUT_32 MOEKIT_WGMMA_D_OUT_16, MOEKIT_WGMMA_D4(16), MOEKIT_WGMMA_D4(20), MOEKIT_WGMMA_D4(24), \
    MOEKIT_WGMMA_D4(28)
#define MOEKIT_WGMMA_D_LIST_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MOEKIT_WGMMA_D_OUT_64 MOEKIT_WGMMA_D_OUT_32, MOEKIT_WGMMA_D4(32), MOEKIT_WGMMA_D4(36), MOEKIT_WGMMA_D4(40), \
    MOEKIT_WGMMA_D4(44), MOEKIT_WGMMA_D4(48), MOEKIT_WGMMA_D4(52), MOEKIT_WGMMA_D4(56), MOEKIT_WGMMA_D4(60)
#define MOEKIT_WGMMA_D_LIST_128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define MOEKIT_WGMMA_D_OUT_128 MOEKIT_WGMMA_D_OUT_64, MOEKIT_WGMMA_D4(64), MOEKIT_WGMMA_D4(68), MOEKIT_WGMMA_D4(72), \
    MOEKIT_WGMMA_D4(76), MOEKIT_WGMMA_D4(80), MOEKIT_WGMMA_D4(84), MOEKIT_WGMMA_D4(88), MOEKIT_WGMMA_D4(92),     \
    MOEKIT_WGMMA_D4(96), MOEKIT_WGMMA_D4(100), MOEKIT_WGMMA_D4(104), MOEKIT_WGMMA_D4(108), MOEKIT_WGMMA_D4(112),  \
    MOEKIT_WGMMA_D4(116), MOEKIT_WGMMA_D4(120), MOEKIT_WGMMA_D4(124)

// One specialization: TAG, N, R = N/2 accumulators in a float[ARR] array, the PTX k / type, the
// trailing immediates (bf16/f16 carry the two transpose flags, e4m3 has none), and the operand
// index of scale_d / desc A / desc B.
#define MOEKIT_WGMMA_SPEC(TAG, N, R, ARR, K, TYPE, TAIL, IS, IA, IB)                                     \
  template <>                                                                                            \
  struct Wgmma<TAG, N> {                                                                                 \
    static __device__ __forceinline__ void mma(float (&d)[ARR], std::uint64_t da, std::uint64_t db,     \
                                               int scale_d) {                                            \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS ", 0;\n"                                    \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k" #K ".f32." TYPE "." TYPE " "                \
                   MOEKIT_WGMMA_D_LIST_##R ", %" #IA ", %" #IB ", p, 1, 1" TAIL ";\n}\n"                  \
                   : MOEKIT_WGMMA_D_OUT_##R                                                              \
                   : "l"(da), "l"(db), "r"(scale_d));                                                    \
    }                                                                                                    \
  };

// Every N for one element type.
#define MOEKIT_WGMMA_ALL_N(TAG, K, TYPE, TAIL)                       \
  MOEKIT_WGMMA_SPEC(TAG, 8, 4, 32, K, TYPE, TAIL, 6, 4, 5)           \
  MOEKIT_WGMMA_SPEC(TAG, 16, 8, 32, K, TYPE, TAIL, 10, 8, 9)         \
  MOEKIT_WGMMA_SPEC(TAG, 32, 16, 32, K, TYPE, TAIL, 18, 16, 17)      \
  MOEKIT_WGMMA_SPEC(TAG, 64, 32, 32, K, TYPE, TAIL, 34, 32, 33)      \
  MOEKIT_WGMMA_SPEC(TAG, 128, 64, 64, K, TYPE, TAIL, 66, 64, 65)     \
  MOEKIT_WGMMA_SPEC(TAG, 256, 128, 128, K, TYPE, TAIL, 130, 128, 129)

MOEKIT_WGMMA_ALL_N(Bf16Tag, 16, "bf16", ", 0, 0")
MOEKIT_WGMMA_ALL_N(F16Tag, 16, "f16", ", 0, 0")
MOEKIT_WGMMA_ALL_N(E4m3Tag, 32, "e4m3", "")

// Two m64n128k32 e4m3 instructions on the halves of one 128-register array, one asm statement:
// d[0, 64) += A0 B0 and d[64, 128) += A1 B1 (each half in Wgmma<.., 128>'s layout). A reference to
// half of the array as a float[64] (reinterpret_cast) made ptxas serialize every wgmma of the
// kernel (C7520); operands named by index do not. The expert-MLP kernel's w2 row pairs (e4m3 only)
// use it.
#define MOEKIT_WGMMA_D_LIST_HI64 "{%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
struct WgmmaHalvesE4m3 {
  static __device__ __forceinline__ void mma(float (&d)[128], std::uint64_t da0, std::uint64_t db0, std::uint64_t da1,
                                             std::uint64_t db1, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " MOEKIT_WGMMA_D_LIST_64 ", %128, %129, p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " MOEKIT_WGMMA_D_LIST_HI64 ", %130, %131, p, 1, 1;\n}\n"
                 : MOEKIT_WGMMA_D_OUT_128
                 : "l"(da0), "l"(db0), "l"(da1), "l"(db1), "r"(scale_d));
  }
};
#undef MOEKIT_WGMMA_D_LIST_HI64

#undef MOEKIT_WGMMA_ALL_N
#undef MOEKIT_WGMMA_SPEC
#undef MOEKIT_WGMMA_D_LIST_4
#undef MOEKIT_WGMMA_D_OUT_4
#undef MOEKIT_WGMMA_D_LIST_8
#undef MOEKIT_WGMMA_D_OUT_8
#undef MOEKIT_WGMMA_D_LIST_16
#undef MOEKIT_WGMMA_D_OUT_16
#undef MOEKIT_WGMMA_D_LIST_32
#undef MOEKIT_WGMMA_D_OUT_32
#undef MOEKIT_WGMMA_D_LIST_64
#undef MOEKIT_WGMMA_D_OUT_64
#undef MOEKIT_WGMMA_D_LIST_128
#undef MOEKIT_WGMMA_D_OUT_128
#undef MOEKIT_WGMMA_D4

}  // namespace moekit::cuda::sm90
