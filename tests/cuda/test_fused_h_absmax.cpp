// fp8_per_tensor with a dynamic intermediate scale takes the intermediate's absmax in GEMM1's
// epilogue (GroupedGemmParams::out_absmax) and quantizes it in one launch; MOEKIT_FUSED_H_ABSMAX=0
// keeps the separate absmax launch. Both must give bitwise the same output: the same max of the
// same values, hence the same scale. Checked on every GEMM path forced by name, fused_experts and
// fused_moe, with token counts that leave tail tiles (label gpu; skipped without a Hopper GPU).
// The per-family GEMM tests (Sm90GroupedGemm, Sm90SwapAbGemm, Sm90TokMajorGemm
// .Fp8PerTensorOutAbsmaxIsTheStoredAbsmax) check the word itself against what each epilogue stored.
// Likewise for hidden: the routing launch takes its absmax on CTAs of its own
// (RoutingParams::absmax_ctas) and quant(hidden) is one launch; MOEKIT_ROUTING_ABSMAX=0 keeps the
// absmax launch (Sm90RoutingAbsmax below); for a small hidden the routing launch quantizes it all
// on a CTA of its own and MOEKIT_ROUTING_QUANT=0 keeps the quantization launch (Sm90RoutingQuant).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

constexpr std::uint16_t kPoison = 0xffff;  // DeviceCase::run memsets out to 0xff bytes: a bf16 NaN

// The GEMM paths of the multi-launch chain, forced by name (Options::path). auto, fused and
// decode are left out: the latter two never run the chain, and auto picks one of these.
const char* const kGemmPaths[] = {"mma", "swapab", "tokmajor"};

// For each path, call mode and M: the output with the switch `env` off (=0: the separate absmax
// launch) and on (=1), bitwise equal and fully written. `what` names the fused form in messages.
void check_switch_bitwise(const CaseSpec& spec, const char* env, const char* what) {
  const MoeCase c = make_case(spec);
  DeviceCase d(c);
  for (const char* path : kGemmPaths)
    for (CallMode mode : {CallMode::kFusedExperts, CallMode::kFusedMoe})
      for (std::int64_t M : {1, 37, 300}) {
        if (M > spec.M) continue;
        SCOPED_TRACE(spec.name() + " " + env + " path=" + path + " " + call_mode_name(mode) + " M=" + std::to_string(M));
        try {
          std::vector<std::uint16_t> separate, fused;
          {
            ScopedEnv off(env, "0");
            separate = d.run(M, mode, path);
          }
          {
            ScopedEnv on(env, "1");
            fused = d.run(M, mode, path);
          }
          ASSERT_EQ(0, std::count(separate.begin(), separate.end(), kPoison)) << "absmax launch: out not written";
          EXPECT_TRUE(fused == separate) << what << " changed the output";
        } catch (const Error& e) {
          ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
        }
      }
}

// The intermediate's absmax in GEMM1's epilogue (MOEKIT_FUSED_H_ABSMAX) against the two-pass quant(h).
void check_fused_vs_two_pass(const CaseSpec& spec) {
  check_switch_bitwise(spec, "MOEKIT_FUSED_H_ABSMAX", "the fused absmax");
}

CaseSpec fp8_dynamic_spec(std::int64_t E, std::int64_t k, std::int64_t K, std::int64_t N) {
  CaseSpec s;
  s.M = 300;
  s.E = E;
  s.k = k;
  s.K = K;
  s.N = N;
  s.scheme = Scheme::kFp8PerTensor;
  s.static_scales = false;  // a2_scale absent: the dynamic intermediate scale
  s.seed = 41;
  return s;
}

// N = 208: tail column tiles on every path (mma and Swap-AB 64 columns, token-major 128); M = 1
// has the intermediate under 32 K elements (quant(h) was one CTA there), M = 300 above.
TEST(Sm90FusedHAbsmax, BitwiseEqualToTwoPassPerPath) {
  SKIP_WITHOUT_SM90();
  check_fused_vs_two_pass(fp8_dynamic_spec(8, 2, 256, 208));
}

// The mixtral shape shrunk (E = 8, k = 2, N = 256), and qwen3-30b's (E = 32, k = 8, N = 96: 64
// and 128-column tails, experts with 0..a few rows at M = 1 and 37).
TEST(Sm90FusedHAbsmax, BitwiseEqualToTwoPassPresets) {
  SKIP_WITHOUT_SM90();
  check_fused_vs_two_pass(fp8_dynamic_spec(8, 2, 512, 256));
  check_fused_vs_two_pass(fp8_dynamic_spec(32, 8, 1024, 96));
}

// With an expert_map half the slots are not local: the intermediate has offsets[E] < M*k live
// rows, the set both the epilogue and the absmax pass are bounded by. With biases the epilogues'
// per-column terms run too.
TEST(Sm90FusedHAbsmax, BitwiseEqualToTwoPassExpertMapAndBias) {
  SKIP_WITHOUT_SM90();
  CaseSpec s = fp8_dynamic_spec(8, 2, 256, 208);
  s.expert_map = true;
  check_fused_vs_two_pass(s);
  s = fp8_dynamic_spec(8, 2, 256, 208);
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  s.seed = 42;
  check_fused_vs_two_pass(s);
}

// Hidden's absmax in the routing launch (MOEKIT_ROUTING_ABSMAX) against the absmax launch. M = 37
// and 300 at K = 1024 are past the one-CTA quantization's 32 K elements (where the routing launch
// takes the absmax); with k = 8 and M = 300 (2400 slots) the permutation runs on the grids, whose
// count launch hosts the absmax CTAs (since session 41).
void check_routing_absmax(const CaseSpec& spec) {
  check_switch_bitwise(spec, "MOEKIT_ROUTING_ABSMAX", "the absmax in the routing launch");
}

TEST(Sm90RoutingAbsmax, BitwiseEqualToAbsmaxLaunch) {
  SKIP_WITHOUT_SM90();
  check_routing_absmax(fp8_dynamic_spec(8, 2, 1024, 208));
  check_routing_absmax(fp8_dynamic_spec(32, 8, 1024, 96));
  CaseSpec s = fp8_dynamic_spec(8, 2, 1024, 208);
  s.expert_map = true;
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  s.seed = 43;
  check_routing_absmax(s);
}

// Hidden quantized on an extra CTA of the routing launch (MOEKIT_ROUTING_QUANT; RoutingParams::
// quant_cta) against the one-CTA quantization launch after it. M = 1 and 37 keep M x K within the
// one-CTA quantization's 32 K elements at K = 256 and 512 (the routing launch hosts it); at M = 300
// neither side does (past 32 K elements, and the permutation grids at k = 8), so both take the
// launches there. k = 8, M = 37: 296 slots, the 1024-thread routing CTA; M = 1: the 256-thread one.
TEST(Sm90RoutingQuant, BitwiseEqualToQuantLaunch) {
  SKIP_WITHOUT_SM90();
  const auto check = [](const CaseSpec& spec) {
    check_switch_bitwise(spec, "MOEKIT_ROUTING_QUANT", "the quantization in the routing launch");
  };
  check(fp8_dynamic_spec(8, 2, 512, 208));
  check(fp8_dynamic_spec(32, 8, 256, 96));
  CaseSpec s = fp8_dynamic_spec(8, 2, 256, 208);
  s.expert_map = true;
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  s.seed = 44;
  check(s);
}

// The token-major ping-pong GEMM2's A rows by TMA (MOEKIT_TOKMAJOR_TMA_A; KernelParams::a_tma)
// against the producer's cp.async gather: the same bytes in the same swizzled layout, so bitwise the
// same output. The box reads 64 rows from a unit's first: rows of the next expert, rows past the
// live rows (offsets[E] < max_rows with an expert_map: the workspace's stale bytes, possibly e4m3
// NaNs) and zeros past max_rows, all dropped by the epilogue; K tails (N = 208: 80 of a second
// stage's 128 bytes) are zeros. The token-major path forced, with the ping-pong form forced on
// wherever the kernel allows it (MOEKIT_TOKMAJOR_PINGPONG=1: M = 300 too, past the rows rule),
// clusters of 1 and the dynamic schedule, and the static K-short GEMM2 off (it would take these
// GEMM2s), so that a switch set around the test cannot turn the TMA path off and leave the gather
// compared with itself.
void check_tma_a(const CaseSpec& spec, std::initializer_list<std::int64_t> Ms) {
  const MoeCase c = make_case(spec);
  DeviceCase d(c);
  ScopedEnv pingpong("MOEKIT_TOKMAJOR_PINGPONG", "1");
  ScopedEnv cluster("MOEKIT_TOKMAJOR_CLUSTER", "1");
  ScopedEnv schedule("MOEKIT_TOKMAJOR_SCHEDULE", "dynamic");
  ScopedEnv kshort("MOEKIT_KSHORT_GEMM2", "0");
  for (CallMode mode : {CallMode::kFusedExperts, CallMode::kFusedMoe})
    for (std::int64_t M : Ms) {
      SCOPED_TRACE(spec.name() + " " + call_mode_name(mode) + " M=" + std::to_string(M));
      try {
        std::vector<std::uint16_t> gather, tma;
        {
          ScopedEnv off("MOEKIT_TOKMAJOR_TMA_A", "0");
          gather = d.run(M, mode, "tokmajor");
        }
        {
          ScopedEnv on("MOEKIT_TOKMAJOR_TMA_A", "1");
          tma = d.run(M, mode, "tokmajor");
        }
        ASSERT_EQ(0, std::count(gather.begin(), gather.end(), kPoison)) << "gather: out not written";
        EXPECT_TRUE(tma == gather) << "A rows by TMA changed the output";
      } catch (const Error& e) {
        ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
      }
    }
}

TEST(Sm90TokmajorTmaA, BitwiseEqualToGather) {
  SKIP_WITHOUT_SM90();
  check_tma_a(fp8_dynamic_spec(32, 8, 1024, 96), {1, 37, 300});
  check_tma_a(fp8_dynamic_spec(8, 2, 256, 208), {1, 37, 300});
  CaseSpec s = fp8_dynamic_spec(8, 2, 256, 208);
  s.expert_map = true;
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  s.seed = 49;
  check_tma_a(s, {1, 37, 300});
  s = fp8_dynamic_spec(16, 4, 512, 96);
  s.pattern = RoutingPattern::kAllToOne;
  s.hot_expert = 5;
  s.seed = 50;
  check_tma_a(s, {37, 300});
  for (DType act : {DType::kBf16, DType::kFp16}) {
    s = fp8_dynamic_spec(32, 8, 1024, 96);
    s.scheme = Scheme::kBf16;
    s.act_dtype = act;
    s.seed = 51;
    check_tma_a(s, {1, 37, 300});
  }
}

// One small case for compute-sanitizer's memcheck and racecheck (an expert_map: rows past the live
// ones in the boxes).
TEST(Sm90TokmajorTmaA, SmallForSanitizers) {
  SKIP_WITHOUT_SM90();
  CaseSpec s = fp8_dynamic_spec(8, 2, 256, 208);
  s.expert_map = true;
  s.seed = 52;
  check_tma_a(s, {37});
}

}  // namespace
}  // namespace moekit::testing
