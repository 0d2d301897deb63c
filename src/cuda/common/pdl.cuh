// Programmatic dependent launch (PDL, sm_90) across the launches of one run_moe call: a kernel
// launched with the programmatic-stream-serialization attribute may start while the previous
// kernel on the stream is still running, and waits in pdl_wait() until that kernel has completed
// and its memory is visible. Its prologue (shared memory, mbarrier init, tensormap prefetch)
// overlaps the previous kernel's tail instead of following a launch gap.
//
// The rule every kernel of the chain follows:
//  - Before pdl_wait() a kernel touches no global memory that an earlier kernel of the chain
//    writes, nor writes what one reads: only shared memory, mbarrier init, prefetch.tensormap of a
//    __grid_constant__ parameter, the kernel parameters themselves, and reads of inputs that no
//    kernel of the call writes (the decode path's combine reads topk_ids before its wait). Everything else comes after: reads (RAW:
//    expert offsets, sorted slots, quantized rows, y) and writes alike (WAR: combine writing
//    `out`, which an in-place caller aliases with `hidden`, read by quant and GEMM1).
//  - Every CTA runs pdl_wait() before it exits, also one with no work. pdl_wait() waits for the
//    immediately preceding grid only; a grid cannot complete before its predecessor because each
//    of its CTAs waited, so completion chains transitively (kernel 4 waiting on kernel 3 implies
//    kernels 1 and 2 are done). A CTA that returned early without waiting would break that chain.
//  - pdl_launch_dependents() only lets the next kernel's CTAs launch (into its own pdl_wait);
//    correctness never depends on where it is. The kernels call it right after their pdl_wait():
//    by then every CTA of this grid that gets there is resident (the dependents launch once all
//    CTAs triggered or exited, so they never take SMs from this grid's own later CTAs), and since
//    it is after the wait, at most two kernels of the chain are in flight at once.
//    One exception: the per-expert MLP kernel (kernels/expert_mlp/) triggers right after its
//    routing, before its own pdl_wait, so that its combine is resident when it ends; on the fp8
//    path (the quantization launch its predecessor) three kernels of the chain can then be in
//    flight. Correctness does not change: each of its CTAs waits before it reads hidden or exits.
//  - The first launch of a call (routing) never has the attribute, so a call never overlaps what
//    the caller ran before it (and the previous call's kernels, which read the offsets and slots
//    routing rewrites, have completed). The last kernel (combine) never triggers: the caller's
//    next kernel, possibly a PDL launch itself, then starts only as combine's CTAs exit.
//
// MOEKIT_PDL=0 in the environment turns the attribute off (read by pdl_enabled() at every
// run_moe call, so a benchmark can A/B it in one process; a CUDA graph keeps what was captured).
// Without a programmatic dependency griddepcontrol.wait returns at once, so the kernels are the
// same either way.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "core/env.hpp"
#include "cuda/common/check.cuh"

namespace moekit::cuda {

#if defined(__CUDACC__)
// Waits until the preceding grid of the stream (when launched as its programmatic dependent) has
// completed and its memory operations are visible; a no-op otherwise.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid of the stream launch once every CTA of this grid has called it or exited.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif  // __CUDACC__

// Whether run_moe launches its kernels after the first with PDL: true unless MOEKIT_PDL is "0".
// Read at every call (the call's MOEKIT_* snapshot, core/env.hpp), so setenv between calls takes
// effect at the next call.
// PDL is used for calls of at most this many tokens whose GEMMs do not run on the token-major
// path (backend.cu). Measured on the H200 in one run, PDL off vs on, every preset, TP 1 and 8,
// bf16 and fp8, M = 1..1024, twice each (bench/results/...-8924ce2-h200-pdl-{off,on}-{1,2}.json;
// run-to-run noise p10-p90 0.99-1.01x): it saves 1-2 % at M <= 32 (median 1.02x at M = 1, up
// to 1.12x), nothing at M = 64, and costs up to 11 % wherever a GEMM runs token-major (mixtral
// TP8 M=128: 146 vs 164 µs; qwen3-30b TP8 M=512: 168 vs 188): the early-launched dependents of a
// persistent 132-CTA kernel only compete with it there.
inline constexpr long long kPdlMaxTokens = 64;

inline bool pdl_enabled() {
  const char* v = moekit::detail::env_value(moekit::detail::EnvVar::kPdl);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Appends the PDL attribute to `cfg` when `pdl`. `attrs` is cfg's attribute array (cfg.attrs, or
// any array when cfg.numAttrs == 0) with room for one more entry.
inline void add_pdl_attribute(cudaLaunchConfig_t& cfg, cudaLaunchAttribute* attrs, bool pdl) {
  if (!pdl) return;
  attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  ++cfg.numAttrs;
}

// The launch configuration of `grid` x `block` CTAs with `smem` bytes of dynamic shared memory on
// `stream`, in thread-block clusters of `cluster` CTAs along x when cluster > 1 (the attribute
// goes to attrs[0]; none when cluster == 1). One more entry in `attrs` makes room for
// add_pdl_attribute's.
inline cudaLaunchConfig_t cluster_launch_config(unsigned grid, unsigned block, std::size_t smem, cudaStream_t stream,
                                                int cluster, cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(block, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  return cfg;
}

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx, with the PDL
// attribute when `pdl`; checked (moekit::Error on a failed launch).
template <class... Params, class... Args>
void launch_kernel_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                       bool pdl, const Args&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[1];
  add_pdl_attribute(cfg, attrs, pdl);
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace moekit::cuda
