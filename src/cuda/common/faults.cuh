// The device-side fault record (moekit/faults.hpp): how a kernel reports an expert id or an
// expert_map entry outside its range without a host sync. Every kernel that reads ids calls the
// two record_* helpers below at the place where it drops the bad slot; nothing else.
//
// Contract (for a new kernel family):
//  - Usage: `if (id < 0 || id >= E_global) { record_id_fault(p.faults, m, j, id, E_global); drop; }`
//    and `if (e < 0 || e >= E) { record_map_fault(p.faults, m, j, id, e, E); drop; }`, or
//    record_slot_fault(...) where only "not local" is known.
//  - The record: one FaultRecord per CUDA device, a __device__ variable of moekit::cuda
//    (faults.cu), zero when the library loads. The host passes its address in the kernel's
//    params (`FaultRecord* faults`, from device_fault_record(device)); null = do not record.
//  - Who sets it: the kernel, at the slot it drops. Valid values are topk_ids in [0, E_global)
//    or -1 and expert_map entries in [0, E) or -1; the helpers ignore -1, so call them on the
//    branch that already drops the slot (the good path gains nothing but that branch). The first
//    fault wins (atomicCAS on `flag`); later ones are dropped, so a kernel may record from every
//    thread and CTA that sees a bad slot, and several kernels of one call may record the same one.
//  - Who clears it: only the host, in moekit::take_fault / check_faults (read, then zero when
//    set). It is sticky across calls and CUDA-graph replays until then; no per-call reset, so no
//    memset in the call and nothing for graph capture to record. Never zero it in a kernel.
#pragma once

#include <cstdint>

#include "moekit/faults.hpp"

namespace moekit::cuda {

// 32 bytes, read by the host in one copy. `flag`: 0 = no fault; 1 = a fault was recorded and the
// other fields describe it (complete once the recording kernel has finished).
struct FaultRecord {
  std::uint32_t flag;
  std::int32_t tensor;  // moekit::FaultTensor
  std::int64_t row;
  std::int32_t slot;
  std::int32_t value;
  std::int32_t expert;
  std::int32_t bound;
};
static_assert(sizeof(FaultRecord) == 32, "FaultRecord is read and cleared as 32 bytes");

// Host: the record of `device` (resolved once per device, then one atomic load). `device` must be
// the current device. Not during a CUDA-graph capture the first time: make one eager call first
// (as for preload_kernels).
FaultRecord* device_fault_record(int device);

// Host: take_fault's CUDA half. Synchronizes `stream` (its device's record), copies the record and
// zeroes it when set. Throws Error(kInvalidArgument) when `stream` is capturing. Returns whether a
// fault was recorded. *capturing (if not null) tells the caller that the stream captures a graph,
// and then nothing is done and nothing thrown.
bool take_device_fault(void* stream, Fault* fault, bool* capturing = nullptr);

#ifdef __CUDACC__
namespace faults_detail {
__device__ __forceinline__ void record(FaultRecord* rec, FaultTensor tensor, std::int64_t row, int slot, int value,
                                       int expert, int bound) {
  if (rec == nullptr || atomicCAS(&rec->flag, 0u, 1u) != 0u) return;
  rec->tensor = static_cast<std::int32_t>(tensor);
  rec->row = row;
  rec->slot = slot;
  rec->value = value;
  rec->expert = expert;
  rec->bound = bound;
}
}  // namespace faults_detail

// topk_ids[row, slot] == id is not in [0, E_global): record it unless it is -1 (a masked slot).
__device__ __forceinline__ void record_id_fault(FaultRecord* rec, std::int64_t row, int slot, int id, int E_global) {
  if (id != -1) faults_detail::record(rec, FaultTensor::kTopkIds, row, slot, id, -1, E_global);
}

// expert_map[id] == entry (id = topk_ids[row, slot], in range) is not in [0, E): record it unless
// it is -1 (an expert of another rank).
__device__ __forceinline__ void record_map_fault(FaultRecord* rec, std::int64_t row, int slot, int id, int entry,
                                                 int E) {
  if (entry != -1) faults_detail::record(rec, FaultTensor::kExpertMap, row, slot, entry, id, E);
}

// A slot with id = topk_ids[row, slot] was dropped (not a local expert): record why, if it was a
// fault. For a kernel that has only the final "not local" verdict at hand; it re-reads the map
// entry (the cold path). expert_map null: ids are local ids in [0, E_global == E).
__device__ __forceinline__ void record_slot_fault(FaultRecord* rec, std::int64_t row, int slot, int id,
                                                  const std::int32_t* expert_map, int E_global, int E) {
  if (rec == nullptr || id == -1) return;
  if (id < 0 || id >= E_global) {
    record_id_fault(rec, row, slot, id, E_global);
    return;
  }
  if (expert_map != nullptr) record_map_fault(rec, row, slot, id, expert_map[id], E);
}
#endif  // __CUDACC__

}  // namespace moekit::cuda
