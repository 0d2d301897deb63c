// The combine kernel: one thread per (token, 4 columns), the k slots summed in j order in fp32,
// slots whose expert is not local skipped (their y rows are never written, never read).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/convert.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/preload.cuh"
#include "cuda/kernels/combine/combine.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this
constexpr int kSlotBatch = 8;               // slots whose loads are in flight together (k <= 8 in every preset)

template <class TOut, int kVec>
__global__ void __launch_bounds__(kThreads) combine_sm90_kernel(const __grid_constant__ CombineParams p) {
  // PDL (cuda/common/pdl.cuh): y, topk_ids and out are all touched after the wait. The last kernel
  // of the chain never calls pdl_launch_dependents(): the caller's next kernel, possibly a PDL
  // launch, must not start while `out` is half written, so it launches as these CTAs exit.
  pdl_wait();
  const std::int64_t vecs_per_row = p.hidden_size / kVec;
  const std::int64_t total = p.num_tokens * vecs_per_row;
  TOut* out = static_cast<TOut*>(p.out);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t m = i / vecs_per_row;
    const std::int64_t c = (i - m * vecs_per_row) * kVec;
    float acc[kVec];
#pragma unroll
    for (int t = 0; t < kVec; ++t) acc[t] = 0.f;
    // Slots in batches of kSlotBatch: the batch's ids, then its expert_map entries, then all of
    // its y loads are issued before the first add, so a token costs three memory latencies per
    // batch instead of one chain per slot (at decode the kernel is nothing but these latencies).
    // The adds still run in j order, skipping non-local slots: the sum is the same bits.
    for (int j0 = 0; j0 < p.top_k; j0 += kSlotBatch) {
      int e[kSlotBatch];
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) e[t] = j0 + t < p.top_k ? __ldg(p.topk_ids + m * p.top_k + j0 + t) : -1;
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) {
        const int id = e[t];
        e[t] = (id < 0 || id >= p.num_experts_global) ? -1 : (p.expert_map != nullptr ? __ldg(p.expert_map + id) : id);
        if (e[t] >= p.num_experts) e[t] = -1;
      }
      float v[kSlotBatch][kVec];
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) {
        // Non-local slots' y rows are never written: not read either (predicated off).
        const float* yr = p.y + (m * p.top_k + j0 + t) * p.hidden_size + c;
        if constexpr (kVec == 4) {
          float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
          if (e[t] >= 0) q = __ldcs(reinterpret_cast<const float4*>(yr));  // streamed: read once
          v[t][0] = q.x; v[t][1] = q.y; v[t][2] = q.z; v[t][3] = q.w;
        } else {
          v[t][0] = e[t] >= 0 ? __ldcs(yr) : 0.f;
        }
      }
#pragma unroll
      for (int t = 0; t < kSlotBatch; ++t) {
        if (e[t] < 0) continue;
#pragma unroll
        for (int q = 0; q < kVec; ++q) acc[q] += v[t][q];
      }
    }
    TOut* o = out + m * p.hidden_size + c;
    if constexpr (kVec == 4) {
      TOut r[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) r[t] = from_float<TOut>(acc[t]);
      *reinterpret_cast<uint2*>(o) = *reinterpret_cast<const uint2*>(r);
    } else {
      o[0] = from_float<TOut>(acc[0]);
    }
  }
}

template <class TOut>
void launch_typed(const CombineParams& p, cudaStream_t stream, bool pdl) {
  const bool vec4 = p.hidden_size % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.out) % 8 == 0 &&
                    reinterpret_cast<std::uintptr_t>(p.y) % 16 == 0;
  const int vec = vec4 ? 4 : 1;
  const std::int64_t total = p.num_tokens * (p.hidden_size / vec);
  const unsigned grid = static_cast<unsigned>(std::max<std::int64_t>(1, std::min(kMaxBlocks, (total + kThreads - 1) / kThreads)));
  launch_kernel_pdl(vec4 ? combine_sm90_kernel<TOut, 4> : combine_sm90_kernel<TOut, 1>, dim3(grid), dim3(kThreads), 0,
                    stream, pdl, p);
}

// Preloaded at the first call (cuda/common/preload.cuh): nothing loads lazily.
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, 4>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__nv_bfloat16, 1>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, 4>);
MOEKIT_REGISTER_KERNEL(combine_sm90_kernel<__half, 1>);

}  // namespace

void launch_combine_sm90(const CombineParams& p, void* stream, bool pdl) {
  if (p.num_tokens <= 0 || p.hidden_size <= 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.out_dtype) {
    case DType::kBf16: launch_typed<__nv_bfloat16>(p, s, pdl); break;
    case DType::kFp16: launch_typed<__half>(p, s, pdl); break;
    default:
      throw Error(Status::kInternal, std::string("launch_combine_sm90: unsupported out dtype ") + dtype_name(p.out_dtype));
  }
}

}  // namespace moekit::cuda
