// The kernel registry and preload (src/cuda/common/preload.cuh): every kernel family registers
// every instantiation its launcher can pick (host-only checks: these run without a GPU and prove
// the registering objects were linked in), and on an sm_90 GPU moekit::cuda_available() loads them
// all, so that no first call at a new batch size pays CUDA's lazy module loading.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda/common/preload.cuh"
#include "moekit/error.hpp"
#include "moekit/ops.hpp"

namespace {

// Its own device probe, not common/cuda_test.hpp's skip: that one calls moekit::cuda_available(),
// which preloads, and these tests are about what loads the kernels.
bool has_sm90() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major == 9 && prop.minor == 0;
}

// "swapab::swapab_sm90_kernel<sm90::E4m3Tag, true, true>" -> "swapab_sm90_kernel".
std::string base_name(const std::string& expr) {
  std::string s = expr.substr(0, expr.find('<'));
  const auto colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

TEST(Preload, EveryKernelFamilyIsRegistered) {
  const std::vector<moekit::cuda::RegisteredKernel> kernels = moekit::cuda::registered_kernels();
  EXPECT_GT(kernels.size(), 20u);
  std::set<const void*> pointers;
  std::set<std::string> names;
  std::map<std::string, int> per_kernel;
  for (const auto& k : kernels) {
    ASSERT_NE(k.fn, nullptr);
    ASSERT_NE(k.name, nullptr);
    EXPECT_TRUE(pointers.insert(k.fn).second) << "registered twice: " << k.name;
    EXPECT_TRUE(names.insert(k.name).second) << "name registered twice: " << k.name;
    ++per_kernel[base_name(k.name)];
  }
  // What each launcher can pick: routing {fp32, bf16 logits} x {256, 1024 threads}, the
  // multi-CTA permutation's count launch {fp32, bf16 logits} and its scatter launch; combine
  // {bf16, fp16} out x {fp32, out dtype} y x {vec 4, 1}; quant {bf16, fp16, fp32} x {vec 4, 1} per kernel; the GEMMs per
  // operand / epilogue / scale layout (Swap-AB: and its kPlain GEMM1 / GEMM2 per operand but
  // block128); the fused path per operand; EP per row width / dtype.
  const std::map<std::string, int> expected = {
      {"routing_sm90_kernel", 6},       {"permute_count_sm90_kernel", 3},  // and the permutation-only ones
      {"permute_scatter_sm90_kernel", 1}, {"combine_sm90_kernel", 8},
      {"absmax_tensor_sm90_kernel", 6}, {"quant_tensor_sm90_kernel", 6},
      {"quant_tensor_small_sm90_kernel", 6}, {"quant_row_sm90_kernel", 6},
      {"quant_group_sm90_kernel", 6},   {"mma_sm90_kernel", 4},
      {"swapab_sm90_kernel", 14},       {"tokmajor_sm90_kernel", 14},  // 8 + GEMM2's ping-pong form per operand + GEMM1 routing in the kernel (bf16, fp16, e4m3)
      {"kshort_sm90_kernel", 3},  // the static K-short GEMM2, per operand
      {"expert_mlp_sm90_kernel", 26},  // the per-expert MLP kernel: bf16, fp16, e4m3, e4m3 per channel, x one CTA / cluster, x the phase timer (tests only); e4m3 row pairs (cluster), x the timer; the plain kernels (bf16, fp16, e4m3, e4m3 per channel x one CTA / cluster, untimed)
      {"fused_moe_sm90_kernel", 3},     {"ep_plan_kernel", 1},  // EP: arch-generic (kernels/ep/kernel.cuh)
      {"ep_pack_kernel", 2},            {"ep_unpack_kernel", 2},
      {"ep_combine_kernel", 2},
      {"inv_rope_quant_sm90_kernel", 1},  // rope_quant: the register kernel (2 rows a warp)
      {"inv_rope_quant_pipe_sm90_kernel", 2},  // rope_quant: the pipelined kernel, 4 and 8 stages
      {"inv_rope_quant_small_sm90_kernel", 1},  // rope_quant: the latency-first kernel
      {"inv_rope_quant_bulk_sm90_kernel", 1},   // rope_quant: the bulk-copy kernel
      {"inv_rope_quant_half_sm90_kernel", 1},   // rope_quant: the half-warp kernel
      {"decode_sm90_kernel", 64},         // decode: bf16, fp16 (whole); e4m3 with bf16 / fp16 activations
                                          // (whole, up, down, block128, channel, channel up, channel
                                          // down), each at token widths 8, 16, 32, 64
      {"decode_combine_kernel", 4},       // decode: its PDL-launched combine, one per operand
      {"gemv_sm90_kernel", 4},            // gemv: bf16, fp16, e4m3 with bf16 / fp16 activations
      {"gemv_fast_sm90_kernel", 4},       // gemv: the same four with GEMM2's one-round form
      {"gemv_mma_sm90_kernel", 4},        // gemv's tensor-core kernel: the same four
      {"gemv_mma_general_sm90_kernel", 2},  // its general e4m3 instantiation (per channel, 8-byte w2 rows)
      {"gemv_mma_wide_sm90_kernel", 2},   // its plain e4m3 form with GEMM1 tasks of 32 columns
      {"gemv_mma_decoupled_sm90_kernel", 2},  // its plain e4m3 form with GEMM1's units on mbarriers
      {"gemv_mma_qg_sm90_kernel", 2},     // its plain e4m3 form with GEMM1 on wgmma
  };
  for (const auto& [name, count] : expected) EXPECT_EQ(per_kernel[name], count) << name;
  EXPECT_EQ(per_kernel.size(), expected.size()) << "a kernel family this test does not know: update it";
}

TEST(Preload, CudaAvailableLoadsEveryKernel) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 GPU";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // device_ok preloads the probed device when it is current
  std::string why;
  ASSERT_TRUE(moekit::cuda_available(&why)) << why;
  EXPECT_TRUE(moekit::cuda::kernels_preloaded(0));
  moekit::cuda::preload_kernels(0);  // idempotent, cheap
  const auto kernels = moekit::cuda::registered_kernels();
  EXPECT_GT(kernels.size(), 20u);
  for (const auto& k : kernels) {
    cudaFuncAttributes attr{};
    EXPECT_EQ(cudaFuncGetAttributes(&attr, k.fn), cudaSuccess) << k.name;
    EXPECT_GT(attr.maxThreadsPerBlock, 0) << k.name;
    EXPECT_GE(attr.ptxVersion, 0) << k.name;
  }
}

TEST(Preload, PublicPreloadReportsTheLoad) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 GPU";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const moekit::PreloadReport r = moekit::preload(-1);  // the current device
  EXPECT_EQ(r.device, 0);
  EXPECT_EQ(r.kernels, static_cast<int>(moekit::cuda::registered_kernels().size()));
  EXPECT_GT(r.load_ms, 0.0);
  EXPECT_GE(r.load_ms, r.context_ms);
  ASSERT_EQ(r.slowest.size(), std::min<std::size_t>(5, moekit::cuda::registered_kernels().size()));
  for (std::size_t i = 1; i < r.slowest.size(); ++i) EXPECT_GE(r.slowest[i - 1].second, r.slowest[i].second);
  EXPECT_TRUE(moekit::cuda::kernels_preloaded(0));
  // Later calls load nothing and report the same load.
  const moekit::PreloadReport again = moekit::preload(0);
  EXPECT_FALSE(again.loaded_now);
  EXPECT_EQ(again.load_ms, r.load_ms);
  EXPECT_EQ(again.kernels, r.kernels);
}

TEST(Preload, EveryVisibleHopperDeviceLoads) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 GPU";
  int count = 0, previous = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&previous), cudaSuccess);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, d), cudaSuccess);
    if (prop.major != 9 || prop.minor != 0) continue;
    EXPECT_NO_THROW(moekit::cuda::preload_kernels(d)) << "device " << d;
    EXPECT_TRUE(moekit::cuda::kernels_preloaded(d));
    int now = -1;
    ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ(now, previous) << "preload_kernels must restore the current device";
  }
  EXPECT_THROW(moekit::cuda::preload_kernels(-1), moekit::Error);
}

}  // namespace
