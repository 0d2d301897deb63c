// Fault records (moekit/faults.hpp): the CPU backend's process-wide record, the rule for what
// counts as a bad id, and the public take_fault / check_faults that read the CPU and CUDA records.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "backend.hpp"
#include "env.hpp"
#include "moekit/error.hpp"
#include "moekit/faults.hpp"

namespace moekit {
namespace detail {
namespace {

std::mutex& cpu_mutex() {
  static std::mutex m;
  return m;
}

Fault& cpu_record() {  // tensor == kNone: no fault; under cpu_mutex
  static Fault f;
  return f;
}

}  // namespace

void record_cpu_fault(const Fault& fault) {
  std::lock_guard<std::mutex> lock(cpu_mutex());
  if (cpu_record().tensor == FaultTensor::kNone) cpu_record() = fault;  // the first fault wins
}

bool take_cpu_fault(Fault* fault) {
  std::lock_guard<std::mutex> lock(cpu_mutex());
  if (cpu_record().tensor == FaultTensor::kNone) return false;
  if (fault != nullptr) *fault = cpu_record();
  cpu_record() = Fault{};
  return true;
}

Fault id_fault(std::int64_t row, std::int32_t slot, std::int32_t id, std::int64_t num_experts_global,
               const std::int32_t* expert_map, std::int64_t num_experts) {
  Fault f;
  if (id == -1) return f;  // a masked slot
  f.row = row;
  f.slot = slot;
  if (id < 0 || id >= num_experts_global) {
    f.tensor = FaultTensor::kTopkIds;
    f.value = id;
    f.bound = num_experts_global;
    return f;
  }
  if (expert_map == nullptr) return Fault{};
  const std::int32_t e = expert_map[id];
  if (e == -1 || (e >= 0 && e < num_experts)) return Fault{};  // another rank's, or a local expert
  f.tensor = FaultTensor::kExpertMap;
  f.value = e;
  f.expert = id;
  f.bound = num_experts;
  return f;
}

void throw_fault(const Fault& fault, const char* what) {
  throw Error(Status::kInvalidArgument, std::string(what) + ": " + fault.to_string());
}

}  // namespace detail

const char* fault_tensor_name(FaultTensor tensor) noexcept {
  switch (tensor) {
    case FaultTensor::kNone: return "none";
    case FaultTensor::kTopkIds: return "topk_ids";
    case FaultTensor::kExpertMap: return "expert_map";
  }
  return "unknown";
}

std::string Fault::to_string() const {
  const std::string at = "[" + std::to_string(row) + ", " + std::to_string(slot) + "]";
  switch (tensor) {
    case FaultTensor::kNone: return "no fault";
    case FaultTensor::kTopkIds:
      return "topk_ids" + at + " = " + std::to_string(value) + " (row " + std::to_string(row) + ", slot " +
             std::to_string(slot) + ") is outside [0, E_global=" + std::to_string(bound) + ") and not -1";
    case FaultTensor::kExpertMap:
      return "expert_map[" + std::to_string(expert) + "] = " + std::to_string(value) + " (for topk_ids" + at + " = " +
             std::to_string(expert) + ": row " + std::to_string(row) + ", slot " + std::to_string(slot) +
             ") is outside [0, E=" + std::to_string(bound) + ") and not -1";
  }
  return "unknown fault";
}

bool take_fault(Fault* fault, const Options& options) {
  if (options.backend != Backend::kCuda && detail::take_cpu_fault(fault)) return true;
  if (options.backend == Backend::kCpu) return false;
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  if (cuda == nullptr) {
    if (options.backend == Backend::kAuto) return false;
    throw Error(Status::kNotSupported, "take_fault(backend=cuda): this build of moekit has no CUDA backend");
  }
  return cuda->take_fault(options.stream, fault, nullptr);
}

void check_faults(const Options& options) {
  Fault f;
  if (take_fault(&f, options)) detail::throw_fault(f, "check_faults: a bad expert id was recorded");
}

void check_faults(void* stream) {
  Options o;
  o.stream = stream;
  check_faults(o);
}

bool debug_faults_enabled(const Options& options) noexcept {
  if (options.debug_faults) return true;
  const char* v = detail::env_value(detail::EnvVar::kDebugFaults);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace moekit
