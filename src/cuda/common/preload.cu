// The kernel registry and preload_kernels (preload.cuh): load every moekit kernel on a device
// before its first launch, so no call pays CUDA's lazy module loading.
#include "cuda/common/preload.cuh"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

// Function-local statics: safe whatever order the registering translation units initialize in.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<RegisteredKernel>& registry() {
  static std::vector<RegisteredKernel> r;
  return r;
}

std::mutex& preload_mutex() {
  static std::mutex m;
  return m;
}

std::atomic<std::uint64_t>& loaded_low() {  // bit d: device d (< 64) is preloaded
  static std::atomic<std::uint64_t> bits{0};
  return bits;
}

std::set<int>& loaded_high() {  // devices >= 64, under preload_mutex
  static std::set<int> s;
  return s;
}

}  // namespace

void register_kernel(const void* fn, const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(RegisteredKernel{fn, name});
}

std::vector<RegisteredKernel> registered_kernels() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry();
}

bool kernels_preloaded(int device) {
  if (device < 0) return false;
  if (device < 64) return (loaded_low().load(std::memory_order_acquire) & (std::uint64_t{1} << device)) != 0;
  std::lock_guard<std::mutex> lock(preload_mutex());
  return loaded_high().count(device) != 0;
}

void preload_kernels(int device) {
  if (device < 0) throw Error(Status::kInvalidArgument, "preload_kernels: device " + std::to_string(device));
  const std::uint64_t bit = device < 64 ? (std::uint64_t{1} << device) : 0;
  if (bit != 0 && (loaded_low().load(std::memory_order_acquire) & bit) != 0) return;

  std::lock_guard<std::mutex> lock(preload_mutex());
  if (bit != 0 ? (loaded_low().load(std::memory_order_acquire) & bit) != 0 : loaded_high().count(device) != 0)
    return;

  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(Status::kCudaError, std::string("preload_kernels: cannot make CUDA device ") +
                                        std::to_string(device) + " current (" + cudaGetErrorName(err) + ": " +
                                        cudaGetErrorString(err) + ")");
  }
  const std::vector<RegisteredKernel> kernels = registered_kernels();
  for (const RegisteredKernel& k : kernels) {
    cudaFuncAttributes attr{};
    err = cudaFuncGetAttributes(&attr, k.fn);
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky, but leave nothing behind for the caller's next check
      if (previous != device) cudaSetDevice(previous);
      throw Error(Status::kCudaError, std::string("cannot load moekit kernel ") + k.name + " on CUDA device " +
                                          std::to_string(device) + " (" + cudaGetErrorName(err) + ": " +
                                          cudaGetErrorString(err) + ")");
    }
  }
  if (previous != device) cudaSetDevice(previous);
  if (bit != 0)
    loaded_low().fetch_or(bit, std::memory_order_acq_rel);
  else
    loaded_high().insert(device);
}

}  // namespace moekit::cuda
