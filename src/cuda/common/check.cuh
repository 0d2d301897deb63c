// Checked CUDA calls: every runtime call and kernel launch in src/cuda/ goes through these, so a
// failure becomes moekit::Error(kCudaError) naming the error, the expression and file:line.
#pragma once

#include <cuda_runtime.h>

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
