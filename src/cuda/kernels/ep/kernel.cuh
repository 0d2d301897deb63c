// The expert-parallel bookkeeping kernels. The plan is one block walking the slots in ascending
// order a chunk at a time, so a slot's position inside its destination's region is its rank
// among earlier slots to the same destination: deterministic and equal to the CPU reference.
// Nothing here is specific to sm_90 (warp ballots and shuffles, 16-byte loads): hence kernel.cuh,
// launch.hpp / .cu and kernel names without the arch. Included by inst/ep.cu alone (the plan
// kernel is not a template: a second includer would define it twice).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/kernels/ep/config.hpp"
#include "cuda/kernels/ep/params.hpp"

namespace moekit::cuda::ep {

// expert_owner of moekit/parallel.hpp: contiguous ranges, the first E % ep ranks one larger.
__device__ __forceinline__ int ep_owner(std::int64_t id, std::int64_t num_experts, int ep) {
  if (id < 0 || id >= num_experts) return -1;
  const std::int64_t base = num_experts / ep, rem = num_experts % ep;
  const std::int64_t big = rem * (base + 1);
  if (id < big) return static_cast<int>(id / (base + 1));
  return static_cast<int>(rem + (id - big) / base);
}

// slot_route[i] = d*C + pos, counts[d] = slots to d. Per chunk of 1024 slots and per peer: a
// ballot gives each lane its rank inside the warp, warp 0 scans the warp totals, a running base
// per peer (shared) carries the count across chunks.
__global__ void __launch_bounds__(kPlanThreads)
    ep_plan_kernel(const std::int32_t* __restrict__ ids, std::int64_t slots, std::int64_t num_experts, int ep,
                        std::int64_t capacity, std::int32_t* __restrict__ route, std::int32_t* __restrict__ counts,
                        std::int64_t top_k, FaultRecord* faults) {
  extern __shared__ int base[];  // [ep]
  __shared__ int warp_total[32];
  __shared__ int warp_offset[32];
  __shared__ int chunk_total;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int num_warps = blockDim.x >> 5;
  for (int p = tid; p < ep; p += blockDim.x) base[p] = 0;
  __syncthreads();
  for (std::int64_t chunk = 0; chunk < slots; chunk += blockDim.x) {
    const std::int64_t i = chunk + tid;
    const int id = i < slots ? ids[i] : -1;
    const int d = ep_owner(id, num_experts, ep);
    if (d < 0) record_id_fault(faults, i / top_k, static_cast<int>(i % top_k), id, static_cast<int>(num_experts));
    int pos = -1;
    for (int p = 0; p < ep; ++p) {
      const unsigned ballot = __ballot_sync(0xffffffffu, d == p);
      if (lane == 0) warp_total[warp] = __popc(ballot);
      __syncthreads();
      if (warp == 0) {
        const int v = lane < num_warps ? warp_total[lane] : 0;
        const int incl = warp_inclusive_sum(v, lane);
        warp_offset[lane] = incl - v;
        if (lane == 31) chunk_total = incl;
      }
      __syncthreads();
      if (d == p) pos = base[p] + warp_offset[warp] + __popc(ballot & ((1u << lane) - 1u));
      __syncthreads();
      if (tid == 0) base[p] += chunk_total;
    }
    if (i < slots) route[i] = d >= 0 ? static_cast<std::int32_t>(d * capacity + pos) : -1;
  }
  __syncthreads();
  for (int p = tid; p < ep; p += blockDim.x) counts[p] = base[p];
}

// One block per slot: copy the token's row to its place in the send buffer, and its meta.
template <class V>
__global__ void __launch_bounds__(kRowThreads)
    ep_pack_kernel(const V* __restrict__ hidden, const std::int32_t* __restrict__ ids,
                        const float* __restrict__ weights, const std::int32_t* __restrict__ route, std::int64_t slots,
                        std::int64_t top_k, std::int64_t row_vecs, V* __restrict__ send, std::int32_t* __restrict__ meta) {
  for (std::int64_t i = blockIdx.x; i < slots; i += gridDim.x) {
    const std::int64_t r = route[i];
    if (r < 0) continue;
    const V* src = hidden + (i / top_k) * row_vecs;
    V* dst = send + r * row_vecs;
    for (std::int64_t c = threadIdx.x; c < row_vecs; c += blockDim.x) dst[c] = src[c];
    if (threadIdx.x == 0) {
      meta[2 * r] = ids[i];
      meta[2 * r + 1] = __float_as_int(weights[i]);
    }
  }
}

template <class V>
__global__ void __launch_bounds__(kRowThreads)
    ep_unpack_kernel(const std::int32_t* __restrict__ counts, const std::int32_t* __restrict__ meta,
                          V* __restrict__ hidden, std::int64_t rows, std::int64_t capacity, std::int64_t row_vecs,
                          std::int64_t first_expert, std::int64_t num_local, bool zero_unused,
                          std::int32_t* __restrict__ local_ids, float* __restrict__ local_weights) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t s = row / capacity, p = row - s * capacity;
    const bool valid = p < counts[s];
    if (threadIdx.x == 0) {
      if (valid) {
        const std::int64_t local = static_cast<std::int64_t>(meta[2 * row]) - first_expert;
        local_ids[row] = local >= 0 && local < num_local ? static_cast<std::int32_t>(local) : -1;
        local_weights[row] = __int_as_float(meta[2 * row + 1]);
      } else {
        local_ids[row] = -1;
        local_weights[row] = 0.0f;
      }
    }
    if (!valid && zero_unused) {
      V* dst = hidden + row * row_vecs;
      for (std::int64_t c = threadIdx.x; c < row_vecs; c += blockDim.x) dst[c] = V{};
    }
  }
}

// One block per token: its k routes in shared memory, then each thread sums columns in j order.
template <class T>
__global__ void __launch_bounds__(kCombineThreads)
    ep_combine_kernel(const std::int32_t* __restrict__ route, const T* __restrict__ returned,
                           std::int64_t returned_rows, std::int64_t num_tokens, std::int64_t top_k,
                           std::int64_t hidden_size, T* __restrict__ out) {
  extern __shared__ std::int64_t rows[];  // [top_k]
  for (std::int64_t m = blockIdx.x; m < num_tokens; m += gridDim.x) {
    __syncthreads();
    for (std::int64_t j = threadIdx.x; j < top_k; j += blockDim.x) {
      const std::int64_t r = route[m * top_k + j];
      rows[j] = r < returned_rows ? r : -1;  // a corrupt route is never used as an index
    }
    __syncthreads();
    for (std::int64_t c = threadIdx.x; c < hidden_size; c += blockDim.x) {
      float acc = 0.0f;
      for (std::int64_t j = 0; j < top_k; ++j)
        if (rows[j] >= 0) acc += to_float(returned[rows[j] * hidden_size + c]);
      out[m * hidden_size + c] = from_float<T>(acc);
    }
  }
}

// ---- host side of one instantiation (inst/ep.cu) ----

// Rows move as 16-byte vectors (uint4) or 2-byte elements.
template <int kVecBytes> struct RowVec;
template <> struct RowVec<16> { using type = uint4; };
template <> struct RowVec<2> { using type = std::uint16_t; };

template <int kVecBytes>
void run_ep_pack(const EpPackParams& p, unsigned grid, void* stream) {
  using V = typename RowVec<kVecBytes>::type;
  ep_pack_kernel<V><<<grid, kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const V*>(p.hidden), p.ids, p.weights, p.route, p.slots, p.top_k, p.row_vecs, static_cast<V*>(p.send),
      p.meta);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <int kVecBytes>
void run_ep_unpack(const EpUnpackParams& p, unsigned grid, void* stream) {
  using V = typename RowVec<kVecBytes>::type;
  ep_unpack_kernel<V><<<grid, kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      p.counts, p.meta, static_cast<V*>(p.hidden), p.rows, p.capacity, p.row_vecs, p.first_expert, p.num_local,
      p.zero_unused, p.local_ids, p.local_weights);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

template <DType kAct>
void run_ep_combine(const EpCombineParams& p, unsigned grid, std::size_t smem, void* stream) {
  using T = element_t<kAct>;
  ep_combine_kernel<T><<<grid, kCombineThreads, smem, static_cast<cudaStream_t>(stream)>>>(
      p.route, static_cast<const T*>(p.returned), p.returned_rows, p.num_tokens, p.top_k, p.hidden_size,
      static_cast<T*>(p.out));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda::ep
