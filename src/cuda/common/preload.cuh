// The kernel registry: every __global__ instantiation a moekit launcher can launch registers itself
// (MOEKIT_REGISTER_KERNEL, next to the launcher or the inst/ file that instantiates it), and
// preload_kernels(device) loads them all on a device at the first call there. CUDA 12+ loads a
// module's kernels lazily on first launch (CUDA_MODULE_LOADING=LAZY is the default), which made
// the first call at a never-seen batch size (a kernel or instantiation not launched before) cost
// up to ~45x the steady call; after preload_kernels nothing loads lazily (docs/design.md
// "No run-time compilation, nothing lazy").
//
// preload_kernels is called by device_ok for the caller's current device (so
// moekit::cuda_available(), moekit::preload() and the first eager call do it) and at the top of
// run_moe, run_route and the parallel EP entries; after the first time on a device it is one
// atomic load. It calls cudaFuncGetAttributes, a non-stream API: make the first call on a device
// eagerly, not inside a CUDA-graph capture. MOEKIT_PRELOAD_LOG=1 prints what it cost (one line
// on stderr); preload_stats keeps the numbers.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace moekit::cuda {

struct RegisteredKernel {
  const void* fn = nullptr;    // the host stub's address, as passed to cudaLaunchKernel
  const char* name = nullptr;  // the registering expression, for error messages
};

/// Adds `fn` to the registry (called from static initializers; thread-safe).
void register_kernel(const void* fn, const char* name);

/// A copy of the registry, in registration order.
std::vector<RegisteredKernel> registered_kernels();

/// Loads every registered kernel on `device` (cudaFuncGetAttributes on each), once per device per
/// process; restores the caller's current device. Thread-safe. Throws moekit::Error(kCudaError)
/// naming the kernel when one fails to load (e.g. no sm_90a image for the device).
void preload_kernels(int device);

/// Whether preload_kernels(device) has completed in this process (for tests).
bool kernels_preloaded(int device);

/// What the preload of one device cost (recorded once, by the preload_kernels call that did it):
/// the cold-start numbers of moekit::preload's report and tools/cold_start (docs/perf.md "Cold
/// start"). Host wall clock, steady_clock.
struct PreloadStats {
  int kernels = 0;
  double context_seconds = 0;  // a context query first: the primary context, when the process had none
  double seconds = 0;          // every cudaFuncGetAttributes, context included
  std::vector<std::pair<const char*, double>> per_kernel;  // (name, seconds), registration order
};

/// The stats of the completed preload of `device`; false (and *out untouched) when none has run.
bool preload_stats(int device, PreloadStats* out);

/// Defined at namespace scope by MOEKIT_REGISTER_KERNEL: its constructor registers one kernel.
struct KernelRegistrar {
  KernelRegistrar(const void* fn, const char* name) { register_kernel(fn, name); }
};

}  // namespace moekit::cuda

#define MOEKIT_PRELOAD_CAT_(a, b) a##b
#define MOEKIT_PRELOAD_CAT(a, b) MOEKIT_PRELOAD_CAT_(a, b)

/// At namespace scope in the .cu file that defines or instantiates the kernel, after it:
///   MOEKIT_REGISTER_KERNEL(my_kernel);
///   MOEKIT_REGISTER_KERNEL(ns::my_kernel_template<Operand::kBf16, true>);
/// Taking the address instantiates a template kernel in that translation unit.
#define MOEKIT_REGISTER_KERNEL(...)                                                               \
  static const ::moekit::cuda::KernelRegistrar MOEKIT_PRELOAD_CAT(moekit_kernel_registrar_,      \
                                                                  __COUNTER__)(                   \
      (const void*)(&__VA_ARGS__), #__VA_ARGS__)
