// Device attributes that cannot change within a process (SM count, cooperative launch, the opt-in
// shared memory per block, compute capability), asked of CUDA once per device rather than at every
// eager call: the router and the launchers read several of them per call. Host only; included by
// the launchers and backend.cu, never by a kernel's translation unit.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/check.cuh"

namespace moekit::cuda {

// cudaDeviceGetAttribute(kAttr, device), checked, remembered for devices 0..63 (others are asked
// at every call, as everywhere here). Thread-safe: two first calls may both ask; they store the
// same value.
template <cudaDeviceAttr kAttr>
int device_attribute(int device) {
  static std::atomic<int> cached[64];  // zero-initialized (static storage): 0 = not asked yet, else value + 1
  const bool slot = device >= 0 && device < 64;
  if (slot) {
    const int v = cached[device].load(std::memory_order_acquire);
    if (v != 0) return v - 1;
  }
  int value = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&value, kAttr, device));
  if (slot) cached[device].store(value + 1, std::memory_order_release);
  return value;
}

inline int device_sm_count(int device) { return device_attribute<cudaDevAttrMultiProcessorCount>(device); }

}  // namespace moekit::cuda
