// moekit's one error type. Every public call either succeeds or throws moekit::Error whose
// message names the argument and the values that were wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace moekit {

/// Why a call failed. Python maps kInvalidArgument -> ValueError, kNotSupported ->
/// NotImplementedError, the rest -> RuntimeError.
enum class Status : int {
  kSuccess = 0,
  kInvalidArgument = 1,  ///< a shape, dtype, device, pointer or value the caller passed is wrong
  kNotSupported = 2,     ///< valid input that this build or backend cannot run
  kCudaError = 3,        ///< a CUDA runtime or library call failed
  kInternal = 4,         ///< a moekit bug: please report it with the message
};

/// "invalid_argument", "not_supported", ...
const char* status_name(Status status) noexcept;

/// The exception every moekit call throws.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace moekit
