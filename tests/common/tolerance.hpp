// Every tolerance moekit's tests use, in one place: how far a backend's output may be from the
// CPU reference, per scheme, row by row and element by element (tests/common/compare.hpp applies it).
#pragma once

#include "moekit/problem.hpp"

namespace moekit::testing {

/// A comparison passes when, for every row of [rows, cols] with finite reference entries,
///   ||out_row - ref_row|| / max(||ref_row||, tiny)      <= row              (2-norms over the row)
///   |out - ref| <= elem_rel * |ref| + elem_abs * rms(ref_row)              (every element)
/// with rms(ref_row) = ||ref_row|| / sqrt(cols), and NaN never passing where the reference is finite.
///
/// Why these values: the GPU computes the reference's formula with the same rounding points but
/// another fp32 summation order, so a few intermediates round to the neighbouring bf16 (2^-8
/// relative) or e4m3 (2^-3 relative) value.
/// - bf16: the output's own rounding is at most 2^-8 |ref| (bf16 ulp / 2, x2 for a neighbour
///   flip): elem_rel 2e-2 holds it with margin; rows stay near 1e-3, so row = 1e-2.
/// - fp8: one intermediate element x_n that rounds to its e4m3 neighbour moves output element c by
///   2^-3 |x_n w2[c, n]|, which is ~2^-3 (|x_n| / rms x)(|w| / rms w) / sqrt(N) of the row's rms:
///   up to ~0.2 for an outlier pair at N = 40. An element's bound is therefore relative to the
///   row's scale (elem_abs 0.25), not to the element, which can be near 0. The same flip moves the
///   row by 2^-3 |x_n| / ||x_row|| (~0.01 typical, ~0.04 for the row's largest element at N = 128),
///   so 6e-2 was the first choice; on the H200 (2026-12-01) single rows of fp8_per_tensor reached
///   0.064-0.082 on every multi-launch path alike (the same flips; worst at N = 16-32, where one
///   element is a larger share of its row), so row = 1e-1.
/// What they still catch: a zeroed or garbage row (row error 1), a dropped slot (row error ~w_j /
/// sqrt(sum w^2), 0.2 or more for the presets' routing), NaN anywhere the reference is finite, and
/// any element off by more than a quarter of its row's scale (a wrong column tile).
struct Tolerance {
  double row = 0.0;       ///< per-row relative 2-norm error
  double elem_rel = 0.0;  ///< element bound, relative part
  double elem_abs = 0.0;  ///< element bound, in units of the row's rms
};

inline Tolerance tolerance_of(Scheme scheme) {
  switch (scheme) {
    case Scheme::kBf16: return {1e-2, 2e-2, 2e-2};
    case Scheme::kFp8PerTensor:
    case Scheme::kFp8PerChannel:
    case Scheme::kFp8Block128: return {1e-1, 1e-1, 2.5e-1};
  }
  return {};
}

/// A GEMM kernel's output against a double-precision loop over the same quantized operands (no
/// re-quantization between them, unlike a whole MoE call): only fp32 summation order and the
/// output's rounding differ, so every scheme gets bf16's bounds.
inline Tolerance gemm_tolerance(Scheme) { return tolerance_of(Scheme::kBf16); }

/// The older single-number bound ||out - ref|| / ||ref||, kept where one number is wanted: a sum
/// of tensor-parallel shards against the unsharded op (per-rank numerics differ by design).
/// moekit-bench --check takes tolerance_of's row bound per token (tools/bench/check.cpp). Over a
/// whole output it dilutes with M: a zeroed row among 4097 passes 3e-2.
/// A call's output is compared with compare_rows / rows_match and tolerance_of.
inline double tolerance(Scheme scheme) { return scheme == Scheme::kBf16 ? 1e-2 : 3e-2; }

}  // namespace moekit::testing
