// The CUDA backend against the CPU reference (label gpu): every scheme x routing x activation,
// the model presets shrunk to test size, tile-boundary token counts, edge cases (empty experts,
// one hot expert, expert_map, k = E, odd E, NaN rows, M > 65536), determinism, CUDA-graph replay
// and GPU routing == CPU routing. The Sm90FusedMoe tests run once per kernel path forced by name
// (Sm90FusedMoe.X/auto, /mma, /swapab: Options::path); a forced path may decline a case only
// where documented_decline() says so. Skipped without a Hopper (sm_90) GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "common/tolerance.hpp"
#include "cuda/kernels/decode/launch_sm90.hpp"
#include "cuda/kernels/gemv/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

// The kernel path the parametrized tests force (Options::path), set by the fixture's SetUp.
std::string g_path = "auto";
// Cases run and cases declined (kNotSupported, documented) by the current test.
int g_cases = 0;
std::vector<std::string> g_declined;

// The GEMV path's kernel the current test asks for (MOEKIT_GEMV_KERNEL): "" the default choice,
// "mma" the tensor-core kernel wherever it can run (parameter gemv_mma).
std::string g_gemv_kernel;

// The kernel paths every Sm90FusedMoe test runs on; gemv_mma is gemv with its tensor-core kernel.
const char* const kTestPaths[] = {"auto", "mma", "swapab", "tokmajor", "decode", "gemv", "gemv_mma"};

class Sm90FusedMoe : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    g_path = GetParam();
    g_gemv_kernel.clear();
    if (g_path == "gemv_mma") {
      g_gemv_kernel = "mma";
      g_path = "gemv";
      setenv("MOEKIT_GEMV_KERNEL", g_gemv_kernel.c_str(), 1);
    }
    g_cases = 0;
    g_declined.clear();
  }
  void TearDown() override {
    if (!g_gemv_kernel.empty()) unsetenv("MOEKIT_GEMV_KERNEL");
    // Every case of the test declined by the forced path: the test is skipped with the reasons.
    if (g_cases > 0 && static_cast<int>(g_declined.size()) == g_cases) {
      std::string why;
      for (const std::string& d : g_declined) why += "\n  " + d;
      GTEST_SKIP() << "path " << g_path << " declines every case of this test:" << why;
    }
  }
};

// Why the forced `path` is documented to decline (kNotSupported) a case of `s`, or "" when it
// must run it. auto never declines (a GEMM Swap-AB cannot run goes to mma); mma runs every case
// here (its limits: even N and K, rows of a multiple of 4 bytes). Swap-AB
// (can_implement_swapab_sm90): TMA and 16-byte cp.async need rows of a multiple of 16 bytes
// (GEMM1 rows hold K elements, GEMM2 rows N), fp8_block128 GEMM1 needs N % 64 == 0, E <= 1024.
// In this suite: the gpt-oss preset at TP8 (N = 360) in fp8 schemes, qwen3-30b at TP8 (N = 96)
// in fp8_block128.
// The tensor-core GEMV kernel's limits (docs/gemv.md): M*k <= 1024 slots, and its shared memory
// within 227 KiB: 10 int / float arrays of M*k, E counts, 256 bytes of scratch, the staged token
// rows (M rows) or every slot's h (M*k rows) at a pitch of whole 64-byte blocks, 64 mod 128, and
// then the larger of the GEMM1 partial sums (32 KiB) and one 16-column block of fp32 slot outputs.
bool gemv_mma_fits(const CaseSpec& s, std::int64_t M) {
  const std::int64_t P = M * s.k, es = s.scheme == Scheme::kBf16 ? 2 : 1;
  if (P > 1024) return false;
  auto pitch = [](std::int64_t bytes) {
    std::int64_t x = (bytes + 63) / 64 * 64;
    return x % 128 == 0 ? x + 64 : x;
  };
  auto a16 = [](std::int64_t b) { return (b + 15) / 16 * 16; };
  const std::int64_t fixed = 2 * a16(P * 4) + a16((P + 1) * 4) + a16((P + 2) * 4) + a16(s.E * 4) + 256 + 4 * a16(P * 4) +
                             a16(std::max(M * pitch(s.K * es), P * pitch(s.N * es)));
  const std::int64_t avail = 227 * 1024 - fixed;
  return avail >= 32 * 1024 && avail >= P * 64;
}

std::string documented_decline(const CaseSpec& s, const std::string& path, std::int64_t M) {
  // decode (can_implement_decode_sm90): bf16 and every fp8 scheme; M*k <= 4096 slots;
  // k <= 1024; E <= 1024; K a multiple of 16 and 16-byte rows of N; partial outputs (M*k x
  // ceil(N/128) x K fp32) up to 128 MiB.
  if (path == "decode") {
    const std::int64_t es = s.scheme == Scheme::kBf16 ? 2 : 1;
    if (M * s.k > 4096) return "decode: M*k = " + std::to_string(s.M * s.k) + " > 4096 slots";
    if (s.k > 1024) return "decode: k = " + std::to_string(s.k) + " > 1024 slots per token";
    if (s.E > 1024) return "decode: E = " + std::to_string(s.E) + " > 1024";
    if (s.K % 16 != 0 || s.N * es % 16 != 0)
      return "decode: K = " + std::to_string(s.K) + " or N = " + std::to_string(s.N) + " rows not 16-byte multiples";
    if (M * s.k * ((s.N + 127) / 128) * s.K * 4 > (std::int64_t{128} << 20)) return "decode: partial outputs > 128 MiB";
    return "";
  }
  // gemv (can_implement_gemv_sm90): bf16, fp8_per_tensor and fp8_per_channel; k <= 64; E <= 1024;
  // 16-byte rows of K and 8-byte rows of N; and one of its two kernels fits: the CUDA-core one
  // (not fp8_per_channel; 16-byte rows of N,
  // M*k <= 256 slots, the token rows, M x K x es bytes, and every slot's h, M*k x N fp32, each
  // within a 192 KiB region) or the tensor-core one (gemv_mma_fits; fp8 rows of N % 16 == 8, the
  // gpt-oss preset at TP8, run only there; bf16 rows of N % 8 == 4 decline).
  if (path == "gemv") {
    const std::int64_t es = s.scheme == Scheme::kBf16 ? 2 : 1;
    if (s.scheme == Scheme::kFp8Block128) return std::string("gemv: ") + scheme_name(s.scheme) + " is not supported";
    if (s.k > 64) return "gemv: k = " + std::to_string(s.k) + " > 64";
    if (s.E > 1024) return "gemv: E = " + std::to_string(s.E) + " > 1024";
    if (s.K * es % 16 != 0 || s.N * es % 8 != 0)
      return "gemv: K = " + std::to_string(s.K) + " or N = " + std::to_string(s.N) +
             " rows not 16-byte (w13) and 8-byte (w2) multiples";
    const bool cuda_fits = s.scheme != Scheme::kFp8PerChannel && s.N * es % 16 == 0 && M * s.k <= 256 &&
                           M * s.K * es <= 192 * 1024 && M * s.k * s.N * 4 <= 192 * 1024;
    const bool mma_rows = s.scheme != Scheme::kBf16 || s.N * es % 16 == 0;  // 8-byte w2 rows: e4m3 only
    if (!cuda_fits && !(mma_rows && gemv_mma_fits(s, M))) return "gemv: M*k = " + std::to_string(M * s.k) + " slots: neither kernel fits";
    return "";
  }
  // tokmajor (can_implement_tokmajor_sm90) shares Swap-AB's limits: TMA and 16-byte cp.async rows,
  // block128 GEMM1 N % 64 == 0, E <= 1024; Swap-AB's GEMM2 also takes rows of 8 bytes (its
  // 8-byte-row producer; not fp8_block128).
  (void)M;
  if (path != "swapab" && path != "tokmajor") return "";
  const std::int64_t es = s.scheme == Scheme::kBf16 ? 2 : 1;
  if (s.K * es % 16 != 0) return path + ": GEMM1 rows of K = " + std::to_string(s.K) + " are not a multiple of 16 bytes";
  const bool rows8 = path == "swapab" && s.scheme != Scheme::kFp8Block128 && s.N * es % 8 == 0;
  if (s.N * es % 16 != 0 && !rows8)
    return path + ": GEMM2 rows of N = " + std::to_string(s.N) + " are not a multiple of 16 bytes";
  if (s.scheme == Scheme::kFp8Block128 && s.N % 64 != 0)
    return path + ": fp8_block128 GEMM1 needs N % 64 == 0, N = " + std::to_string(s.N);
  if (s.E > 1024) return path + ": E = " + std::to_string(s.E) + " > 1024";
  return "";
}

using Mode = CallMode;
const char* mode_name(Mode m) { return call_mode_name(m); }

std::string label(const CaseSpec& s, std::int64_t M, Mode mode) {
  CaseSpec t = s;
  t.M = M;
  return t.name() + " " + mode_name(mode);
}

// Run `c` on the GPU for each M in `Ms` (a prefix of its tokens) and compare with the reference.
// A forced path declining a case (kNotSupported) is recorded when documented_decline() expects
// it, a failure otherwise; a documented decline that does not happen is a failure too.
void check_case(MoeCase& c, const std::vector<std::int64_t>& Ms, Mode mode) {
  DeviceCase d(c);
  for (std::int64_t M : Ms) {
    const std::string expected_decline = documented_decline(c.spec, g_path, M);
    ASSERT_LE(M, c.spec.M);
    ++g_cases;
    std::vector<std::int32_t> ids;
    std::vector<float> wts;
    std::vector<std::uint16_t> bits;
    try {
      bits = d.run(M, mode, g_path, nullptr, mode == Mode::kFusedMoe ? &ids : nullptr, mode == Mode::kFusedMoe ? &wts : nullptr);
    } catch (const Error& e) {
      if (e.status() == Status::kNotSupported && !expected_decline.empty()) {
        g_declined.push_back(label(c.spec, M, mode) + ": " + e.what());
        std::cout << "[ DECLINED ] path " << g_path << ", " << g_declined.back() << "\n";
        continue;
      }
      ADD_FAILURE() << label(c.spec, M, mode) << " path " << g_path << ": " << status_name(e.status()) << ": "
                    << e.what();
      continue;
    }
    EXPECT_TRUE(expected_decline.empty())
        << label(c.spec, M, mode) << ": path " << g_path << " ran a case documented to decline (" << expected_decline
        << "); update documented_decline()";
    if (g_gemv_kernel == "mma" && gemv_mma_fits(c.spec, M))
      EXPECT_STREQ(cuda::gemv_last_kernel(), "mma") << label(c.spec, M, mode) << ": the tensor-core GEMV kernel did not run";
    if (mode == Mode::kFusedMoe) {
      const std::vector<std::int32_t> want(c.topk_ids.begin(), c.topk_ids.begin() + M * c.spec.k);
      EXPECT_EQ(ids, want) << label(c.spec, M, mode) << ": GPU routing chose other experts than the CPU";
      // The weights too (poisoned before the call, so a path that leaves them unwritten fails):
      // the CPU routing's, within 1e-3, relative above 1 (the GPU sums its softmax / normalization in
      // another order).
      for (std::size_t i = 0; i < wts.size() && i < c.topk_weights.size(); ++i) {
        const float w = c.topk_weights[i];
        if (!(std::fabs(wts[i] - w) <= 1e-3f * std::max(1.0f, std::fabs(w)))) {
          ADD_FAILURE() << label(c.spec, M, mode) << " path " << g_path << ": topk_weights[" << i << "] = " << wts[i]
                        << ", the CPU routing's " << w;
          break;
        }
      }
    }
    EXPECT_TRUE(rows_match(to_float(bits, c.spec.act_dtype), reference_rows(c, 0, M), c.spec.K, c.spec.scheme,
                           label(c.spec, M, mode) + " path " + g_path));
  }
}

constexpr Scheme kSchemes[] = {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128};

RoutingConfig routing_of(RoutingMethod m) {
  RoutingConfig r;
  r.method = m;
  if (m == RoutingMethod::kSigmoidGroupedTopk) {
    r.num_groups = 4;
    r.topk_groups = 2;
    r.routed_scaling_factor = 2.5f;
  }
  r.renormalize = m != RoutingMethod::kTopkSoftmax;
  return r;
}

// ---- every scheme x routing x activation on a small shape ----

void all_combos(Scheme scheme) {
  for (RoutingMethod rm : {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSigmoidGroupedTopk, RoutingMethod::kTopkSoftmax})
    for (Activation act : {Activation::kSilu, Activation::kGelu, Activation::kSwigluOai}) {
      CaseSpec s;
      s.M = 65;
      s.E = 16;
      s.k = 4;
      s.K = 256;
      s.N = 128;
      s.scheme = scheme;
      s.routing = routing_of(rm);
      s.activation.kind = act;
      s.seed = 11 + static_cast<int>(rm) * 3 + static_cast<int>(act);
      MoeCase c = make_case(s);
      check_case(c, {1, 17, 65}, Mode::kFusedMoe);
      check_case(c, {17}, Mode::kFusedExperts);
    }
}

TEST_P(Sm90FusedMoe, AllCombosBf16) { SKIP_WITHOUT_SM90(); all_combos(Scheme::kBf16); }
TEST_P(Sm90FusedMoe, AllCombosFp8PerTensor) { SKIP_WITHOUT_SM90(); all_combos(Scheme::kFp8PerTensor); }
TEST_P(Sm90FusedMoe, AllCombosFp8PerChannel) { SKIP_WITHOUT_SM90(); all_combos(Scheme::kFp8PerChannel); }
TEST_P(Sm90FusedMoe, AllCombosFp8Block128) { SKIP_WITHOUT_SM90(); all_combos(Scheme::kFp8Block128); }

TEST_P(Sm90FusedMoe, Fp8PerTensorStaticScales) {
  SKIP_WITHOUT_SM90();
  CaseSpec s;
  s.M = 65;
  s.E = 16;
  s.k = 4;
  s.K = 256;
  s.N = 128;
  s.scheme = Scheme::kFp8PerTensor;
  s.static_scales = true;
  MoeCase c = make_case(s);
  check_case(c, {1, 65}, Mode::kFusedExperts);
}

// ---- the model presets, shrunk: E, k, routing, activation, bias and K real; N at TP8; E cut
// where the weights would not fit a quick CPU reference (marked), M small ----

void preset_cases(const char* name, std::int64_t E_cap, const std::vector<std::int64_t>& Ms) {
  const ModelPreset& pr = find_preset(name);
  // 1. Routing-real: E, k and the routing of the preset on a small K, N.
  {
    CaseSpec s;
    s.M = 129;
    s.E = pr.num_experts;
    s.k = pr.top_k;
    s.K = 256;
    s.N = 128;
    s.routing = pr.routing;
    s.activation = pr.activation;
    s.bias = pr.has_bias;
    for (Scheme scheme : {Scheme::kBf16, pr.checkpoint_scheme == Scheme::kBf16 ? Scheme::kFp8PerTensor : pr.checkpoint_scheme}) {
      s.scheme = scheme;
      MoeCase c = make_case(s);
      check_case(c, {1, 3, 17, 64, 65, 129}, Mode::kFusedMoe);
    }
  }
  // 2. Shape-real: K and N = N/8 real (gpt-oss: K = 2880 and N = 360 are not multiples of 128).
  for (Scheme scheme : kSchemes) {
    CaseSpec s;
    s.M = Ms.back();
    s.E = std::min<std::int64_t>(pr.num_experts, E_cap);
    s.k = pr.top_k;
    s.K = pr.hidden_size;
    s.N = pr.intermediate_size / 8;
    s.routing = pr.routing;
    if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk && s.E < pr.num_experts) {
      s.routing.num_groups = 8;  // groups of E/8 experts, topk_groups 4: k = 8 still fits
    }
    s.activation = pr.activation;
    s.bias = pr.has_bias;
    s.scheme = scheme;
    s.seed = 5;
    MoeCase c = make_case(s);
    check_case(c, Ms, Mode::kFusedMoe);
  }
}

TEST_P(Sm90FusedMoe, PresetMixtral8x7b) { SKIP_WITHOUT_SM90(); preset_cases("mixtral-8x7b", 8, {1, 17, 65}); }
TEST_P(Sm90FusedMoe, PresetQwen3_30bA3b) { SKIP_WITHOUT_SM90(); preset_cases("qwen3-30b-a3b", 128, {1, 3, 17, 64, 65, 129}); }
TEST_P(Sm90FusedMoe, PresetQwen3_235bA22b) { SKIP_WITHOUT_SM90(); preset_cases("qwen3-235b-a22b", 32, {1, 17, 65}); }
TEST_P(Sm90FusedMoe, PresetDeepseekV3) { SKIP_WITHOUT_SM90(); preset_cases("deepseek-v3", 16, {1, 17, 65}); }
TEST_P(Sm90FusedMoe, PresetGptOss120b) { SKIP_WITHOUT_SM90(); preset_cases("gpt-oss-120b", 16, {1, 17, 65}); }

// ---- tile-boundary token counts ----

void tile_boundaries(Scheme scheme) {
  CaseSpec s;
  s.M = 4097;
  s.E = 8;
  s.k = 2;
  s.K = 256;
  s.N = 128;
  s.scheme = scheme;
  MoeCase c = make_case(s);
  check_case(c, {1, 2, 3, 7, 17, 63, 64, 65, 127, 129, 4095, 4096, 4097}, Mode::kFusedExperts);
  // fused_moe routes in the permute CTA up to 512 tokens and on a separate grid above; past 4096
  // slots (4095..4097 x k = 2) the permutation runs on the count and scatter grids.
  check_case(c, {512, 513, 4097}, Mode::kFusedMoe);
}
TEST_P(Sm90FusedMoe, TileBoundaryMBf16) { SKIP_WITHOUT_SM90(); tile_boundaries(Scheme::kBf16); }
TEST_P(Sm90FusedMoe, TileBoundaryMFp8PerTensor) { SKIP_WITHOUT_SM90(); tile_boundaries(Scheme::kFp8PerTensor); }
TEST_P(Sm90FusedMoe, TileBoundaryMFp8Block128) { SKIP_WITHOUT_SM90(); tile_boundaries(Scheme::kFp8Block128); }

// ---- edge cases ----

CaseSpec small_spec(Scheme scheme) {
  CaseSpec s;
  s.M = 65;
  s.E = 16;
  s.k = 4;
  s.K = 256;
  s.N = 128;
  s.scheme = scheme;
  return s;
}

TEST_P(Sm90FusedMoe, ZeroTokens) {
  SKIP_WITHOUT_SM90();
  CaseSpec s = small_spec(Scheme::kFp8Block128);
  s.M = 1;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  Options o;
  o.backend = Backend::kCuda;
  o.path = g_path.c_str();
  EXPECT_NO_THROW(fused_experts(d.experts(0), o));
  EXPECT_NO_THROW(fused_moe(d.moe(0), o));
  CUDA_OK(cudaDeviceSynchronize());
}

TEST_P(Sm90FusedMoe, ExpertsWithNoTokens) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.pattern = RoutingPattern::kSkewed;
    MoeCase c = make_case(s);
    check_case(c, {1, 7, 65}, Mode::kFusedExperts);
  }
}

TEST_P(Sm90FusedMoe, AllTokensOnOneExpert) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.M = 300;
    s.k = 1;
    s.pattern = RoutingPattern::kAllToOne;
    s.hot_expert = 5;
    MoeCase c = make_case(s);
    check_case(c, {1, 64, 65, 300}, Mode::kFusedExperts);
  }
}

// Two slots of one token on the same expert (every other token): each slot contributes with its
// own weight, as in the CPU reference, on every path (the decode and GEMV kernels route per CTA).
TEST_P(Sm90FusedMoe, DuplicateExpertWithinAToken) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.pattern = RoutingPattern::kDuplicates;
    MoeCase c = make_case(s);
    check_case(c, {1, 2, 5, 17, 65}, Mode::kFusedExperts);
  }
}

TEST_P(Sm90FusedMoe, ExpertMapWithRemoteExperts) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.expert_map = true;
    MoeCase c = make_case(s);
    check_case(c, {1, 17, 65}, Mode::kFusedExperts);
    check_case(c, {65}, Mode::kFusedMoe);
  }
}

// Past kPermuteMultiCtaMinSlots (1024) slots the permutation runs on a grid (count launch, scatter
// launch; routing in the count launch for fused_moe); test_permute.cpp compares it with the
// one-CTA path bit for bit.
// Here the whole call: k = 8 with remote experts and with empty experts, given and computed.
TEST_P(Sm90FusedMoe, MultiCtaPermutation) {
  SKIP_WITHOUT_SM90();
  for (RoutingPattern pattern : {RoutingPattern::kFromLogits, RoutingPattern::kSkewed}) {
    CaseSpec s;
    s.M = 1024;
    s.E = 64;
    s.k = 8;
    s.K = 256;
    s.N = 128;
    s.pattern = pattern;
    s.expert_map = pattern == RoutingPattern::kFromLogits;
    MoeCase c = make_case(s);
    check_case(c, {511, 513, 1024}, Mode::kFusedExperts);
    if (pattern == RoutingPattern::kFromLogits) check_case(c, {1024}, Mode::kFusedMoe);
  }
}

TEST_P(Sm90FusedMoe, KEqualsE) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8Block128}) {
    CaseSpec s = small_spec(scheme);
    s.E = 8;
    s.k = 8;
    MoeCase c = make_case(s);
    check_case(c, {1, 17, 65}, Mode::kFusedMoe);
  }
}

TEST_P(Sm90FusedMoe, OddExpertCounts) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t E : {72, 160, 257}) {
    CaseSpec s = small_spec(E == 160 ? Scheme::kFp8PerChannel : Scheme::kBf16);
    s.M = 129;
    s.E = E;
    s.k = 8;
    MoeCase c = make_case(s);
    check_case(c, {1, 129}, Mode::kFusedMoe);
  }
}

TEST_P(Sm90FusedMoe, BiasAndSwigluOai) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.bias = true;
    s.activation.kind = Activation::kSwigluOai;
    s.routing = routing_of(RoutingMethod::kTopkSoftmax);
    MoeCase c = make_case(s);
    check_case(c, {1, 65}, Mode::kFusedMoe);
  }
}

// GEMM2 at TP8: short K (N = 96..360) over many experts with 1..64 tokens each, where Swap-AB
// walks several weight tiles per work item and reads the router weights in sorted order (the
// permutation writes them: from the caller's weights in fused_experts, from its own routing in
// fused_moe). fp8 per tensor with dynamic and static activation scales; weight_on_input.
TEST_P(Sm90FusedMoe, ShortGemm2KManyExperts) {
  SKIP_WITHOUT_SM90();
  int seed = 60;
  for (std::int64_t N : {96, 192, 256, 360}) {
    for (int variant = 0; variant < 3; ++variant) {
      CaseSpec s;
      s.M = 256;
      s.E = 64;
      s.k = 8;  // 32 slots per expert on average at M = 256
      s.K = 256;
      s.N = N;
      s.scheme = variant == 0 ? Scheme::kBf16 : Scheme::kFp8PerTensor;
      s.static_scales = variant == 2;
      s.weight_on_input = N == 192 && variant != 2;
      s.seed = seed++;
      MoeCase c = make_case(s);
      check_case(c, {1, 16, 64, 256}, Mode::kFusedExperts);
      check_case(c, {129}, Mode::kFusedMoe);
    }
  }
}

TEST_P(Sm90FusedMoe, WeightOnInput) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.weight_on_input = true;
    s.bias = scheme == Scheme::kBf16;
    MoeCase c = make_case(s);
    check_case(c, {1, 65}, Mode::kFusedExperts);
  }
}

TEST_P(Sm90FusedMoe, Fp16Activations) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.act_dtype = DType::kFp16;
    s.bias = true;
    MoeCase c = make_case(s);
    check_case(c, {1, 65}, Mode::kFusedMoe);
  }
}

// A NaN token poisons its own output row only (absmax ignores NaN, so no shared scale breaks).
TEST_P(Sm90FusedMoe, NanRowStaysInItsRow) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    if (!documented_decline(s, g_path, s.M).empty()) continue;  // checked by AllCombos*
    MoeCase c = make_case(s);
    const std::int64_t bad = 5, K = s.K, M = s.M;
    const std::uint16_t nan_bits = 0x7fc0;  // bf16 quiet NaN
    std::fill(c.hidden.begin() + bad * K, c.hidden.begin() + (bad + 1) * K, nan_bits);
    DeviceCase d(c);
    const std::vector<float> got = to_float(d.run(M, Mode::kFusedExperts, g_path), s.act_dtype);
    const std::vector<float> ref = reference_output(c);
    std::vector<float> got_rest, ref_rest;
    for (std::int64_t m = 0; m < M; ++m) {
      if (m == bad) continue;
      got_rest.insert(got_rest.end(), got.begin() + m * K, got.begin() + (m + 1) * K);
      ref_rest.insert(ref_rest.end(), ref.begin() + m * K, ref.begin() + (m + 1) * K);
    }
    for (float v : ref_rest) ASSERT_TRUE(std::isfinite(v)) << "the reference lets the NaN row leak";
    EXPECT_TRUE(rows_match(got_rest, ref_rest, K, scheme, "NaN row, rows but the NaN one"));
  }
}

// M * k * K > 2^31: y and its offsets need 64-bit indices; grids pass 65535 blocks per dimension.
TEST_P(Sm90FusedMoe, HugeMUses64BitIndices) {
  SKIP_WITHOUT_SM90();
  CaseSpec s;
  s.M = 70000;
  s.E = 16;
  s.k = 16;
  s.K = 2048;
  s.N = 64;
  s.scheme = Scheme::kBf16;  // tokens independent: rows can be checked alone
  if (!documented_decline(s, g_path, s.M).empty()) GTEST_SKIP() << documented_decline(s, g_path, s.M);
  static MoeCase c = make_case(s);  // made once for the paths
  ASSERT_GT(s.M * s.k * s.K, std::int64_t{1} << 31);
  DeviceCase d(c);
  std::vector<std::int32_t> ids;
  const std::vector<float> got = to_float(d.run(s.M, Mode::kFusedMoe, g_path, nullptr, &ids), s.act_dtype);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), c.topk_ids.begin())) << "GPU routing differs at M = 70000";
  for (std::int64_t m0 : {std::int64_t{0}, s.M - 64}) {
    const std::vector<float> ref = reference_rows(c, m0, m0 + 64);
    const std::vector<float> part(got.begin() + m0 * s.K, got.begin() + (m0 + 64) * s.K);
    EXPECT_TRUE(rows_match(part, ref, s.K, s.scheme, "rows [" + std::to_string(m0) + ", +64) of M=70000"));
  }
  for (float v : got) ASSERT_TRUE(std::isfinite(v)) << "an output element was not written";
}

// ---- determinism and CUDA graphs ----

TEST_P(Sm90FusedMoe, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : kSchemes) {
    CaseSpec s = small_spec(scheme);
    s.M = 257;
    if (!documented_decline(s, g_path, s.M).empty()) continue;  // checked by AllCombos*
    MoeCase c = make_case(s);
    DeviceCase d(c);
    std::vector<std::int32_t> ids1, ids2;
    std::vector<float> w1, w2;
    const auto a = d.run(s.M, Mode::kFusedMoe, g_path, nullptr, &ids1, &w1);
    const auto b = d.run(s.M, Mode::kFusedMoe, g_path, nullptr, &ids2, &w2);
    EXPECT_TRUE(a == b) << scheme_name(scheme) << ": two runs differ";
    EXPECT_EQ(ids1, ids2);
    EXPECT_EQ(0, std::memcmp(w1.data(), w2.data(), w1.size() * 4));
  }
}

TEST_P(Sm90FusedMoe, CudaGraphReplayEqualsEager) {
  SKIP_WITHOUT_SM90();
  // M = 1000: fused_moe routes on a grid, then permutes (two launches) above 512 tokens.
  for (auto [scheme, M] : {std::pair{Scheme::kBf16, 129}, std::pair{Scheme::kFp8PerTensor, 129},
                           std::pair{Scheme::kFp8Block128, 1000}}) {
    CaseSpec s = small_spec(scheme);
    s.M = M;
    s.routing = routing_of(RoutingMethod::kSigmoidGroupedTopk);
    if (!documented_decline(s, g_path, s.M).empty()) continue;  // checked by AllCombos*
    MoeCase c = make_case(s);
    DeviceCase d(c);
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const std::vector<std::uint16_t> eager = d.run(s.M, Mode::kFusedMoe, g_path, stream);
    const auto replays = d.replay_in_graph(s.M, Mode::kFusedMoe, g_path, stream, 2);
    ASSERT_EQ(replays.size(), 2u) << scheme_name(scheme);
    for (std::size_t replay = 0; replay < replays.size(); ++replay)
      EXPECT_TRUE(replays[replay] == eager) << scheme_name(scheme) << ": graph replay " << replay << " differs from eager";
    cudaStreamDestroy(stream);
    EXPECT_TRUE(rows_match(to_float(eager, s.act_dtype), reference_output(c), s.K, scheme, "graph case eager"));
  }
}

INSTANTIATE_TEST_SUITE_P(, Sm90FusedMoe, ::testing::ValuesIn(kTestPaths),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// ---- the router, on the GPU: names, forced paths, the log line ----

// Runs one call of `c` at M with Options::path = path (null: none) and returns the status.
Status run_status(DeviceCase& d, std::int64_t M, const char* path, std::string* what = nullptr) {
  Options o;
  o.backend = Backend::kCuda;
  o.path = path;
  d.prepare(M, Mode::kFusedExperts, o);
  try {
    fused_experts(d.experts(M), o);
    // A fault in a kernel is a failure too, not only a host-side refusal.
    if (cudaDeviceSynchronize() != cudaSuccess) {
      if (what != nullptr) *what = "a kernel of the call failed on the device";
      return Status::kCudaError;
    }
    return Status::kSuccess;
  } catch (const Error& e) {
    if (what != nullptr) *what = e.what();
    return e.status();
  }
}

// The CUDA backend keeps each thread's last 8 problems' workspace size and decode / GEMV answers
// (backend.cu problem_facts). Cycling more problems than that through one thread, twice (every
// entry evicted and refilled), and revisiting neighbours (hits) gives the sizes a thread with an
// empty memo computes. Host only: no device needed.
TEST(Sm90Dispatch, ProblemMemoMatchesAFreshThread) {
  std::vector<moekit::MoeProblem> problems;
  for (const char* name : {"qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b", "gpt-oss-120b"})
    for (std::int64_t M : {1, 16, 256})
      for (moekit::Scheme scheme : {moekit::Scheme::kBf16, moekit::Scheme::kFp8PerTensor})
        problems.push_back(moekit::preset_problem(moekit::find_preset(name), M, 8, scheme));
  auto size = [](const moekit::MoeProblem& p) { return moekit::workspace_size(p, moekit::Backend::kCuda); };
  std::vector<std::size_t> fresh;
  for (const moekit::MoeProblem& p : problems) {
    std::size_t bytes = 0;
    std::thread t([&] { bytes = size(p); });
    t.join();
    fresh.push_back(bytes);
  }
  std::set<std::size_t> distinct(fresh.begin(), fresh.end());
  ASSERT_GT(distinct.size(), problems.size() / 2) << "the sizes must tell most problems apart";
  const std::size_t n = problems.size();
  for (int round = 0; round < 2; ++round)
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(size(problems[i]), fresh[i]) << problems[i].to_string();
      EXPECT_EQ(size(problems[(i + 1) % n]), fresh[(i + 1) % n]) << problems[(i + 1) % n].to_string();
      EXPECT_EQ(size(problems[i]), fresh[i]) << problems[i].to_string();
    }
}

TEST(Sm90Dispatch, UnknownPathIsInvalidArgument) {
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  std::string what;
  EXPECT_EQ(run_status(d, 17, "swap_ab", &what), Status::kInvalidArgument);
  for (const char* name : {"auto", "mma", "swapab", "fused", "tokmajor"}) EXPECT_NE(what.find(name), std::string::npos) << what;
  EXPECT_EQ(run_status(d, 0, "nope"), Status::kInvalidArgument) << "M = 0 checks the name too";
}

TEST(Sm90Dispatch, ForcedPathThatCannotRunIsNotSupported) {
  SKIP_WITHOUT_SM90();
  // gpt-oss at TP8 in fp8: w2 rows of N = 360 bytes, which no TMA map describes; token-major
  // declines GEMM2 (Swap-AB's 8-byte-row producer runs it, the fused path's 8-byte copies and the
  // tensor-core GEMV kernel's 8-byte loads and the per-expert MLP kernel's row pairs too); the
  // fused path declines M*k > 512. auto: the GEMV path below 16 slots, the per-expert MLP kernel
  // from 16 to 1024 (RouterTable::expert_mlp_quad_fp8_*); with that kernel switched off, both GEMMs
  // on Swap-AB (up to 17 tokens an expert).
  CaseSpec s = small_spec(Scheme::kFp8PerTensor);
  s.N = 360;
  s.K = 2880;
  s.M = 160;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  std::string what;
  EXPECT_EQ(run_status(d, 4, "tokmajor", &what), Status::kNotSupported);
  EXPECT_NE(what.find("GEMM2"), std::string::npos) << what;
  EXPECT_EQ(run_status(d, 4, "swapab", &what), Status::kSuccess) << what;
  EXPECT_EQ(run_status(d, 160, "swapab", &what), Status::kSuccess) << what;
  EXPECT_EQ(run_status(d, 4, "fused"), Status::kSuccess);
  EXPECT_EQ(run_status(d, 160, "fused", &what), Status::kNotSupported) << what;
  EXPECT_EQ(run_status(d, 4, "auto"), Status::kSuccess);
  EXPECT_EQ(run_status(d, 17, "auto"), Status::kSuccess);  // the per-expert MLP kernel (row pairs)
  EXPECT_EQ(run_status(d, 66, "auto"), Status::kSuccess);  // the per-expert MLP kernel (264 slots)
  EXPECT_EQ(run_status(d, 4, "mma"), Status::kSuccess);
  Options o;
  o.path = "auto";
  o.backend = Backend::kCuda;
  std::string why;
  // Both GEMMs on Swap-AB (with whatever split-K the SM count gives).
  auto swapab_both = [](const std::string& plan) {
    return plan.rfind("gemm1=swapab", 0) == 0 && plan.find("gemm2=swapab") != std::string::npos;
  };
  std::string plan = describe_dispatch(describe(d.experts(2)), o, &why);
  EXPECT_EQ(plan, "gemv(mma)") << why;
  EXPECT_EQ(run_status(d, 4, "gemv"), Status::kSuccess);
  EXPECT_STREQ(cuda::gemv_last_kernel(), "mma") << "the CUDA-core GEMV kernel declines 360-byte w2 rows";
  EXPECT_EQ(describe_dispatch(describe(d.experts(4)), o, &why), "expert_mlp") << why;
  EXPECT_EQ(describe_dispatch(describe(d.experts(17)), o, &why), "expert_mlp") << why;
  EXPECT_EQ(run_status(d, 17, "expert_mlp", &what), Status::kSuccess) << what;
  const MoeProblem p = describe(d.experts(66));
  EXPECT_EQ(describe_dispatch(p, o, &why), "expert_mlp") << why;
  {
    ScopedEnv off("MOEKIT_EXPERT_MLP", "0");  // auto's next choice: Swap-AB's 8-byte-row producer
    plan = describe_dispatch(p, o, &why);
    EXPECT_TRUE(swapab_both(plan)) << plan << ": " << why;
    EXPECT_EQ(why.find("GEMM2 on mma"), std::string::npos) << why;
    EXPECT_EQ(run_status(d, 66, "auto"), Status::kSuccess);  // both GEMMs on Swap-AB (264 slots, 16.5 an expert)
  }
  // bf16 w2 rows of 8 but not 16 bytes (N = 36: 72 bytes): neither GEMV kernel reads them (the
  // tensor-core kernel's 8-byte rows are e4m3 only).
  CaseSpec b = small_spec(Scheme::kBf16);
  b.N = 36;
  MoeCase cb = make_case(b);
  DeviceCase db(cb);
  EXPECT_EQ(run_status(db, 4, "gemv", &what), Status::kNotSupported);
  EXPECT_NE(what.find("16-byte"), std::string::npos) << what;
  EXPECT_EQ(run_status(db, 4, "auto"), Status::kSuccess);
}

TEST(Sm90Dispatch, DecodeNarrowKernelsMatchTheWideOneBitwise) {
  SKIP_WITHOUT_SM90();
  // The decode kernel is instantiated per token width: a launch takes the one of its tiling's
  // max_tokens (M <= 8: only the 8-wide code), MOEKIT_DECODE_WIDE=1 the one that holds every
  // width. Both run each item on the same width, so the bits must match. M = 1, 8 (the 8-wide
  // kernel), 9, 17 (16, 32 wide), 40 (64 wide: the same instantiation both ways); bf16, fp8 with
  // static scales, fp8 with dynamic scales (the split call), fp8_block128 (its own one-launch
  // stage) and fp8_per_channel at N = 128 (one kChannel launch) and N = 224 (kChannelUp +
  // kChannelDown), biases and swiglu_oai on fp8; each against the reference of the call's M rows
  // (a case of its own: its own dynamic scales).
  for (int variant = 0; variant < 6; ++variant) {  // bf16; fp8 static; fp8 dynamic; block128; per channel x 2
    const Scheme scheme = variant == 0   ? Scheme::kBf16
                          : variant == 3 ? Scheme::kFp8Block128
                          : variant >= 4 ? Scheme::kFp8PerChannel
                                         : Scheme::kFp8PerTensor;
    CaseSpec s = small_spec(scheme);
    s.M = 40;
    if (variant == 5) s.N = 224;
    if (variant > 0) {
      s.static_scales = variant == 1;
      s.bias = true;
      s.activation.kind = Activation::kSwigluOai;
    }
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (std::int64_t M : {1, 8, 9, 17, 40}) {
      const std::vector<std::uint16_t> narrow = d.run(M, Mode::kFusedExperts, "decode");
      std::vector<std::uint16_t> wide;
      {
        ScopedEnv env("MOEKIT_DECODE_WIDE", "1");
        wide = d.run(M, Mode::kFusedExperts, "decode");
      }
      EXPECT_TRUE(narrow == wide) << scheme_name(scheme) << " variant " << variant << " M = " << M
                                  << ": the narrow kernel differs from the wide one";
      EXPECT_TRUE(rows_match(to_float(narrow, s.act_dtype), reference_rows(c, 0, M), s.K, scheme, "decode narrow"));
    }
  }
}

TEST(Sm90Dispatch, DecodeBlock128EveryClusterSize) {
  SKIP_WITHOUT_SM90();
  // fp8_block128 on the decode path, each cluster size forced (MOEKIT_DECODE_CLUSTER: ranks split
  // GEMM1's K chunks, so a rank's chunks start past 0 and its block scales at that column): K =
  // 2112 (16.5 blocks: the last one partial, its tail zero-filled), N = 224 (two N chunks, the
  // second 96 wide; the up rows of a chunk straddle two 128-row scale blocks); against the
  // reference, and bitwise run to run at each size. fp8_per_channel the same way (a token's scale
  // spans the K slices of every rank; N = 224: the split call, each slot's h scale over both
  // chunks) and at N = 80 (one kChannel launch; N % 32 != 0: a tile's last gate / up rows lie past
  // N and 2N). A cluster of 8 needs 16 K stages (each rank >= 2): K = 4096. The forced size must
  // be the one that ran (a size that does not fit would fall back to the model's choice).
  struct Variant {
    Scheme scheme;
    std::int64_t K, N;
    std::vector<int> clusters;
  };
  const Variant variants[] = {{Scheme::kFp8Block128, 2112, 224, {1, 2, 4}},
                              {Scheme::kFp8PerChannel, 2112, 224, {1, 2, 4}},
                              {Scheme::kFp8PerChannel, 2112, 80, {1, 2, 4}},
                              {Scheme::kFp8Block128, 4096, 224, {8}},
                              {Scheme::kFp8PerChannel, 4096, 224, {8}}};
  for (const Variant& v : variants) {
    CaseSpec s;
    s.M = 17;
    s.E = 8;
    s.k = 2;
    s.K = v.K;
    s.N = v.N;
    s.scheme = v.scheme;
    s.seed = 23;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    for (int cluster : v.clusters) {
      ScopedEnv env("MOEKIT_DECODE_CLUSTER", std::to_string(cluster).c_str());
      for (std::int64_t M : {1, 5, 17}) {
        const std::string what = std::string(scheme_name(s.scheme)) + " K = " + std::to_string(s.K) + " N = " +
                                 std::to_string(s.N) + " cluster " + std::to_string(cluster) + " M = " + std::to_string(M);
        const std::vector<std::uint16_t> a = d.run(M, Mode::kFusedExperts, "decode");
        EXPECT_EQ(cuda::decode_last_cluster(), cluster) << what << ": the forced cluster size did not run";
        const std::vector<std::uint16_t> b = d.run(M, Mode::kFusedExperts, "decode");
        EXPECT_TRUE(a == b) << what << ": two runs differ";
        EXPECT_TRUE(rows_match(to_float(a, s.act_dtype), reference_rows(c, 0, M), s.K, s.scheme, "decode " + what));
      }
    }
  }
}

TEST(Sm90Dispatch, GemvGemm2OneRoundFormMatchesReference) {
  SKIP_WITHOUT_SM90();
  // The CUDA-core GEMV kernel runs GEMM2 in its one-round form (gemv_fast_sm90_kernel) where a
  // task's k x N chunks fit one round of loads and a CTA owns at least 24 output columns (K = 4096
  // on the H200's 132 CTAs: 31); elsewhere the general loop. Both against the reference, at M = 1..4
  // (M > 1: a warp's columns change token, the form's set_token path), with biases, fp8, an
  // expert_map with -1 entries, bitwise run to run and bitwise against the general loop
  // (MOEKIT_GEMV_ONE_ROUND=0); a bad MOEKIT_GEMV_ONE_ROUND value is an error.
  struct Variant {
    Scheme scheme;
    std::int64_t k, N;
    bool bias;
    bool fast;        // the form the shape should get
    bool expert_map;  // half the global ids map to -1 (their slots dropped)
  };
  const Variant variants[] = {
      {Scheme::kBf16, 4, 128, false, true, false},
      {Scheme::kBf16, 4, 128, true, true, false},
      {Scheme::kFp8PerTensor, 4, 128, false, true, false},
      {Scheme::kBf16, 4, 128, false, true, true},
      {Scheme::kBf16, 8, 1024, false, false, false},  // 8 x 128 chunks: the general loop
  };
  for (const Variant& v : variants) {
    CaseSpec s = small_spec(v.scheme);
    s.E = 16;
    s.k = v.k;
    s.K = 4096;
    s.N = v.N;
    s.M = 4;
    s.bias = v.bias;
    s.expert_map = v.expert_map;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "cuda");
    for (std::int64_t M : {1, 2, 3, 4}) {
      const std::vector<std::uint16_t> a = d.run(M, Mode::kFusedExperts, "gemv");
      EXPECT_STREQ(cuda::gemv_last_kernel(), "cuda") << s.name();
      EXPECT_EQ(cuda::gemv_last_gemm2_fast(), v.fast) << s.name() << " M = " << M;
      const std::vector<std::uint16_t> b = d.run(M, Mode::kFusedExperts, "gemv");
      EXPECT_TRUE(a == b) << s.name() << " M = " << M << ": not bitwise reproducible";
      {  // the general loop (MOEKIT_GEMV_ONE_ROUND=0): the same sums in the same order, the same bits
        ScopedEnv off("MOEKIT_GEMV_ONE_ROUND", "0");
        const std::vector<std::uint16_t> g = d.run(M, Mode::kFusedExperts, "gemv");
        EXPECT_FALSE(cuda::gemv_last_gemm2_fast()) << s.name();
        EXPECT_TRUE(g == a) << s.name() << " M = " << M << ": the one-round form differs from the general loop";
      }
      EXPECT_TRUE(rows_match(to_float(a, s.act_dtype), reference_rows(c, 0, M), s.K, v.scheme, "gemv GEMM2 form"))
          << s.name() << " M = " << M;
    }
  }
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  std::string what;
  ScopedEnv bad("MOEKIT_GEMV_ONE_ROUND", "yes");
  EXPECT_EQ(run_status(d, 2, "gemv", &what), Status::kInvalidArgument);
  EXPECT_NE(what.find("MOEKIT_GEMV_ONE_ROUND"), std::string::npos) << what;
}

// The fp8 GEMV kernel forms behind a 0 / 1 switch (MOEKIT_GEMV_WIDE, MOEKIT_GEMV_FP8_DECOUPLED):
// one shape of their tests, the small fp8_per_tensor case at these sizes.
struct GemvFormShape {
  DType act;
  std::int64_t E, k, K, N, M;
};

CaseSpec gemv_form_spec(const GemvFormShape& v) {
  CaseSpec s = small_spec(Scheme::kFp8PerTensor);
  s.act_dtype = v.act;
  s.E = v.E;
  s.k = v.k;
  s.K = v.K;
  s.N = v.N;
  s.M = v.M;
  return s;
}

// A switch test's case: its scheme, the GEMV kernel it forces (MOEKIT_GEMV_KERNEL) and QGMMA
// switch (null: unset), its shape and the case's options.
struct GemvVariant {
  Scheme scheme;
  const char* kernel;
  const char* qgmma;
  GemvFormShape shape;
  bool static_scales = false;
  bool expert_map = false;
  RoutingPattern pattern = RoutingPattern::kFromLogits;
};

CaseSpec gemv_variant_spec(const GemvVariant& v) {
  CaseSpec s = gemv_form_spec(v.shape);
  s.scheme = v.scheme;
  s.static_scales = v.static_scales;
  s.expert_map = v.expert_map;
  s.pattern = v.pattern;
  return s;
}

// A GEMV switch that must keep the bits (`var`: 0 / 1, default on): the call with var = "0", then
// with "1" and unset, gives the same output on the forced kernel (and QGMMA form), again on a
// second call; the output matches the reference. With `ran` (the launcher's record of what the
// switch turns on): off at "0", `on_where_set` at "1" and unset.
void expect_switch_keeps_bits(const GemvVariant& v, const char* var, bool (*ran)() = nullptr,
                              bool on_where_set = true) {
  const CaseSpec s = gemv_variant_spec(v);
  const std::int64_t M = v.shape.M;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  ScopedEnv kernel("MOEKIT_GEMV_KERNEL", v.kernel);
  ScopedEnv qg("MOEKIT_GEMV_QGMMA", v.qgmma);
  std::vector<std::uint16_t> off;
  {
    ScopedEnv zero(var, "0");
    off = d.run(M, Mode::kFusedExperts, "gemv");
    EXPECT_STREQ(cuda::gemv_last_kernel(), v.kernel) << s.name();
    if (ran != nullptr) EXPECT_FALSE(ran()) << s.name() << ": " << var << "=0 ran it";
  }
  EXPECT_TRUE(rows_match(to_float(off, s.act_dtype), reference_rows(c, 0, M), s.K, s.scheme, var)) << s.name();
  for (const char* on : {"1", static_cast<const char*>(nullptr)}) {  // "1", then unset (the default)
    ScopedEnv set(var, on);
    const std::vector<std::uint16_t> got = d.run(M, Mode::kFusedExperts, "gemv");
    EXPECT_STREQ(cuda::gemv_last_kernel(), v.kernel) << s.name();
    if (v.qgmma != nullptr) EXPECT_EQ(cuda::gemv_last_qgmma(), v.qgmma[0] == '1') << s.name();
    if (ran != nullptr) EXPECT_EQ(ran(), on_where_set) << s.name() << ": " << var << "=" << (on ? on : "unset");
    EXPECT_TRUE(got == off) << s.name() << ": " << var << "=" << (on ? on : "unset") << " changed the output";
    EXPECT_TRUE(d.run(M, Mode::kFusedExperts, "gemv") == got) << s.name() << ": not reproducible";
  }
}

// With `var` = "1": the form ran (`ran`), gives `a`'s bits (the other form's output), again on a
// second call, and matches the reference.
void expect_gemv_form(MoeCase& c, DeviceCase& d, const std::vector<std::uint16_t>& a, const char* var,
                      bool (*ran)(), const char* form) {
  const CaseSpec& s = c.spec;
  ScopedEnv on(var, "1");
  const std::vector<std::uint16_t> b = d.run(s.M, Mode::kFusedExperts, "gemv");
  EXPECT_TRUE(ran()) << s.name() << ": the " << form << " kernel did not run";
  EXPECT_TRUE(a == b) << s.name() << ": the " << form << " form differs from the other one";
  const std::vector<std::uint16_t> b2 = d.run(s.M, Mode::kFusedExperts, "gemv");
  EXPECT_TRUE(b == b2) << s.name() << ": the " << form << " kernel is not bitwise reproducible";
  EXPECT_TRUE(rows_match(to_float(b, s.act_dtype), reference_rows(c, 0, s.M), s.K, s.scheme, form)) << s.name();
}

// One shape of a 0 / 1 switch between the plain e4m3 kernel's forms: with `var` = "0" the other
// form runs, unset the rule (`rule`: whether it takes this form here) gives the same bits, and "1"
// runs this form (expect_gemv_form).
void expect_gemv_switch(const GemvFormShape& v, const char* var, bool (*ran)(), bool rule, const char* form) {
  const CaseSpec s = gemv_form_spec(v);
  MoeCase c = make_case(s);
  DeviceCase d(c);
  ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
  ScopedEnv qg_off("MOEKIT_GEMV_QGMMA", "0");  // the mma.sync forms (the QGMMA one goes first where on)
  std::vector<std::uint16_t> a;
  {
    ScopedEnv off(var, "0");
    a = d.run(v.M, Mode::kFusedExperts, "gemv");
    EXPECT_STREQ(cuda::gemv_last_kernel(), "mma") << s.name();
    EXPECT_FALSE(ran()) << s.name() << ": " << var << "=0 ran the " << form << " form";
  }
  {
    ScopedEnv unset(var, nullptr);
    const std::vector<std::uint16_t> r = d.run(v.M, Mode::kFusedExperts, "gemv");
    EXPECT_EQ(ran(), rule) << s.name() << ": the default rule";
    EXPECT_TRUE(r == a) << s.name() << ": the default form differs from the other one";
  }
  expect_gemv_form(c, d, a, var, ran, form);
}

// bf16 has one tensor-core form: with `var` = "1" the mma kernel runs and `ran` stays false (`why`).
void expect_bf16_ignores_gemv_switch(const char* var, bool (*ran)(), const char* why) {
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
  ScopedEnv on(var, "1");
  d.run(2, Mode::kFusedExperts, "gemv");
  EXPECT_STREQ(cuda::gemv_last_kernel(), "mma") << var;
  EXPECT_FALSE(ran()) << why;
}

// Any value of `var` but 0 / 1 is an error naming it.
void expect_bad_gemv_switch(const char* var) {
  MoeCase c = make_case(small_spec(Scheme::kFp8PerTensor));
  DeviceCase d(c);
  std::string what;
  ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
  ScopedEnv bad(var, "yes");
  EXPECT_EQ(run_status(d, 2, "gemv", &what), Status::kInvalidArgument);
  EXPECT_NE(what.find(var), std::string::npos) << what;
}

TEST(Sm90Dispatch, GemvWideTasksBitwiseEqualToSixteenColumnTasks) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_GEMV_WIDE=1 runs fp8 calls of the tensor-core GEMV kernel with GEMM1 tasks of 32
  // columns (rounds of one k-block, 8 tokens a pass) instead of 16 (rounds of two, 16 tokens): the
  // same mmas a column in the same order, so the same bits. Shapes: K = 4096 (four k-blocks a
  // warp), a K whose last k-block is partial (1040: 65 chunks, warps of an odd k-block count, where
  // the 16-column form's last round multiplies zeros), N not a multiple of 32 (48: the last task's
  // second tile past N), 24 tokens an expert (three passes of 8 against 16 + 8), M = 1, fp16
  // activations; against the reference too. Unset, the rule takes the wide form at K <= 2048 and
  // M >= 4 (here: the K = 2048, M = 24 and fp16 M = 8 shapes). bf16 ignores the switch; a bad
  // value is an error.
  const GemvFormShape shapes[] = {
      {DType::kBf16, 16, 4, 4096, 96, 5}, {DType::kBf16, 8, 2, 2048, 128, 1}, {DType::kBf16, 8, 2, 1040, 48, 3},
      {DType::kBf16, 2, 2, 2048, 64, 24}, {DType::kFp16, 16, 4, 2048, 96, 8},
  };
  // Unset, the rule: 32-column tasks where w13 rows are at most 2048 bytes and M >= 4.
  for (const GemvFormShape& v : shapes)
    expect_gemv_switch(v, "MOEKIT_GEMV_WIDE", &cuda::gemv_last_wide, v.K <= 2048 && v.M >= 4, "gemv wide");
  expect_bf16_ignores_gemv_switch("MOEKIT_GEMV_WIDE", &cuda::gemv_last_wide, "bf16 has no wide form");
  expect_bad_gemv_switch("MOEKIT_GEMV_WIDE");
}

TEST(Sm90Dispatch, GemvFp8DecoupledUnitsBitwiseEqualToBarrierUnits) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_GEMV_FP8_DECOUPLED=1 runs fp8 calls of the tensor-core GEMV kernel's plain e4m3 form
  // with GEMM1's units on two mbarriers (one warp sums a unit while the others go on) instead of
  // two CTA barriers a unit: the same sums in the same order, so the same bits. Shapes: K = 4096,
  // a partial last k-block (K = 1040), 24 tokens an expert (two passes), M = 1, fp16 activations,
  // and 64 experts x 32 tasks (about 16 units a CTA: the reducing warp goes round all 16 warps and
  // both barriers turn many phases); against the reference too. Unset, the rule takes the
  // decoupled form at K >= 4096 and M = 2..8 (here: the M = 5 and fp16 M = 8 shapes). The wide form
  // (K <= 2048 and M >= 4 by default) and bf16 ignore the switch; a bad value is an error.
  const GemvFormShape shapes[] = {
      {DType::kBf16, 16, 4, 4096, 96, 5}, {DType::kBf16, 8, 2, 4096, 128, 1}, {DType::kBf16, 8, 2, 1040, 48, 3},
      {DType::kBf16, 2, 2, 4096, 64, 24}, {DType::kFp16, 16, 4, 4096, 96, 8}, {DType::kBf16, 64, 8, 1024, 512, 16},
  };
  ScopedEnv wide_off("MOEKIT_GEMV_WIDE", "0");
  // Unset, the rule: mbarrier units where w13 rows are at least 4096 bytes and M = 2..8.
  for (const GemvFormShape& v : shapes)
    expect_gemv_switch(v, "MOEKIT_GEMV_FP8_DECOUPLED", &cuda::gemv_last_decoupled,
                       v.K >= 4096 && v.M >= 2 && v.M <= 8, "gemv decoupled");
  {
    CaseSpec s = small_spec(Scheme::kFp8PerTensor);
    s.K = 2048;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
    ScopedEnv wide("MOEKIT_GEMV_WIDE", "1");
    ScopedEnv on("MOEKIT_GEMV_FP8_DECOUPLED", "1");
    d.run(4, Mode::kFusedExperts, "gemv");
    EXPECT_TRUE(cuda::gemv_last_wide());
    EXPECT_FALSE(cuda::gemv_last_decoupled()) << "the wide form keeps its barriers";
  }
  expect_bf16_ignores_gemv_switch("MOEKIT_GEMV_FP8_DECOUPLED", &cuda::gemv_last_decoupled,
                                  "bf16 has one form (always on mbarriers)");
  expect_bad_gemv_switch("MOEKIT_GEMV_FP8_DECOUPLED");
}

TEST(Sm90Dispatch, GemvQgmmaMatchesReference) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_GEMV_QGMMA=1 runs fp8 calls of the tensor-core GEMV kernel's plain e4m3 form with GEMM1
  // on wgmma (A = the weights straight from memory in registers, B = every token of the call in
  // one shared-memory tile): a different sum order from the mma.sync forms, so against the
  // reference, not their bits. Shapes: K = 4096, a partial last k-block (K = 1040: 17 k-blocks over
  // four warpgroups, 4 / 4 / 4 / 5), N = 48 (three 16-column tasks an expert: with 128 experts at
  // M = 16, ~300 tasks over the grid, a unit's two tasks of two experts; with 8 experts at M = 3
  // one task a CTA), M = 1 (a CTA with one task: a unit's second half empty), fp16
  // activations, 64 experts x 32 tasks at M = 8 and 16 (many units a CTA; M = 16 the tile's every
  // token); bitwise reproducible. Unset, the rule (gemv_qgmma: at least 6 tasks a CTA by the
  // bound min(E, M k) x N / 16, on an H200's 132 SMs the two 64-expert shapes); M > 16 keeps the
  // mma.sync form; bf16 ignores it; a bad value is an error.
  const GemvFormShape shapes[] = {
      {DType::kBf16, 16, 4, 4096, 96, 5},    {DType::kBf16, 8, 2, 4096, 128, 1}, {DType::kBf16, 8, 2, 1040, 48, 3},
      {DType::kFp16, 16, 4, 2048, 96, 8},    {DType::kBf16, 64, 8, 1024, 512, 8},
      {DType::kBf16, 128, 8, 1040, 48, 16}, {DType::kBf16, 64, 8, 1024, 512, 16},
  };
  for (const GemvFormShape& v : shapes) {
    const CaseSpec s = gemv_form_spec(v);
    MoeCase c = make_case(s);
    DeviceCase d(c);
    ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
    {
      ScopedEnv off("MOEKIT_GEMV_QGMMA", "0");
      d.run(v.M, Mode::kFusedExperts, "gemv");
      EXPECT_STREQ(cuda::gemv_last_kernel(), "mma") << s.name();
      EXPECT_FALSE(cuda::gemv_last_qgmma()) << s.name() << ": MOEKIT_GEMV_QGMMA=0 ran it";
    }
    {
      ScopedEnv unset("MOEKIT_GEMV_QGMMA", nullptr);
      d.run(v.M, Mode::kFusedExperts, "gemv");
      int sms = 0;
      ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
      const bool rule = std::min<std::int64_t>(v.E, v.M * v.k) * ((v.N + 15) / 16) >= 6 * std::int64_t{sms};
      EXPECT_EQ(cuda::gemv_last_qgmma(), rule) << s.name() << ": the default rule";
    }
    ScopedEnv on("MOEKIT_GEMV_QGMMA", "1");
    const std::vector<std::uint16_t> b = d.run(v.M, Mode::kFusedExperts, "gemv");
    EXPECT_TRUE(cuda::gemv_last_qgmma()) << s.name() << ": the QGMMA form did not run";
    const std::vector<std::uint16_t> b2 = d.run(v.M, Mode::kFusedExperts, "gemv");
    EXPECT_TRUE(b == b2) << s.name() << ": the QGMMA form is not bitwise reproducible";
    EXPECT_TRUE(rows_match(to_float(b, s.act_dtype), reference_rows(c, 0, v.M), s.K, s.scheme, "gemv qgmma"))
        << s.name();
  }
  {
    const CaseSpec s = gemv_form_spec({DType::kBf16, 8, 2, 1024, 64, 17});
    MoeCase c = make_case(s);
    DeviceCase d(c);
    ScopedEnv kernel("MOEKIT_GEMV_KERNEL", "mma");
    ScopedEnv on("MOEKIT_GEMV_QGMMA", "1");
    const std::vector<std::uint16_t> b = d.run(17, Mode::kFusedExperts, "gemv");
    EXPECT_STREQ(cuda::gemv_last_kernel(), "mma");
    EXPECT_FALSE(cuda::gemv_last_qgmma()) << "M = 17 is past the QGMMA form's token tile";
    EXPECT_TRUE(rows_match(to_float(b, s.act_dtype), reference_rows(c, 0, 17), s.K, s.scheme, "gemv M = 17"));
  }
  expect_bf16_ignores_gemv_switch("MOEKIT_GEMV_QGMMA", &cuda::gemv_last_qgmma, "bf16 has no QGMMA form");
  expect_bad_gemv_switch("MOEKIT_GEMV_QGMMA");
}

TEST(Sm90Dispatch, GemvHiddenEarlyBitwiseEqualToLate) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_GEMV_HIDDEN_EARLY (default on): an fp8 GEMV call loads hidden's first kHiddenAhead
  // chunks a thread before the routing, and the dynamic activation scale takes their absmax from
  // registers; the same values and the same (order-free) max, so the same bits as loading them
  // after the routing. Every fp8 form: the CUDA-core
  // kernel (hidden within the chunks loaded ahead, and past them: M = 5 x K = 4096 = 20480
  // elements), the tensor-core kernel's plain e4m3 form, its QGMMA form, fp8_per_channel (its
  // per-row scales ignore the chunks), static scales, fp16 activations, gpt-oss's N = 360 (h rows
  // of whole 16-byte chunks past N); against the reference too. A bad value is an error.
  const GemvVariant variants[] = {
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kBf16, 128, 8, 2048, 96, 1}, false},
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kBf16, 16, 4, 4096, 128, 5}, false},
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kFp16, 16, 4, 2048, 128, 2}, false},
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kBf16, 16, 4, 2048, 128, 2}, true},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 64, 8, 4096, 192, 4}, false},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 64, 8, 7168, 256, 3}, false},
      {Scheme::kFp8PerTensor, "mma", "1", {DType::kBf16, 128, 8, 1024, 96, 16}, false},
      {Scheme::kFp8PerTensor, "mma", "1", {DType::kFp16, 128, 8, 2048, 96, 9}, false},
      {Scheme::kFp8PerChannel, "mma", nullptr, {DType::kBf16, 32, 4, 2048, 128, 5}, false},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 32, 4, 2880, 360, 2}, false},
  };
  for (const GemvVariant& v : variants) expect_switch_keeps_bits(v, "MOEKIT_GEMV_HIDDEN_EARLY");
  expect_bad_gemv_switch("MOEKIT_GEMV_HIDDEN_EARLY");
}

TEST(Sm90Dispatch, GemvWarpRouteBitwiseEqualToCtaRoute) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_GEMV_WARP_ROUTE (default on): calls of at most 32 slots are routed by one warp (a slot
  // a lane) instead of the CTA's per-expert counts and scan; the same tables, so the same bits
  // (the output's bits: tables that differ only where no sum sees it would pass too). Both kernels
  // and every form: the CUDA-core kernel (bf16, fp8), the tensor-core kernel (bf16, its mma.sync
  // and QGMMA e4m3 forms, fp8_per_channel, gpt-oss's N = 360 rows), an expert_map with -1 entries
  // (slots dropped), every token's first slot on one expert (kAllToOne; k = E = 8, M = 4: 32
  // slots, every expert touched, the warp's every lane), odd E (E = 9, P = 30), P = 33 (one past
  // the warp: the CTA's routing either way, and the launcher says so); against the reference
  // too, and reproducible. A bad value is an error. (Bad ids and map entries under both routings:
  // Sm90Faults, M = 5 x k = 2.)
  const GemvVariant variants[] = {
      {Scheme::kBf16, "cuda", nullptr, {DType::kBf16, 128, 8, 2048, 96, 1}, false, false, RoutingPattern::kFromLogits},
      {Scheme::kBf16, "cuda", nullptr, {DType::kBf16, 64, 8, 7168, 256, 4}, false, true, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kBf16, 128, 8, 2048, 96, 2}, false, false, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerTensor, "cuda", nullptr, {DType::kFp16, 9, 3, 1024, 64, 10}, false, false, RoutingPattern::kFromLogits},
      {Scheme::kBf16, "mma", nullptr, {DType::kBf16, 8, 8, 1024, 128, 4}, false, false, RoutingPattern::kAllToOne},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 64, 8, 4096, 192, 4}, false, true, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerTensor, "mma", "1", {DType::kBf16, 128, 8, 1024, 96, 3}, false, false, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerChannel, "mma", nullptr, {DType::kBf16, 32, 4, 2048, 128, 5}, false, false, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 32, 4, 2880, 360, 2}, false, true, RoutingPattern::kFromLogits},
      {Scheme::kFp8PerTensor, "mma", "0", {DType::kBf16, 9, 3, 1024, 64, 11}, false, false, RoutingPattern::kAllToOne},
  };
  for (const GemvVariant& v : variants)
    expect_switch_keeps_bits(v, "MOEKIT_GEMV_WARP_ROUTE", &cuda::gemv_last_warp_route, v.shape.M * v.shape.k <= 32);
  expect_bad_gemv_switch("MOEKIT_GEMV_WARP_ROUTE");
}

TEST(Sm90Dispatch, GemvFp8IntermediateScaleFromEveryH) {
  SKIP_WITHOUT_SM90();
  // fp8_per_tensor's dynamic intermediate scale is the absmax of every h of the call. Each GEMV
  // CTA takes it from the h it stages after the grid barrier (all of the call's: no grid-wide
  // reduction); the tensor-core kernel holds a thread's words in registers between the absmax and
  // the quantization up to 4096 words a CTA (P x ceil(N / 16) x 4), one word a thread in a form
  // of its own up to 512 (M = 1 on the TP8 shards), and reads them twice from L2 past that. One
  // token's hidden row here is 16x the others', so its h (about 256x: the activation is about
  // quadratic) holds the absmax, and only the CTAs whose GEMM1 pairs it
  // reached wrote it: a CTA whose staging missed it would take a scale ~256x too small and
  // saturate that token's e4m3 h at 448, far outside the tolerance. Against the reference, both
  // kernels, the big token first or last; reproducible.
  struct Case {
    const char* kernel;
    GemvFormShape shape;
    bool held;  // the tensor-core kernel: h words held in registers
  };
  const Case cases[] = {
      {"cuda", {DType::kBf16, 64, 8, 2048, 96, 4}, false},
      {"cuda", {DType::kFp16, 32, 8, 1024, 256, 8}, false},
      {"mma", {DType::kBf16, 64, 8, 7168, 256, 1}, true},     // 8 slots x 64 words: one a thread
      {"mma", {DType::kBf16, 128, 8, 2048, 96, 8}, true},     // 64 slots x 24 words
      {"mma", {DType::kBf16, 32, 4, 2880, 360, 4}, true},     // N = 360: the half last chunk
      {"mma", {DType::kBf16, 64, 8, 1024, 512, 16}, false},   // 128 slots x 128 words
      {"mma", {DType::kFp16, 16, 2, 4096, 1792, 5}, false},   // mixtral-like rows, 10 slots x 448
  };
  for (const Case& v : cases) {
    const std::int64_t words = v.shape.M * v.shape.k * ((v.shape.N + 15) / 16) * 4;
    if (std::string(v.kernel) == "mma") {
      ASSERT_EQ(v.held, words <= 4096) << "case table: " << words << " words";
    }
    for (int big : {0, static_cast<int>(v.shape.M) - 1}) {
      const CaseSpec s = gemv_form_spec(v.shape);
      MoeCase c = make_case(s);
      for (std::int64_t i = 0; i < s.K; ++i) {
        std::uint16_t& b = c.hidden[static_cast<std::size_t>(big * s.K + i)];
        b = s.act_dtype == DType::kFp16 ? float_to_fp16(16.0f * fp16_to_float(b))
                                        : float_to_bf16(16.0f * bf16_to_float(b));
      }
      DeviceCase d(c);
      ScopedEnv kernel("MOEKIT_GEMV_KERNEL", v.kernel);
      const std::vector<std::uint16_t> a = d.run(v.shape.M, Mode::kFusedExperts, "gemv");
      EXPECT_STREQ(cuda::gemv_last_kernel(), v.kernel) << s.name();
      EXPECT_TRUE(rows_match(to_float(a, s.act_dtype), reference_rows(c, 0, v.shape.M), s.K, s.scheme,
                             std::string("gemv ") + v.kernel + ", token " + std::to_string(big) + " 16x"))
          << s.name();
      EXPECT_TRUE(d.run(v.shape.M, Mode::kFusedExperts, "gemv") == a) << s.name() << ": not reproducible";
    }
  }
}

TEST(Sm90Dispatch, FusedDeclinesRowsPastItsSplits) {
  SKIP_WITHOUT_SM90();
  // The fused single launch reduces a GEMM in at most fm::kMaxSplit ranges of the token buffer
  // (<= 2944 bytes each): bf16 w2 rows of N = 12288 (24,576 bytes) need 9, so path=fused must
  // decline, naming the splits, where until session 20 it ran without a GEMM2 and never wrote
  // the output (mixtral-8x7b TP1 bf16). fp8 rows of the same N (12,288 bytes, 5 splits) run and
  // match the reference; auto runs both.
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = small_spec(scheme);
    s.E = 4;
    s.k = 2;
    s.K = 256;
    s.N = 12288;
    s.M = 4;
    MoeCase c = make_case(s);
    DeviceCase d(c);
    std::string what;
    const Status fused = run_status(d, 4, "fused", &what);
    if (scheme == Scheme::kBf16) {
      EXPECT_EQ(fused, Status::kNotSupported) << s.name();
      EXPECT_NE(what.find("splits"), std::string::npos) << what;
    } else {
      EXPECT_EQ(fused, Status::kSuccess) << s.name() << ": " << what;
      const std::vector<std::uint16_t> out = d.run(4, Mode::kFusedExperts, "fused");
      EXPECT_TRUE(rows_match(to_float(out, s.act_dtype), reference_rows(c, 0, 4), s.K, scheme, "fused N = 12288"));
    }
    const std::vector<std::uint16_t> a = d.run(4, Mode::kFusedExperts, "auto");
    EXPECT_TRUE(rows_match(to_float(a, s.act_dtype), reference_rows(c, 0, 4), s.K, scheme, "auto N = 12288"));
  }
}

TEST(Sm90Dispatch, TokmajorScheduleSwitchIsChecked) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_TOKMAJOR_SCHEDULE: dynamic (default) or static; anything else fails the call before
  // anything is enqueued. That both schedules give the same bits is Sm90TokMajorGemm's
  // DynamicScheduleMatchesStaticBitwise; the Sm90FusedMoe cases check the dynamic one end to end.
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  std::string what;
  Status bad, fixed;
  {
    ScopedEnv env("MOEKIT_TOKMAJOR_SCHEDULE", "sometimes");
    bad = run_status(d, 17, "tokmajor", &what);
  }
  {
    ScopedEnv env("MOEKIT_TOKMAJOR_SCHEDULE", "static");
    fixed = run_status(d, 17, "tokmajor");
  }
  EXPECT_EQ(bad, Status::kInvalidArgument);
  EXPECT_NE(what.find("MOEKIT_TOKMAJOR_SCHEDULE"), std::string::npos) << what;
  EXPECT_EQ(fixed, Status::kSuccess);
  EXPECT_EQ(run_status(d, 17, "tokmajor"), Status::kSuccess);
}

TEST(Sm90Dispatch, TokmajorPingpongSwitchIsChecked) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_TOKMAJOR_PINGPONG: 0 or 1; anything else fails the call before anything is enqueued
  // (until session 32 it threw at GEMM2's launch, after routing and GEMM1 were enqueued). That
  // both forms give the same bits is Sm90TokMajorGemm.PingPongMatchesTwoWarpgroupUnitsBitwise.
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  for (const char* v : {"2", "on", "-1"}) {
    std::string what;
    ScopedEnv env("MOEKIT_TOKMAJOR_PINGPONG", v);
    EXPECT_EQ(run_status(d, 17, "tokmajor", &what), Status::kInvalidArgument) << v;
    EXPECT_NE(what.find("MOEKIT_TOKMAJOR_PINGPONG"), std::string::npos) << v << ": " << what;
  }
  for (const char* v : {"0", "1"}) {
    ScopedEnv env("MOEKIT_TOKMAJOR_PINGPONG", v);
    EXPECT_EQ(run_status(d, 17, "tokmajor"), Status::kSuccess) << v;
  }
}

TEST(Sm90Dispatch, TokmajorTakeSwitchIsChecked) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_TOKMAJOR_TAKE: 1..8 units an atomic of the dynamic schedule's lookahead; anything else
  // fails the call before anything is enqueued. That every value gives the same bits is
  // Sm90TokMajorGemm.UnitsPerTakeMatchOneUnitBitwise.
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  for (const char* v : {"0", "9", "2x", "-1", "12"}) {
    std::string what;
    ScopedEnv env("MOEKIT_TOKMAJOR_TAKE", v);
    EXPECT_EQ(run_status(d, 17, "tokmajor", &what), Status::kInvalidArgument) << v;
    EXPECT_NE(what.find("MOEKIT_TOKMAJOR_TAKE"), std::string::npos) << v << ": " << what;
  }
  ScopedEnv env("MOEKIT_TOKMAJOR_TAKE", "8");
  EXPECT_EQ(run_status(d, 17, "tokmajor"), Status::kSuccess);
}

TEST(Sm90Dispatch, LogLinePerCall) {
  SKIP_WITHOUT_SM90();
  MoeCase c = make_case(small_spec(Scheme::kBf16));
  DeviceCase d(c);
  Status st;
  std::string err;
  {
    ScopedEnv log("MOEKIT_LOG_DISPATCH", "1");
    ::testing::internal::CaptureStderr();
    st = run_status(d, 17, "auto");
    err = ::testing::internal::GetCapturedStderr();
  }
  EXPECT_EQ(st, Status::kSuccess);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("moekit dispatch: M=17 E=16 k=4 K=256 N=128 bf16"), std::string::npos) << err;
  EXPECT_NE(err.find("path=auto"), std::string::npos) << err;
  // M = 17 x k = 4 slots on experts of 128 x 256: the per-expert MLP kernel's cluster form since
  // its one-round band (68 slots on 16 experts, within the resident clusters of 2; session 62),
  // else gemv(mma), decode or the GEMM pair: the log names it.
  EXPECT_TRUE(err.find("-> expert_mlp |") != std::string::npos || err.find("-> gemv(mma) |") != std::string::npos ||
              err.find("-> gemv |") != std::string::npos || err.find("-> decode |") != std::string::npos ||
              err.find("gemm1=") != std::string::npos)
      << err;
}

// ---- routing alone: GPU == CPU ----

TEST(Sm90Routing, MatchesCpuRoute) {
  SKIP_WITHOUT_SM90();
  for (RoutingMethod rm : {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSigmoidGroupedTopk, RoutingMethod::kTopkSoftmax})
    for (std::int64_t E : {8, 72, 128, 256})
      for (DType ldt : {DType::kFp32, DType::kBf16}) {
        const std::int64_t M = 1000;
        RoutingConfig r = routing_of(rm);
        r.top_k = static_cast<int>(std::min<std::int64_t>(8, E));
        if (rm == RoutingMethod::kSigmoidGroupedTopk) {
          r.num_groups = E == 72 ? 9 : E == 8 ? 4 : 8;  // E = 8: 4 groups of 2, 2 kept: k = 4
          r.topk_groups = E == 8 ? 2 : 4;
          if (E == 8) r.top_k = 4;
        }
        r.renormalize = !(rm == RoutingMethod::kSoftmaxTopk && E == 72);  // one case without
        CaseSpec s;
        s.M = M;
        s.E = E;
        s.k = r.top_k;
        s.K = 8;
        s.N = 8;
        s.routing = r;
        s.seed = static_cast<std::uint64_t>(E) * 7 + static_cast<int>(rm);
        s.pattern = RoutingPattern::kSkewed;  // cheap: only the logits and bias are used here
        MoeCase c = make_case(s);
        // A NaN logit in token 3: it selects as -inf, on both backends alike.
        c.router_logits[3 * E + 1] = std::nanf("");
        std::vector<std::uint16_t> lbf;
        for (float v : c.router_logits) lbf.push_back(float_to_bf16(v));
        const void* host_logits = ldt == DType::kBf16 ? static_cast<const void*>(lbf.data()) : c.router_logits.data();
        const std::size_t lbytes = static_cast<std::size_t>(M * E) * dtype_size(ldt);

        std::vector<std::int32_t> cpu_ids(static_cast<std::size_t>(M * r.top_k)), gpu_ids(cpu_ids.size());
        std::vector<float> cpu_w(cpu_ids.size()), gpu_w(cpu_ids.size());
        RouteArgs a;
        a.routing = r;
        a.router_logits = TensorView::contiguous(host_logits, ldt, {M, E});
        if (!c.correction_bias.empty())
          a.e_score_correction_bias = TensorView::contiguous(c.correction_bias.data(), DType::kFp32, {E});
        a.topk_ids = TensorView::contiguous(cpu_ids.data(), DType::kInt32, {M, r.top_k});
        a.topk_weights = TensorView::contiguous(cpu_w.data(), DType::kFp32, {M, r.top_k});
        Options co;
        co.backend = Backend::kCpu;
        route(a, co);

        DevPtr dl = dev_alloc(lbytes), db = dev_alloc(static_cast<std::size_t>(E) * 4);
        DevPtr di = dev_alloc(cpu_ids.size() * 4), dw = dev_alloc(cpu_ids.size() * 4);
        CUDA_OK(cudaMemcpy(dl.get(), host_logits, lbytes, cudaMemcpyHostToDevice));
        RouteArgs g = a;
        g.router_logits = TensorView::contiguous(dl.get(), ldt, {M, E}, Device::cuda(0));
        if (!c.correction_bias.empty()) {
          CUDA_OK(cudaMemcpy(db.get(), c.correction_bias.data(), static_cast<std::size_t>(E) * 4, cudaMemcpyHostToDevice));
          g.e_score_correction_bias = TensorView::contiguous(db.get(), DType::kFp32, {E}, Device::cuda(0));
        }
        g.topk_ids = TensorView::contiguous(di.get(), DType::kInt32, {M, r.top_k}, Device::cuda(0));
        g.topk_weights = TensorView::contiguous(dw.get(), DType::kFp32, {M, r.top_k}, Device::cuda(0));
        Options go;
        go.backend = Backend::kCuda;
        route(g, go);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(gpu_ids.data(), di.get(), gpu_ids.size() * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gpu_w.data(), dw.get(), gpu_w.size() * 4, cudaMemcpyDeviceToHost));

        const std::string what = std::string(routing_method_name(rm)) + " E=" + std::to_string(E) + " logits " +
                                 dtype_name(ldt);
        EXPECT_EQ(cpu_ids, gpu_ids) << what;
        std::size_t bad = 0;
        for (std::size_t i = 0; i < cpu_w.size(); ++i) {
          const bool both_nan = std::isnan(cpu_w[i]) && std::isnan(gpu_w[i]);
          if (!both_nan && !(std::fabs(cpu_w[i] - gpu_w[i]) <= 1e-6f)) {
            if (bad++ < 3)
              ADD_FAILURE() << what << ": weight " << i << " cpu " << cpu_w[i] << " gpu " << gpu_w[i];
          }
        }
        EXPECT_EQ(bad, 0u) << what;
      }
}

}  // namespace
}  // namespace moekit::testing
