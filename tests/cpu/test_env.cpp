// The MOEKIT_* switch snapshot (src/core/env.hpp), host only: inside an EnvScope env_value() gives
// what std::getenv gives (set, empty, unset; a name that only shares a prefix never matches), a
// setenv between two scopes is seen by the second, a nested scope keeps the outer one's snapshot,
// and outside any scope env_value() reads the environment live. Also: a public call's scope ends
// with the call, and a switch changed between two calls reaches the second.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "core/env.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

using detail::env_name;
using detail::env_value;
using detail::EnvScope;
using detail::EnvVar;

// Every switch and its name, spelled out here (the literal statement env.cpp's table must match).
const std::vector<std::pair<EnvVar, std::string>>& all_switches() {
  static const std::vector<std::pair<EnvVar, std::string>> v = {
      {EnvVar::kPath, "MOEKIT_PATH"},
      {EnvVar::kDebugFaults, "MOEKIT_DEBUG_FAULTS"},
      {EnvVar::kLogDispatch, "MOEKIT_LOG_DISPATCH"},
      {EnvVar::kDecode, "MOEKIT_DECODE"},
      {EnvVar::kGemv, "MOEKIT_GEMV"},
      {EnvVar::kGemvMma, "MOEKIT_GEMV_MMA"},
      {EnvVar::kGemvKernel, "MOEKIT_GEMV_KERNEL"},
      {EnvVar::kGemm2Path, "MOEKIT_GEMM2_PATH"},
      {EnvVar::kSwapabSplit, "MOEKIT_SWAPAB_SPLIT"},
      {EnvVar::kRoutingAbsmax, "MOEKIT_ROUTING_ABSMAX"},
      {EnvVar::kRoutingQuant, "MOEKIT_ROUTING_QUANT"},
      {EnvVar::kFusedHAbsmax, "MOEKIT_FUSED_H_ABSMAX"},
      {EnvVar::kYFp32, "MOEKIT_Y_FP32"},
      {EnvVar::kPdl, "MOEKIT_PDL"},
      {EnvVar::kDecodeCluster, "MOEKIT_DECODE_CLUSTER"},
      {EnvVar::kDecodeWide, "MOEKIT_DECODE_WIDE"},
      {EnvVar::kGemvOneRound, "MOEKIT_GEMV_ONE_ROUND"},
      {EnvVar::kGemvWide, "MOEKIT_GEMV_WIDE"},
      {EnvVar::kGemvFp8Decoupled, "MOEKIT_GEMV_FP8_DECOUPLED"},
      {EnvVar::kGemvQgmma, "MOEKIT_GEMV_QGMMA"},
      {EnvVar::kGemvHiddenEarly, "MOEKIT_GEMV_HIDDEN_EARLY"},
      {EnvVar::kGemvWarpRoute, "MOEKIT_GEMV_WARP_ROUTE"},
      {EnvVar::kSwapabKblocks, "MOEKIT_SWAPAB_KBLOCKS"},
      {EnvVar::kSwapabGemm2Ctas, "MOEKIT_SWAPAB_GEMM2_CTAS"},
      {EnvVar::kSwapabDirect, "MOEKIT_SWAPAB_DIRECT"},
      {EnvVar::kSwapabPlain, "MOEKIT_SWAPAB_PLAIN"},
      {EnvVar::kRoutingPlain, "MOEKIT_ROUTING_PLAIN"},
      {EnvVar::kTokmajorPingpong, "MOEKIT_TOKMAJOR_PINGPONG"},
      {EnvVar::kTokmajorCluster, "MOEKIT_TOKMAJOR_CLUSTER"},
      {EnvVar::kTokmajorSchedule, "MOEKIT_TOKMAJOR_SCHEDULE"},
      {EnvVar::kTokmajorTake, "MOEKIT_TOKMAJOR_TAKE"},
      {EnvVar::kTokmajorEarly, "MOEKIT_TOKMAJOR_EARLY"},
      {EnvVar::kTokmajorRoute, "MOEKIT_TOKMAJOR_ROUTE"},
      {EnvVar::kTokmajorTmaA, "MOEKIT_TOKMAJOR_TMA_A"},
      {EnvVar::kKshortGemm2, "MOEKIT_KSHORT_GEMM2"},
      {EnvVar::kExpertMlp, "MOEKIT_EXPERT_MLP"},
      {EnvVar::kExpertMlpEvictFirst, "MOEKIT_EXPERT_MLP_EVICT_FIRST"},
      {EnvVar::kExpertMlpLeanGather, "MOEKIT_EXPERT_MLP_LEAN_GATHER"},
      {EnvVar::kExpertMlpQuantOneCta, "MOEKIT_EXPERT_MLP_QUANT_ONE_CTA"},
      {EnvVar::kExpertMlpAheadNext, "MOEKIT_EXPERT_MLP_AHEAD_NEXT"},
      {EnvVar::kExpertMlpTwoBoxes, "MOEKIT_EXPERT_MLP_TWO_BOXES"},
      {EnvVar::kExpertMlpWarmAct, "MOEKIT_EXPERT_MLP_WARM_ACT"},
      {EnvVar::kExpertMlpG2Swap, "MOEKIT_EXPERT_MLP_G2_SWAP"},
      {EnvVar::kExpertMlpPlain, "MOEKIT_EXPERT_MLP_PLAIN"},
      {EnvVar::kExpertMlpPlainChannel, "MOEKIT_EXPERT_MLP_PLAIN_CHANNEL"},
      {EnvVar::kRopeKernel, "MOEKIT_ROPE_KERNEL"},
      {EnvVar::kRopeQuantRows, "MOEKIT_ROPE_QUANT_ROWS"},
  };
  return v;
}

// env_value(var) against std::getenv of its name: both null, or the same string.
void expect_as_getenv(EnvVar var, const std::string& where) {
  const char* want = std::getenv(env_name(var));
  const char* got = env_value(var);
  if (want == nullptr) {
    EXPECT_EQ(got, nullptr) << env_name(var) << " " << where << ": got '" << got << "'";
  } else {
    ASSERT_NE(got, nullptr) << env_name(var) << " " << where << ": unset, getenv has '" << want << "'";
    EXPECT_STREQ(got, want) << env_name(var) << " " << where;
  }
}

TEST(CpuEnv, NamesMatchTheSwitches) {
  ASSERT_EQ(all_switches().size(), static_cast<std::size_t>(detail::kNumEnvVars));
  for (const auto& [var, name] : all_switches()) EXPECT_EQ(env_name(var), name);
}

TEST(CpuEnv, ScopeMatchesGetenvSetEmptyUnset) {
  for (const char* value : {"1", "0", "", "swapab", "a=b"}) {
    for (EnvVar set : {EnvVar::kGemv, EnvVar::kPath, EnvVar::kPdl, EnvVar::kTokmajorSchedule, EnvVar::kRopeQuantRows}) {
      // One switch set to `value`, its neighbours in the table set to something else or unset.
      ScopedEnv a(env_name(set), value);
      ScopedEnv b("MOEKIT_GEMV_MMA", "0");
      ScopedEnv c("MOEKIT_DEBUG_FAULTS", nullptr);
      ScopedEnv d("MOEKIT_SWAPAB_SPLIT", "");
      const EnvScope scope;
      EXPECT_STREQ(env_value(set), value) << env_name(set);
      for (const auto& sw : all_switches()) expect_as_getenv(sw.first, std::string("in a scope, value '") + value + "'");
    }
  }
}

TEST(CpuEnv, EverySwitchReadInOneScan) {
  std::vector<std::unique_ptr<ScopedEnv>> set;
  for (const auto& [var, name] : all_switches()) set.push_back(std::make_unique<ScopedEnv>(name.c_str(), ("v-" + name).c_str()));
  const EnvScope scope;
  for (const auto& [var, name] : all_switches()) {
    ASSERT_NE(env_value(var), nullptr) << name;
    EXPECT_EQ(std::string(env_value(var)), "v-" + name);
    expect_as_getenv(var, "all set");
  }
}

TEST(CpuEnv, SetenvBetweenScopesIsSeenByTheNext) {
  ScopedEnv gemv("MOEKIT_GEMV", nullptr);
  ScopedEnv pdl("MOEKIT_PDL", "1");
  {
    const EnvScope scope;
    EXPECT_EQ(env_value(EnvVar::kGemv), nullptr);
    EXPECT_STREQ(env_value(EnvVar::kPdl), "1");
  }
  ::setenv("MOEKIT_GEMV", "0", 1);
  ::unsetenv("MOEKIT_PDL");
  {
    const EnvScope scope;
    EXPECT_STREQ(env_value(EnvVar::kGemv), "0");
    EXPECT_EQ(env_value(EnvVar::kPdl), nullptr);
  }
  ::setenv("MOEKIT_GEMV", "", 1);
  {
    const EnvScope scope;
    EXPECT_STREQ(env_value(EnvVar::kGemv), "");
  }
}

TEST(CpuEnv, OutsideAScopeReadsLive) {
  ScopedEnv split("MOEKIT_SWAPAB_SPLIT", nullptr);
  EXPECT_EQ(env_value(EnvVar::kSwapabSplit), nullptr);
  ::setenv("MOEKIT_SWAPAB_SPLIT", "4", 1);
  EXPECT_STREQ(env_value(EnvVar::kSwapabSplit), "4");
  { const EnvScope scope; }  // a scope that ended leaves nothing behind
  ::setenv("MOEKIT_SWAPAB_SPLIT", "8", 1);
  EXPECT_STREQ(env_value(EnvVar::kSwapabSplit), "8");
  ::unsetenv("MOEKIT_SWAPAB_SPLIT");
  EXPECT_EQ(env_value(EnvVar::kSwapabSplit), nullptr);
}

TEST(CpuEnv, NameSharingAPrefixDoesNotMatch) {
  ScopedEnv gemv("MOEKIT_GEMV", nullptr);
  ScopedEnv mma("MOEKIT_GEMV_MMA", nullptr);
  ScopedEnv path("MOEKIT_PATH", nullptr);
  ScopedEnv longer("MOEKIT_GEMVX", "1");
  ScopedEnv longer2("MOEKIT_GEMV_MMAX", "1");
  ScopedEnv longer3("MOEKIT_PATHS", "swapab");
  ScopedEnv shorter("MOEKIT_GEM", "1");
  ScopedEnv other_prefix("XMOEKIT_GEMV", "1");
  ScopedEnv lower("moekit_gemv", "1");
  {
    const EnvScope scope;
    EXPECT_EQ(env_value(EnvVar::kGemv), nullptr);
    EXPECT_EQ(env_value(EnvVar::kGemvMma), nullptr);
    EXPECT_EQ(env_value(EnvVar::kPath), nullptr);
  }
  // A longer switch's name set does not make the shorter one's match, and the other way round.
  ::setenv("MOEKIT_GEMV_MMA", "0", 1);
  {
    const EnvScope scope;
    EXPECT_EQ(env_value(EnvVar::kGemv), nullptr);
    EXPECT_STREQ(env_value(EnvVar::kGemvMma), "0");
  }
  ::unsetenv("MOEKIT_GEMV_MMA");
  ::setenv("MOEKIT_GEMV", "0", 1);
  {
    const EnvScope scope;
    EXPECT_STREQ(env_value(EnvVar::kGemv), "0");
    EXPECT_EQ(env_value(EnvVar::kGemvMma), nullptr);
    for (const auto& sw : all_switches()) expect_as_getenv(sw.first, "with prefix-sharing names set");
  }
}

TEST(CpuEnv, NestedScopesKeepTheOuterSnapshot) {
  ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "cuda");
  {
    const EnvScope outer;
    EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "cuda");
    ::setenv("MOEKIT_GEMV_KERNEL", "mma", 1);
    {
      const EnvScope inner;  // one call's reads come from one scan, at its outermost entry
      EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "cuda");
      {
        const EnvScope innermost;
        EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "cuda");
      }
    }
    EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "cuda");  // still inside `outer`
  }
  EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "mma");  // no scope: live
  {
    const EnvScope next;
    EXPECT_STREQ(env_value(EnvVar::kGemvKernel), "mma");
  }
}

TEST(CpuEnv, ScopeIsPerThread) {
  ScopedEnv schedule("MOEKIT_TOKMAJOR_SCHEDULE", "static");
  const EnvScope scope;
  ::setenv("MOEKIT_TOKMAJOR_SCHEDULE", "dynamic", 1);
  EXPECT_STREQ(env_value(EnvVar::kTokmajorSchedule), "static");
  std::string other;
  std::thread([&] {
    const char* v = env_value(EnvVar::kTokmajorSchedule);  // no scope on this thread: live
    other = v != nullptr ? v : "(null)";
  }).join();
  EXPECT_EQ(other, "dynamic");
}

// Through the public API: MOEKIT_DEBUG_FAULTS makes a call with a bad id throw on the CPU backend;
// switched between two calls, the second call follows it, and each call's scope ends with it
// (returning or throwing).
TEST(CpuEnv, SwitchTakesZeroOneOrItsDefault) {
  // env_switch: unset or empty -> the default, "0" / "1" -> false / true, anything else an error
  // naming the variable and the value.
  for (bool unset : {false, true}) {
    {
      ScopedEnv v("MOEKIT_GEMV_WIDE", nullptr);
      EXPECT_EQ(detail::env_switch(EnvVar::kGemvWide, unset), unset);
    }
    {
      ScopedEnv v("MOEKIT_GEMV_WIDE", "");
      EXPECT_EQ(detail::env_switch(EnvVar::kGemvWide, unset), unset);
    }
    {
      ScopedEnv v("MOEKIT_GEMV_WIDE", "0");
      EXPECT_FALSE(detail::env_switch(EnvVar::kGemvWide, unset));
    }
    {
      ScopedEnv v("MOEKIT_GEMV_WIDE", "1");
      const EnvScope scope;  // the snapshot gives the same answer
      EXPECT_TRUE(detail::env_switch(EnvVar::kGemvWide, unset));
    }
  }
  ScopedEnv bad("MOEKIT_GEMV_ONE_ROUND", "yes");
  try {
    detail::env_switch(EnvVar::kGemvOneRound, true);
    ADD_FAILURE() << "a value other than 0 or 1 must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("MOEKIT_GEMV_ONE_ROUND = 'yes'"), std::string::npos) << e.what();
  }
}

TEST(CpuEnv, PublicCallsSeeASwitchSetBetweenThem) {
  CaseSpec s;
  s.M = 3;
  s.E = 4;
  s.k = 2;
  s.K = 128;
  s.N = 64;
  MoeCase c = make_case(s);
  c.topk_ids[1] = 1000;  // outside [0, E_global)
  Options o;
  o.backend = Backend::kCpu;
  std::vector<std::uint16_t> out(static_cast<std::size_t>(s.M * s.K));
  take_fault(nullptr, o);
  ScopedEnv debug("MOEKIT_DEBUG_FAULTS", "1");
  EXPECT_THROW(fused_experts(c.host_args(out.data()), o), Error);
  EXPECT_STREQ(env_value(EnvVar::kDebugFaults), "1");
  ::setenv("MOEKIT_DEBUG_FAULTS", "0", 1);
  EXPECT_STREQ(env_value(EnvVar::kDebugFaults), "0") << "the throwing call's scope outlived it";
  EXPECT_NO_THROW(fused_experts(c.host_args(out.data()), o));
  EXPECT_TRUE(take_fault(nullptr, o));
  ::setenv("MOEKIT_DEBUG_FAULTS", "1", 1);
  EXPECT_THROW(fused_experts(c.host_args(out.data()), o), Error);
  // describe (validation only) resolves the same switches in its own scope.
  ::setenv("MOEKIT_DEBUG_FAULTS", "", 1);
  EXPECT_NO_THROW((void)describe(c.host_args(out.data())));
  EXPECT_STREQ(env_value(EnvVar::kDebugFaults), "");
}

}  // namespace
}  // namespace moekit::testing
