// GPU test of the token-major prefill GEMM (launch_grouped_gemm_tokmajor_sm90) against a host
// double-precision loop of the same formula (docs/design.md): experts with 0, 1, 127, 128, 129,
// 300, 1000 rows (128-row tiles), N and K on and off the tile edges, every epilogue option,
// bf16 / fp16 / fp8 schemes, NaN-poisoned outputs (the shared harness tests/common/gemm_harness.hpp
// builds, runs and checks each case).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/gemm_harness.hpp"
#include "common/scoped_env.hpp"
#include "moekit/error.hpp"

namespace {

using moekit::Activation;
using moekit::DType;
using moekit::Scheme;
using moekit::cuda::GemmEpilogue;
using moekit::cuda::GroupedGemmParams;
using moekit::testing::GemmCase;

// A grouped GEMM case (tests/common/gemm_harness.hpp) with token-major's row counts (128-row
// tiles) and its own knobs.
struct Case : GemmCase {
  Case() { rows = {0, 1, 127, 128, 129, 300, 1000}; }
  int cluster = 0;       // 0: the launcher's default; 1, 2: forced (2 = weight multicast)
  bool dynamic = false;  // pass a zeroed tile counter: the dynamic schedule (clusters of 1)
  // Let the static K-short GEMM2 (src/cuda/kernels/kshort/) take a decode-sized K-short GEMM2, as
  // it does by default; off, this file tests token-major's own forms (MOEKIT_KSHORT_GEMM2=0).
  bool kshort = false;
};

// Runs one case on the token-major path: the path must accept it and match the reference. The
// raw output (as floats) goes to *result when given, the tile counter after the launch to
// *counter.
void run_case(const Case& c, std::vector<float>* result = nullptr, std::uint32_t* counter = nullptr) {
  SCOPED_TRACE("tokmajor cluster=" + std::to_string(c.cluster) + " dynamic=" + std::to_string(c.dynamic) +
               " kshort=" + std::to_string(c.kshort));
  moekit::testing::ScopedEnv kshort("MOEKIT_KSHORT_GEMM2", c.kshort ? "1" : "0");
  GemmCase g = c;
  g.tile_counter = c.dynamic;
  moekit::testing::GemmRun run;
  moekit::testing::run_gemm_case(
      g,
      [&](const GroupedGemmParams& p, cudaStream_t stream) {
        std::string why;
        ASSERT_TRUE(moekit::cuda::can_implement_tokmajor_sm90(p, &why)) << why;
        moekit::cuda::launch_grouped_gemm_tokmajor_sm90(p, stream, c.cluster);
      },
      &run);
  if (result) *result = std::move(run.out);
  if (counter) *counter = run.counter;
}

Case gemm1(Scheme s, std::int64_t N, std::int64_t K) {
  Case c;
  c.scheme = s;
  c.N = N;
  c.K = K;
  c.out_dtype = s == Scheme::kBf16 ? DType::kBf16 : DType::kFp32;
  return c;
}
Case gemm2(Scheme s, std::int64_t N, std::int64_t K) {
  Case c = gemm1(s, N, K);
  c.epilogue = GemmEpilogue::kBiasWeightScatter;
  c.out_dtype = DType::kFp32;
  return c;
}
// Fewer rows for the large shapes: the double-precision host reference is the slow part.
const std::vector<int> kFewRows = {129, 0, 300, 1};

TEST(Sm90TokMajorGemm, Bf16GateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);  // every expert size; N = 96: one partial column tile
  run_case(c);
  c = gemm1(Scheme::kBf16, 768, 2048);
  c.rows = kFewRows;
  c.act = Activation::kGelu;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weight_on_input = true;
  c.seed = 2;
  run_case(c);
  c = gemm1(Scheme::kBf16, 360, 2880);  // N and K off the tile edges
  c.rows = {1, 127, 128};
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.out_dtype = DType::kFp32;
  c.seed = 3;
  run_case(c);
  c = gemm1(Scheme::kBf16, 1536, 2048);
  c.rows = {130, 0, 2};
  c.seed = 13;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Bf16ScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kBf16, 96, 256);  // K = 256: one full column tile; k_dim = 96: a K tail
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kBf16, 768, 2048);
  c.rows = kFewRows;
  c.seed = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);  // n_out = 2880: a partial last column tile
  c.rows = {1, 200};
  c.weight_on_input = true;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.seed = 5;
  run_case(c);
  // y in the activation dtype (what moekit's prefill chain asks of this kernel).
  c.out_dtype = DType::kBf16;
  c.seed = 6;
  run_case(c);
  c = gemm2(Scheme::kBf16, 96, 2048);
  c.rows = kFewRows;
  c.out_dtype = DType::kBf16;
  c.weights = 2;  // by sorted row only, as run_moe's routing passes them
  c.seed = 7;
  run_case(c);
  // n_out = 262: y rows that are not a multiple of 16 bytes (the epilogue's 4-byte fallback) and
  // a row end inside a staged 16-byte piece, in fp32 and bf16.
  c = gemm2(Scheme::kBf16, 128, 262);
  c.rows = {1, 130, 65};
  c.seed = 8;
  run_case(c);
  c.out_dtype = DType::kBf16;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp16MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.out_dtype = DType::kFp16;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.bias = true;
  c.bias_dtype = DType::kFp16;
  run_case(c);
  c.out_dtype = DType::kFp16;  // y in the activation dtype
  c.seed = 10;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerTensorGateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 768, 2048);
  c.rows = kFewRows;
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 6;
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.rows = {300, 1};
  c.weight_on_input = true;
  c.act = Activation::kGelu;
  c.seed = 7;
  run_case(c);
}

// out_absmax (GEMM1 of fp8_per_tensor, fp32 out; the fused quant(h) of backend.cu): the word is
// the absmax of exactly what the epilogue stored, with 1, 127, 128, 129, 300, 1000 rows (tail
// tiles, and tiles of <= 64 rows whose second warpgroup stores nothing), tail column tiles
// (N = 96, 208 in 128-column tiles), both cluster sizes (the spare CTA of a pair stores nothing),
// the dynamic schedule, a NaN token, a bias with weight_on_input.
TEST(Sm90TokMajorGemm, Fp8PerTensorOutAbsmaxIsTheStoredAbsmax) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t N : {96, 208}) {
    for (int cluster : {1, 2}) {
      Case c = gemm1(Scheme::kFp8PerTensor, N, 256);
      c.out_absmax = true;
      c.cluster = cluster;
      c.seed = 30 + cluster;
      run_case(c);
    }
    Case c = gemm1(Scheme::kFp8PerTensor, N, 256);
    c.out_absmax = true;
    c.cluster = 1;
    c.dynamic = true;
    c.nan_a_row = 3;
    run_case(c);
  }
  Case c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.rows = {300, 1};
  c.out_absmax = true;
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.weight_on_input = true;
  c.seed = 39;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerTensorScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 768, 2048);
  c.rows = kFewRows;
  c.weight_on_input = true;
  c.bias = true;
  c.seed = 8;
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 384, 2880);
  c.rows = {129, 3};
  c.bias = true;
  c.out_dtype = DType::kBf16;  // y in the activation dtype
  c.seed = 9;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8PerChannelMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerChannel, 96, 2048);
  c.rows = kFewRows;
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.rows = kFewRows;
  c.seed = 10;
  run_case(c);
}

TEST(Sm90TokMajorGemm, Fp8Block128MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.rows = kFewRows;
  run_case(c);
  c = gemm1(Scheme::kFp8Block128, 192, 2880);  // K tail: 2880 = 22.5 groups; N = 192: up rows mid-block
  c.rows = {1, 127, 128, 129};
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 11;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 2880);  // ragged last column tile of K = 2880
  c.rows = kFewRows;
  c.seed = 12;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 96, 256);  // k_dim = 96: one partial K group
  c.seed = 14;
  run_case(c);
}

TEST(Sm90TokMajorGemm, ManyTokensOnOneExpert) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 4097, 0};  // 33 token tiles, the last with one row
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {2000, 3};
  run_case(c);
}

TEST(Sm90TokMajorGemm, EmptyProblemsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};  // max_rows = 3 > 0 but no expert has rows
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {0};
  run_case(c);
}

TEST(Sm90TokMajorGemm, ManyExperts) {
  SKIP_WITHOUT_SM90();
  // 257 experts (odd, > 256): the tile table and the persistent walk across many small experts.
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows.assign(257, 0);
  for (int e = 0; e < 257; ++e) c.rows[e] = (e * 37) % 150;
  c.top_k = 8;
  run_case(c);
}

TEST(Sm90TokMajorGemm, ClusterSizesMatchReference) {
  SKIP_WITHOUT_SM90();
  // Both cluster sizes on every scheme; token-tile counts 1, 2, 3, 8 per expert (odd: the spare
  // CTA of the last pair only loads its half of the weights).
  for (int cluster : {1, 2}) {
    Case c = gemm1(Scheme::kBf16, 96, 256);
    c.cluster = cluster;
    run_case(c);
    c = gemm2(Scheme::kBf16, 360, 2880);
    c.rows = {1, 300, 0, 129};
    c.bias = true;
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kFp8PerTensor, 768, 2048);
    c.rows = {300, 1};
    c.act = Activation::kSwigluOai;
    c.cluster = cluster;
    run_case(c);
    c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
    c.rows = {129, 1000};
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kFp8Block128, 128, 2048);
    c.rows = kFewRows;
    c.cluster = cluster;
    run_case(c);
    c = gemm1(Scheme::kBf16, 96, 256);
    c.rows = {0, 0, 0};
    c.cluster = cluster;
    run_case(c);
  }
}

TEST(Sm90TokMajorGemm, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  for (int cluster : {1, 2}) {
    Case c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
    c.rows = kFewRows;
    c.cluster = cluster;
    std::vector<float> first, second;
    run_case(c, &first);
    run_case(c, &second);
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "cluster=" << cluster;
  }
}

// The schedule tests' cases (dynamic against static, early weights on against off): every scheme
// and epilogue, token-tile counts 0..8 per expert, K tails, tail tiles of <= 64 rows, more units
// than CTAs, experts without rows (expert 2 of the fp8 GEMM1: 6 column tiles, K longer than the
// ring) and a call with none.
std::vector<Case> schedule_cases() {
  std::vector<Case> cases;
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows.assign(257, 0);
  for (int e = 0; e < 257; ++e) c.rows[e] = (e * 37) % 150;
  c.top_k = 8;
  cases.push_back(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.rows = {1, 300, 0, 129, 1000};
  c.bias = true;
  c.out_dtype = DType::kBf16;
  cases.push_back(c);
  c = gemm1(Scheme::kFp8PerTensor, 768, 2048);  // 6 column tiles; expert 2 without rows
  c.rows = {300, 1, 0, 64, 65};
  c.act = Activation::kSwigluOai;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.rows = {129, 1000};
  c.weights = 2;  // by sorted row only, as run_moe's routing passes them
  cases.push_back(c);
  c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.rows = kFewRows;
  cases.push_back(c);
  c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};
  cases.push_back(c);
  return cases;
}

TEST(Sm90TokMajorGemm, DynamicScheduleMatchesStaticBitwise) {
  SKIP_WITHOUT_SM90();
  // The dynamic schedule changes which CTA runs a unit, never what a unit computes: every scheme
  // and epilogue matches the reference and the static schedule bit for bit, with token-tile counts
  // 0..8 per expert, K tails, tail tiles of <= 64 rows and more units than CTAs.
  std::vector<Case> cases = schedule_cases();
  for (Case& k : cases) {
    SCOPED_TRACE(k.describe());
    std::vector<float> fixed, taken, again;
    k.cluster = 1;
    k.dynamic = false;
    run_case(k, &fixed);
    k.dynamic = true;
    run_case(k, &taken);
    run_case(k, &again);  // a fresh zeroed counter each launch, as run_moe's routing gives
    ASSERT_EQ(fixed.size(), taken.size());
    ASSERT_EQ(taken.size(), again.size());
    EXPECT_EQ(0, std::memcmp(fixed.data(), taken.data(), fixed.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(taken.data(), again.data(), taken.size() * sizeof(float)));
  }
}

// The dynamic schedule on both epilogues at a size compute-sanitizer runs: an empty expert (with
// early weights, CTA 2's first unit), a tail tile, an expert of two token tiles.
void run_dynamic_small() {
  for (bool gate_up : {true, false}) {
    Case c = gate_up ? gemm1(Scheme::kBf16, 96, 256) : gemm2(Scheme::kBf16, 96, 256);
    c.rows = {1, 129, 0, 64};
    c.cluster = 1;
    c.dynamic = true;
    run_case(c);
  }
}

TEST(Sm90TokMajorGemm, DynamicScheduleSmall) {
  SKIP_WITHOUT_SM90();
  // Small enough for compute-sanitizer (memcheck, racecheck: the unit handed from the producer
  // to the consumers through shared memory).
  moekit::testing::ScopedEnv e("MOEKIT_TOKMAJOR_EARLY", "0");
  run_dynamic_small();
}

// K-short GEMM2 shapes (1-3 K stages) for the ping-pong and take tests: experts of 0, 1, 63, 64,
// 65, 129 and 300 rows (several units an expert, a unit count of either parity), more units than
// CTAs (the first: >= 16 a CTA on 132 SMs, the 5-stage ring and takes of 4 by rule), K and n_out
// tails, bias, per-channel scales, 16-bit y.
std::vector<Case> kshort_gemm2_cases() {
  std::vector<Case> cases;
  Case c = gemm2(Scheme::kBf16, 96, 2048);  // qwen3-30b TP8's GEMM2: k_dim 96 (2 stages of bf16)
  c.rows.assign(257, 0);
  for (int e = 0; e < 257; ++e) c.rows[e] = (e * 37) % 70;
  c.top_k = 8;
  c.out_dtype = DType::kBf16;
  c.weights = 2;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 2048);  // 1 stage
  c.rows = {1, 64, 65, 0, 129, 300, 63};
  c.seed = 21;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerTensor, 256, 7168);  // deepseek-v3 TP8: 2 stages, 28 column tiles
  c.rows = {3, 0, 70, 1};
  c.seed = 22;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerChannel, 192, 4096);  // qwen3-235b TP8
  c.rows = {1, 65, 0, 2};
  c.seed = 23;
  cases.push_back(c);
  c = gemm2(Scheme::kBf16, 192, 262);  // 3 stages; n_out 262: the epilogue's 4-byte fallback
  c.rows = {1, 130, 65, 0, 7};
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.seed = 24;
  cases.push_back(c);
  c.out_dtype = DType::kBf16;
  c.weight_on_input = true;
  cases.push_back(c);
  for (Case& k : cases) {
    k.cluster = 1;
    k.dynamic = true;
  }
  return cases;
}

TEST(Sm90TokMajorGemm, PingPongMatchesTwoWarpgroupUnitsBitwise) {
  SKIP_WITHOUT_SM90();
  // GEMM2's ping-pong consumers (64-row units, one warpgroup each, alternate units) change who
  // computes a row, never how: forced on and off (MOEKIT_TOKMAJOR_PINGPONG), every case matches
  // the reference and the two match bit for bit (kshort_gemm2_cases).
  for (const Case& k : kshort_gemm2_cases()) {
    SCOPED_TRACE(k.describe());
    std::vector<float> two, pp, again;
    {
      moekit::testing::ScopedEnv off("MOEKIT_TOKMAJOR_PINGPONG", "0");
      run_case(k, &two);
    }
    {
      moekit::testing::ScopedEnv on("MOEKIT_TOKMAJOR_PINGPONG", "1");
      run_case(k, &pp);
      run_case(k, &again);
    }
    ASSERT_EQ(two.size(), pp.size());
    ASSERT_EQ(pp.size(), again.size());
    EXPECT_EQ(0, std::memcmp(two.data(), pp.data(), two.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(pp.data(), again.data(), pp.size() * sizeof(float)));
  }
}

// The static K-short GEMM2 (src/cuda/kernels/kshort/) runs what token-major gives its ping-pong
// consumers where MOEKIT_KSHORT_GEMM2=1: kshort_gemm2_cases without the bias and per-channel
// cases (it declines those), and the shapes it adds: fp16 operands with fp32 y and
// weight_on_input, four K stages a unit (deepseek-v3 bf16 TP8, N = 256), e4m3 with three, a last
// column tile of 6 columns (n_out 1030), units that do not divide over the CTAs, a graph replay.
std::vector<Case> kshort_static_cases() {
  std::vector<Case> cases;
  for (const Case& k : kshort_gemm2_cases())
    if (!k.bias && k.scheme != Scheme::kFp8PerChannel) cases.push_back(k);
  Case c = gemm2(Scheme::kBf16, 192, 262);
  c.act_dtype = DType::kFp16;
  c.rows = {1, 130, 65, 0, 7};
  c.out_dtype = DType::kFp32;
  c.weight_on_input = true;
  c.seed = 31;
  cases.push_back(c);
  c = gemm2(Scheme::kBf16, 256, 7168);  // 4 K stages a unit (the deepest the kernel takes; token-major
                                        // runs it on its two-warpgroup form, not ping-pong)
  c.rows = {5, 0, 64, 65, 1, 128};
  c.out_dtype = DType::kBf16;
  c.weights = 1;
  c.graph_replay = true;
  c.seed = 32;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerTensor, 384, 1030);  // 3 stages; 5 column tiles, the last of 6 columns
  c.rows = {2, 63, 64, 0, 0, 129, 17};
  c.out_dtype = DType::kBf16;
  c.weights = 2;
  c.seed = 33;
  cases.push_back(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 2048);  // qwen3-30b TP8 fp8: 128 experts, ~16 rows each
  c.rows.assign(128, 0);
  for (int e = 0; e < 128; ++e) c.rows[e] = (e * 29) % 33;
  c.top_k = 8;
  c.out_dtype = DType::kBf16;
  c.weights = 2;
  c.seed = 34;
  cases.push_back(c);
  // Three K stages a unit with several units a CTA (the case the two warpgroups' wait order
  // matters most for: 3 of a 5-stage ring): qwen3-235b TP8's shape, bf16, ~1800 units.
  c = gemm2(Scheme::kBf16, 192, 4096);
  c.rows.assign(128, 0);
  for (int e = 0; e < 128; ++e) c.rows[e] = (e * 13) % 9;
  c.top_k = 8;
  c.out_dtype = DType::kBf16;
  c.weights = 2;
  c.seed = 35;
  cases.push_back(c);
  for (Case& k : cases) {
    k.cluster = 1;
    k.dynamic = true;
  }
  return cases;
}

TEST(Sm90TokMajorGemm, KshortGemm2MatchesPingPongBitwise) {
  SKIP_WITHOUT_SM90();
  // The same wgmma over the same K stages and the same epilogue arithmetic as the ping-pong
  // consumers, on other CTAs in another order: bit for bit the same output, and the reference's
  // (run_gemm_case checks it, and that no row outside the routed ones was written). The switch
  // must really have run it (its launch count) and left the tile counter alone.
  moekit::testing::ScopedEnv pingpong("MOEKIT_TOKMAJOR_PINGPONG", "1");
  for (Case k : kshort_static_cases()) {
    SCOPED_TRACE(k.describe());
    std::vector<float> pp, ks, again;
    run_case(k, &pp);  // k.kshort false: token-major's own form
    {
      k.kshort = true;
      k.counter_unused = true;
      const int before = moekit::cuda::kshort_gemm2_launches();
      std::uint32_t counter = 1;
      run_case(k, &ks, &counter);
      // A graph replay case launches once more, into its capture.
      EXPECT_EQ(moekit::cuda::kshort_gemm2_launches(), before + (k.graph_replay ? 2 : 1))
          << "the static K-short GEMM2 did not run";
      EXPECT_EQ(counter, 0u) << "the static K-short GEMM2 took units from the tile counter";
      run_case(k, &again);
    }
    ASSERT_EQ(pp.size(), ks.size());
    ASSERT_EQ(ks.size(), again.size());
    EXPECT_EQ(0, std::memcmp(pp.data(), ks.data(), pp.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(ks.data(), again.data(), ks.size() * sizeof(float)));
  }
  // What it declines (a bias, per-channel scales) still runs, on the ping-pong form: no launch of it.
  for (Case k : kshort_gemm2_cases()) {
    if (!k.bias && k.scheme != Scheme::kFp8PerChannel) continue;
    k.kshort = true;
    SCOPED_TRACE(k.describe());
    const int before = moekit::cuda::kshort_gemm2_launches();
    run_case(k);
    EXPECT_EQ(moekit::cuda::kshort_gemm2_launches(), before) << "a declined case ran on the static K-short GEMM2";
  }
}

TEST(Sm90TokMajorGemm, KshortGemm2Small) {
  SKIP_WITHOUT_SM90();
  // Small cases for compute-sanitizer (memcheck, racecheck; tools/scripts/gpu_check.sh): two
  // K stages a unit (bf16) and one (e4m3) on a 5-stage ring; 24 row tiles x 28 column tiles = 672
  // units over the SMs, so CTAs run 5 or 6 units: both consumer warpgroups, odd counts, the order
  // barrier between them, the ring wrapping more than once.
  moekit::testing::ScopedEnv pingpong("MOEKIT_TOKMAJOR_PINGPONG", "1");
  for (Scheme s : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    Case c = gemm2(s, 96, 7168);
    c.rows = {3, 0, 70, 1, 9, 64, 130, 40, 200, 150, 300, 90};
    c.out_dtype = DType::kBf16;
    c.weights = 2;
    c.cluster = 1;
    c.dynamic = true;
    c.kshort = true;
    c.counter_unused = true;
    SCOPED_TRACE(c.describe());
    const int before = moekit::cuda::kshort_gemm2_launches();
    run_case(c);
    EXPECT_EQ(moekit::cuda::kshort_gemm2_launches(), before + 1);
  }
}

TEST(Sm90TokMajorGemm, UnitsPerTakeMatchOneUnitBitwise) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_TOKMAJOR_TAKE = n: the dynamic schedule's atomic takes n consecutive units where the
  // producer looks a unit ahead (K-short tiles). Which CTA runs a unit changes, never what it
  // computes: against one unit an atomic, bit for bit, with the ping-pong consumers and without,
  // takes that divide the units or not (3), and more than a CTA gets (8: takes past the end), on
  // kshort_gemm2_cases. Every atomic adds n to the counter, so its final value is a multiple of
  // n: the take was used.
  for (const Case& k : kshort_gemm2_cases()) {
    SCOPED_TRACE(k.describe());
    for (const char* pp : {"0", "1"}) {
      moekit::testing::ScopedEnv pingpong("MOEKIT_TOKMAJOR_PINGPONG", pp);
      std::vector<float> one;
      {
        moekit::testing::ScopedEnv take("MOEKIT_TOKMAJOR_TAKE", "1");
        run_case(k, &one);
      }
      for (const char* n : {"2", "3", "8"}) {
        moekit::testing::ScopedEnv take("MOEKIT_TOKMAJOR_TAKE", n);
        std::vector<float> got;
        std::uint32_t counter = 0;
        run_case(k, &got, &counter);
        EXPECT_EQ(counter % static_cast<std::uint32_t>(n[0] - '0'), 0u) << "take " << n << ": counter " << counter;
        ASSERT_EQ(one.size(), got.size());
        EXPECT_EQ(0, std::memcmp(one.data(), got.data(), one.size() * sizeof(float)))
            << "ping-pong " << pp << ", take " << n;
      }
    }
  }
}

TEST(Sm90TokMajorGemm, EarlyWeightsMatchBitwise) {
  SKIP_WITHOUT_SM90();
  // MOEKIT_TOKMAJOR_EARLY = 1: the static first takes are head units ((expert, column tile) =
  // divmod(w, column tiles), its first token tile), so each CTA issues its first unit's first
  // weight stages at the kernel's entry, before the expert table; the counter hands out the other
  // units. Which CTA runs a unit and in which order change, never what a unit computes: against it
  // off, bit for bit, with experts without rows (a static unit passed over, or a CTA's first unit:
  // its early stages passed on, nothing written), experts of several token tiles, fewer and more
  // head units than CTAs, K longer than the ring (a CTA's first unit without rows cut short),
  // every scheme and epilogue, and the K-short GEMM2s with the ping-pong consumers and 3 units a take.
  std::vector<Case> cases = schedule_cases();
  for (Case& k : cases) {
    k.cluster = 1;
    k.dynamic = true;
  }
  const std::vector<Case> kshort = kshort_gemm2_cases();
  const std::size_t first_kshort = cases.size();
  cases.insert(cases.end(), kshort.begin(), kshort.end());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    SCOPED_TRACE(k.describe());
    // (ping-pong, take): the K-short GEMM2s run two, the others one.
    const char* configs[2][2] = {{"0", "1"}, {"1", "3"}};
    for (int j = 0; j < (i < first_kshort ? 1 : 2); ++j) {
      const char* pp = configs[j][0];
      const char* take = configs[j][1];
      moekit::testing::ScopedEnv pingpong("MOEKIT_TOKMAJOR_PINGPONG", pp);
      moekit::testing::ScopedEnv units("MOEKIT_TOKMAJOR_TAKE", take);
      std::vector<float> off, early, again;
      {
        moekit::testing::ScopedEnv e("MOEKIT_TOKMAJOR_EARLY", "0");
        run_case(k, &off);
      }
      {
        moekit::testing::ScopedEnv e("MOEKIT_TOKMAJOR_EARLY", "1");
        run_case(k, &early);
        if (j == 0 && i < first_kshort) run_case(k, &again);  // bitwise run to run
      }
      ASSERT_EQ(off.size(), early.size());
      EXPECT_EQ(0, std::memcmp(off.data(), early.data(), off.size() * sizeof(float)))
          << "ping-pong " << pp << ", take " << take;
      if (j == 0 && i < first_kshort) {
        ASSERT_EQ(early.size(), again.size());
        EXPECT_EQ(0, std::memcmp(early.data(), again.data(), early.size() * sizeof(float)));
      }
    }
  }
}

TEST(Sm90TokMajorGemm, RouteInKernelMatchesTheTables) {
  SKIP_WITHOUT_SM90();
  // GEMM1 with the routing in the kernel (GroupedGemmParams::route; docs/tokmajor.md "Routing in
  // GEMM1"): from the ids alone (row_offsets and sorted_slots poisoned), the output bit for bit the
  // one from the routing's tables, and the tables it writes for GEMM2 equal to the host's (the
  // harness checks them, rows past the routed ones untouched, and GEMM1's own fault record: a bad
  // id, a bad expert_map entry among remote (-1) entries, or remote entries only and no fault).
  // Experts of 0, 1, 127, 128, 129 and 300 rows (token tiles of 128), two and three column tiles,
  // a K tail, bf16 and fp16, bias and swiglu_oai; under each schedule and cluster size, with and
  // without early weights.
  struct Sched {
    int cluster;
    const char* schedule;
    const char* early;
  };
  const Sched scheds[] = {{1, "dynamic", "1"}, {1, "dynamic", "0"}, {1, "static", "0"}, {2, "static", "0"}};
  struct Ids {
    bool map;
    int bad;
  };
  const Ids id_forms[] = {{false, 1}, {true, 2}, {true, 0}};
  std::vector<Case> cases;
  {
    Case c = gemm1(Scheme::kBf16, 256, 1056);
    c.rows = {0, 1, 127, 128, 129, 300, 0, 5};
    c.weights = 1;
    cases.push_back(c);
  }
  {
    Case c = gemm1(Scheme::kBf16, 320, 256);
    c.act_dtype = DType::kFp16;
    c.out_dtype = DType::kFp16;
    c.bias = true;
    c.act = Activation::kSwigluOai;
    c.rows = {3, 0, 64, 200};
    cases.push_back(c);
  }
  for (Case& c : cases) {
    c.top_k = 4;
    c.extra_rows = 3 * c.top_k;  // the routed case's ids cover every slot of M = P / k + 2 tokens
    for (const Sched& sc : scheds) {
      moekit::testing::ScopedEnv schedule("MOEKIT_TOKMAJOR_SCHEDULE", sc.schedule);
      moekit::testing::ScopedEnv early("MOEKIT_TOKMAJOR_EARLY", sc.early);
      Case plain = c;
      plain.cluster = sc.cluster;
      plain.dynamic = sc.cluster == 1 && std::strcmp(sc.schedule, "dynamic") == 0;
      std::vector<float> from_tables;
      run_case(plain, &from_tables);
      for (const Ids& form : id_forms) {
        Case routed = plain;
        routed.route = true;
        routed.route_map = form.map;
        routed.route_bad = form.bad;
        SCOPED_TRACE(std::string("schedule ") + sc.schedule + ", early " + sc.early + ", expert_map " +
                     (form.map ? "yes" : "no") + ", bad entry " + std::to_string(form.bad));
        std::vector<float> from_ids;
        const int before = moekit::cuda::tokmajor_route_launches();
        run_case(routed, &from_ids);
        EXPECT_EQ(moekit::cuda::tokmajor_route_launches(), before + 1) << "the launch did not route";
        ASSERT_EQ(from_tables.size(), from_ids.size());
        EXPECT_EQ(0, std::memcmp(from_tables.data(), from_ids.data(), from_ids.size() * sizeof(float)))
            << "the routing in the kernel changed the output";
      }
    }
  }
}

TEST(Sm90TokMajorGemm, EarlyWeightsSmall) {
  SKIP_WITHOUT_SM90();
  // DynamicScheduleSmall with early weights, for compute-sanitizer (memcheck, racecheck: the
  // stages issued at the entry and their rows gathered after the table).
  moekit::testing::ScopedEnv e("MOEKIT_TOKMAJOR_EARLY", "1");
  run_dynamic_small();
}

TEST(Sm90TokMajorGemm, DeclinesWhatItCannotRun) {
  // gpt-oss at TP8: fp8 w2 rows of N = 360 bytes are not a multiple of 16 (TMA stride rule).
  GroupedGemmParams p;
  p.scheme = Scheme::kFp8PerTensor;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.num_experts = 4;
  p.n_out = 2880;
  p.k_dim = 360;
  std::string why;
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("16"), std::string::npos) << why;
  // Launching it anyway is an error, not a crash.
  p.max_rows = 8;
  EXPECT_THROW(moekit::cuda::launch_grouped_gemm_tokmajor_sm90(p, nullptr), moekit::Error);
  // fp8_block128 GEMM1 with N % 64 != 0: the up rows of a tile would straddle two scale blocks.
  p.scheme = Scheme::kFp8Block128;
  p.epilogue = GemmEpilogue::kGateUpActivation;
  p.n_out = 96;
  p.k_dim = 256;
  p.max_rows = 0;  // sizes only: no pointers are checked
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("64"), std::string::npos) << why;
  // GEMM2 writes fp32 or the activation dtype, nothing else.
  p.scheme = Scheme::kBf16;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.n_out = 256;
  p.k_dim = 128;
  p.act_dtype = DType::kBf16;
  p.out_dtype = DType::kFp16;
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
  EXPECT_NE(why.find("activation dtype"), std::string::npos) << why;
  // ... and accepts the activation dtype (the device check comes last: only with a Hopper GPU
  // does the answer become yes; this test also runs in CI, without one).
  p.out_dtype = DType::kBf16;
  if (moekit::cuda_available()) {
    EXPECT_TRUE(moekit::cuda::can_implement_tokmajor_sm90(p, &why)) << why;
  } else {
    EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
    EXPECT_NE(why.find("device"), std::string::npos) << why;
  }
  // An e4m3 act_dtype does not pass as 16-bit y (the epilogue would store 4-byte values into it).
  p.scheme = Scheme::kFp8PerTensor;
  p.act_dtype = DType::kFp8E4m3;
  p.out_dtype = DType::kFp8E4m3;
  EXPECT_FALSE(moekit::cuda::can_implement_tokmajor_sm90(p, &why));
}

TEST(Sm90TokMajorGemm, KshortGemm2DeclinesWhatItCannotRun) {
  // The static K-short GEMM2 (src/cuda/kernels/kshort/) takes bf16 / fp16 and fp8_per_tensor
  // GEMM2s of at most 512 bytes of K with no bias; everything else stays on token-major, with the
  // reason. Sizes only (max_rows = 0: no pointer is checked), so this runs in CI without a GPU.
  using moekit::cuda::kshort_gemm2_unsupported_reason;
  GroupedGemmParams p;
  p.scheme = Scheme::kBf16;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.num_experts = 128;
  p.n_out = 2048;
  p.k_dim = 96;  // qwen3-30b TP8
  p.act_dtype = DType::kBf16;
  p.out_dtype = DType::kBf16;
  p.max_rows = 0;
  const auto declined = [&](const char* needle) {
    const std::string why = kshort_gemm2_unsupported_reason(p);
    EXPECT_NE(why.find(needle), std::string::npos) << "'" << why << "' should name " << needle;
  };
  {
    const std::string why = kshort_gemm2_unsupported_reason(p);
    if (moekit::cuda_available()) EXPECT_TRUE(why.empty()) << why;
    else EXPECT_NE(why.find("device"), std::string::npos) << why;
  }
  p.epilogue = GemmEpilogue::kGateUpActivation;
  declined("GEMM2");
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.scheme = Scheme::kFp8PerChannel;
  declined("scheme");
  p.scheme = Scheme::kBf16;
  p.k_dim = 320;  // 640 bytes a row: not K-short
  declined("K-short");
  p.k_dim = 256;  // 4 K stages: the 5-stage ring fits beside the largest table
  p.num_experts = 1024;
  {
    const std::string why = kshort_gemm2_unsupported_reason(p);
    EXPECT_EQ(why.find("ring"), std::string::npos) << why;
  }
  p.num_experts = 128;
  p.out_dtype = DType::kFp16;  // neither fp32 nor the activation dtype
  declined("out_dtype");
  p.out_dtype = DType::kBf16;
  p.gather_a_by_token = true;
  declined("gather");
  p.gather_a_by_token = false;
  int fake = 0;
  p.bias = &fake;  // never read: max_rows = 0
  declined("bias");
}

}  // namespace
