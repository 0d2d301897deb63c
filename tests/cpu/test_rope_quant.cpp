// inv_rope_fp8_quant on the CPU reference: hand-computed rows, the scale rules (zero blocks,
// the fp32 rounding case of docs/rope_quant.md), NaN / Inf, the group-major and MN-major layouts,
// strides, and the argument checks.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "moekit/moekit.hpp"

namespace {

using moekit::DType;
using moekit::TensorView;

constexpr std::int64_t kD = 512;

// A host problem: o [T, H, 512] bf16 (optionally with padded strides), positions, cache, outputs.
struct Case {
  std::int64_t T = 1, H = 1, G = 1, rope = 64, max_pos = 2;
  std::int64_t t_stride = 0, h_stride = 0;  // 0 = contiguous
  bool packed = false;
  std::vector<std::uint16_t> o;
  std::vector<std::int64_t> pos;
  std::vector<float> cache;
  std::vector<std::uint8_t> q;
  std::vector<float> scale;
  std::vector<std::int32_t> scale_i;

  Case(std::int64_t T_, std::int64_t H_, std::int64_t G_, std::int64_t rope_ = 64, std::int64_t max_pos_ = 2,
       std::int64_t t_stride_ = 0, std::int64_t h_stride_ = 0)
      : T(T_), H(H_), G(G_), rope(rope_), max_pos(max_pos_), t_stride(t_stride_), h_stride(h_stride_) {
    if (h_stride == 0) h_stride = kD;
    if (t_stride == 0) t_stride = H * h_stride;
    o.assign(static_cast<std::size_t>(std::max<std::int64_t>(T * t_stride, 1)), 0);
    pos.assign(static_cast<std::size_t>(T), 0);
    cache.assign(static_cast<std::size_t>(max_pos * rope), 0.0f);
    q.assign(static_cast<std::size_t>(G * T * (H / G) * kD), 0xAA);  // poison: every byte must be written
    scale.assign(static_cast<std::size_t>(G * nb() * Tp()), std::numeric_limits<float>::quiet_NaN());
    scale_i.assign(static_cast<std::size_t>(G * (nb() / 4) * Tp()), 0x5a5a5a5a);
  }
  std::int64_t hpg() const { return H / G; }
  std::int64_t nb() const { return hpg() * kD / 128; }
  std::int64_t Tp() const { return (T + 3) / 4 * 4; }
  std::uint16_t& at(std::int64_t t, std::int64_t h, std::int64_t c) { return o[t * t_stride + h * h_stride + c]; }
  void set(std::int64_t t, std::int64_t h, std::int64_t c, float v) { at(t, h, c) = moekit::float_to_bf16(v); }
  float& cos_(std::int64_t p, std::int64_t i) { return cache[p * rope + i]; }
  float& sin_(std::int64_t p, std::int64_t i) { return cache[p * rope + rope / 2 + i]; }
  std::uint8_t qat(std::int64_t t, std::int64_t h, std::int64_t c) const {
    const std::int64_t g = h / hpg(), hh = h % hpg();
    return q[(g * T + t) * hpg() * kD + hh * kD + c];
  }
  float sat(std::int64_t t, std::int64_t g, std::int64_t b) const { return scale[(g * nb() + b) * Tp() + t]; }
  std::uint32_t wat(std::int64_t t, std::int64_t g, std::int64_t w) const {
    return static_cast<std::uint32_t>(scale_i[(g * (nb() / 4) + w) * Tp() + t]);
  }

  moekit::InvRopeFp8QuantArgs args() {
    moekit::InvRopeFp8QuantArgs a;
    a.o = TensorView::contiguous(o.data(), DType::kBf16, {T, H, kD});
    a.o.strides[0] = t_stride;
    a.o.strides[1] = h_stride;
    a.positions = TensorView::contiguous(pos.data(), DType::kInt64, {T});
    a.cos_sin_cache = TensorView::contiguous(cache.data(), DType::kFp32, {max_pos, rope});
    a.num_groups = G;
    a.o_fp8 = TensorView::contiguous(q.data(), DType::kFp8E4m3, {G, T, hpg() * kD});
    a.packed_ue8m0 = packed;
    a.o_scale = packed ? TensorView::contiguous(scale_i.data(), DType::kInt32, {G, nb() / 4, Tp()})
                       : TensorView::contiguous(scale.data(), DType::kFp32, {G, nb(), Tp()});
    return a;
  }
  void run() {
    moekit::Options opt;
    opt.backend = moekit::Backend::kCpu;
    moekit::inv_rope_fp8_quant(args(), opt);
  }
};

// The row of the worked example in docs/rope_quant.md.
void fill_worked_example(Case& c) {
  // Row 0 of the cache is garbage: the position (1) must pick row 1.
  for (std::int64_t i = 0; i < c.rope; ++i) c.cache[i] = 9.0f;
  c.pos[0] = 1;
  c.cos_(1, 0) = 0.5f;
  c.sin_(1, 0) = 0.25f;
  c.cos_(1, 31) = 0.0f;
  c.sin_(1, 31) = 1.0f;
  c.set(0, 0, 0, 1.0f);     // block 0: amax 3 -> scale 2^ceil(log2(3/448)) = 2^-7
  c.set(0, 0, 1, -3.0f);
  c.set(0, 0, 300, 448.0f); // block 2: amax 448 -> scale 1
  c.set(0, 0, 384, 0.5f);   // block 3 (rotated channels 448..511): amax 1.25 -> 2^-8
  c.set(0, 0, 448, 2.0f);   // pair 0: y = 2*0.5 + 1*0.25 = 1.25, 1*0.5 - 2*0.25 = 0
  c.set(0, 0, 449, 1.0f);
  c.set(0, 0, 510, 1.0f);   // pair 31: cos 0, sin 1: y = 0, -1
}

TEST(CpuRopeQuant, WorkedExampleByHand) {
  Case c(1, 1, 1);
  fill_worked_example(c);
  c.run();
  // e4m3: 128 = 2^7 -> 0x70; -384 = -1.5*2^8 -> 0xfc; 448 -> 0x7e; 320 = 1.25*2^8 -> 0x7a;
  // -256 -> 0xf8; zeros -> 0x00.
  EXPECT_EQ(c.qat(0, 0, 0), 0x70);
  EXPECT_EQ(c.qat(0, 0, 1), 0xfc);
  EXPECT_EQ(c.qat(0, 0, 300), 0x7e);
  EXPECT_EQ(c.qat(0, 0, 384), 0x70);
  EXPECT_EQ(c.qat(0, 0, 448), 0x7a);
  EXPECT_EQ(c.qat(0, 0, 449), 0x00);
  EXPECT_EQ(c.qat(0, 0, 510), 0x00);
  EXPECT_EQ(c.qat(0, 0, 511), 0xf8);
  int nonzero = 0;
  for (std::int64_t ch = 0; ch < kD; ++ch) nonzero += c.qat(0, 0, ch) != 0;
  EXPECT_EQ(nonzero, 6);
  EXPECT_EQ(c.sat(0, 0, 0), std::ldexp(1.0f, -7));
  EXPECT_EQ(c.sat(0, 0, 1), std::ldexp(1.0f, -42));  // a zero block
  EXPECT_EQ(c.sat(0, 0, 2), 1.0f);
  EXPECT_EQ(c.sat(0, 0, 3), std::ldexp(1.0f, -8));
  for (std::int64_t t = 1; t < 4; ++t)  // padded token rows
    for (std::int64_t b = 0; b < 4; ++b) EXPECT_EQ(c.sat(t, 0, b), 0.0f) << t << " " << b;
}

TEST(CpuRopeQuant, PackedUe8m0IsTheExponentBytes) {
  Case c(1, 1, 1);
  c.packed = true;
  fill_worked_example(c);
  c.run();
  const std::uint32_t want = (127u - 7u) | ((127u - 42u) << 8) | (127u << 16) | ((127u - 8u) << 24);
  EXPECT_EQ(c.wat(0, 0, 0), want);
  for (std::int64_t t = 1; t < 4; ++t) EXPECT_EQ(c.wat(t, 0, 0), 0u);
  EXPECT_EQ(c.qat(0, 0, 448), 0x7a);
}

// amax floors at 1e-10: 1e-10 / 448 = 2.23e-13 lies in (2^-43, 2^-42], so the scale is 2^-42.
TEST(CpuRopeQuant, ZeroBlockScaleIsTwoToMinus42) {
  const double s = 1e-10 / 448.0;
  EXPECT_GT(s, std::ldexp(1.0, -43));
  EXPECT_LE(s, std::ldexp(1.0, -42));
  Case c(5, 2, 1);
  c.run();
  for (std::int64_t t = 0; t < 5; ++t)
    for (std::int64_t b = 0; b < c.nb(); ++b) EXPECT_EQ(c.sat(t, 0, b), std::ldexp(1.0f, -42));
  for (std::int64_t t = 5; t < 8; ++t)
    for (std::int64_t b = 0; b < c.nb(); ++b) EXPECT_EQ(c.sat(t, 0, b), 0.0f);
  for (std::uint8_t b : c.q) EXPECT_EQ(b, 0);
}

// The kernel's scale: biased exponent of fp32 amax * fl(1/448), rounded up to a power of two.
int fp32_formula_exponent(float amax) {
  std::uint32_t bits;
  const float s = amax * (1.0f / 448.0f);
  std::memcpy(&bits, &s, 4);
  return static_cast<int>((bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0)) - 127;
}
int exact_exponent(float amax) {  // smallest k with 448 * 2^k >= amax
  int k = std::ilogb(amax) - 10;  // below the answer: 448 * 2^k < 2^(k+9) <= amax
  while (std::ldexp(448.0, k) < static_cast<double>(amax)) ++k;
  return k;
}

// docs/rope_quant.md "rounding": fl(1/448) = (1/448)(1 + 0.375 * 2^-23), and the fp32 neighbours
// of 448 * 2^k are 2^-23 / 1.75 apart relatively, so amax * fl(1/448) never lands on the other
// side of a power of two: the fp32 formula and exact math agree for every normal amax. Checked
// here around every boundary the clamped amax can reach, and on random values.
TEST(CpuRopeQuant, Fp32ReciprocalScaleMatchesExactMath) {
  const double rel = (static_cast<double>(1.0f / 448.0f) - 1.0 / 448.0) * 448.0 / std::ldexp(1.0, -23);
  EXPECT_NEAR(rel, 0.375, 1e-6);
  for (int k = -43; k <= 120; ++k) {
    float a = static_cast<float>(std::ldexp(448.0, k));
    for (int i = 0; i < 2000; ++i) a = std::nextafter(a, 0.0f);
    for (int i = 0; i < 4000; ++i, a = std::nextafter(a, FLT_MAX))
      ASSERT_EQ(fp32_formula_exponent(a), exact_exponent(a)) << "amax " << a;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits(0x2edbe6ffu /* 1e-10f */, 0x7f7fffffu);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = bits(rng);
    float a;
    std::memcpy(&a, &u, 4);
    ASSERT_EQ(fp32_formula_exponent(a), exact_exponent(a)) << "amax " << a;
  }
}

// The one place where fp32 and real-number math pick different exponents: y itself is rounded
// to fp32. Here the exact rotated value is 448 + 2^-30, just above 448, but it rounds to 448
// (fp32 ulp there: 2^-15), so the scale is 2^0, where real arithmetic would give 2^1. moekit
// defines the scale from the fp32 y (the kernel does the same), so the byte is exactly 448.
TEST(CpuRopeQuant, Fp32RoundingOfYDecidesTheExponent) {
  Case c(1, 1, 1);
  c.pos[0] = 0;
  c.cos_(0, 0) = 1.0f;
  c.sin_(0, 0) = std::ldexp(1.0f, -10);
  c.set(0, 0, 448, 448.0f);
  c.set(0, 0, 449, std::ldexp(1.0f, -20));  // y[448] = 448 + 2^-20 * 2^-10 exactly
  c.run();
  EXPECT_EQ(c.sat(0, 0, 3), 1.0f);
  EXPECT_EQ(c.qat(0, 0, 448), 0x7e);
  // y[449] = 2^-20 - 448 * 2^-10 = -0.4375 + 2^-20 -> -0.4375 in e4m3 (0xae: -1.75 * 2^-2).
  EXPECT_EQ(c.qat(0, 0, 449), 0xae);
}

TEST(CpuRopeQuant, NanAndInf) {
  Case c(1, 1, 1);
  c.cos_(0, 0) = 0.5f;
  c.sin_(0, 0) = 0.25f;
  c.cos_(0, 1) = 1.0f;
  c.sin_(0, 1) = 0.0f;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  c.set(0, 0, 5, nan);       // block 0: NaN ignored by amax; its byte is 0x7f
  c.set(0, 0, 6, -nan);      // a negative NaN too
  c.set(0, 0, 7, 2.0f);      // amax 2 -> 2^-7 (2/448 in (2^-8, 2^-7])
  c.set(0, 0, 130, inf);     // block 1: amax -> FLT_MAX, scale 2^120; Inf -> 448
  c.set(0, 0, 131, -inf);
  c.set(0, 0, 132, 1.0f);    //   a finite value against 2^120 -> 0
  c.set(0, 0, 133, -1.0f);   //   -> -0
  c.set(0, 0, 448, inf);     // block 3, pair 0: y = (Inf*0.5 + 1*0.25, 1*0.5 - Inf*0.25) = (Inf, -Inf)
  c.set(0, 0, 449, 1.0f);
  c.set(0, 0, 450, inf);     // pair 1 with sin 0: y = (Inf + 0, 0 - Inf*0) = (Inf, NaN)
  c.run();
  EXPECT_EQ(c.qat(0, 0, 5), 0x7f);
  EXPECT_EQ(c.qat(0, 0, 6), 0x7f);
  EXPECT_EQ(c.qat(0, 0, 7), 0x78);  // 2 / 2^-7 = 256 = 2^8
  EXPECT_EQ(c.sat(0, 0, 0), std::ldexp(1.0f, -7));
  EXPECT_EQ(c.sat(0, 0, 1), std::ldexp(1.0f, 120));
  EXPECT_EQ(c.qat(0, 0, 130), 0x7e);
  EXPECT_EQ(c.qat(0, 0, 131), 0xfe);
  EXPECT_EQ(c.qat(0, 0, 132), 0x00);
  EXPECT_EQ(c.qat(0, 0, 133), 0x80);
  EXPECT_EQ(c.sat(0, 0, 3), std::ldexp(1.0f, 120));
  EXPECT_EQ(c.qat(0, 0, 448), 0x7e);
  EXPECT_EQ(c.qat(0, 0, 449), 0xfe);
  EXPECT_EQ(c.qat(0, 0, 450), 0x7e);
  EXPECT_EQ(c.qat(0, 0, 451), 0x7f);
  EXPECT_EQ(c.sat(0, 0, 2), std::ldexp(1.0f, -42));  // other blocks untouched
}

// Fills o and the cache with reproducible values of a realistic range.
void fill_random(Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (std::int64_t t = 0; t < c.T; ++t)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t ch = 0; ch < kD; ++ch) c.set(t, h, ch, n(rng) * (1.0f + static_cast<float>(ch % 7)));
  for (std::int64_t p = 0; p < c.max_pos; ++p)
    for (std::int64_t i = 0; i < c.rope / 2; ++i) {
      const double th = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope));
      c.cos_(p, i) = static_cast<float>(std::cos(th));
      c.sin_(p, i) = static_cast<float>(std::sin(th));
    }
  std::uniform_int_distribution<std::int64_t> pick(0, c.max_pos - 1);
  for (std::int64_t t = 0; t < c.T; ++t) c.pos[t] = pick(rng);
}

// Groups are group-major: o_fp8[g, t, hh*512 + c] and scale[g, hh*4 + j, t] hold head g*hpg + hh,
// the same bytes a one-head call on that head gives.
TEST(CpuRopeQuant, GroupMajorLayoutMatchesPerHeadCalls) {
  Case c(3, 4, 2, 64, 16);
  fill_random(c, 1);
  c.run();
  for (std::int64_t h = 0; h < 4; ++h) {
    Case one(3, 1, 1, 64, 16);
    one.cache = c.cache;
    one.pos = c.pos;
    for (std::int64_t t = 0; t < 3; ++t)
      for (std::int64_t ch = 0; ch < kD; ++ch) one.at(t, 0, ch) = c.at(t, h, ch);
    one.run();
    for (std::int64_t t = 0; t < 3; ++t) {
      for (std::int64_t ch = 0; ch < kD; ++ch) ASSERT_EQ(c.qat(t, h, ch), one.qat(t, 0, ch)) << h << " " << t << " " << ch;
      for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(c.sat(t, h / 2, (h % 2) * 4 + j), one.sat(t, 0, j));
    }
  }
}

TEST(CpuRopeQuant, StridedInputMatchesContiguous) {
  Case a(5, 3, 1, 64, 8);
  fill_random(a, 2);
  Case b(5, 3, 1, 64, 8, /*t_stride=*/3 * 600 + 40, /*h_stride=*/600);
  b.cache = a.cache;
  b.pos = a.pos;
  for (std::int64_t t = 0; t < 5; ++t)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t ch = 0; ch < kD; ++ch) b.at(t, h, ch) = a.at(t, h, ch);
  a.run();
  b.run();
  EXPECT_EQ(a.q, b.q);
  for (std::size_t i = 0; i < a.scale.size(); ++i) EXPECT_EQ(a.scale[i], b.scale[i]);
}

// Every quantized value is within half an e4m3 step of y / scale, and the block max reaches
// (224, 448]: checks the reference against an independent float64 decode.
TEST(CpuRopeQuant, DequantizesCloseToTheRotatedInput) {
  Case c(4, 2, 1, 64, 32);
  fill_random(c, 3);
  c.run();
  for (std::int64_t t = 0; t < 4; ++t)
    for (std::int64_t h = 0; h < 2; ++h) {
      const float* cs = c.cache.data() + c.pos[t] * 64;
      for (std::int64_t j = 0; j < 4; ++j) {
        const double s = c.sat(t, 0, h * 4 + j);
        double qmax = 0;
        for (std::int64_t ch = j * 128; ch < (j + 1) * 128; ++ch) {
          double y = moekit::bf16_to_float(c.at(t, h, ch));
          if (ch >= 448) {
            const std::int64_t i = (ch - 448) / 2;
            const double xe = moekit::bf16_to_float(c.at(t, h, 448 + 2 * i)), xo = moekit::bf16_to_float(c.at(t, h, 449 + 2 * i));
            y = (ch % 2 == 0) ? xe * cs[i] + xo * cs[32 + i] : xo * cs[i] - xe * cs[32 + i];
          }
          const double v = moekit::e4m3_to_float(c.qat(t, h, ch));
          const double step = std::ldexp(1.0, std::max(std::ilogb(std::fabs(y / s) + 1e-30), -6) - 3);
          ASSERT_LE(std::fabs(v - y / s), 0.5 * step + 1e-6 * std::fabs(y / s) + 1e-12) << t << " " << h << " " << ch;
          qmax = std::max(qmax, std::fabs(v));
        }
        EXPECT_GE(qmax, 224.0);
        EXPECT_LE(qmax, 448.0);
      }
    }
}

TEST(CpuRopeQuant, EmptyAndLastCacheRow) {
  Case empty(0, 2, 1);
  EXPECT_NO_THROW(empty.run());
  moekit::InvRopeFp8QuantArgs a = empty.args();  // numpy gives an empty array zero strides
  for (TensorView* v : {&a.o, &a.o_fp8, &a.o_scale, &a.positions}) std::fill(v->strides, v->strides + v->ndim, 0);
  moekit::Options opt;
  opt.backend = moekit::Backend::kCpu;
  EXPECT_NO_THROW(moekit::inv_rope_fp8_quant(a, opt));
  Case c(2, 1, 1, 64, 5);
  fill_random(c, 4);
  c.pos = {0, 4};
  EXPECT_NO_THROW(c.run());
}

std::string error_of(Case& c, void (*mutate)(moekit::InvRopeFp8QuantArgs&)) {
  moekit::InvRopeFp8QuantArgs a = c.args();
  mutate(a);
  moekit::Options opt;
  opt.backend = moekit::Backend::kCpu;
  try {
    moekit::inv_rope_fp8_quant(a, opt);
  } catch (const moekit::Error& e) {
    EXPECT_EQ(e.status(), moekit::Status::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

TEST(CpuRopeQuant, ErrorsNameTheArgument) {
  Case c(3, 4, 2);
  auto has = [](const std::string& msg, const char* part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  has(error_of(c, [](auto& a) { a.o.dtype = DType::kFp16; }), "o has dtype fp16, expected bf16");
  has(error_of(c, [](auto& a) { a.num_groups = 3; }), "num_groups is 3, expected a divisor of the H=4 heads");
  has(error_of(c, [](auto& a) { a.o.shape[2] = 500; a.o.strides[1] = 500; a.o.strides[0] = 2000; }),
      "head_dim D=500 must be a positive multiple of 128");
  has(error_of(c, [](auto& a) { a.cos_sin_cache.shape[1] = 63; a.cos_sin_cache.strides[0] = 63; }),
      "rope_dim=63 must be even");
  has(error_of(c, [](auto& a) { a.positions.dtype = DType::kInt32; }), "positions has dtype int32, expected int64");
  has(error_of(c, [](auto& a) { a.o_fp8.shape[1] = 4; }), "o_fp8 has shape [2, 4, 1024], expected [G=2, T=3, hpg*D=1024]");
  has(error_of(c, [](auto& a) { a.o_scale.shape[2] = 3; }), "o_scale has shape [2, 8, 3], expected [G=2, nb=8, Tp=4]");
  has(error_of(c, [](auto& a) { a.o.strides[2] = 2; }), "its last dimension must have stride 1");
  has(error_of(c, [](auto& a) { a.o_fp8.data = a.o.data; }), "o_fp8 overlaps o");
  c.pos[1] = 2;  // max_pos = 2
  has(error_of(c, [](auto&) {}), "positions[1] is 2, outside the 2 rows of cos_sin_cache");
  c.pos[1] = -1;
  has(error_of(c, [](auto&) {}), "positions[1] is -1");
}

TEST(CpuRopeQuant, PackedNeedsWholeWordsAndInt32) {
  Case c(1, 1, 1);
  c.packed = true;
  EXPECT_NE(error_of(c, [](auto& a) { a.o_scale.dtype = DType::kFp32; }).find("o_scale has dtype fp32, expected int32"),
            std::string::npos);
}

}  // namespace
