// The resolved form of an inv_rope_fp8_quant call that backends receive: sizes, raw pointers and
// element strides, checked once by src/core/rope_quant.cpp. No CUDA types here.
#pragma once

#include <cstdint>

namespace moekit::detail {

struct InvRopeQuantCall {
  std::int64_t num_tokens = 0;       // T
  std::int64_t num_heads = 0;        // H = num_groups * heads_per_group
  std::int64_t num_groups = 1;       // G
  std::int64_t heads_per_group = 1;  // hpg
  std::int64_t head_dim = 0;         // D, a multiple of 128
  std::int64_t rope_dim = 0;         // even, <= D; the rotated channels are [D - rope_dim, D)
  std::int64_t max_pos = 0;          // rows of cos_sin_cache
  std::int64_t scale_rows = 0;       // Tp = T rounded up to 4
  bool packed_ue8m0 = false;

  const std::uint16_t* o = nullptr;      // bf16 bits, o[t*o_stride_t + h*o_stride_h + c]
  std::int64_t o_stride_t = 0, o_stride_h = 0;
  const std::int64_t* positions = nullptr;  // positions[t*pos_stride]
  std::int64_t pos_stride = 1;
  const float* cos_sin = nullptr;        // cos_sin[p*cache_stride + i]
  std::int64_t cache_stride = 0;
  std::uint8_t* q = nullptr;             // q[g*q_stride_g + t*q_stride_t + hh*D + c]
  std::int64_t q_stride_g = 0, q_stride_t = 0;
  void* scale = nullptr;                 // fp32 or int32: scale[g*s_stride_g + b*s_stride_b + t]
  std::int64_t s_stride_g = 0, s_stride_b = 0;

  void* stream = nullptr;
  int device = 0;
  int num_threads = 0;
};

}  // namespace moekit::detail
