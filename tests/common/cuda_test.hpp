// What every GPU test file needs, in one place: the skip on machines without a usable Hopper
// GPU, the CUDA-call assertion, an owning device pointer, the upload of a case's shared
// operands, and a scoped environment variable (the backend's switches are read at every call).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
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

// The operands every call of a case shares (weights, their scales and biases, the static
// activation scales, expert_map): each host view in `args` replaced by `upload(view)`, the test's
// own uploader (it owns the device memory and decides how an empty view is stored).
template <class Upload>
void upload_shared_operands(FusedExpertsArgs& args, Upload&& upload) {
  for (TensorView* v : {&args.weights.w13, &args.weights.w2, &args.weights.w13_scale, &args.weights.w2_scale,
                        &args.weights.b13, &args.weights.b2, &args.a13_scale, &args.a2_scale, &args.expert_map})
    *v = upload(*v);
}

// Sets an environment variable for a scope and restores what was there before, even when the
// scope is left by an exception (MOEKIT_PDL, MOEKIT_LOG_DISPATCH, MOEKIT_TOKMAJOR_SCHEDULE, ...).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace moekit::testing
