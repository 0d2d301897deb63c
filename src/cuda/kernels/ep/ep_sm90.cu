// The expert-parallel bookkeeping kernels. The plan is one block walking the slots in ascending
// order a chunk at a time, so a slot's position inside its destination's region is its rank
// among earlier slots to the same destination: deterministic and equal to the CPU reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/common/preload.cuh"
#include "cuda/kernels/ep/ep.hpp"

namespace moekit::cuda {
namespace {

constexpr int kPlanThreads = 1024;  // 32 warps: one warp scans the 32 warp totals
constexpr int kRowThreads = 128;
constexpr int kCombineThreads = 256;
constexpr std::int64_t kMaxGrid = 1 << 20;  // grid-stride beyond this many blocks

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
    ep_plan_sm90_kernel(const std::int32_t* __restrict__ ids, std::int64_t slots, std::int64_t num_experts, int ep,
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
        int incl = v;
        for (int o = 1; o < 32; o <<= 1) {
          const int t = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += t;
        }
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
    ep_pack_sm90_kernel(const V* __restrict__ hidden, const std::int32_t* __restrict__ ids,
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
    ep_unpack_sm90_kernel(const std::int32_t* __restrict__ counts, const std::int32_t* __restrict__ meta,
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
    ep_combine_sm90_kernel(const std::int32_t* __restrict__ route, const T* __restrict__ returned,
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

unsigned grid_for(std::int64_t items) { return static_cast<unsigned>(std::min<std::int64_t>(items, kMaxGrid)); }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(ep_plan_sm90_kernel);
MOEKIT_REGISTER_KERNEL(ep_pack_sm90_kernel<uint4>);
MOEKIT_REGISTER_KERNEL(ep_pack_sm90_kernel<std::uint16_t>);
MOEKIT_REGISTER_KERNEL(ep_unpack_sm90_kernel<uint4>);
MOEKIT_REGISTER_KERNEL(ep_unpack_sm90_kernel<std::uint16_t>);
MOEKIT_REGISTER_KERNEL(ep_combine_sm90_kernel<__half>);
MOEKIT_REGISTER_KERNEL(ep_combine_sm90_kernel<__nv_bfloat16>);

}  // namespace

void launch_ep_dispatch_sm90(const detail::EpDispatchCall& c) {
  auto stream = static_cast<cudaStream_t>(c.stream);
  const std::int64_t slots = c.num_tokens * c.top_k;
  // moekit::ep_dispatch checked C >= M*k and ep*C < 2^31 (slot_route is int32).
  const std::size_t smem = static_cast<std::size_t>(c.ep_size) * sizeof(int);
  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  ep_plan_sm90_kernel<<<1, kPlanThreads, smem, stream>>>(c.topk_ids, slots, c.num_experts_global, c.ep_size,
                                                         c.capacity, c.slot_route, c.send_counts, c.top_k,
                                                         device_fault_record(device));
  MOEKIT_CUDA_CHECK_LAUNCH();
  if (slots == 0) return;
  const std::int64_t row_bytes = c.hidden_size * 2;
  if (row_bytes % 16 == 0 && aligned16(c.hidden) && aligned16(c.send_hidden)) {
    ep_pack_sm90_kernel<uint4><<<grid_for(slots), kRowThreads, 0, stream>>>(
        static_cast<const uint4*>(c.hidden), c.topk_ids, c.topk_weights, c.slot_route, slots, c.top_k, row_bytes / 16,
        static_cast<uint4*>(c.send_hidden), c.send_meta);
  } else {
    ep_pack_sm90_kernel<std::uint16_t><<<grid_for(slots), kRowThreads, 0, stream>>>(
        static_cast<const std::uint16_t*>(c.hidden), c.topk_ids, c.topk_weights, c.slot_route, slots, c.top_k,
        c.hidden_size, static_cast<std::uint16_t*>(c.send_hidden), c.send_meta);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void launch_ep_unpack_sm90(const detail::EpUnpackCall& c) {
  auto stream = static_cast<cudaStream_t>(c.stream);
  const std::int64_t rows = static_cast<std::int64_t>(c.ep_size) * c.capacity;
  if (rows == 0) return;
  const std::int64_t row_bytes = c.hidden_size * 2;
  if (row_bytes % 16 == 0 && aligned16(c.recv_hidden)) {
    ep_unpack_sm90_kernel<uint4><<<grid_for(rows), kRowThreads, 0, stream>>>(
        c.recv_counts, c.recv_meta, static_cast<uint4*>(c.recv_hidden), rows, c.capacity, row_bytes / 16,
        c.first_expert, c.num_local_experts, c.zero_unused_rows, c.local_ids, c.local_weights);
  } else {
    ep_unpack_sm90_kernel<std::uint16_t><<<grid_for(rows), kRowThreads, 0, stream>>>(
        c.recv_counts, c.recv_meta, static_cast<std::uint16_t*>(c.recv_hidden), rows, c.capacity, c.hidden_size,
        c.first_expert, c.num_local_experts, c.zero_unused_rows, c.local_ids, c.local_weights);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void launch_ep_combine_sm90(const detail::EpCombineCall& c) {
  auto stream = static_cast<cudaStream_t>(c.stream);
  if (c.num_tokens == 0) return;
  // Rounded up to whole 16-byte words: the compiler reads rows[] two at a time (ld.shared.v2),
  // and compute-sanitizer flags the second half past an odd top_k.
  const std::size_t smem = static_cast<std::size_t>((c.top_k + 1) / 2 * 2) * sizeof(std::int64_t);
  if (c.act_dtype == DType::kFp16) {
    ep_combine_sm90_kernel<__half><<<grid_for(c.num_tokens), kCombineThreads, smem, stream>>>(
        c.slot_route, static_cast<const __half*>(c.returned), c.returned_rows, c.num_tokens, c.top_k, c.hidden_size,
        static_cast<__half*>(c.out));
  } else {
    ep_combine_sm90_kernel<__nv_bfloat16><<<grid_for(c.num_tokens), kCombineThreads, smem, stream>>>(
        c.slot_route, static_cast<const __nv_bfloat16*>(c.returned), c.returned_rows, c.num_tokens, c.top_k, c.hidden_size,
        static_cast<__nv_bfloat16*>(c.out));
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda
