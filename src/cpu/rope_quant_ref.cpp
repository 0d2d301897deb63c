// The reference of inv_rope_fp8_quant (include/moekit/rope_quant.hpp, docs/rope_quant.md): plain
// loops over (token, head) rows, the rotation in float64, the scale exponent found exactly (by
// comparing amax with 448 * 2^k), e4m3 through moekit's bit-exact host conversion.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/backend.hpp"
#include "moekit/error.hpp"
#include "moekit/quant.hpp"
#include "moekit/rope_quant.hpp"
#include "threads.hpp"

namespace moekit::cpu {
namespace {

// The smallest k with 448 * 2^k >= amax, i.e. ceil(log2(amax / 448)) in exact arithmetic
// (448 * 2^k and amax are both exact doubles, so the comparisons are exact).
int scale_exponent(float amax) {
  int k = std::ilogb(amax) - 10;  // 448 * 2^k < 2^(k+9) <= amax: a start below the answer
  while (std::ldexp(448.0, k) < static_cast<double>(amax)) ++k;
  return k;
}

// q = e4m3(y / 2^k): the quotient is exact in double; NaN -> 0x7f whatever its sign.
std::uint8_t quantize(float y, int k) {
  if (std::isnan(y)) return 0x7f;
  double v = static_cast<double>(y) / std::ldexp(1.0, k);
  if (v > 448.0) v = 448.0;    // only +Inf gets here (amax / scale <= 448 for finite values)
  if (v < -448.0) v = -448.0;
  return float_to_e4m3(static_cast<float>(v));  // |v| <= 448: the float cast rounds nothing e4m3 keeps
}

}  // namespace

void run_inv_rope_fp8_quant(const detail::InvRopeQuantCall& c) {
  const std::int64_t T = c.num_tokens, H = c.num_heads, D = c.head_dim, hpg = c.heads_per_group;
  const std::int64_t rope = c.rope_dim, nope = D - rope, half = rope / 2;
  const std::int64_t blocks = D / kRopeQuantBlock;  // per head
  // The positions are host memory here: check them all before writing anything.
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t p = c.positions[t * c.pos_stride];
    if (p < 0 || p >= c.max_pos)
      throw Error(Status::kInvalidArgument, "inv_rope_fp8_quant: positions[" + std::to_string(t) + "] is " +
                                                std::to_string(p) + ", outside the " + std::to_string(c.max_pos) +
                                                " rows of cos_sin_cache");
  }
  auto* scale_f = static_cast<float*>(c.scale);
  auto* scale_i = static_cast<std::int32_t*>(c.scale);

  parallel_for(T * H, c.num_threads, [&](std::int64_t row) {
    const std::int64_t t = row / H, h = row % H, g = h / hpg, hh = h % hpg;
    const std::uint16_t* x = c.o + t * c.o_stride_t + h * c.o_stride_h;
    const float* cs = c.cos_sin + c.positions[t * c.pos_stride] * c.cache_stride;
    std::vector<float> y(static_cast<std::size_t>(D));
    for (std::int64_t ch = 0; ch < nope; ++ch) y[ch] = bf16_to_float(x[ch]);
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t e = nope + 2 * i, o = e + 1;
      const double xe = bf16_to_float(x[e]), xo = bf16_to_float(x[o]);
      const double cv = cs[i], sv = cs[half + i];
      // Both products are exact in double (8 x 24 significant bits), so each y is the exact
      // value rounded to double, then to fp32 (the CUDA kernel does the same operations).
      y[e] = static_cast<float>(std::fma(xe, cv, xo * sv));
      y[o] = static_cast<float>(std::fma(xo, cv, -(xe * sv)));
    }
    std::uint8_t* q = c.q + g * c.q_stride_g + t * c.q_stride_t + hh * D;
    std::uint32_t packed = 0;
    for (std::int64_t j = 0; j < blocks; ++j) {
      float amax = 0.0f;
      for (std::int64_t ch = j * kRopeQuantBlock; ch < (j + 1) * kRopeQuantBlock; ++ch) {
        const float a = std::fabs(y[ch]);
        if (a > amax) amax = a;  // NaN never wins
      }
      if (amax < kRopeQuantMinAmax) amax = kRopeQuantMinAmax;
      if (amax > FLT_MAX) amax = FLT_MAX;  // +Inf: saturate (docs/rope_quant.md)
      const int k = scale_exponent(amax);
      for (std::int64_t ch = j * kRopeQuantBlock; ch < (j + 1) * kRopeQuantBlock; ++ch) q[ch] = quantize(y[ch], k);
      const std::int64_t b = hh * blocks + j;  // block index within the group's hpg*D channels
      if (c.packed_ue8m0) {
        packed |= static_cast<std::uint32_t>(k + 127) << (8 * (b % 4));
        if (b % 4 == 3) {
          scale_i[g * c.s_stride_g + (b / 4) * c.s_stride_b + t] = static_cast<std::int32_t>(packed);
          packed = 0;
        }
      } else {
        scale_f[g * c.s_stride_g + b * c.s_stride_b + t] = std::ldexp(1.0f, k);
      }
    }
  });
  // Padded token rows [T, Tp) of every (group, block): zero.
  const std::int64_t nb = hpg * blocks, cols = c.packed_ue8m0 ? nb / 4 : nb;
  for (std::int64_t g = 0; g < c.num_groups; ++g)
    for (std::int64_t b = 0; b < cols; ++b)
      for (std::int64_t t = T; t < c.scale_rows; ++t) {
        if (c.packed_ue8m0)
          scale_i[g * c.s_stride_g + b * c.s_stride_b + t] = 0;
        else
          scale_f[g * c.s_stride_g + b * c.s_stride_b + t] = 0.0f;
      }
}

}  // namespace moekit::cpu
