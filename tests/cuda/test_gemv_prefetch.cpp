// The GEMV path's L2 prefetch (GemvParams::l2_prefetch, MOEKIT_GEMV_PREFETCH_KB) is a hint: it
// must not change a bit of the output. Both GEMV kernels, forced by MOEKIT_GEMV_KERNEL, run each
// case with the prefetch off (0), with a budget so small that only part of GEMM1 goes ahead and
// w2 goes after GEMM1 (1 KB), and with the default (everything at the start where it fits);
// the outputs must be fully written, bitwise equal, and within tolerance of the CPU reference.
// A bad MOEKIT_GEMV_PREFETCH_KB is an error raised before anything is enqueued. (label gpu;
// skipped without a Hopper GPU.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "cuda/kernels/gemv/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

constexpr std::uint16_t kPoison = 0xffff;  // DeviceCase::run memsets out to 0xff bytes: a bf16 NaN

CaseSpec spec_of(std::int64_t M, std::int64_t E, std::int64_t k, std::int64_t K, std::int64_t N, Scheme scheme,
                 bool bias, std::uint64_t seed) {
  CaseSpec s;
  s.M = M;
  s.E = E;
  s.k = k;
  s.K = K;
  s.N = N;
  s.scheme = scheme;
  s.static_scales = false;  // fp8: dynamic activation and intermediate scales
  s.seed = seed;
  if (bias) {
    s.bias = true;
    s.activation.kind = Activation::kSwigluOai;
  }
  return s;
}

void check_prefetch_keeps_bits(const CaseSpec& spec) {
  MoeCase c = make_case(spec);
  DeviceCase d(c);
  for (const char* kernel : {"cuda", "mma"})
    for (std::int64_t M : {std::int64_t{1}, std::int64_t{3}, spec.M}) {
      SCOPED_TRACE(spec.name() + " kernel=" + kernel + " M=" + std::to_string(M));
      ScopedEnv force("MOEKIT_GEMV_KERNEL", kernel);
      std::vector<std::vector<std::uint16_t>> outs;
      std::vector<std::string> ran;
      for (const char* kb : std::initializer_list<const char*>{"0", "1", nullptr}) {
        try {
          if (kb != nullptr) {
            ScopedEnv budget("MOEKIT_GEMV_PREFETCH_KB", kb);
            outs.push_back(d.run(M, CallMode::kFusedExperts, "gemv"));
          } else {
            outs.push_back(d.run(M, CallMode::kFusedExperts, "gemv"));
          }
          ran.push_back(cuda::gemv_last_kernel());
        } catch (const Error& e) {
          FAIL() << status_name(e.status()) << ": " << e.what();
        }
      }
      ASSERT_EQ(0, std::count(outs[0].begin(), outs[0].end(), kPoison)) << "out not fully written";
      EXPECT_TRUE(outs[1] == outs[0]) << "a 1 KB prefetch budget changed the output";
      EXPECT_TRUE(outs[2] == outs[0]) << "the default prefetch changed the output";
      EXPECT_TRUE(ran[0] == ran[1] && ran[1] == ran[2]) << "the kernel changed with the prefetch budget";
      EXPECT_TRUE(rows_match(to_float(outs[2], spec.act_dtype), reference_rows(c, 0, M), spec.K, spec.scheme,
                             spec.name() + " gemv " + ran[2]));
    }
}

// qwen3-30b's TP8 shape shrunk to E = 32 (N = 96, K = 2048): everything fits the default budget.
TEST(Sm90Gemv, L2PrefetchKeepsTheBitsSmall) {
  SKIP_WITHOUT_SM90();
  check_prefetch_keeps_bits(spec_of(8, 32, 8, 2048, 96, Scheme::kBf16, false, 71));
  check_prefetch_keeps_bits(spec_of(8, 32, 8, 2048, 96, Scheme::kFp8PerTensor, false, 72));
}

// mixtral's TP8 shape (E = 8, k = 2, K = 4096, N = 1792): 2 x 14 MB of w13 and 117 MB of w2 at 8
// tokens, over the default budget: GEMM1's first half-budget at the start, w2 after GEMM1.
TEST(Sm90Gemv, L2PrefetchKeepsTheBitsLarge) {
  SKIP_WITHOUT_SM90();
  check_prefetch_keeps_bits(spec_of(8, 8, 2, 4096, 1792, Scheme::kBf16, false, 73));
}

// gpt-oss's TP8 shape in fp8 (N = 360: w2 rows of 360 bytes, 8-byte but not 16-byte multiples,
// the tensor-core kernel's half chunks; biases and swiglu_oai). The CUDA-core kernel declines
// these rows, so MOEKIT_GEMV_KERNEL=cuda runs the tensor-core kernel here too.
TEST(Sm90Gemv, L2PrefetchKeepsTheBitsHalfChunkRows) {
  SKIP_WITHOUT_SM90();
  check_prefetch_keeps_bits(spec_of(8, 16, 4, 2880, 360, Scheme::kFp8PerTensor, true, 74));
}

TEST(Sm90Gemv, BadPrefetchBudgetIsAnError) {
  SKIP_WITHOUT_SM90();
  const MoeCase c = make_case(spec_of(2, 8, 2, 256, 64, Scheme::kBf16, false, 75));
  DeviceCase d(c);
  for (const char* bad : {"x", "-1", "12kb", ""}) {
    ScopedEnv budget("MOEKIT_GEMV_PREFETCH_KB", bad);
    try {
      d.run(2, CallMode::kFusedExperts, "gemv");
      ADD_FAILURE() << "MOEKIT_GEMV_PREFETCH_KB='" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("MOEKIT_GEMV_PREFETCH_KB"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moekit
