// Checked CUDA calls: every runtime call and kernel launch in src/cuda/ goes through these, so a
// failure becomes moekit::Error(kCudaError) naming the error, the expression and file:line.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "moekit/error.hpp"

namespace moekit::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw Error(Status::kCudaError, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) +
                                      " in " + expr + " at " + file + ":" + std::to_string(line));
}

}  // namespace moekit::cuda

/// Throw moekit::Error(kCudaError) when the CUDA runtime call `expr` fails.
#define MOEKIT_CUDA_CHECK(expr)                                                    \
  do {                                                                             \
    const cudaError_t moekit_err_ = (expr);                                        \
    if (moekit_err_ != cudaSuccess)                                                \
      ::moekit::cuda::throw_cuda_error(moekit_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

/// After a <<<...>>> launch: throw when the launch itself failed (bad configuration, too much
/// shared memory, no kernel image). Asynchronous faults surface at the next synchronizing call.
#define MOEKIT_CUDA_CHECK_LAUNCH() MOEKIT_CUDA_CHECK(cudaGetLastError())

namespace moekit::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on the current device, once per device:
// `raised` holds one bit per device (a static of the caller's kernel instantiation); devices past
// 64 are raised at every call. With `max_carveout`, also asks for the whole unified L1 / shared
// memory as shared (a kernel that runs two CTAs an SM needs it). Host-side; the first launch on a
// device pays the attribute calls.
inline void raise_smem_limit_once(const void* kernel, int bytes, std::atomic<std::uint64_t>& raised,
                                  bool max_carveout = false) {
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const std::uint64_t bit = dev < 64 ? (std::uint64_t{1} << dev) : 0;
  if (bit != 0 && (raised.load(std::memory_order_acquire) & bit) != 0) return;
  if (max_carveout)
    MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
  MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace moekit::cuda
