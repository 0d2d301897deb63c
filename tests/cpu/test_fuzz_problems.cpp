// The CPU half of the GPU fuzz test (tests/common/fuzz.hpp): problems are reproducible from
// (seed, index), always valid calls, small enough for the CPU reference, and the default run
// covers every option the fuzz test promises (so a GPU run of it cannot silently skip one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/fuzz.hpp"
#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

TEST(CpuFuzzProblems, SameSeedSameProblemsOtherSeedOthers) {
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const FuzzProblem a = draw_fuzz_problem(kDefaultFuzzSeed, i), b = draw_fuzz_problem(kDefaultFuzzSeed, i);
    EXPECT_EQ(describe_fuzz_problem(a), describe_fuzz_problem(b));
    const FuzzProblem c = draw_fuzz_problem(kDefaultFuzzSeed + 1, i);
    differ += describe_fuzz_problem(a).substr(describe_fuzz_problem(a).find(':')) !=
              describe_fuzz_problem(c).substr(describe_fuzz_problem(c).find(':'));
  }
  EXPECT_GE(differ, 45);
}

TEST(CpuFuzzProblems, DescriptionNamesEveryFieldAndTheRerun) {
  const FuzzProblem p = draw_fuzz_problem(123, 7);
  const std::string d = describe_fuzz_problem(p);
  for (const char* field : {"problem 7 of seed 123", "M=", "E=", "E_global=", "k=", "K=", "N=", "scheme=", "act_dtype=",
                            "activation=", "routing=", "renormalize=", "ids=", "bias=", "expert_map=",
                            "apply_router_weight_on_input=", "static_scales=", "case_seed=",
                            "MOEKIT_FUZZ_SEED=123 MOEKIT_FUZZ_FIRST=7 MOEKIT_FUZZ_COUNT=1"})
    EXPECT_NE(d.find(field), std::string::npos) << field << " missing in: " << d;
}

TEST(CpuFuzzProblems, EnvironmentSetsSeedCountAndFirst) {
  {
    ScopedEnv seed("MOEKIT_FUZZ_SEED", "0x10"), count("MOEKIT_FUZZ_COUNT", "7"), first("MOEKIT_FUZZ_FIRST", "3");
    EXPECT_EQ(fuzz_seed_from_env(), 16u);
    EXPECT_EQ(fuzz_count_from_env(300), 7);
    EXPECT_EQ(fuzz_first_from_env(), 3);
  }
  {
    ScopedEnv seed("MOEKIT_FUZZ_SEED", ""), count("MOEKIT_FUZZ_COUNT", ""), first("MOEKIT_FUZZ_FIRST", "");
    EXPECT_EQ(fuzz_seed_from_env(), kDefaultFuzzSeed);
    EXPECT_EQ(fuzz_count_from_env(300), 300);
    EXPECT_EQ(fuzz_first_from_env(), 0);
  }
  ScopedEnv bad("MOEKIT_FUZZ_COUNT", "many");
  EXPECT_THROW(fuzz_count_from_env(300), std::invalid_argument);
}

// Invariants of every problem of the default run, and its coverage.
TEST(CpuFuzzProblems, DefaultRunIsValidSmallAndCoversEveryOption) {
  std::set<std::string> seen;
  auto saw = [&](const std::string& what) { seen.insert(what); };
  for (int i = 0; i < kDefaultFuzzCount; ++i) {
    const FuzzProblem p = draw_fuzz_problem(kDefaultFuzzSeed, i);
    const CaseSpec& s = p.spec;
    SCOPED_TRACE(describe_fuzz_problem(p));
    const std::int64_t Eg = s.expert_map ? 2 * s.E : s.E;
    ASSERT_GE(s.M, 0);
    ASSERT_GE(s.k, 1);
    ASSERT_LE(s.k, s.E);
    ASSERT_LE(p.reference_macs(), 20'000'000);
    ASSERT_LE(s.E * 3 * s.K * s.N, 6'000'000);
    if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
      ASSERT_EQ(Eg % s.routing.num_groups, 0);
      ASSERT_LE(s.routing.num_groups, 32);
      ASSERT_GE(s.routing.topk_groups, 1);
      ASSERT_LE(s.routing.topk_groups, s.routing.num_groups);
      ASSERT_GE(s.routing.topk_groups * (Eg / s.routing.num_groups), s.k);
    }
    if (p.fused_moe) ASSERT_EQ(s.pattern, RoutingPattern::kFromLogits);
    if (!p.odd_sizes) {
      ASSERT_FALSE(p.may_decline_all()) << "only odd-size problems may be declined by auto";
    }
    saw(std::string("scheme ") + scheme_name(s.scheme));
    saw(std::string("routing ") + routing_method_name(s.routing.method));
    saw(std::string("activation ") + activation_name(s.activation.kind));
    saw(std::string("dtype ") + dtype_name(s.act_dtype));
    if (s.bias) saw("bias");
    if (s.expert_map) saw("expert_map");
    if (s.weight_on_input) saw("weight_on_input");
    if (s.static_scales) saw("static_scales");
    if (p.fused_moe) saw("fused_moe");
    else saw("fused_experts");
    if (s.pattern == RoutingPattern::kSkewed) saw("skewed");
    if (s.pattern == RoutingPattern::kAllToOne) saw("all_to_one");
    if (s.k == s.E && s.E > 1) saw("k=E");
    if (s.E % 2 == 1 && s.E > 1) saw("odd E");
    if (s.E > 64) saw("E > 64");
    if (s.M == 0) saw("M=0");
    if (s.M == 64 || s.M == 128 || s.M == 256 || s.M == 512) saw("M on a tile edge");
    if (s.M == 65 || s.M == 129 || s.M == 257 || s.M == 513) saw("M one past a tile edge");
    if (s.M > 512) saw("M > 512");
    if (s.K % 64 != 0) saw("K off the tile");
    if (s.N % 64 != 0) saw("N off the tile");
    if (p.odd_sizes) saw("odd K or N");
    if (s.scheme == Scheme::kBf16 && (s.K % 4 != 0 || s.N % 4 != 0)) saw("bf16 rows of 2 mod 4 elements");
    if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk && s.routing.num_groups > 1) saw("grouped routing");
    if (s.activation.kind == Activation::kSwigluOai && s.activation.limit < 7.0f) saw("swiglu_oai limit 2");
  }
  for (const char* want :
       {"scheme bf16", "scheme fp8_per_tensor", "scheme fp8_per_channel", "scheme fp8_block128", "routing softmax_topk",
        "routing sigmoid_grouped_topk", "routing topk_softmax", "activation silu", "activation gelu",
        "activation swiglu_oai", "dtype bf16", "dtype fp16", "bias", "expert_map", "weight_on_input", "static_scales",
        "fused_moe", "fused_experts", "skewed", "all_to_one", "k=E", "odd E", "E > 64", "M=0", "M on a tile edge",
        "M one past a tile edge", "M > 512", "K off the tile", "N off the tile", "odd K or N",
        "bf16 rows of 2 mod 4 elements", "grouped routing", "swiglu_oai limit 2"})
    EXPECT_TRUE(seen.count(want)) << "the default fuzz run (seed " << kDefaultFuzzSeed << ", " << kDefaultFuzzCount
                                  << " problems) never draws: " << want;
}

// Every problem of the default run as a call: moekit::describe accepts it and the CPU reference
// gives finite outputs (the fuzz generator makes no input the API refuses). A few seconds: this
// is the CPU share of a GPU fuzz run.
TEST(CpuFuzzProblems, ProblemsAreValidCallsWithFiniteReference) {
  for (int i = 0; i < kDefaultFuzzCount; ++i) {
    const FuzzProblem p = draw_fuzz_problem(kDefaultFuzzSeed, i);
    SCOPED_TRACE(describe_fuzz_problem(p));
    const MoeCase c = make_case(p.spec);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(p.spec.M * p.spec.K));
    const FusedExpertsArgs experts = c.host_args(out.data());
    ASSERT_NO_THROW(describe(experts));
    if (p.fused_moe) {  // routed in the call: the routing arguments are validated too
      FusedMoeArgs a;
      a.router_logits = TensorView::contiguous(c.router_logits.data(), DType::kFp32, {p.spec.M, c.E_global});
      a.routing = p.spec.routing;
      a.routing.top_k = static_cast<int>(p.spec.k);
      if (!c.correction_bias.empty())
        a.e_score_correction_bias = TensorView::contiguous(c.correction_bias.data(), DType::kFp32, {c.E_global});
      a.experts = experts;
      ASSERT_NO_THROW(describe(a));
    }
    const std::vector<float> ref = reference_output(c);
    ASSERT_EQ(ref.size(), out.size());
    for (float v : ref) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace moekit::testing
