// Host number formats (bf16, fp16, e4m3: exact round-to-nearest-even, bit-level) and the
// quantization of expert weights into each scheme. The CPU reference and the tests rely on
// these being exact, so every conversion works on the bits, never through a library cast.
#include "moekit/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "moekit/error.hpp"

namespace moekit {

namespace {

std::uint32_t bits_of(float x) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(std::uint32_t u) noexcept {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Round a non-negative float below 2^22 to the nearest integer, ties to even. Adding 2^23
// pushes the fraction bits out of the mantissa, and the FPU rounds that add to nearest even
// (the default mode; moekit never changes it).
int rne_small(float f) noexcept {
  // Without -ffast-math the compiler may not fold (f + c) - c, so this is exact.
  return static_cast<int>((f + 8388608.0f) - 8388608.0f);
}

// 256 decoded e4m3 values, built once.
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int b = 0; b < 256; ++b) {
      const int exp = (b >> 3) & 15, man = b & 7;
      float mag;
      if (exp == 15 && man == 7) {
        mag = std::numeric_limits<float>::quiet_NaN();
      } else if (exp == 0) {
        mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: man * 2^-9
      } else {
        mag = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
      }
      v[b] = (b & 0x80) ? -mag : mag;
    }
  }
};
const E4m3Table kE4m3Table;

}  // namespace

namespace {
// The conversions' bodies, inline so quantize_weights' loops do not pay a call per element.
inline std::uint16_t bf16_bits(float x) noexcept {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep the sign, force a quiet mantissa bit so truncation cannot turn it into inf.
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}
}  // namespace

std::uint16_t float_to_bf16(float x) noexcept { return bf16_bits(x); }

float bf16_to_float(std::uint16_t x) noexcept { return float_of(static_cast<std::uint32_t>(x) << 16); }

std::uint16_t float_to_fp16(float x) noexcept {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN (quiet)
  if (a >= 0x477ff000u) return sign | 0x7c00u;                // >= 65520 rounds to inf (RNE)
  if (a < 0x38800000u) {                                      // below 2^-14: subnormal fp16
    const float f = float_of(a) * 16777216.0f;                // |x| * 2^24, exact (< 1024)
    return static_cast<std::uint16_t>(sign | rne_small(f));   // 1024 lands on the smallest normal
  }
  const std::uint32_t rounded = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
  return static_cast<std::uint16_t>(sign | (rounded - ((127u - 15u) << 10)));
}

float fp16_to_float(std::uint16_t x) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(x & 0x8000u) << 16;
  const std::uint32_t exp = (x >> 10) & 31u, man = x & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24, exact
    return sign ? -mag : mag;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
  return float_of(sign | ((exp + 127u - 15u) << 23) | (man << 13));
}

namespace {
inline std::uint8_t e4m3_bits(float x) noexcept {
  const std::uint32_t u = bits_of(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;     // NaN (e4m3fn's only NaN code, sign kept)
  if (a > 0x43e00000u) return sign | 0x7eu;     // > 448 (inf included): saturate to 448
  if (a < 0x3c800000u) {                        // below 2^-6: subnormal e4m3, man * 2^-9
    const float f = float_of(a) * 512.0f;       // exact, < 8
    return static_cast<std::uint8_t>(sign | rne_small(f));  // 8 lands on the smallest normal
  }
  // Normal: drop 20 of the 23 mantissa bits with round to nearest even; a carry moves into
  // the exponent, which is what rounding up to the next binade needs.
  const std::uint32_t rounded = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return static_cast<std::uint8_t>(sign | (rounded - ((127u - 7u) << 3)));
}
}  // namespace

std::uint8_t float_to_e4m3(float x) noexcept { return e4m3_bits(x); }

float e4m3_to_float(std::uint8_t x) noexcept { return kE4m3Table.v[x]; }

float round_to(DType dtype, float x) noexcept {
  switch (dtype) {
    case DType::kBf16: return bf16_to_float(float_to_bf16(x));
    case DType::kFp16: return fp16_to_float(float_to_fp16(x));
    case DType::kFp8E4m3: return e4m3_to_float(float_to_e4m3(x));
    default: return x;
  }
}

float load_as_float(const void* data, DType dtype, std::int64_t i) noexcept {
  switch (dtype) {
    case DType::kBf16: return bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kFp16: return fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kFp32: return static_cast<const float*>(data)[i];
    case DType::kFp8E4m3: return e4m3_to_float(static_cast<const std::uint8_t*>(data)[i]);
    case DType::kInt32: return static_cast<float>(static_cast<const std::int32_t*>(data)[i]);
    case DType::kInt64: return static_cast<float>(static_cast<const std::int64_t*>(data)[i]);
  }
  return 0.0f;
}

TensorView QuantizedWeights::view() const {
  return TensorView::contiguous(data.data(), dtype, shape.data(), static_cast<int>(shape.size()));
}

TensorView QuantizedWeights::scale_view() const {
  if (scale_shape.empty()) return TensorView{};
  return TensorView::contiguous(scale.data(), DType::kFp32, scale_shape.data(),
                                static_cast<int>(scale_shape.size()));
}

QuantizedWeights quantize_weights(const TensorView& w, Scheme scheme, DType bf16_dtype) {
  if (!w.present() || w.ndim != 3)
    throw Error(Status::kInvalidArgument,
                "quantize_weights: w must be a 3-D tensor [E, R, C], got shape " + w.shape_string());
  if (w.device.type != DeviceType::kCpu)
    throw Error(Status::kInvalidArgument,
                "quantize_weights: w must be in host memory, got " + device_name(w.device));
  if (w.dtype != DType::kFp32 && w.dtype != DType::kBf16 && w.dtype != DType::kFp16)
    throw Error(Status::kInvalidArgument, std::string("quantize_weights: w has dtype ") + dtype_name(w.dtype) +
                                              ", expected fp32, bf16 or fp16");
  if (!w.is_contiguous())
    throw Error(Status::kInvalidArgument, "quantize_weights: w " + w.shape_string() + " must be contiguous");
  if (w.numel() > 0 && w.data == nullptr)
    throw Error(Status::kInvalidArgument, "quantize_weights: w.data is null");
  if (scheme == Scheme::kBf16 && bf16_dtype != DType::kBf16 && bf16_dtype != DType::kFp16)
    throw Error(Status::kInvalidArgument, std::string("quantize_weights: bf16_dtype is ") + dtype_name(bf16_dtype) +
                                              ", expected bf16 or fp16");

  const std::int64_t E = w.shape[0], R = w.shape[1], C = w.shape[2];
  QuantizedWeights q;
  q.shape = {E, R, C};
  const std::int64_t n = E * R * C;
  // Row i of w as fp32: fp32 input is read in place, 16-bit input decoded into `buf`. This is
  // the hot path of making preset-sized test weights, so it stays free of per-element switches.
  auto row_of = [&](std::int64_t i, std::vector<float>& buf) -> const float* {
    if (w.dtype == DType::kFp32) return static_cast<const float*>(w.data) + i * C;
    const auto* src = static_cast<const std::uint16_t*>(w.data) + i * C;
    buf.resize(static_cast<std::size_t>(C));
    if (w.dtype == DType::kBf16) {
      for (std::int64_t c = 0; c < C; ++c) buf[c] = float_of(static_cast<std::uint32_t>(src[c]) << 16);
    } else {
      for (std::int64_t c = 0; c < C; ++c) buf[c] = fp16_to_float(src[c]);
    }
    return buf.data();
  };
  std::vector<float> buf;

  if (scheme == Scheme::kBf16) {
    q.dtype = bf16_dtype;
    q.data.resize(static_cast<std::size_t>(n) * 2);
    auto* out = reinterpret_cast<std::uint16_t*>(q.data.data());
    for (std::int64_t i = 0; i < E * R; ++i) {
      const float* x = row_of(i, buf);
      std::uint16_t* o = out + i * C;
      if (bf16_dtype == DType::kBf16) {
        for (std::int64_t c = 0; c < C; ++c) o[c] = bf16_bits(x[c]);
      } else {
        for (std::int64_t c = 0; c < C; ++c) o[c] = float_to_fp16(x[c]);
      }
    }
    return q;
  }

  q.dtype = DType::kFp8E4m3;
  q.data.resize(static_cast<std::size_t>(n));
  // Block grid: per tensor = one block of R x C, per channel = 1 x C, block128 = 128 x 128
  // (ceil-divided: the last row/column block is ragged).
  std::int64_t bR = std::max<std::int64_t>(R, 1), bC = std::max<std::int64_t>(C, 1);
  if (scheme == Scheme::kFp8PerChannel) bR = 1;
  if (scheme == Scheme::kFp8Block128) bR = bC = kBlockQuant;
  const std::int64_t nRB = (R + bR - 1) / bR, nCB = (C + bC - 1) / bC;
  switch (scheme) {
    case Scheme::kFp8PerTensor: q.scale_shape = {E}; break;
    case Scheme::kFp8PerChannel: q.scale_shape = {E, R}; break;
    default: q.scale_shape = {E, nRB, nCB}; break;
  }
  const std::int64_t blocks_per_expert = (scheme == Scheme::kFp8PerTensor) ? 1 : nRB * nCB;
  q.scale.assign(static_cast<std::size_t>(E * blocks_per_expert), kMinDynamicScale);

  std::vector<float> amax(static_cast<std::size_t>(nCB)), inv(static_cast<std::size_t>(nCB));
  for (std::int64_t e = 0; e < E; ++e) {
    for (std::int64_t rb = 0; rb < nRB; ++rb) {
      const std::int64_t r0 = rb * bR, r1 = std::min(R, r0 + bR);
      // Pass 1: absmax of each column block of these rows (fmax: a NaN weight never wins).
      std::fill(amax.begin(), amax.end(), 0.0f);
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* x = row_of(e * R + r, buf);
        for (std::int64_t cb = 0; cb < nCB; ++cb) {
          float a = amax[cb];
          for (std::int64_t c = cb * bC; c < std::min(C, (cb + 1) * bC); ++c) {
            const float v = std::fabs(x[c]);
            a = v > a ? v : a;  // fmax semantics (a is never NaN) without a libm call
          }
          amax[cb] = a;
        }
      }
      for (std::int64_t cb = 0; cb < nCB; ++cb) {
        const float sc = std::max(amax[cb] / kFp8Max, kMinDynamicScale);
        q.scale[static_cast<std::size_t>(e * blocks_per_expert + rb * nCB + cb)] = sc;
        inv[cb] = 1.0f / sc;
      }
      // Pass 2: q = e4m3(w * (1 / scale)).
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* x = row_of(e * R + r, buf);
        std::uint8_t* o = q.data.data() + (e * R + r) * C;
        for (std::int64_t cb = 0; cb < nCB; ++cb) {
          const float iv = inv[cb];
          for (std::int64_t c = cb * bC; c < std::min(C, (cb + 1) * bC); ++c) o[c] = e4m3_bits(x[c] * iv);
        }
      }
    }
  }
  return q;
}

}  // namespace moekit
