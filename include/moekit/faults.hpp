// Faults in values that only the kernels read: an expert id in topk_ids, or an expert_map entry,
// outside its range. Calls never read those values on the host (that would synchronize it), so
// the backend records the first bad one and the caller checks when it synchronizes anyway.
#pragma once

#include <cstdint>
#include <string>

#include "moekit/ops.hpp"

namespace moekit {

/// Which tensor held a bad value.
enum class FaultTensor : int {
  kNone = 0,
  kTopkIds = 1,    ///< topk_ids[row, slot] is not -1 and not in [0, E_global)
  kExpertMap = 2,  ///< expert_map[topk_ids[row, slot]] is not -1 and not in [0, E)
};
const char* fault_tensor_name(FaultTensor tensor) noexcept;  ///< "none", "topk_ids", "expert_map"

/// The first bad value recorded since the record was last read.
///
/// Valid values: topk_ids in [0, E_global) or -1 ("no expert for this slot", as vLLM's and
/// DeepEP's masked slots use it); expert_map entries in [0, E) or -1 ("expert on another rank").
/// A bad value contributes nothing to the output (like -1) and is recorded.
struct Fault {
  FaultTensor tensor = FaultTensor::kNone;
  std::int64_t row = -1;    ///< the token m
  std::int32_t slot = -1;   ///< j in [0, k): topk_ids[m, j]
  std::int32_t value = 0;   ///< the bad value: topk_ids[m, j], or expert_map[topk_ids[m, j]]
  std::int32_t expert = -1; ///< kExpertMap: the global id topk_ids[m, j] whose entry is bad
  std::int64_t bound = 0;   ///< the range's end: E_global (topk_ids) or E (expert_map)
  /// "topk_ids[3, 1] = 130 (row 3, slot 1) is outside [0, E_global=128) and not -1"
  std::string to_string() const;
};

/// Read and clear the fault record; true (and *fault filled, if not null) when a fault was
/// recorded since the last read. Where the record lives:
///  - Backend::kCuda: one record per CUDA device, in device memory that moekit's kernels set
///    (first fault wins) and that starts zeroed when the library loads. It is sticky: it stays
///    set across calls (and CUDA-graph replays) until this reads and clears it. This synchronizes
///    options.stream first (the stream the calls ran on; its device is the record's) and must
///    not be called while that stream captures a graph (throws kInvalidArgument). A device on
///    which no moekit call ever ran has no fault and is not touched.
///  - Backend::kCpu: one record per process for the CPU reference backend.
///  - Backend::kAuto: the CPU record, then the CUDA one.
/// options.workspace is not used: every call on a device shares its record, whatever its
/// workspace (so Python's per-call workspaces and the expert-parallel inner calls are covered).
bool take_fault(Fault* fault, const Options& options = {});

/// take_fault, then throw Error(kInvalidArgument) naming the tensor, row, slot and value when a
/// fault was recorded. Cheap (one stream sync and a 32-byte copy): run it where the caller
/// synchronizes anyway, e.g. once per engine step.
void check_faults(const Options& options = {});
/// The same on `stream` (cudaStream_t; nullptr = the legacy default stream), Backend::kAuto.
void check_faults(void* stream);

/// Whether calls with `options` check for faults right after their launches and throw
/// Error(kInvalidArgument) for a bad id (the debug mode): options.debug_faults, or the
/// environment variable MOEKIT_DEBUG_FAULTS set to anything but "" or "0" (read at every call).
/// On CUDA the check synchronizes the call's stream (so it is off by default); inside a
/// CUDA-graph capture it is skipped (check after the replay). On the CPU the ids are checked
/// before anything is computed.
bool debug_faults_enabled(const Options& options = {}) noexcept;

}  // namespace moekit
