// The per-expert MLP kernel (src/cuda/kernels/expert_mlp/): fused_experts calls it can run, forced
// by name (Options::path = "expert_mlp"), against the CPU reference (tests/common/tolerance.hpp's bf16 bounds), outputs
// NaN-poisoned before every call; bf16 and fp8_per_tensor; the BRIEF §5 cases it takes (tile-boundary M, one expert holding
// every slot, experts without tokens, k = E, odd E, expert_map with -1, the router weight on the
// input, fp16); the same bits as the token-major chain where both run; graph replay; and the calls it
// declines left to the router. All of it on one CTA a unit (N = 96) and on the cluster form (N up to
// 384: qwen3-235b and deepseek-v3 TP8 shards, partial last slices, four ranks).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "common/tolerance.hpp"
#include "cuda/kernels/expert_mlp/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

// qwen3-30b-a3b's TP8 expert shard (E = 128, K = 2048, N = 96, k = 8), or a variation of it.
CaseSpec qwen30_tp8(std::int64_t M, std::uint64_t seed) {
  CaseSpec s;
  s.M = M;
  s.E = 128;
  s.k = 8;
  s.K = 2048;
  s.N = 96;
  s.seed = seed;
  return s;
}

// gpt-oss-120b's TP8 expert shard (E = 128, k = 4, K = 2880, N = 360, swiglu_oai, b13 and b2): a
// cluster of four a unit, the last slice 72 columns; e4m3 with K % 128 = 64 (GEMM1's last stage
// half zeros). fp8_per_tensor runs N = 360 with w2 as row pairs (360-byte rows, which a TMA map
// cannot stride: the odd rows 8 bytes early against h shifted by 8 columns); fp8_per_channel
// declines it and runs N = 352 here (gptoss_fp8_tp8).
CaseSpec gptoss_tp8(std::int64_t M, std::uint64_t seed) {
  CaseSpec s;
  s.M = M;
  s.E = 128;
  s.k = 4;
  s.K = 2880;
  s.N = 360;
  s.bias = true;
  s.activation.kind = Activation::kSwigluOai;
  s.seed = seed;
  return s;
}
CaseSpec gptoss_fp8_tp8(std::int64_t M, std::uint64_t seed, Scheme scheme = Scheme::kFp8PerTensor) {
  CaseSpec s = gptoss_tp8(M, seed);
  s.N = scheme == Scheme::kFp8PerChannel ? 352 : 360;
  s.scheme = scheme;
  return s;
}

// Runs the first M tokens on the kernel (forced by name) and checks that it ran and that the output
// matches the CPU reference; returns the output's bits.
std::vector<std::uint16_t> run_checked(DeviceCase& d, MoeCase& c, std::int64_t M, const std::string& what) {
  const int before = cuda::expert_mlp_launches();
  std::vector<std::uint16_t> bits = d.run(M, CallMode::kFusedExperts, "expert_mlp");
  EXPECT_EQ(cuda::expert_mlp_launches(), before + 1) << what << ": the kernel did not run";
  EXPECT_TRUE(rows_match(to_float(bits, c.spec.act_dtype), reference_rows(c, 0, M), c.spec.K, c.spec.scheme, what));
  return bits;
}

// A case of its own, its first M tokens run checked (run_checked).
void check_case(const CaseSpec& s, std::int64_t M, const std::string& what) {
  MoeCase c = make_case(s);
  DeviceCase d(c);
  run_checked(d, c, M, what);
}

// One fp8_per_channel case a variant of a base shape: `set` edits the spec, run at M tokens.
struct ChannelVariant {
  const char* what;
  void (*set)(CaseSpec&);
  std::int64_t M;
};
void check_channel_variants(CaseSpec (*base)(std::int64_t, std::uint64_t), const std::vector<ChannelVariant>& variants,
                            std::uint64_t seed) {
  for (const ChannelVariant& v : variants) {
    CaseSpec s = base(v.M, ++seed);
    s.scheme = Scheme::kFp8PerChannel;
    v.set(s);
    check_case(s, v.M, std::string("fp8_per_channel, ") + v.what);
  }
}

// Output values whose bits differ between two runs of the same call.
std::int64_t values_differing(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  std::int64_t n = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n;
}

// Output values whose bits differ between the call run with `var` = off and with `var` = on (each
// run checked against the reference): for the switches that must give the same bits.
std::int64_t values_differing_under(DeviceCase& d, MoeCase& c, std::int64_t m, const char* var, const char* off,
                                    const char* on, const std::string& what) {
  std::vector<std::uint16_t> a, b;
  {
    ScopedEnv e(var, off);
    a = run_checked(d, c, m, what + " (" + var + "=" + off + ")");
  }
  {
    ScopedEnv e(var, on);
    b = run_checked(d, c, m, what + " (" + var + "=" + on + ")");
  }
  return values_differing(a, b);
}

TEST(Sm90ExpertMlp, MatchesReferenceAtQwen3Tp8Shapes) {
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen30_tp8(256, 11));
  DeviceCase d(c);
  // M = 1 (8 units of one row), tile-boundary counts around 64 rows an expert, the grid's sizes.
  for (std::int64_t M : {1, 2, 5, 16, 33, 64, 100, 256})
    run_checked(d, c, M, "qwen3-30b TP8 bf16 M=" + std::to_string(M));
  // Narrower shards (N = 48: qwen3-30b at TP16; N = 64), forced: one CTA a unit, h's and w2's
  // columns past N zeros in GEMM2's chunk.
  for (std::int64_t n : {48, 64}) {
    for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
      CaseSpec s = qwen30_tp8(40, 60 + n);
      s.N = n;
      s.scheme = scheme;
      check_case(s, 40, "N=" + std::to_string(n) + " " + scheme_name(scheme));
    }
  }
}

TEST(Sm90ExpertMlp, SameBitsAsTheTokenMajorChain) {
  // The same wgmma sums over the same K order and the same roundings (h to bf16, y to bf16, the
  // combine's fp32 sum of the slots in j order) as token-major GEMM1 + the K-short GEMM2.
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen30_tp8(128, 12));
  DeviceCase d(c);
  for (std::int64_t M : {16, 64, 128}) {
    const std::vector<std::uint16_t> fused = run_checked(d, c, M, "M=" + std::to_string(M));
    const std::vector<std::uint16_t> chain = d.run(M, CallMode::kFusedExperts, "tokmajor");
    const std::int64_t differ = values_differing(fused, chain);
    EXPECT_EQ(differ, 0) << "M=" << M << ": " << differ << " of " << fused.size()
                         << " output values differ from the token-major chain's";
  }
}

TEST(Sm90ExpertMlp, RoutingEdgeCases) {
  SKIP_WITHOUT_SM90();
  {
    CaseSpec s = qwen30_tp8(150, 13);  // every token's first slot on one expert: 150 rows, 3 tiles
    s.pattern = RoutingPattern::kAllToOne;
    s.hot_expert = 5;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    run_checked(d, c, 150, "all to one expert");
    run_checked(d, c, 64, "all to one expert, one full tile");
  }
  {
    CaseSpec s = qwen30_tp8(40, 14);  // half the experts without tokens
    s.pattern = RoutingPattern::kSkewed;
    check_case(s, 40, "skewed");
  }
  {
    CaseSpec s = qwen30_tp8(9, 15);  // k = E, odd E, a smaller K
    s.E = 7;
    s.k = 7;
    s.K = 320;
    check_case(s, 9, "k = E = 7, K = 320");
  }
  {
    CaseSpec s = qwen30_tp8(24, 16);  // expert_map: odd global ids on another rank (-1)
    s.expert_map = true;
    s.E = 64;
    check_case(s, 24, "expert_map with -1");
  }
  {
    CaseSpec s = qwen30_tp8(48, 17);
    s.weight_on_input = true;
    check_case(s, 48, "router weight on the input");
  }
  {
    CaseSpec s = qwen30_tp8(48, 18);
    s.act_dtype = DType::kFp16;
    check_case(s, 48, "fp16");
  }
  {
    CaseSpec s = qwen30_tp8(20, 19);
    s.activation.kind = Activation::kGelu;
    check_case(s, 20, "gelu");
  }
}

TEST(Sm90ExpertMlp, EvictFirstHintGivesTheSameBits) {
  // MOEKIT_EXPERT_MLP_EVICT_FIRST=1 (the weights' TMA with an L2 evict-first hint): a cache policy
  // only, the same bits as without, bf16 and fp8.
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = qwen30_tp8(64, 47);
    s.scheme = scheme;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    std::vector<std::uint16_t> on, off;
    {
      ScopedEnv e("MOEKIT_EXPERT_MLP_EVICT_FIRST", "1");
      on = run_checked(d, c, 64, std::string(scheme_name(scheme)) + " evict-first");
    }
    off = run_checked(d, c, 64, std::string(scheme_name(scheme)) + " no hint");
    const std::int64_t differ = values_differing(on, off);
    EXPECT_EQ(differ, 0) << scheme_name(scheme) << ": " << differ << " values differ with the hint";
  }
}

TEST(Sm90ExpertMlp, LeanGatherGivesTheSameBits) {
  // The producer's lean gather (the default: each row's source once a unit, only the unit's live
  // groups of 4 rows copied a stage) against MOEKIT_EXPERT_MLP_LEAN_GATHER=0 (all 16 rows a lane,
  // predicated, every stage): the same bytes in the same places, so the same bits. Units of 1..64
  // rows: M = 3 with k = 8 over 128 experts (1-row units), M = 37 / 200 from the logits (units of a
  // few rows), M = 203 with every token's first slot on one expert (three full 64-row tiles and one
  // of 11 rows: a last group of 4 only partly live); bf16, fp8 and the cluster form (N = 192).
  SKIP_WITHOUT_SM90();
  struct Run {
    Scheme scheme;
    std::int64_t m, n;
    RoutingPattern pattern;
  };
  for (const Run& run : {Run{Scheme::kBf16, 3, 96, RoutingPattern::kFromLogits},
                         Run{Scheme::kBf16, 203, 96, RoutingPattern::kAllToOne},
                         Run{Scheme::kFp8PerTensor, 37, 96, RoutingPattern::kFromLogits},
                         Run{Scheme::kFp8PerTensor, 203, 96, RoutingPattern::kAllToOne},
                         Run{Scheme::kBf16, 200, 192, RoutingPattern::kFromLogits}}) {
    CaseSpec s = qwen30_tp8(run.m, 71 + static_cast<int>(run.m));
    s.scheme = run.scheme;
    s.N = run.n;
    s.pattern = run.pattern;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    const std::string what = std::string(scheme_name(run.scheme)) + " M = " + std::to_string(run.m) +
                             " N = " + std::to_string(run.n);
    std::vector<std::uint16_t> lean, full;
    lean = run_checked(d, c, run.m, what + " lean");
    {
      ScopedEnv e("MOEKIT_EXPERT_MLP_LEAN_GATHER", "0");
      full = run_checked(d, c, run.m, what + " predicated");
    }
    const std::int64_t differ = values_differing(lean, full);
    EXPECT_EQ(differ, 0) << what << ": " << differ << " values differ between the two gathers";
  }
}

TEST(Sm90ExpertMlp, TwoBoxesGiveTheSameBits) {
  // A GEMM1 stage's w13 tile as two boxes over both planes (64 and 32 rows of gate then up; the
  // default) against six 32-row boxes (MOEKIT_EXPERT_MLP_TWO_BOXES=0): the same bytes in the same places, so the
  // same bits. The one-CTA form (N = 96, and N = 40: every box's rows past N TMA's zeros), the
  // cluster form (N = 192), gpt-oss TP8's shard (N = 360, its last slice 72 rows; biases; e4m3 with
  // w2 row pairs and K = 2880, GEMM1's last stage half past K), bf16, fp16, fp8_per_tensor and
  // fp8_per_channel, several units a CTA (M = 203, all to one).
  SKIP_WITHOUT_SM90();
  struct Run {
    Scheme scheme;
    DType act;
    std::int64_t m, n;
    RoutingPattern pattern;
  };
  for (const Run& run : {Run{Scheme::kBf16, DType::kBf16, 8, 96, RoutingPattern::kFromLogits},
                         Run{Scheme::kBf16, DType::kFp16, 203, 96, RoutingPattern::kAllToOne},
                         Run{Scheme::kBf16, DType::kBf16, 16, 40, RoutingPattern::kFromLogits},
                         Run{Scheme::kFp8PerTensor, DType::kBf16, 37, 96, RoutingPattern::kFromLogits},
                         Run{Scheme::kFp8PerChannel, DType::kBf16, 16, 96, RoutingPattern::kFromLogits},
                         Run{Scheme::kBf16, DType::kBf16, 64, 192, RoutingPattern::kFromLogits},
                         Run{Scheme::kBf16, DType::kBf16, 8, 360, RoutingPattern::kFromLogits},
                         Run{Scheme::kFp8PerTensor, DType::kBf16, 16, 360, RoutingPattern::kFromLogits}}) {
    const std::uint64_t seed = 171 + static_cast<std::uint64_t>(run.m + run.n);
    CaseSpec s = run.n == 360 ? (run.scheme == Scheme::kBf16 ? gptoss_tp8(run.m, seed) : gptoss_fp8_tp8(run.m, seed))
                              : qwen30_tp8(run.m, seed);
    s.scheme = run.scheme;
    s.act_dtype = run.act;
    s.N = run.n;
    s.pattern = run.pattern;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    const std::string what = std::string(scheme_name(run.scheme)) + (run.act == DType::kFp16 ? " fp16" : "") +
                             " M = " + std::to_string(run.m) + " N = " + std::to_string(run.n);
    const std::int64_t differ = values_differing_under(d, c, run.m, "MOEKIT_EXPERT_MLP_TWO_BOXES", "0", "1", what);
    EXPECT_EQ(differ, 0) << what << ": " << differ << " values differ between six and two boxes a stage";
  }
}

TEST(Sm90ExpertMlp, WarmActGivesTheSameBits) {
  // The one-CTA form's warm warp (the default; MOEKIT_EXPERT_MLP_WARM_ACT=0 keeps it off) runs the
  // CTA's first unit through the consumers' code with nothing stored and no barrier (consume's
  // `warm`), so the output is the same bits as without it. Each activation kind, with and without
  // b13 / b2, the router weight on the input, bf16, fp16, fp8_per_tensor with the dynamic and the
  // static intermediate scale, fp8_per_channel (whose warm warp returns at once), N = 40, and
  // several units a CTA (M = 203, all to one: the warm warp runs the first only).
  SKIP_WITHOUT_SM90();
  struct Run {
    const char* what;
    Scheme scheme;
    std::int64_t m;
    void (*tweak)(CaseSpec&);
  };
  const Run runs[] = {
      {"bf16 silu", Scheme::kBf16, 8, [](CaseSpec&) {}},
      {"fp16 all to one", Scheme::kBf16, 203,
       [](CaseSpec& s) { s.act_dtype = DType::kFp16; s.pattern = RoutingPattern::kAllToOne; }},
      {"bf16 gelu, weight on the input", Scheme::kBf16, 16,
       [](CaseSpec& s) { s.activation.kind = Activation::kGelu; s.weight_on_input = true; }},
      {"bf16 swiglu_oai with biases", Scheme::kBf16, 16,
       [](CaseSpec& s) { s.activation.kind = Activation::kSwigluOai; s.bias = true; s.K = 512; }},
      {"bf16 N = 40", Scheme::kBf16, 16, [](CaseSpec& s) { s.N = 40; }},
      {"fp8 dynamic", Scheme::kFp8PerTensor, 37, [](CaseSpec&) {}},
      {"fp8 static", Scheme::kFp8PerTensor, 64, [](CaseSpec& s) { s.static_scales = true; }},
      {"fp8 swiglu_oai with biases", Scheme::kFp8PerTensor, 8,
       [](CaseSpec& s) { s.activation.kind = Activation::kSwigluOai; s.bias = true; s.K = 768; }},
      {"fp8_per_channel", Scheme::kFp8PerChannel, 16, [](CaseSpec&) {}},
  };
  for (const Run& run : runs) {
    CaseSpec s = qwen30_tp8(run.m, 191 + static_cast<std::uint64_t>(run.m));
    s.scheme = run.scheme;
    run.tweak(s);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    const std::string what = std::string(run.what) + " M = " + std::to_string(run.m);
    const std::int64_t differ = values_differing_under(d, c, run.m, "MOEKIT_EXPERT_MLP_WARM_ACT", "0", "1", what);
    EXPECT_EQ(differ, 0) << what << ": " << differ << " values differ with the warm warp";
  }
}

TEST(Sm90ExpertMlp, G2SwapGivesTheSameBits) {
  // The one-CTA form's GEMM2 as Swap-AB (MOEKIT_EXPERT_MLP_G2_SWAP, on by default: N = 8 or 16
  // token columns for units of up to 8 rows, 16 in e4m3; larger units keep the m64n256 form) gives
  // the m64n256 form's bits (the tensor cores' sums agree: 0 differing values of 81 cases on an
  // H100 in session 77, when it ran at every unit size up to 64) and matches the CPU reference,
  // at unit sizes across the widths and the threshold (all to one: a unit of M rows; M = 203:
  // three full units and one of 11), bf16, fp16, fp8_per_tensor with the dynamic and the static
  // intermediate scale and with fp16 y, biases (b2 in the epilogue), the router weight on the
  // input, N = 40, a last output tile of 192 columns (K = 704), and without the warm warp.
  SKIP_WITHOUT_SM90();
  struct Run {
    const char* what;
    Scheme scheme;
    void (*tweak)(CaseSpec&);
  };
  const Run runs[] = {
      {"bf16", Scheme::kBf16, [](CaseSpec&) {}},
      {"fp16, weight on the input", Scheme::kBf16,
       [](CaseSpec& s) { s.act_dtype = DType::kFp16; s.weight_on_input = true; }},
      {"bf16 swiglu_oai with biases", Scheme::kBf16,
       [](CaseSpec& s) { s.activation.kind = Activation::kSwigluOai; s.bias = true; s.K = 512; }},
      {"bf16 N = 40", Scheme::kBf16, [](CaseSpec& s) { s.N = 40; }},
      {"bf16 K = 704 with biases (the last tile 192 columns)", Scheme::kBf16, [](CaseSpec& s) { s.bias = true; s.K = 704; }},
      {"fp8 dynamic", Scheme::kFp8PerTensor, [](CaseSpec&) {}},
      {"fp8, fp16 activations (fp16 y)", Scheme::kFp8PerTensor, [](CaseSpec& s) { s.act_dtype = DType::kFp16; }},
      {"fp8 static", Scheme::kFp8PerTensor, [](CaseSpec& s) { s.static_scales = true; }},
      {"fp8 gelu with biases", Scheme::kFp8PerTensor,
       [](CaseSpec& s) { s.activation.kind = Activation::kGelu; s.bias = true; s.K = 768; }},
  };
  ScopedEnv swap("MOEKIT_EXPERT_MLP_G2_SWAP", "1");
  for (const Run& run : runs) {
    CaseSpec s = qwen30_tp8(203, 211);
    s.scheme = run.scheme;
    s.pattern = RoutingPattern::kAllToOne;
    run.tweak(s);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 8, 9, 16, 17, 32, 33, 64, 203}) {
      const std::string what = std::string(run.what) + " all to one, M = " + std::to_string(M);
      EXPECT_EQ(values_differing_under(d, c, M, "MOEKIT_EXPERT_MLP_G2_SWAP", "0", "1", what), 0) << what;
    }
  }
  // Routed from logits (units of a few rows, many experts), and without the warm warp.
  for (const char* warm : {"1", "0"}) {
    ScopedEnv w("MOEKIT_EXPERT_MLP_WARM_ACT", warm);
    for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
      CaseSpec s = qwen30_tp8(64, 223);
      s.scheme = scheme;
      MoeCase c = make_case(s);
      DeviceCase d(c);
      for (std::int64_t M : {1, 4, 16, 64})
        run_checked(d, c, M, std::string(scheme_name(scheme)) + " swap, warm warp " + warm + ", M = " + std::to_string(M));
    }
  }
}

TEST(Sm90ExpertMlp, PlainKernelGivesTheSameBits) {
  // The kPlain kernels (MOEKIT_EXPERT_MLP_PLAIN, on by default: the common per-tensor call's
  // features fixed at compile time; the one-CTA kernel's code ~45 % of the general one's) run the
  // calls with those features, the same bits as the general kernels, and the general kernels run
  // the rest: silu without biases in bf16, fp16 and fp8_per_tensor (dynamic and static intermediate
  // scale), on one CTA (N = 96, N = 40) and on clusters of 2, 3 and 4 (N = 192, 256, 320), all to
  // one (units of 1..64 rows and several units a CTA), routed from logits with an expert_map; then
  // gelu, swiglu_oai with biases, the router weight on the input, fp8 with fp16 y and a switch off
  // its default (two boxes), which the plain kernels must not take.
  SKIP_WITHOUT_SM90();
  struct Run {
    const char* what;
    Scheme scheme;
    bool plain;  // the plain kernel takes it
    void (*tweak)(CaseSpec&);
  };
  const Run runs[] = {
      {"bf16", Scheme::kBf16, true, [](CaseSpec&) {}},
      {"fp16", Scheme::kBf16, true, [](CaseSpec& s) { s.act_dtype = DType::kFp16; }},
      {"bf16 N = 40, all to one", Scheme::kBf16, true, [](CaseSpec& s) { s.N = 40; s.pattern = RoutingPattern::kAllToOne; }},
      {"bf16 expert_map with -1", Scheme::kBf16, true, [](CaseSpec& s) { s.expert_map = true; }},
      {"fp8 dynamic", Scheme::kFp8PerTensor, true, [](CaseSpec&) {}},
      {"fp8 dynamic, all to one", Scheme::kFp8PerTensor, true, [](CaseSpec& s) { s.pattern = RoutingPattern::kAllToOne; }},
      {"fp8 static", Scheme::kFp8PerTensor, true, [](CaseSpec& s) { s.static_scales = true; }},
      {"bf16 N = 192 (a cluster of 2)", Scheme::kBf16, true, [](CaseSpec& s) { s.N = 192; }},
      {"fp16 N = 320 (a cluster of 4, the last slice 32 columns)", Scheme::kBf16, true,
       [](CaseSpec& s) { s.act_dtype = DType::kFp16; s.N = 320; }},
      {"fp8 N = 256 (a cluster of 3), all to one", Scheme::kFp8PerTensor, true,
       [](CaseSpec& s) { s.N = 256; s.pattern = RoutingPattern::kAllToOne; }},
      {"fp8 static N = 192", Scheme::kFp8PerTensor, true, [](CaseSpec& s) { s.static_scales = true; s.N = 192; }},
      {"bf16 gelu N = 192", Scheme::kBf16, false, [](CaseSpec& s) { s.activation.kind = Activation::kGelu; s.N = 192; }},
      {"bf16 gelu", Scheme::kBf16, false, [](CaseSpec& s) { s.activation.kind = Activation::kGelu; }},
      {"bf16 swiglu_oai with biases", Scheme::kBf16, false,
       [](CaseSpec& s) { s.activation.kind = Activation::kSwigluOai; s.bias = true; s.K = 512; }},
      {"bf16 weight on the input", Scheme::kBf16, false, [](CaseSpec& s) { s.weight_on_input = true; }},
      {"fp8, fp16 activations (fp16 y)", Scheme::kFp8PerTensor, false, [](CaseSpec& s) { s.act_dtype = DType::kFp16; }},
  };
  for (const Run& run : runs) {
    CaseSpec s = qwen30_tp8(203, 233);
    s.scheme = run.scheme;
    run.tweak(s);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 8, 64, 203}) {
      const std::string what = std::string(run.what) + " M = " + std::to_string(M);
      const int plain0 = cuda::expert_mlp_plain_launches();
      EXPECT_EQ(values_differing_under(d, c, M, "MOEKIT_EXPERT_MLP_PLAIN", "0", "1", what), 0) << what;
      EXPECT_EQ(cuda::expert_mlp_plain_launches() - plain0, run.plain ? 1 : 0)
          << what << (run.plain ? ": the plain kernel did not run" : ": the plain kernel ran a call it does not fit");
    }
  }
  // A switch off its default sends the call to the general kernel.
  ScopedEnv six("MOEKIT_EXPERT_MLP_TWO_BOXES", "0");
  MoeCase c = make_case(qwen30_tp8(16, 239));
  DeviceCase d(c);
  const int plain0 = cuda::expert_mlp_plain_launches();
  run_checked(d, c, 16, "bf16, six boxes a stage");
  EXPECT_EQ(cuda::expert_mlp_plain_launches(), plain0) << "the plain kernel ran with MOEKIT_EXPERT_MLP_TWO_BOXES=0";
}

TEST(Sm90ExpertMlp, PlainChannelKernelGivesTheSameBits) {
  // The kChannel kPlain kernels (MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1; off by default until measured)
  // run fp8_per_channel's common call (silu, no biases, the router weight on the output, bf16 y)
  // with the same bits as the general kChannel kernels, on one CTA (N = 96, N = 40) and on clusters
  // of 2 and 3 (N = 192, 256), all to one and with an expert_map; with the switch unset no call
  // takes them, and gelu keeps the general kernel with it set.
  SKIP_WITHOUT_SM90();
  struct Run {
    const char* what;
    bool plain;  // the plain kernel takes it (with the switch on)
    void (*tweak)(CaseSpec&);
  };
  const Run runs[] = {
      {"N = 96", true, [](CaseSpec&) {}},
      {"N = 40, all to one", true, [](CaseSpec& s) { s.N = 40; s.pattern = RoutingPattern::kAllToOne; }},
      {"expert_map with -1", true, [](CaseSpec& s) { s.expert_map = true; }},
      {"N = 192 (a cluster of 2)", true, [](CaseSpec& s) { s.N = 192; }},
      {"N = 256 (a cluster of 3), all to one", true, [](CaseSpec& s) { s.N = 256; s.pattern = RoutingPattern::kAllToOne; }},
      {"gelu", false, [](CaseSpec& s) { s.activation.kind = Activation::kGelu; }},
  };
  for (const Run& run : runs) {
    CaseSpec s = qwen30_tp8(203, 241);
    s.scheme = Scheme::kFp8PerChannel;
    run.tweak(s);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 8, 64, 203}) {
      const std::string what = std::string("fp8_per_channel ") + run.what + " M = " + std::to_string(M);
      {
        const int plain0 = cuda::expert_mlp_plain_launches();
        run_checked(d, c, M, what + ", switch unset");
        EXPECT_EQ(cuda::expert_mlp_plain_launches(), plain0) << what << ": a plain kernel ran with the switch unset";
      }
      ScopedEnv on("MOEKIT_EXPERT_MLP_PLAIN_CHANNEL", "1");
      const int plain0 = cuda::expert_mlp_plain_launches();
      EXPECT_EQ(values_differing_under(d, c, M, "MOEKIT_EXPERT_MLP_PLAIN", "0", "1", what), 0) << what;
      EXPECT_EQ(cuda::expert_mlp_plain_launches() - plain0, run.plain ? 1 : 0)
          << what << (run.plain ? ": the plain kernel did not run" : ": the plain kernel ran a call it does not fit");
    }
  }
}

TEST(Sm90ExpertMlp, QuantOneCtaGivesTheSameBits) {
  // MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=1: hidden's dynamic scale from the one-CTA quantization (the
  // block's max) instead of the absmax launch's atomicMax word: the same scale, the same bits, at
  // sizes past the one-CTA kernel's own threshold (M x K = 64 x 2048 and 128 x 2048 elements) and
  // on the cluster form.
  SKIP_WITHOUT_SM90();
  for (std::int64_t n : {96, 192}) {
    CaseSpec s = qwen30_tp8(128, 61);
    s.scheme = Scheme::kFp8PerTensor;
    s.N = n;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {64, 128}) {
      std::vector<std::uint16_t> one, two;
      {
        ScopedEnv e("MOEKIT_EXPERT_MLP_QUANT_ONE_CTA", "1");
        one = run_checked(d, c, M, "one-CTA quantization N=" + std::to_string(n) + " M=" + std::to_string(M));
      }
      two = run_checked(d, c, M, "two launches N=" + std::to_string(n) + " M=" + std::to_string(M));
      const std::int64_t differ = values_differing(one, two);
      EXPECT_EQ(differ, 0) << "N=" << n << " M=" << M << ": " << differ << " values differ";
    }
  }
}

TEST(Sm90ExpertMlp, Fp8PerTensorMatchesReference) {
  // fp8_per_tensor: hidden quantized by the chain's quantization launch (dynamic or static scale),
  // each unit's intermediate scaled by itself (dynamic; docs/design.md) or by the static scale,
  // within the scheme's bounds of the reference (tests/common/tolerance.hpp).
  SKIP_WITHOUT_SM90();
  for (bool static_scales : {false, true}) {
    CaseSpec s = qwen30_tp8(256, 26 + (static_scales ? 1 : 0));
    s.scheme = Scheme::kFp8PerTensor;
    s.static_scales = static_scales;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 16, 64, 256})
      run_checked(d, c, M, std::string("fp8 ") + (static_scales ? "static" : "dynamic") + " M=" + std::to_string(M));
  }
  {
    CaseSpec s = qwen30_tp8(48, 28);
    s.scheme = Scheme::kFp8PerTensor;
    s.weight_on_input = true;
    s.act_dtype = DType::kFp16;
    check_case(s, 48, "fp8, fp16 activations, router weight on the input");
  }
  {
    CaseSpec s = qwen30_tp8(150, 29);  // one expert's 150 rows: three units, three scales
    s.scheme = Scheme::kFp8PerTensor;
    s.pattern = RoutingPattern::kAllToOne;
    s.hot_expert = 3;
    check_case(s, 150, "fp8, all to one expert");
  }
}

TEST(Sm90ExpertMlp, Fp8PerChannelMatchesReference) {
  // fp8_per_channel on the one-CTA form (forced by name; the cluster form's cases are in
  // ClusterSlicesFp8PerChannelMatchReference): hidden quantized
  // a token row at a time by the chain's launch, the w13 scales a gate / up row and the w2 scales
  // an output column (the expert's, in shared memory a unit), h's scale a slot row (the
  // reference's quantization points), within the scheme's bounds of the reference; the BRIEF §5
  // cases it takes: tile-boundary M, every token's first slot on one expert (three units of one
  // expert), experts without tokens, k = E with odd E and a K that is not a multiple of 256 (a
  // partial last output tile: the w2 scales past K are zeros), expert_map with -1, the router
  // weight on the input, fp16 activations, gelu, and N = 48 (w13 scales past N are zeros).
  SKIP_WITHOUT_SM90();
  {
    CaseSpec s = qwen30_tp8(256, 41);
    s.scheme = Scheme::kFp8PerChannel;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 3, 16, 64, 65, 256})
      run_checked(d, c, M, "fp8_per_channel M=" + std::to_string(M));
  }
  check_channel_variants(
      qwen30_tp8,
      {
      {"all to one expert", [](CaseSpec& s) { s.pattern = RoutingPattern::kAllToOne; s.hot_expert = 3; }, 150},
      {"skewed", [](CaseSpec& s) { s.pattern = RoutingPattern::kSkewed; }, 40},
      {"k = E = 7, K = 384", [](CaseSpec& s) { s.E = 7; s.k = 7; s.K = 384; }, 9},
      {"expert_map with -1", [](CaseSpec& s) { s.expert_map = true; s.E = 64; }, 24},
      {"router weight on the input, fp16", [](CaseSpec& s) { s.weight_on_input = true; s.act_dtype = DType::kFp16; }, 48},
      {"gelu", [](CaseSpec& s) { s.activation.kind = Activation::kGelu; }, 20},
      {"N = 48", [](CaseSpec& s) { s.N = 48; }, 32},
      },
      42);
}

// The cluster form (N > 96: a unit on ceil(N / 96) CTAs, each a 96-column slice of h pushed into
// every rank's tile, GEMM2's output tiles split over the ranks).

// qwen3-235b-a22b's TP8 shard (E = 128, K = 4096, N = 192: two slices) and deepseek-v3's (K = 7168,
// N = 256: three, the last one 64 columns; 32 of its 256 experts, so the host builds 0.2 G weights
// instead of 1.4 G: the slices, K and the tile split are the shard's).
CaseSpec qwen235_tp8(std::int64_t M, std::uint64_t seed) {
  CaseSpec s = qwen30_tp8(M, seed);
  s.K = 4096;
  s.N = 192;
  return s;
}
CaseSpec deepseek_tp8(std::int64_t M, std::uint64_t seed) {
  CaseSpec s = qwen30_tp8(M, seed);
  s.E = 32;
  s.K = 7168;
  s.N = 256;
  return s;
}

TEST(Sm90ExpertMlp, ClusterSlicesMatchReference) {
  // M = 1 (8 units), tile-boundary counts, and M = 256 (more units than clusters: every cluster
  // runs several, through h_empty), bf16 and fp8_per_tensor (the unit's h scale over all ranks).
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = qwen235_tp8(256, 51);
    s.scheme = scheme;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 16, 65, 256})
      run_checked(d, c, M, std::string("qwen3-235b TP8 ") + scheme_name(scheme) + " M=" + std::to_string(M));
  }
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = deepseek_tp8(64, 52);
    s.scheme = scheme;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 64})
      run_checked(d, c, M, std::string("deepseek-v3 TP8 ") + scheme_name(scheme) + " M=" + std::to_string(M));
  }
}

TEST(Sm90ExpertMlp, ClusterSlicesEdgeCases) {
  SKIP_WITHOUT_SM90();
  {
    CaseSpec s = qwen235_tp8(150, 53);  // one expert's 150 rows: three units, one dynamic scale each
    s.pattern = RoutingPattern::kAllToOne;
    s.hot_expert = 9;
    s.scheme = Scheme::kFp8PerTensor;
    check_case(s, 150, "N = 192 fp8, all to one expert");
  }
  {
    CaseSpec s = qwen30_tp8(37, 54);  // four slices, the last 64 columns; k = E, odd E, a short K
    s.N = 352;
    s.E = 7;
    s.k = 7;
    s.K = 384;
    for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
      s.scheme = scheme;
      check_case(s, 37, std::string("N = 352, k = E = 7 ") + scheme_name(scheme));
    }
  }
  {
    CaseSpec s = qwen235_tp8(24, 55);  // expert_map with -1, fp16, the router weight on the input
    s.expert_map = true;
    s.E = 64;
    s.act_dtype = DType::kFp16;
    s.weight_on_input = true;
    check_case(s, 24, "N = 192, expert_map with -1, fp16, weight on input");
  }
  {
    CaseSpec s = qwen235_tp8(48, 56);  // fp8 with static scales (the intermediate's as given)
    s.scheme = Scheme::kFp8PerTensor;
    s.static_scales = true;
    check_case(s, 48, "N = 192 fp8, static scales");
  }
  {
    CaseSpec s = qwen235_tp8(20, 57);  // N = 160: two slices, the second 64 columns; gelu
    s.N = 160;
    s.activation.kind = Activation::kGelu;
    check_case(s, 20, "N = 160, gelu");
  }
}

TEST(Sm90ExpertMlp, ClusterSlicesFp8PerChannelMatchReference) {
  // fp8_per_channel on the cluster form: each rank stages its slice's w13 scales, and a row's h
  // scale is the max of the ranks' slice absmaxes (exchanged a row a float), so the reference's
  // per-slot scale. qwen3-235b TP8 (two slices) at M = 1 / 16 / 65 / 256 (several units a cluster),
  // deepseek-v3 TP8 (three, the last 64 columns), four slices with a last one of 64 columns and
  // k = E = 7 with a short K, one expert's 150 rows (three units, a scale a row each), expert_map
  // with -1 with fp16 and the router weight on the input, and gelu at N = 160.
  SKIP_WITHOUT_SM90();
  {
    CaseSpec s = qwen235_tp8(256, 61);
    s.scheme = Scheme::kFp8PerChannel;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 16, 65, 256})
      run_checked(d, c, M, "qwen3-235b TP8 fp8_per_channel M=" + std::to_string(M));
  }
  {
    CaseSpec s = deepseek_tp8(64, 62);
    s.scheme = Scheme::kFp8PerChannel;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 64}) run_checked(d, c, M, "deepseek-v3 TP8 fp8_per_channel M=" + std::to_string(M));
  }
  check_channel_variants(
      qwen235_tp8,
      {
      {"N = 352, k = E = 7, K = 384", [](CaseSpec& s) { s.N = 352; s.E = 7; s.k = 7; s.K = 384; }, 37},
      {"N = 192, all to one expert", [](CaseSpec& s) { s.pattern = RoutingPattern::kAllToOne; s.hot_expert = 9; }, 150},
      {"N = 192, expert_map with -1, fp16, weight on input",
       [](CaseSpec& s) { s.expert_map = true; s.E = 64; s.act_dtype = DType::kFp16; s.weight_on_input = true; }, 24},
      {"N = 160, gelu", [](CaseSpec& s) { s.N = 160; s.activation.kind = Activation::kGelu; }, 20},
      },
      62);
}

TEST(Sm90ExpertMlp, ClusterSlicesSameBitsAsTheTokenMajorChain) {
  // bf16 at N = 192: h is the same bf16 values (each slice's GEMM1 over the same K order), and
  // GEMM2 sums all 192 columns in order on one rank, as token-major GEMM1 and the K-short GEMM2.
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen235_tp8(64, 58));
  DeviceCase d(c);
  const std::vector<std::uint16_t> fused = run_checked(d, c, 64, "N = 192 M=64");
  const std::vector<std::uint16_t> chain = d.run(64, CallMode::kFusedExperts, "tokmajor");
  const std::int64_t differ = values_differing(fused, chain);
  EXPECT_EQ(differ, 0) << differ << " of " << fused.size() << " output values differ from the token-major chain's";
}

TEST(Sm90ExpertMlp, ClusterSlicesGraphReplayIsBitwiseStable) {
  // Forced by name in a graph: every replay gives the eager call's bits (the cluster's exchange
  // has no order-dependent sum), fp8 with the dynamic scales.
  SKIP_WITHOUT_SM90();
  CaseSpec s = deepseek_tp8(32, 59);
  s.scheme = Scheme::kFp8PerTensor;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  const std::vector<std::uint16_t> eager = run_checked(d, c, 32, "deepseek-v3 TP8 fp8 eager");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto outs = d.replay_in_graph(32, CallMode::kFusedExperts, "expert_mlp", stream, 3, /*poison_ws=*/true);
  ASSERT_EQ(outs.size(), 3u);
  for (const auto& o : outs) EXPECT_TRUE(o == eager) << "a graph replay differs from the eager call";
  cudaStreamDestroy(stream);
}

TEST(Sm90ExpertMlp, GraphReplayEqualsEager) {
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen30_tp8(64, 20));
  DeviceCase d(c);
  const std::vector<std::uint16_t> eager = run_checked(d, c, 64, "eager");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int before = cuda::expert_mlp_launches();
  const auto outs = d.replay_in_graph(64, CallMode::kFusedExperts, "auto", stream, 3, /*poison_ws=*/true);
  EXPECT_EQ(cuda::expert_mlp_launches(), before + 1) << "auto did not take the kernel at M = 64 (captured once)";
  ASSERT_EQ(outs.size(), 3u);
  for (const auto& o : outs) EXPECT_TRUE(o == eager) << "a graph replay differs from the eager call";
  cudaStreamDestroy(stream);
}

TEST(Sm90ExpertMlp, AutoTakesItInItsRangeAndTheSwitchKeepsItOff) {
  // docs/router.md: auto from 32 to 2048 local slots (qwen3-30b TP8 bf16 M = 4..256; fp8_per_tensor
  // from 24, M = 3); below, the router's other paths; the cluster form (qwen3-235b TP8, N = 192)
  // from 40 slots where its expected units fit the resident clusters in one round (M = 8), not at
  // 96 (M = 12: two rounds), again from 128; MOEKIT_EXPERT_MLP=0 keeps auto off it;
  // MOEKIT_LOG_DISPATCH names it.
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen30_tp8(32, 24));
  DeviceCase d(c);
  Options o;
  o.backend = Backend::kCuda;
  std::vector<std::uint16_t> host_out(static_cast<std::size_t>(32 * c.spec.K));
  const FusedExpertsArgs h = c.host_args(host_out.data());
  // The plan auto describes for the first M tokens of a call's arguments.
  const auto dispatch_at = [&o](FusedExpertsArgs a, std::int64_t M) {
    for (TensorView* v : {&a.hidden, &a.topk_ids, &a.topk_weights, &a.out}) v->shape[0] = M;
    return describe_dispatch(describe(a), o);
  };
  EXPECT_EQ(dispatch_at(h, 32), "expert_mlp");
  {
    CaseSpec s8 = qwen30_tp8(32, 25);  // fp8_per_tensor: from 24 slots (RouterTable::expert_mlp_fp8_min_slots)
    s8.scheme = Scheme::kFp8PerTensor;
    MoeCase c8 = make_case(s8);
    std::vector<std::uint16_t> out8(static_cast<std::size_t>(32 * c8.spec.K));
    const FusedExpertsArgs h8 = c8.host_args(out8.data());
    EXPECT_EQ(dispatch_at(h8, 32), "expert_mlp");
    EXPECT_EQ(dispatch_at(h8, 3), "expert_mlp");  // 24 slots
    EXPECT_NE(dispatch_at(h8, 2), "expert_mlp");  // 16 slots: gemv(mma)
  }
  EXPECT_EQ(dispatch_at(h, 4), "expert_mlp");  // bf16, 32 slots
  EXPECT_NE(dispatch_at(h, 3), "expert_mlp");  // bf16, 24 slots: gemv
  {
    // The cluster form's one round: qwen3-235b TP8's shard (E = 128, k = 8, N = 192; K cut to 1024
    // here: the router reads E, k, N and the slots) on this GPU's resident clusters of 2 (66 on an
    // H100 SXM: M = 8's ~52 expected experts fit, M = 12's ~69 do not).
    CaseSpec sw = qwen30_tp8(16, 26);
    sw.N = 192;
    sw.K = 1024;
    MoeCase cw = make_case(sw);
    std::vector<std::uint16_t> outw(static_cast<std::size_t>(16 * cw.spec.K));
    const FusedExpertsArgs hw = cw.host_args(outw.data());
    const int clusters = cuda::expert_mlp_resident_clusters(describe(hw));
    EXPECT_GT(clusters, 0);
    if (clusters >= 52 && clusters < 69) {
      EXPECT_EQ(dispatch_at(hw, 8), "expert_mlp");   // 64 slots, ~52 experts: one round
      EXPECT_NE(dispatch_at(hw, 12), "expert_mlp");  // 96 slots, ~69 experts: two rounds
    }
    EXPECT_EQ(dispatch_at(hw, 16), "expert_mlp");  // 128 slots
  }
  for (std::int64_t M : {3, 4, 16, 32}) {
    const int before = cuda::expert_mlp_launches();
    std::string err;
    std::vector<std::uint16_t> bits;
    {
      ScopedEnv log("MOEKIT_LOG_DISPATCH", "1");
      ::testing::internal::CaptureStderr();
      bits = d.run(M, CallMode::kFusedExperts, "auto");
      err = ::testing::internal::GetCapturedStderr();
    }
    EXPECT_EQ(cuda::expert_mlp_launches(), before + (M >= 4 ? 1 : 0)) << "M=" << M;
    EXPECT_EQ(err.find("-> expert_mlp |") != std::string::npos, M >= 4) << err;
    EXPECT_TRUE(rows_match(to_float(bits, c.spec.act_dtype), reference_rows(c, 0, M), c.spec.K, c.spec.scheme,
                           "auto M=" + std::to_string(M)));
  }
  ScopedEnv off("MOEKIT_EXPERT_MLP", "0");
  const int before = cuda::expert_mlp_launches();
  d.run(32, CallMode::kFusedExperts, "auto");
  EXPECT_EQ(cuda::expert_mlp_launches(), before);
}

TEST(Sm90ExpertMlp, DeclinedCallsGoToTheRouter) {
  // Shapes and schemes it does not take: forced, an error naming why; auto, the router's path.
  SKIP_WITHOUT_SM90();
  CaseSpec s = qwen30_tp8(16, 21);
  s.N = 400;  // past four 96-column slices
  MoeCase c = make_case(s);
  std::vector<std::uint16_t> host_out(static_cast<std::size_t>(s.M * s.K));
  std::string why;
  EXPECT_FALSE(cuda::expert_mlp_supported(describe(c.host_args(host_out.data())), &why));
  EXPECT_NE(why.find("intermediate_size must be a multiple of 8 from 16 up to 384"), std::string::npos) << why;
  DeviceCase d(c);
  try {
    d.run(16, CallMode::kFusedExperts, "expert_mlp");
    ADD_FAILURE() << "forced expert_mlp at N = 400 did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("intermediate_size must be a multiple of 8"), std::string::npos) << e.what();
  }
  const int before = cuda::expert_mlp_launches();
  const std::vector<std::uint16_t> bits = d.run(16, CallMode::kFusedExperts, "auto");
  EXPECT_EQ(cuda::expert_mlp_launches(), before);
  EXPECT_TRUE(rows_match(to_float(bits, s.act_dtype), reference_rows(c, 0, 16), s.K, s.scheme, "N = 400"));
  CaseSpec f = qwen30_tp8(16, 22);
  f.scheme = Scheme::kFp8Block128;
  const MoeCase fc = make_case(f);
  EXPECT_FALSE(cuda::expert_mlp_supported(describe(fc.host_args(host_out.data())), &why));
  EXPECT_NE(why.find("fp8_per_tensor"), std::string::npos) << why;
}

TEST(Sm90ExpertMlp, GptOssShardMatchesReference) {
  // gpt-oss TP8 (gptoss_tp8) at the grid's token counts: the biases staged a unit (b13 after
  // GEMM1's scales and the router weight on the input, b2 after GEMM2's scales and before the router
  // weight on the output), swiglu_oai, the partial last slice and output tile; in e4m3 (the
  // half-zero last K stage) fp8_per_tensor at N = 360 (w2 as row pairs) and fp8_per_channel at 352;
  // and fp8_per_channel at N = 360 declined with its reason, auto running it elsewhere.
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 300;
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel}) {
    MoeCase c = make_case(scheme == Scheme::kBf16 ? gptoss_tp8(256, ++seed) : gptoss_fp8_tp8(256, ++seed, scheme));
    DeviceCase d(c);
    for (std::int64_t M : {1, 5, 16, 64, 256})
      run_checked(d, c, M, std::string("gpt-oss TP8 ") + scheme_name(scheme) + " M=" + std::to_string(M));
  }
  CaseSpec f = gptoss_tp8(16, ++seed);
  f.scheme = Scheme::kFp8PerChannel;
  MoeCase c = make_case(f);
  std::vector<std::uint16_t> host_out(static_cast<std::size_t>(f.M * f.K));
  std::string why;
  EXPECT_FALSE(cuda::expert_mlp_supported(describe(c.host_args(host_out.data())), &why));
  EXPECT_NE(why.find("fp8_per_channel: e4m3 w2 rows of N bytes must be a multiple of 16"), std::string::npos) << why;
  DeviceCase d(c);
  const int before = cuda::expert_mlp_launches();
  const std::vector<std::uint16_t> bits = d.run(16, CallMode::kFusedExperts, "auto");
  EXPECT_EQ(cuda::expert_mlp_launches(), before);
  EXPECT_TRUE(rows_match(to_float(bits, f.act_dtype), reference_rows(c, 0, 16), f.K, f.scheme,
                         "fp8_per_channel N = 360, auto"));
  // The one-CTA form has no row pairs: e4m3 at N = 88 declined.
  CaseSpec g = gptoss_fp8_tp8(4, ++seed);
  g.N = 88;
  MoeCase cg = make_case(g);
  EXPECT_FALSE(cuda::expert_mlp_supported(describe(cg.host_args(host_out.data())), &why));
  EXPECT_NE(why.find("at N <= 96"), std::string::npos) << why;
}

TEST(Sm90ExpertMlp, RowPairShapesMatchReference) {
  // w2 as row pairs (e4m3 per tensor, N % 16 = 8) around gpt-oss's 360: clusters of two with an
  // 8-column last slice (N = 104), of three (200) and of four with a full last slice (376); K = 320
  // (the half-zero last K stage) and 2880 (a partial last output tile); without biases (store_y's
  // factor), fp16 output, static scales, and tile-boundary token counts at N = 360.
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 350;
  for (std::int64_t n : {104, 200, 376}) {
    CaseSpec s = gptoss_fp8_tp8(40, ++seed);
    s.N = n;
    s.K = 320;
    check_case(s, 40, "row pairs N = " + std::to_string(n) + ", K = 320");
  }
  {
    CaseSpec s = gptoss_fp8_tp8(64, ++seed);
    s.bias = false;
    check_case(s, 64, "row pairs, no biases");
  }
  {
    CaseSpec s = gptoss_fp8_tp8(64, ++seed);
    s.bias = false;
    s.act_dtype = DType::kFp16;
    s.activation.kind = Activation::kSilu;
    check_case(s, 64, "row pairs, no biases, fp16, silu");
  }
  {
    CaseSpec s = gptoss_fp8_tp8(33, ++seed);
    s.static_scales = true;
    s.bias = false;
    check_case(s, 33, "row pairs, static scales, no biases");
  }
  MoeCase c = make_case(gptoss_fp8_tp8(200, ++seed));
  DeviceCase d(c);
  for (std::int64_t M : {15, 16, 17, 63, 64, 65, 200})
    run_checked(d, c, M, "row pairs gpt-oss TP8 M=" + std::to_string(M));
}

TEST(Sm90ExpertMlp, BiasesEdgeCases) {
  // The biases and the odd shapes around gpt-oss's: the router weight on the input with biases,
  // fp16, static fp8 scales, expert_map with -1, all tokens on one expert (several 64-row tiles of
  // one expert, each staging the same biases), k = E with odd E; one CTA a unit at N = 40 (bf16) /
  // 48 (e4m3) and K = 320 (e4m3: a half-zero last stage), a cluster of two at N = 136 / 144; and
  // only one bias present.
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 400;
  const auto gpt = [&](std::int64_t M, Scheme scheme) {
    return scheme == Scheme::kBf16 ? gptoss_tp8(M, ++seed) : gptoss_fp8_tp8(M, ++seed, scheme);
  };
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    const std::string sn = scheme_name(scheme);
    {
      CaseSpec s = gpt(24, scheme);
      s.weight_on_input = true;
      check_case(s, 24, sn + " weight on input");
    }
    {
      CaseSpec s = gpt(24, scheme);
      s.act_dtype = DType::kFp16;
      check_case(s, 24, sn + " fp16");
    }
    {
      CaseSpec s = gpt(24, scheme);
      s.expert_map = true;
      check_case(s, 24, sn + " expert_map");
    }
    {
      CaseSpec s = gpt(150, scheme);
      s.pattern = RoutingPattern::kAllToOne;
      s.hot_expert = 77;
      check_case(s, 150, sn + " all to one expert");
    }
    {
      CaseSpec s = gpt(9, scheme);
      s.E = 7;
      s.k = 7;
      s.K = 320;
      check_case(s, 9, sn + " k = E = 7, K = 320");
    }
    for (std::int64_t n : {40, 136}) {  // one CTA; a cluster of two, the last slice 40 (e4m3: 48) columns
      CaseSpec s = gpt(33, scheme);
      s.N = scheme == Scheme::kBf16 ? n : n + 8;
      s.K = 320;
      check_case(s, 33, sn + " N = " + std::to_string(n) + ", K = 320");
    }
  }
  {
    CaseSpec s = gpt(40, Scheme::kFp8PerTensor);
    s.static_scales = true;
    check_case(s, 40, "fp8 static scales");
  }
  {
    CaseSpec s = gpt(40, Scheme::kBf16);
    s.activation.kind = Activation::kSilu;
    check_case(s, 40, "silu with biases");
  }
  // One bias only: the MoeCase's other one dropped from the call.
  for (int which : {0, 1}) {
    CaseSpec s = gpt(20, which == 0 ? Scheme::kBf16 : Scheme::kFp8PerTensor);
    MoeCase c = make_case(s);
    if (which == 0) c.b2.clear();
    else c.b13.clear();
    DeviceCase d(c);
    run_checked(d, c, 20, which == 0 ? "b13 only" : "b2 only, fp8");
  }
}

TEST(Sm90ExpertMlp, GptOssRunsAreBitwiseStable) {
  // Deterministic: the same bits on two runs of the same call (biases staged a unit).
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    const std::uint64_t seed = 500 + static_cast<int>(scheme);
    CaseSpec s = scheme == Scheme::kBf16 ? gptoss_tp8(64, seed) : gptoss_fp8_tp8(64, seed);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    const std::vector<std::uint16_t> eager = run_checked(d, c, 64, std::string("gpt-oss eager ") + scheme_name(scheme));
    const std::vector<std::uint16_t> again = d.run(64, CallMode::kFusedExperts, "expert_mlp");
    EXPECT_EQ(values_differing(eager, again), 0) << scheme_name(scheme) << ": two eager runs differ";
  }
}

TEST(Sm90ExpertMlp, ZeroTokensForcedLaunchesNothing) {
  // M = 0 forced by name: nothing launches, no error (as every known path name).
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(qwen30_tp8(4, 25));
  DeviceCase d(c);
  const int before = cuda::expert_mlp_launches();
  EXPECT_NO_THROW(d.run(0, CallMode::kFusedExperts, "expert_mlp"));
  EXPECT_EQ(cuda::expert_mlp_launches(), before);
}

TEST(Sm90ExpertMlp, SmallForSanitizers) {
  // Small calls for compute-sanitizer (gpu_check.sh's memcheck and racecheck filters): bf16, fp8
  // per tensor and per channel.
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel}) {
    for (std::int64_t n : {96, 224}) {  // one CTA a unit; a cluster of three (the last slice 32 columns)
      CaseSpec s = qwen30_tp8(6, 23);
      s.E = 16;
      s.k = 4;
      s.K = 256;
      s.N = n;
      s.scheme = scheme;
      check_case(s, 6, std::string("small ") + scheme_name(scheme) + " N=" + std::to_string(n));
    }
  }
  // Several units a CTA (~450 experts hit over a grid of at most 132 CTAs), so each of the two
  // slot-list buffers is rewritten while the producer may still hold the one before; and in
  // fp8_per_channel the unit's scales in shared memory, re-staged for each next expert.
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerChannel}) {
    CaseSpec s = qwen30_tp8(128, 29);
    s.E = 512;
    s.K = 256;
    s.scheme = scheme;
    check_case(s, 128, std::string("several units a CTA, ") + scheme_name(scheme));
  }
  // gpt-oss's form, small: biases staged a unit, swiglu_oai, clusters of four (N = 360, in
  // fp8_per_tensor w2 as row pairs; fp8_per_channel 352), e4m3's half-zero last K stage (K = 320);
  // several units a cluster (E = 64).
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel}) {
    CaseSpec s = scheme == Scheme::kBf16 ? gptoss_tp8(24, 33) : gptoss_fp8_tp8(24, 33, scheme);
    s.E = 64;
    s.K = 320;
    check_case(s, 24, std::string("small gpt-oss form, ") + scheme_name(scheme));
  }
  {
    CaseSpec s = qwen30_tp8(64, 31);  // fp8_per_channel on clusters of two, several units a cluster
    s.E = 512;
    s.K = 256;
    s.N = 192;
    s.scheme = Scheme::kFp8PerChannel;
    check_case(s, 64, "several units a cluster, fp8_per_channel");
  }
}

TEST(Sm90ExpertMlp, AheadNextGivesTheSameBits) {
  // A CTA's units after its first issue a whole ring of w13 stages before their slot list (the
  // default) against MOEKIT_EXPERT_MLP_AHEAD_NEXT=0 (one stage, as the first unit): the same bytes
  // into the same stages, so the same bits, both against the reference. Shapes with several units
  // a CTA or cluster: the one-CTA form over 512 experts (bf16, fp8_per_tensor, fp8_per_channel),
  // qwen3-235b's clusters of two at M = 256 and gpt-oss's clusters of four (e4m3 w2 row pairs,
  // biases) at M = 64.
  SKIP_WITHOUT_SM90();
  struct Run {
    const char* what;
    CaseSpec spec;
  };
  std::vector<Run> runs;
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel}) {
    CaseSpec s = qwen30_tp8(128, 41 + static_cast<int>(scheme));
    s.E = 512;
    s.scheme = scheme;
    runs.push_back({"one CTA, 512 experts", s});
  }
  {
    CaseSpec s = qwen235_tp8(256, 47);
    s.scheme = Scheme::kFp8PerTensor;
    runs.push_back({"qwen3-235b TP8 clusters of two", s});
  }
  runs.push_back({"gpt-oss TP8 clusters of four", gptoss_fp8_tp8(64, 48)});
  for (Run& run : runs) {
    MoeCase c = make_case(run.spec);
    DeviceCase d(c);
    const std::string what = std::string(run.what) + ", " + scheme_name(run.spec.scheme) + " M = " +
                             std::to_string(run.spec.M);
    const std::vector<std::uint16_t> ahead = run_checked(d, c, run.spec.M, what + " (whole ring ahead)");
    std::vector<std::uint16_t> one;
    {
      ScopedEnv e("MOEKIT_EXPERT_MLP_AHEAD_NEXT", "0");
      one = run_checked(d, c, run.spec.M, what + " (one stage ahead)");
    }
    const std::int64_t differ = values_differing(ahead, one);
    EXPECT_EQ(differ, 0) << what << ": " << differ << " values differ between the two issue orders";
  }
}

}  // namespace
}  // namespace moekit::testing
