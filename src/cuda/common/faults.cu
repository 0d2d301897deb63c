// The per-device fault record (faults.cuh) and its host side: resolving its address once per
// device, and reading-and-clearing it for moekit::take_fault.
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/faults.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda {

// One per device (a __device__ variable has one instance per device context); zero-initialized
// when the module loads. No rdc: kernels of other translation units get its address in params.
__device__ FaultRecord g_fault_record;

namespace {

constexpr int kCachedDevices = 64;

// Set once any device's record was resolved: before that no kernel can have recorded anything,
// and take_device_fault makes no CUDA call (a CPU-only process never touches the driver).
std::atomic<bool> g_any_resolved{false};

std::atomic<FaultRecord*>& cached(int device) {
  static std::atomic<FaultRecord*> slots[kCachedDevices];
  return slots[device];
}

std::mutex& high_mutex() {
  static std::mutex m;
  return m;
}

std::map<int, FaultRecord*>& high_devices() {  // devices >= kCachedDevices, under high_mutex
  static std::map<int, FaultRecord*> m;
  return m;
}

// The cached address for `device`, or null when no call resolved it yet (then no kernel of this
// process can have written that device's record).
FaultRecord* lookup(int device) {
  if (device < 0) return nullptr;
  if (device < kCachedDevices) return cached(device).load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(high_mutex());
  auto it = high_devices().find(device);
  return it == high_devices().end() ? nullptr : it->second;
}

}  // namespace

FaultRecord* device_fault_record(int device) {
  FaultRecord* rec = lookup(device);
  if (rec != nullptr) return rec;
  void* addr = nullptr;
  MOEKIT_CUDA_CHECK(cudaGetSymbolAddress(&addr, g_fault_record));  // on the current device (== device)
  rec = static_cast<FaultRecord*>(addr);
  if (device < kCachedDevices) {
    cached(device).store(rec, std::memory_order_release);
  } else {
    std::lock_guard<std::mutex> lock(high_mutex());
    high_devices()[device] = rec;
  }
  g_any_resolved.store(true, std::memory_order_release);
  return rec;
}

bool take_device_fault(void* stream_ptr, Fault* fault, bool* capturing) {
  if (capturing != nullptr) *capturing = false;
  if (!g_any_resolved.load(std::memory_order_acquire)) return false;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  // First, and nothing else before it: a query that is legal while the stream captures.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MOEKIT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) {
    if (capturing != nullptr) {
      *capturing = true;
      return false;
    }
    throw Error(Status::kInvalidArgument,
                "check_faults: the stream is capturing a CUDA graph (a capture cannot synchronize); "
                "check after the graph's launch instead");
  }
  int device = -1;
  if (stream != nullptr) {
    MOEKIT_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  } else {
    MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  }
  FaultRecord* rec = lookup(device);
  if (rec == nullptr) return false;  // no moekit call ever ran on this device
  int previous = device;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) MOEKIT_CUDA_CHECK(cudaSetDevice(device));
  struct Restore {
    int previous, device;
    ~Restore() {
      if (previous != device) cudaSetDevice(previous);
    }
  } restore{previous, device};

  // Kernels still running on other streams may record after the copy: they are seen next time
  // (or, in the instant between the copy and the clear, lost: the record keeps the first fault).
  FaultRecord host{};
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  MOEKIT_CUDA_CHECK(cudaMemcpyAsync(&host, rec, sizeof(FaultRecord), cudaMemcpyDeviceToHost, stream));
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.flag == 0) return false;
  MOEKIT_CUDA_CHECK(cudaMemsetAsync(rec, 0, sizeof(FaultRecord), stream));
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (fault != nullptr) {
    fault->tensor = static_cast<FaultTensor>(host.tensor);
    fault->row = host.row;
    fault->slot = host.slot;
    fault->value = host.value;
    fault->expert = host.expert;
    fault->bound = host.bound;
  }
  return true;
}

}  // namespace moekit::cuda
