// inv_rope_fp8_quant: DeepSeek-V4's attention-output epilogue (inverse RoPE on the last rope_dim
// channels of each head, then FP8 e4m3 quantization with power-of-two scales per 128 channels),
// the layouts a block-scaled grouped output projection reads. docs/rope_quant.md has the math.
#pragma once

#include "moekit/ops.hpp"
#include "moekit/tensor.hpp"

namespace moekit {

/// Channels per quantization block (one scale per 128 channels of a head row).
inline constexpr std::int64_t kRopeQuantBlock = 128;
/// amax floor of a block: a block of zeros gets scale 2^ceil(log2(1e-10 / 448)) = 2^-42.
inline constexpr float kRopeQuantMinAmax = 1e-10f;

/// One call of inv_rope_fp8_quant. With H = num_groups * heads_per_group heads of D channels
/// (D a multiple of 128), rope_dim = cos_sin_cache.shape[1] (even, <= D), nope_dim = D - rope_dim,
/// nb = heads_per_group * D / 128 scale blocks per (token, group) and Tp = T rounded up to 4:
///
///   y[t,h,c]   = o[t,h,c]                                   for c < nope_dim
///   y[t,h,e]   = o[t,h,e]*cos[i] + o[t,h,e+1]*sin[i]        e = nope_dim + 2i   (inverse GPT-J
///   y[t,h,e+1] = o[t,h,e+1]*cos[i] - o[t,h,e]*sin[i]        interleaved rotation)
///   with cos = cos_sin_cache[positions[t], 0:rope_dim/2], sin = the second half; each y is the
///   float64 result of that formula rounded once to fp32.
///   block b of head row (t, h): amax = max(max |y| over its 128 channels (NaN ignored), 1e-10),
///   clamped at FLT_MAX; scale = 2^ceil(log2(amax / 448)) (exactly); q = e4m3_rne(y / scale).
///
/// NaN in y -> the e4m3 NaN byte 0x7f (the block's scale ignores it). +-Inf in y -> amax is
/// FLT_MAX, the scale 2^120, the Inf byte +-448 (0x7e / 0xfe), the block's finite values
/// quantize against 2^120 (to 0 in practice). In the rotated channels an Inf reaches both
/// channels of its pair (Inf*0 = NaN when a cos or sin is 0).
struct InvRopeFp8QuantArgs {
  TensorView o;              ///< [T, H, D] bf16; any token / head strides, channel stride 1
  TensorView positions;      ///< [T] int64 (any stride), each in [0, max_pos)
  TensorView cos_sin_cache;  ///< [max_pos, rope_dim] fp32 (any row stride, column stride 1)
  std::int64_t num_groups = 1;  ///< G; H must be a multiple of G (heads_per_group = H / G)
  /// out: [G, T, heads_per_group * D] e4m3 (group-major: each group's [T, hpg*D] block is what
  /// its GEMM reads); token / group strides free, channel stride 1.
  TensorView o_fp8;
  /// out, the scales, token-fastest (MN-major) with T padded to Tp; padded tokens get 0:
  ///   packed_ue8m0 = false: fp32 [G, nb, Tp], the scale of block b of (t, g) at [g, b, t];
  ///   packed_ue8m0 = true:  int32 [G, nb/4, Tp], four UE8M0 exponents (biased by 127) of
  ///                         blocks 4w..4w+3 in bytes 0..3 (little-endian) of [g, w, t].
  /// Token stride 1; the other two strides free.
  TensorView o_scale;
  bool packed_ue8m0 = false;
};

/// Run inv_rope_fp8_quant on the tensors' backend (options.backend / stream / num_threads;
/// no workspace). CUDA: one launch, no allocation, no host synchronization, graph-capturable;
/// T, positions, head counts and every stride are run-time values. A position outside the cache,
/// which only the GPU sees, makes that token's output bytes NaN (0x7f) and its scales NaN (fp32)
/// or 0xff (UE8M0's NaN); the CPU backend throws kInvalidArgument instead.
void inv_rope_fp8_quant(const InvRopeFp8QuantArgs& args, const Options& options = {});

/// Tp of the scale layout: T rounded up to a multiple of 4 (what a TMA-fed GEMM reads).
inline std::int64_t inv_rope_scale_rows(std::int64_t num_tokens) { return (num_tokens + 3) / 4 * 4; }

}  // namespace moekit
