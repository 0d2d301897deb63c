// Routing a call's slots inside one CTA, for the kernels that take the ids themselves instead of
// reading a routing launch's tables: the decode kernel (kernels/decode/, every CTA) and the
// token-major GEMM1 with the routing in the kernel (kernels/tokmajor/, kRoute). Both derive the
// same tables in every CTA, in the routing launch's order: slots grouped by local expert,
// ascending inside one (stable), so that any CTA, cluster rank or later kernel agrees on which
// sorted row is which slot.
//
//   map_and_count   every thread of the CTA: each slot's local expert (-1: dropped) and the slots
//                   of each expert, the ids' and map's loads batched;
//   record_faults   CTA 0, where map_and_count saw a bad entry: the fault record (faults.cuh);
//   place_window    a warpgroup (4 warps, its named barrier): the slots of ranks [r0, r1) of one
//                   expert, by two ballot passes over the slot list.
#pragma once

#include <cstdint>

#include "cuda/common/faults.cuh"
#include "cuda/common/ptx.cuh"

namespace moekit::cuda::slot_routing {

// Slots a thread has in flight at once in map_and_count's scalar form: each batch's id loads, then
// its map loads, are issued before any is used, so that the dependent global loads (~1 us each
// after the L2 flush) come one round per kIdBatch * threads slots instead of one per `threads`.
inline constexpr int kIdBatch = 4;

// One slot of map_and_count: its local expert into slot_e[sl] and count; whether it needs
// record_faults (an id out of range other than -1, or a map entry out of range other than -1).
template <class SlotE>
__device__ __forceinline__ bool map_one(int sl, int id, int e, int Eg, int E, SlotE* slot_e, int* count) {
  const bool in = id >= 0 && id < Eg;
  bool bad = false;
  if (!in || e < 0 || e >= E) {
    bad = in ? e != -1 : id != -1;
    e = -1;
  }
  slot_e[sl] = static_cast<SlotE>(e);
  if (e >= 0) atomicAdd(count + e, 1);
  return bad;
}

// Every thread of a CTA of `threads` threads (`tid` its index): slot_e[sl] = the local expert of
// slot sl of `ids` [P] (through expert_map [Eg] when given; -1 when the id or entry is out of
// range, -1, or on another rank), and count[e] += its slots (count zeroed and ordered before by the
// caller). Returns whether a slot of this thread needs record_faults: an id out of range other
// than -1 (a masked slot), or an entry out of range other than -1 (an expert on another rank).
// The quads below give a thread other slots than record_faults' own: a caller records when any
// thread of the CTA returned true (__syncthreads_or), with every thread.
//
// Past one round of the scalar form below (P > kIdBatch * threads: 640 slots at expert_mlp's 160
// threads), without a map and with ids 16-byte aligned (every public call: CUDA tensors are), a
// thread loads its quads of 4 ids (q = q0 + j * threads, j < kIdBatch; q0 = tid, then tid +
// kIdBatch * threads past 16 * threads slots) as 16-byte loads, all in flight at once: one DRAM
// round up to 16 * threads slots (2,560), where the scalar form takes one a kIdBatch * threads
// (qwen3-30b TP8 M = 256, 2,048 slots: the routing 4.9 -> 2.3 µs, H100, session 63).
// Up to one round the scalar form stays (its slots spread over all the threads). The quads are
// taken one a pass of a loop that is not unrolled (the registers rotate), so the code is the
// scalar form's size: the routing runs once a call, fetched cold while the weight stream fills
// the memory system, and a wider unrolled batch cost more than its rounds saved (docs/perf.md
// "Session 61", s64). The same slots get the same experts and counts as the scalar form (the
// counts are sums, order-free).
template <class SlotE>
__device__ __forceinline__ bool map_and_count(const std::int32_t* ids, const std::int32_t* expert_map, int P, int Eg,
                                              int E, int tid, int threads, SlotE* slot_e, int* count) {
  bool bad = false;
  if (expert_map == nullptr && P > kIdBatch * threads && (reinterpret_cast<std::uintptr_t>(ids) & 15u) == 0) {
    const int quads = P >> 2;  // whole quads; the last P % 4 slots below
    const int4* ids4 = reinterpret_cast<const int4*>(ids);
    for (int q0 = tid; q0 < quads; q0 += kIdBatch * threads) {
      int4 v[kIdBatch];
#pragma unroll
      for (int j = 0; j < kIdBatch; ++j) {
        const int q = q0 + j * threads;
        v[j] = q < quads ? ids4[q] : make_int4(-1, -1, -1, -1);
      }
#pragma unroll 1
      for (int j = 0, q = q0; j < kIdBatch && q < quads; ++j, q += threads) {
        const int4 c = v[0];
#pragma unroll
        for (int i = 0; i + 1 < kIdBatch; ++i) v[i] = v[i + 1];
        bad |= map_one(4 * q + 0, c.x, c.x, Eg, E, slot_e, count);
        bad |= map_one(4 * q + 1, c.y, c.y, Eg, E, slot_e, count);
        bad |= map_one(4 * q + 2, c.z, c.z, Eg, E, slot_e, count);
        bad |= map_one(4 * q + 3, c.w, c.w, Eg, E, slot_e, count);
      }
    }
    for (int sl = 4 * quads + tid; sl < P; sl += threads) {
      const int id = ids[sl];
      bad |= map_one(sl, id, id, Eg, E, slot_e, count);
    }
    return bad;
  }
  for (int s0 = tid; s0 < P; s0 += kIdBatch * threads) {
    int id[kIdBatch], e[kIdBatch];
#pragma unroll
    for (int j = 0; j < kIdBatch; ++j) {
      const int sl = s0 + j * threads;
      id[j] = sl < P ? ids[sl] : -1;
    }
#pragma unroll
    for (int j = 0; j < kIdBatch; ++j) {
      const bool in = id[j] >= 0 && id[j] < Eg;
      e[j] = !in ? -1 : expert_map != nullptr ? expert_map[id[j]] : id[j];
    }
#pragma unroll
    for (int j = 0; j < kIdBatch; ++j) {
      const int sl = s0 + j * threads;
      if (sl < P) bad |= map_one(sl, id[j], e[j], Eg, E, slot_e, count);
    }
  }
  return bad;
}

// Every thread of the recording CTA, where one of its threads' map_and_count returned true: each
// bad id or map entry of the call's slots goes to `rec` (the first fault wins; the helpers ignore
// -1). The slot is already dropped; this only reports it.
__device__ __forceinline__ void record_faults(const std::int32_t* ids, const std::int32_t* expert_map, int P, int Eg,
                                              int E, int top_k, FaultRecord* rec, int tid, int threads) {
  for (int sl = tid; sl < P; sl += threads) {
    const int i = ids[sl];
    if (i >= 0 && i < Eg) {
      if (expert_map != nullptr) {
        const int m = expert_map[i];
        if (m < 0 || m >= E) record_map_fault(rec, sl / top_k, sl % top_k, i, m, E);
      }
    } else {
      record_id_fault(rec, sl / top_k, sl % top_k, i, Eg);
    }
  }
}

// The 128 threads of a warpgroup (`t` = 0..127 inside it), with named barrier `bar` of theirs:
// dst[r - r0] = the slot of rank r among expert e's slots in ascending slot order, for r in
// [r0, r1). Warp w owns a share of slot_e [P] (a multiple of 32 slots, the four shares covering
// it): it counts e's slots there (ballots), the counts (through warp_rows [4]) give each warp its
// first rank, and the warps whose ranks meet [r0, r1) place theirs: 2 P / 128 rounds a warp. It
// starts and ends with a barrier of the warpgroup, so warp_rows and dst may be reused by the next
// call once every thread has read what it needs of this one's.
template <class SlotE>
__device__ __forceinline__ void place_window(const SlotE* slot_e, int P, int e, int r0, int r1, int t, int bar,
                                             int* warp_rows, int* dst) {
  const int warp = t >> 5, lane = t & 31;
  const int per = (P + 127) / 128 * 32;
  const int b = warp * per, end = min(P, b + per);
  int n = 0;
  for (int base = b; base < end; base += 32) {
    const int sl = base + lane;
    n += __popc(__ballot_sync(0xffffffffu, sl < end && slot_e[sl] == e));
  }
  // Every thread is past its reads of the previous call's warp_rows and dst.
  if (lane == 0) warp_rows[warp] = n;
  sm90::named_barrier_sync(bar, 128);
  int rank = 0;  // e's slots in the shares before this warp's
  for (int v = 0; v < warp; ++v) rank += warp_rows[v];
  if (rank < r1 && rank + n > r0) {
    for (int base = b; base < end && rank < r1; base += 32) {
      const int sl = base + lane;
      const unsigned m = __ballot_sync(0xffffffffu, sl < end && slot_e[sl] == e);
      const int r = rank + __popc(m & ((1u << lane) - 1u));
      if (((m >> lane) & 1u) && r >= r0 && r < r1) dst[r - r0] = sl;
      rank += __popc(m);
    }
  }
  sm90::named_barrier_sync(bar, 128);
}

}  // namespace moekit::cuda::slot_routing
