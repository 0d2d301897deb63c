// What every GPU test file needs, in one place: the skip on machines without a usable Hopper
// GPU, the CUDA-call assertion, owning device memory and the uploads / downloads of host data
// (one set of helpers for every GPU suite), and a scoped environment variable.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/scoped_env.hpp"
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

// Device memory of at least `bytes` (16 at least, so an empty tensor still has an aligned,
// distinct address); a failed cudaMalloc is a test failure and a null pointer.
inline DevPtr dev_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<std::size_t>(bytes, 16)) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc(" << bytes << ") failed";
    cudaGetLastError();
    p = nullptr;
  }
  return DevPtr(p);
}

inline std::size_t view_bytes(const TensorView& v) { return static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype); }

// A device copy of a host vector (synchronous cudaMemcpy).
template <class T>
DevPtr upload(const std::vector<T>& h) {
  DevPtr d = dev_alloc(h.size() * sizeof(T));
  if (d && !h.empty())
    EXPECT_EQ(cudaSuccess, cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// n elements of device memory, copied to the host (synchronous cudaMemcpy).
template <class T>
std::vector<T> download(const void* d, std::size_t n) {
  std::vector<T> h(n);
  if (n > 0) EXPECT_EQ(cudaSuccess, cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Owns every device buffer a test makes; views and pointers stay valid for its lifetime.
class DeviceArena {
 public:
  void* alloc(std::size_t bytes) {
    owned_.push_back(dev_alloc(bytes));
    return owned_.back().get();
  }
  // `h` with its data on the device (a copy); an absent view stays absent.
  TensorView upload(const TensorView& h) {
    if (!h.present()) return h;
    TensorView d = alloc_like(h);
    if (view_bytes(h) > 0 && h.data != nullptr)
      EXPECT_EQ(cudaSuccess, cudaMemcpy(d.data, h.data, view_bytes(h), cudaMemcpyHostToDevice));
    return d;
  }
  // Device memory shaped like `h`, contents undefined.
  TensorView alloc_like(const TensorView& h) {
    TensorView d = h;
    d.data = alloc(view_bytes(h));
    d.device = Device::cuda(0);
    return d;
  }
  template <class T>
  T* upload(const std::vector<T>& h) {
    owned_.push_back(::moekit::testing::upload(h));
    return static_cast<T*>(owned_.back().get());
  }

 private:
  std::vector<DevPtr> owned_;
};

// The operands every call of a case shares (weights, their scales and biases, the static
// activation scales, expert_map): each host view in `args` replaced by `upload(view)`, the test's
// own uploader (it owns the device memory and decides how an empty view is stored).
template <class Upload>
void upload_shared_operands(FusedExpertsArgs& args, Upload&& upload) {
  for (TensorView* v : {&args.weights.w13, &args.weights.w2, &args.weights.w13_scale, &args.weights.w2_scale,
                        &args.weights.b13, &args.weights.b2, &args.a13_scale, &args.a2_scale, &args.expert_map})
    *v = upload(*v);
}

// A 0 / 1 switch read at every launch (MOEKIT_SWAPAB_PLAIN, MOEKIT_ROUTING_PLAIN, ...) set to any
// other value: `launch` must throw a moekit::Error that names the variable, and launch nothing.
template <class Launch>
void expect_bad_switch_throws(const char* var, Launch&& launch) {
  ScopedEnv bad(var, "yes");
  try {
    launch();
    ADD_FAILURE() << var << "=yes launched";
  } catch (const ::moekit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
  }
}

}  // namespace moekit::testing
