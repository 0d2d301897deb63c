// A token-major GEMM1 prefetches the first bytes of the touched experts' w2 into L2 at its end
// (GroupedGemmParams::l2_next; half the L2 by default, MOEKIT_TOKMAJOR_L2_NEXT_MB sets it in MB,
// "0" turns it off). A prefetch is a hint: the output is bitwise the same whatever the budget,
// including a budget of a few pieces (1 MB) and one past every touched expert (1024 MB: the
// prefetch loop runs out of experts). A bad value fails the call before anything is enqueued
// (label gpu; skipped without a Hopper GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

constexpr std::uint16_t kPoison = 0xffff;  // DeviceCase::run memsets out to 0xff bytes: a bf16 NaN
constexpr const char* kEnv = "MOEKIT_TOKMAJOR_L2_NEXT_MB";

void check_budgets_bitwise(const CaseSpec& spec) {
  const MoeCase c = make_case(spec);
  DeviceCase d(c);
  for (CallMode mode : {CallMode::kFusedExperts, CallMode::kFusedMoe})
    for (std::int64_t M : {1, 37, 300}) {
      if (M > spec.M) continue;
      SCOPED_TRACE(spec.name() + " " + call_mode_name(mode) + " M=" + std::to_string(M));
      try {
        std::vector<std::uint16_t> off;
        {
          ScopedEnv e(kEnv, "0");
          off = d.run(M, mode, "tokmajor");
        }
        ASSERT_EQ(0, std::count(off.begin(), off.end(), kPoison)) << "no prefetch: out not written";
        for (const char* mb : {static_cast<const char*>(nullptr), "1", "1024"}) {
          ScopedEnv e(kEnv, mb);  // null: unset, the default budget (half the L2)
          const std::vector<std::uint16_t> got = d.run(M, mode, "tokmajor");
          EXPECT_TRUE(got == off) << kEnv << " = " << (mb != nullptr ? mb : "(unset)") << " changed the output";
        }
      } catch (const Error& e) {
        ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
      }
    }
}

CaseSpec spec_of(Scheme scheme, std::int64_t E, std::int64_t k, std::int64_t K, std::int64_t N) {
  CaseSpec s;
  s.M = 300;
  s.E = E;
  s.k = k;
  s.K = K;
  s.N = N;
  s.scheme = scheme;
  s.seed = 51;
  return s;
}

// The mixtral shape shrunk (E = 8, k = 2), qwen3-30b's (E = 32, k = 8, N = 96: experts with no
// row at M = 1, whose w2 the prefetch skips), fp8 dynamic and static, block128.
TEST(Sm90TokMajorL2Next, SameBitsAtEveryBudget) {
  SKIP_WITHOUT_SM90();
  check_budgets_bitwise(spec_of(Scheme::kBf16, 8, 2, 512, 256));
  check_budgets_bitwise(spec_of(Scheme::kFp8PerTensor, 32, 8, 1024, 96));
  CaseSpec s = spec_of(Scheme::kFp8PerTensor, 8, 2, 512, 256);
  s.static_scales = true;
  check_budgets_bitwise(s);
  check_budgets_bitwise(spec_of(Scheme::kFp8Block128, 8, 2, 512, 256));
}

// With an expert_map half the global experts are remote (never touched), with biases and
// swiglu_oai the epilogues' column terms run too.
TEST(Sm90TokMajorL2Next, SameBitsExpertMapAndBias) {
  SKIP_WITHOUT_SM90();
  CaseSpec s = spec_of(Scheme::kBf16, 8, 2, 256, 208);
  s.expert_map = true;
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  check_budgets_bitwise(s);
}

TEST(Sm90TokMajorL2Next, BadValueFailsTheCall) {
  SKIP_WITHOUT_SM90();
  const MoeCase c = make_case(spec_of(Scheme::kBf16, 8, 2, 256, 128));
  DeviceCase d(c);
  for (const char* bad : {"x", "-1", "1025", "12mb"}) {
    ScopedEnv e(kEnv, bad);
    try {
      d.run(37, CallMode::kFusedExperts, "tokmajor");
      ADD_FAILURE() << kEnv << " = '" << bad << "' was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.status(), Status::kInvalidArgument) << err.what();
      EXPECT_NE(std::string(err.what()).find(kEnv), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace moekit::testing
