// Number formats and weight quantization on the host: exact bf16 / fp16 / e4m3 conversions
// (round to nearest even; e4m3 saturates to +-448 and keeps NaN) and the conversion of
// bf16/fp32 expert weights into each scheme with its scales. Tests and benchmarks use these to
// make quantized weights from random ones; the CPU reference uses the same conversions.
#pragma once

#include <cstdint>
#include <vector>

#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit {

std::uint16_t float_to_bf16(float x) noexcept;  ///< round to nearest even; NaN stays NaN
float bf16_to_float(std::uint16_t x) noexcept;
std::uint16_t float_to_fp16(float x) noexcept;  ///< round to nearest even; overflow -> inf
float fp16_to_float(std::uint16_t x) noexcept;
std::uint8_t float_to_e4m3(float x) noexcept;   ///< RNE, saturate to +-448 (inf too), NaN -> 0x7f
float e4m3_to_float(std::uint8_t x) noexcept;
/// Round through `dtype` (kBf16, kFp16, kFp8E4m3 or kFp32) and back.
float round_to(DType dtype, float x) noexcept;
/// Read element i of a host array of `dtype` (kBf16, kFp16, kFp32, kFp8E4m3) as float.
float load_as_float(const void* data, DType dtype, std::int64_t i) noexcept;

/// Expert weights [E, R, C] quantized for one scheme, in host memory, in the layout
/// ExpertWeights expects (see ops.hpp for the scale shapes).
struct QuantizedWeights {
  DType dtype = DType::kBf16;        ///< kFp8E4m3 for fp8 schemes, else the requested dtype
  std::vector<std::int64_t> shape;   ///< [E, R, C]
  std::vector<std::uint8_t> data;    ///< raw elements, row-major
  std::vector<std::int64_t> scale_shape;  ///< empty for kBf16
  std::vector<float> scale;          ///< dequantization multipliers (value = q * scale)

  TensorView view() const;        ///< host view of data
  TensorView scale_view() const;  ///< host view of scale (absent for kBf16)
};

/// Quantize host weights `w` [E, R, C] (fp32, bf16 or fp16) for `scheme`. kBf16 converts to
/// `bf16_dtype` (kBf16 or kFp16). Scales are absmax / 448 over the tensor of each expert, each row,
/// or each 128x128 block, floored at kMinDynamicScale; q = e4m3(w * (1 / scale)).
QuantizedWeights quantize_weights(const TensorView& w, Scheme scheme, DType bf16_dtype = DType::kBf16);

}  // namespace moekit
