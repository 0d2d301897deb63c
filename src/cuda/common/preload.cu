// The kernel registry and preload_kernels (preload.cuh): load every moekit kernel on a device
// before its first launch, so no call pays CUDA's lazy module loading.
#include "cuda/common/preload.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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

std::map<int, PreloadStats>& stats_by_device() {  // under preload_mutex
  static std::map<int, PreloadStats> m;
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool preload_log_enabled() {
  const char* v = std::getenv("MOEKIT_PRELOAD_LOG");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

void log_preload(int device, const PreloadStats& st) {
  std::vector<std::pair<const char*, double>> slow = st.per_kernel;
  std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::fprintf(stderr, "moekit: preloaded %d kernels on CUDA device %d in %.1f ms (context %.1f ms); slowest:",
               st.kernels, device, st.seconds * 1e3, st.context_seconds * 1e3);
  for (std::size_t i = 0; i < slow.size() && i < 3; ++i)
    std::fprintf(stderr, "%s %s %.2f ms", i ? "," : "", slow[i].first, slow[i].second * 1e3);
  std::fprintf(stderr, "\n");
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

bool preload_stats(int device, PreloadStats* out) {
  std::lock_guard<std::mutex> lock(preload_mutex());
  const auto it = stats_by_device().find(device);
  if (it == stats_by_device().end()) return false;
  if (out != nullptr) *out = it->second;
  return true;
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

  // Timed for the cold-start report: the context first (a context query makes the primary
  // context when the process has none, ~0 when torch or the caller made it; a query, not
  // cudaFree(0), which a CUDA-graph capture in another thread would not allow), then each kernel.
  PreloadStats stats;
  const auto t_start = std::chrono::steady_clock::now();
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) {
    std::size_t stack_bytes = 0;
    err = cudaDeviceGetLimit(&stack_bytes, cudaLimitStackSize);
    if (err != cudaSuccess && previous != device) cudaSetDevice(previous);
  }
  stats.context_seconds = seconds_since(t_start);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(Status::kCudaError, std::string("preload_kernels: cannot make CUDA device ") +
                                        std::to_string(device) + " current (" + cudaGetErrorName(err) + ": " +
                                        cudaGetErrorString(err) + ")");
  }
  const std::vector<RegisteredKernel> kernels = registered_kernels();
  stats.per_kernel.reserve(kernels.size());
  for (const RegisteredKernel& k : kernels) {
    cudaFuncAttributes attr{};
    const auto t_kernel = std::chrono::steady_clock::now();
    err = cudaFuncGetAttributes(&attr, k.fn);
    stats.per_kernel.emplace_back(k.name, seconds_since(t_kernel));
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky, but leave nothing behind for the caller's next check
      if (previous != device) cudaSetDevice(previous);
      throw Error(Status::kCudaError, std::string("cannot load moekit kernel ") + k.name + " on CUDA device " +
                                          std::to_string(device) + " (" + cudaGetErrorName(err) + ": " +
                                          cudaGetErrorString(err) + ")");
    }
  }
  if (previous != device) cudaSetDevice(previous);
  stats.kernels = static_cast<int>(kernels.size());
  stats.seconds = seconds_since(t_start);
  if (preload_log_enabled()) log_preload(device, stats);
  stats_by_device()[device] = std::move(stats);
  if (bit != 0)
    loaded_low().fetch_or(bit, std::memory_order_acq_rel);
  else
    loaded_high().insert(device);
}

}  // namespace moekit::cuda
