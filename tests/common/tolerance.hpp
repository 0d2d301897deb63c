// Every tolerance moekit's tests use, in one place: the largest ||out - ref|| / ||ref|| a backend
// may show against the CPU reference, per scheme.
#pragma once

#include "moekit/problem.hpp"

namespace moekit::testing {

/// Why these values: the GPU computes the reference's formula with the same rounding points but
/// another fp32 summation order, so a few intermediates round to the neighbouring bf16 (2^-8
/// relative) or e4m3 (2^-3 relative) value.
inline double tolerance(Scheme scheme) {
  switch (scheme) {
    case Scheme::kBf16: return 1e-2;
    case Scheme::kFp8PerTensor:
    case Scheme::kFp8PerChannel:
    case Scheme::kFp8Block128: return 3e-2;
  }
  return 0.0;
}

}  // namespace moekit::testing
