// Number formats and weight quantization: known bit patterns of bf16 / fp16 / e4m3 (RNE ties,
// subnormals, saturation, NaN), an exhaustive nearest-value check, and quantize_weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(CpuQuant, E4m3KnownValues) {
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(0.5f), 0x30);
  EXPECT_EQ(float_to_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-448.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -6)), 0x08);       // smallest normal
  EXPECT_EQ(float_to_e4m3(std::ldexp(7.0f, -9)), 0x07);       // largest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);       // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x3f), 1.875f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
}

TEST(CpuQuant, E4m3SaturatesAndKeepsNaN) {
  EXPECT_EQ(float_to_e4m3(449.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);  // the would-be tie with 480 (no such value): saturate
  EXPECT_EQ(float_to_e4m3(500.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(float_to_e4m3(kInf), 0x7e);
  EXPECT_EQ(float_to_e4m3(-kInf), 0xfe);
  EXPECT_EQ(float_to_e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(kNaN) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_e4m3(-kNaN) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(round_to(DType::kFp8E4m3, kNaN)));
}

TEST(CpuQuant, E4m3RoundsTiesToEven) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);                    // 1 + 1/16: tie, 1.0 is even
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);                    // 1 + 3/16: tie, 1.25 is even
  EXPECT_EQ(float_to_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);      // half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);      // 1.5 subnormal steps: to 2
  EXPECT_EQ(float_to_e4m3(std::ldexp(15.0f, -10)), 0x08);     // 7.5 steps rounds up into normal
  EXPECT_EQ(float_to_e4m3(15.5f), 0x58);                      // tie between 15 and 16: 16 (even)
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7e);                     // tie 416|448: 448 (even mantissa 6)
  EXPECT_EQ(float_to_e4m3(400.0f), 0x7c);                     // tie 384|416: 384 (even)
}

// Every finite float we try encodes to the nearest e4m3 value (ties to the even code).
TEST(CpuQuant, E4m3IsNearestEvenEverywhere) {
  std::vector<float> values;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7f) != 0x7f) values.push_back(e4m3_to_float(static_cast<std::uint8_t>(b)));
  auto brute = [&](float x) -> int {
    if (std::fabs(x) > 448.0f) return x > 0 ? 0x7e : 0xfe;
    int best = -1;
    double best_d = 1e300;
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7f) == 0x7f) continue;
      if ((b & 0x80) != (std::signbit(x) ? 0x80 : 0)) continue;
      const double d = std::fabs(static_cast<double>(e4m3_to_float(static_cast<std::uint8_t>(b))) - x);
      if (d < best_d || (d == best_d && (b & 1) == 0)) {
        best_d = d;
        best = b;
      }
    }
    return best;
  };
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Exponents spanning subnormal e4m3 to beyond the max, plus exact midpoints.
    const float x = from_bits((state & 0x807fffffu) | ((110u + (state >> 8) % 30u) << 23));
    ASSERT_EQ(float_to_e4m3(x), brute(x)) << "x = " << x;
  }
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = e4m3_to_float(static_cast<std::uint8_t>(b));
    EXPECT_EQ(float_to_e4m3(v), b == 0x80 ? 0x80 : b);  // round trip
  }
}

TEST(CpuQuant, Bf16RoundsTiesToEvenAndKeepsNaN) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie: down to even
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie: up to even
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(from_bits(0x00000001u)), 0x0000);  // float subnormal
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000u)), 0x0002);  // subnormal tie to even
  // A NaN whose payload sits only in the low bits must not truncate to inf.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(to_bits(bf16_to_float(0x8001)), 0x80010000u);
}

TEST(CpuQuant, Fp16RoundsTiesToEvenSubnormalsAndOverflow) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // tie with 65536: even, which is inf
  EXPECT_EQ(float_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie: to even (0)
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // tie: to even (2)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(float_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(kNaN))));
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0xfc00), -kInf);
  // Every fp16 value round-trips.
  for (int b = 0; b < 65536; ++b) {
    const float v = fp16_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_fp16(v), b) << b;
  }
}

TEST(CpuQuant, RoundToAndLoadAsFloat) {
  EXPECT_EQ(round_to(DType::kFp32, 1.1f), 1.1f);
  EXPECT_EQ(round_to(DType::kBf16, 1.00390625f), 1.0f);  // 1 + 2^-8: tie to even
  EXPECT_EQ(round_to(DType::kFp8E4m3, 1000.0f), 448.0f);
  EXPECT_EQ(round_to(DType::kFp16, 3.0f), 3.0f);
  const std::uint16_t bf[2] = {0x3f80, 0x4000};
  const std::uint16_t hf[2] = {0x3c00, 0x4000};
  const float f[2] = {1.5f, -2.5f};
  const std::uint8_t q[2] = {0x38, 0x7e};
  EXPECT_EQ(load_as_float(bf, DType::kBf16, 1), 2.0f);
  EXPECT_EQ(load_as_float(hf, DType::kFp16, 0), 1.0f);
  EXPECT_EQ(load_as_float(f, DType::kFp32, 1), -2.5f);
  EXPECT_EQ(load_as_float(q, DType::kFp8E4m3, 1), 448.0f);
}

// Weights [E, R, C] with a known per-expert pattern.
std::vector<float> ramp(std::int64_t E, std::int64_t R, std::int64_t C) {
  std::vector<float> w(static_cast<std::size_t>(E * R * C));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + i % 7);
  return w;
}

TEST(CpuQuant, QuantizeWeightsBf16AndFp16) {
  auto w = ramp(2, 3, 5);
  auto q = quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {2, 3, 5}), Scheme::kBf16);
  EXPECT_EQ(q.dtype, DType::kBf16);
  EXPECT_TRUE(q.scale.empty());
  EXPECT_FALSE(q.scale_view().present());
  EXPECT_EQ(q.view().shape_string(), "[2, 3, 5]");
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(load_as_float(q.data.data(), DType::kBf16, i), round_to(DType::kBf16, w[i]));
  auto h = quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {2, 3, 5}), Scheme::kBf16, DType::kFp16);
  EXPECT_EQ(h.dtype, DType::kFp16);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(load_as_float(h.data.data(), DType::kFp16, i), round_to(DType::kFp16, w[i]));
}

// Checks the scale of every block is absmax/448 (floored) and q = e4m3(w / s).
void check_fp8(const std::vector<float>& w, std::int64_t E, std::int64_t R, std::int64_t C, Scheme scheme) {
  auto q = quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {E, R, C}), scheme);
  ASSERT_EQ(q.dtype, DType::kFp8E4m3);
  ASSERT_EQ(q.data.size(), w.size());
  std::int64_t bR = R, bC = C;
  if (scheme == Scheme::kFp8PerChannel) bR = 1;
  if (scheme == Scheme::kFp8Block128) bR = bC = 128;
  const std::int64_t nRB = (R + bR - 1) / bR, nCB = (C + bC - 1) / bC;
  if (scheme == Scheme::kFp8PerTensor) EXPECT_EQ(q.scale_shape, (std::vector<std::int64_t>{E}));
  if (scheme == Scheme::kFp8PerChannel) EXPECT_EQ(q.scale_shape, (std::vector<std::int64_t>{E, R}));
  if (scheme == Scheme::kFp8Block128) EXPECT_EQ(q.scale_shape, (std::vector<std::int64_t>{E, nRB, nCB}));
  ASSERT_EQ(static_cast<std::int64_t>(q.scale.size()), E * nRB * nCB);
  EXPECT_EQ(q.scale_view().numel(), E * nRB * nCB);
  for (std::int64_t e = 0; e < E; ++e)
    for (std::int64_t rb = 0; rb < nRB; ++rb)
      for (std::int64_t cb = 0; cb < nCB; ++cb) {
        float amax = 0.0f;
        for (std::int64_t r = rb * bR; r < std::min(R, (rb + 1) * bR); ++r)
          for (std::int64_t c = cb * bC; c < std::min(C, (cb + 1) * bC); ++c)
            amax = std::max(amax, std::fabs(w[(e * R + r) * C + c]));
        const float s = std::max(amax / 448.0f, kMinDynamicScale);
        ASSERT_EQ(q.scale[(e * nRB + rb) * nCB + cb], s);
        for (std::int64_t r = rb * bR; r < std::min(R, (rb + 1) * bR); ++r)
          for (std::int64_t c = cb * bC; c < std::min(C, (cb + 1) * bC); ++c) {
            const std::int64_t i = (e * R + r) * C + c;
            ASSERT_EQ(q.data[i], float_to_e4m3(w[i] * (1.0f / s)));
            // Dequantized within half an e4m3 step (2^-4 relative) plus the subnormal floor.
            EXPECT_NEAR(e4m3_to_float(q.data[i]) * s, w[i], std::fabs(w[i]) / 16 + s * std::ldexp(1.0f, -9));
          }
      }
}

TEST(CpuQuant, QuantizeWeightsPerTensor) { check_fp8(ramp(3, 7, 9), 3, 7, 9, Scheme::kFp8PerTensor); }
TEST(CpuQuant, QuantizeWeightsPerChannel) { check_fp8(ramp(2, 5, 33), 2, 5, 33, Scheme::kFp8PerChannel); }
TEST(CpuQuant, QuantizeWeightsBlock128RaggedEdges) {
  check_fp8(ramp(2, 200, 300), 2, 200, 300, Scheme::kFp8Block128);
  check_fp8(ramp(1, 128, 256), 1, 128, 256, Scheme::kFp8Block128);
}

TEST(CpuQuant, QuantizeWeightsZeroExpertUsesFloorScale) {
  std::vector<float> w(2 * 4 * 4, 0.0f);
  w[16] = 448.0f * 2;  // expert 1 has a value; expert 0 is all zeros
  auto q = quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {2, 4, 4}), Scheme::kFp8PerTensor);
  EXPECT_EQ(q.scale[0], kMinDynamicScale);
  EXPECT_EQ(q.scale[1], 2.0f);
  EXPECT_EQ(q.data[0], 0);
  EXPECT_EQ(q.data[16], 0x7e);
}

TEST(CpuQuant, QuantizeWeightsReadsBf16Input) {
  std::vector<std::uint16_t> w = {float_to_bf16(1.0f), float_to_bf16(-3.5f), float_to_bf16(0.25f), float_to_bf16(7.0f)};
  auto q = quantize_weights(TensorView::contiguous(w.data(), DType::kBf16, {1, 2, 2}), Scheme::kFp8PerChannel);
  EXPECT_EQ(q.scale[0], 3.5f / 448.0f);
  EXPECT_EQ(q.scale[1], 7.0f / 448.0f);
  EXPECT_EQ(q.data[1], 0xfe);
  EXPECT_EQ(q.data[3], 0x7e);
}

TEST(CpuQuant, QuantizeWeightsRejectsBadInput) {
  std::vector<float> w(8);
  try {
    quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {2, 4}), Scheme::kFp8PerTensor);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_weights(TensorView::contiguous(w.data(), DType::kInt32, {2, 2, 2}), Scheme::kBf16), Error);
  EXPECT_THROW(quantize_weights(TensorView{}, Scheme::kBf16), Error);
}

}  // namespace
}  // namespace moekit::testing
