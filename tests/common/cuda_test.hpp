// What every GPU test file needs, in one place: the skip on machines without a usable Hopper
// GPU, the CUDA-call assertion, and an owning device pointer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "moekit/moekit.hpp"

// Skips the test unless moekit's CUDA backend can run here (an sm_90 GPU; the reason is shown).
#define SKIP_WITHOUT_SM90()                                    \
  do {                                                         \
    std::string why_;                                          \
    if (!::moekit::cuda_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

#define CUDA_OK(expr) ASSERT_EQ(cudaSuccess, (expr)) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

namespace moekit::testing {

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevPtr = std::unique_ptr<void, CudaFree>;

}  // namespace moekit::testing
