// Non-owning tensor views: how arrays cross moekit's API (raw pointer, shape, strides, dtype,
// device). moekit never owns or frees caller memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace moekit {

/// Element types moekit reads or writes.
enum class DType : int { kBf16, kFp16, kFp32, kFp8E4m3, kInt32, kInt64 };

/// "bf16", "fp16", "fp32", "fp8_e4m3", "int32", "int64".
const char* dtype_name(DType dtype) noexcept;
/// Bytes per element.
std::size_t dtype_size(DType dtype) noexcept;

enum class DeviceType : int { kCpu, kCuda };

/// Where a tensor's memory lives. `index` is the CUDA device ordinal (ignored for the CPU).
struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }
};

/// "cpu" or "cuda:N".
std::string device_name(Device device);

/// A view of caller memory. A default-constructed view is "absent" (ndim == -1): optional
/// arguments are left that way. A present view with zero elements may have data == nullptr.
struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kFp32;
  Device device{};
  int ndim = -1;
  std::int64_t shape[kMaxDims] = {0, 0, 0, 0};
  std::int64_t strides[kMaxDims] = {0, 0, 0, 0};  ///< in elements, not bytes

  bool present() const noexcept { return ndim >= 0; }
  std::int64_t numel() const noexcept;
  /// Row-major with no gaps (a view with zero elements counts as contiguous).
  bool is_contiguous() const noexcept;
  /// "[128, 1536, 2048]"
  std::string shape_string() const;

  /// A row-major contiguous view of `data`.
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               Device device = Device::cpu());
  static TensorView contiguous(const void* data, DType dtype, const std::int64_t* shape, int ndim,
                               Device device = Device::cpu());
};

}  // namespace moekit
