// GPU test of the Swap-AB decode GEMM (launch_grouped_gemm_swapab_sm90) against a host
// double-precision loop of the same formula (docs/design.md; the shared harness
// tests/common/gemm_harness.hpp builds, runs and checks each case), on small random grouped problems:
// experts with 0, 1, 5, 33, 64, 100 rows, ragged N and K, every epilogue option, NaN-poisoned outputs;
// short K (GEMM2 at TP8) over many experts with several tiles per work item, router weights in
// sorted order (sorted_weights) or by slot.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
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

// A grouped GEMM case (tests/common/gemm_harness.hpp) and Swap-AB's own knobs.
struct Case : GemmCase {
  int split_k = 0;         // 0: the launcher's choice; 1, 2, 4, 8: forced cluster split-K
  int tiles_per_item = 0;  // 0: the launcher's choice; 1..16: forced tiles per work item
};

// Runs one case on the Swap-AB path: the path must accept it and match the reference. The raw
// output (as floats) goes to *result when given.
void run_case(const Case& c, std::vector<float>* result = nullptr) {
  SCOPED_TRACE("swapab split_k=" + std::to_string(c.split_k) + " tiles_per_item=" + std::to_string(c.tiles_per_item));
  moekit::testing::GemmRun run;
  moekit::testing::run_gemm_case(
      c,
      [&](const GroupedGemmParams& p, cudaStream_t stream) {
        std::string why;
        ASSERT_TRUE(moekit::cuda::can_implement_swapab_sm90(p, &why)) << why;
        // split_k 0: the router's choice (the launcher takes a split, it does not choose one).
        int split_k = c.split_k;
        if (split_k == 0) {
          int dev = 0, sms = 0;
          ASSERT_EQ(cudaSuccess, cudaGetDevice(&dev));
          ASSERT_EQ(cudaSuccess, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
          const std::int64_t k_stages = (p.k_dim * (p.scheme == moekit::Scheme::kBf16 ? 2 : 1) + 127) / 128;
          split_k = moekit::detail::choose_swapab_split(
              moekit::detail::swapab_max_items(p.n_out, p.num_experts, p.max_rows), sms, k_stages);
        }
        moekit::cuda::launch_grouped_gemm_swapab_sm90(p, stream, split_k, c.tiles_per_item);
      },
      &run);
  if (result) *result = std::move(run.out);
}

// `c`'s output with the environment variable `name` set to `value` for the call.
std::vector<float> run_with_env(const Case& c, const char* name, const char* value) {
  moekit::testing::ScopedEnv env(name, value);
  std::vector<float> out;
  run_case(c, &out);
  return out;
}

// Two outputs of one case are the same bits.
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
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
  c.out_dtype = DType::kFp32;  // GEMM2 writes fp32 y
  return c;
}

TEST(Sm90SwapAbGemm, Bf16GateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kBf16, 128, 2048);
  c.act = Activation::kGelu;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weight_on_input = true;
  c.seed = 2;
  run_case(c);
  c = gemm1(Scheme::kBf16, 360, 2880);
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.out_dtype = DType::kFp32;
  c.seed = 3;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Bf16ScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kBf16, 96, 256);
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 2048);
  c.seed = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.weight_on_input = true;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.seed = 5;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp16MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.out_dtype = DType::kFp16;
  run_case(c);
  c = gemm2(Scheme::kBf16, 128, 256);
  c.act_dtype = DType::kFp16;
  c.bias = true;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerTensorGateUpMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 6;
  run_case(c);
  c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.weight_on_input = true;
  c.act = Activation::kGelu;
  c.seed = 7;
  run_case(c);
}

// out_absmax (GEMM1 of fp8_per_tensor, fp32 out; the fused quant(h) of backend.cu): the word is
// the absmax of exactly what the epilogue stored, with items of 1..64 tokens (tail chunks of
// 64-token items), tail weight tiles (N = 96, 208), every split-K (a rank stores only the rows it
// owns), several tiles per item, a NaN token, a bias with weight_on_input.
TEST(Sm90SwapAbGemm, Fp8PerTensorOutAbsmaxIsTheStoredAbsmax) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t N : {96, 208}) {
    for (int split : {1, 2, 4, 8}) {
      Case c = gemm1(Scheme::kFp8PerTensor, N, 1024);
      c.out_absmax = true;
      c.split_k = split;
      c.seed = 20 + split;
      run_case(c);
    }
    Case c = gemm1(Scheme::kFp8PerTensor, N, 256);
    c.out_absmax = true;
    c.tiles_per_item = 4;
    c.nan_a_row = 3;
    run_case(c);
  }
  Case c = gemm1(Scheme::kFp8PerTensor, 360, 2880);
  c.out_absmax = true;
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.weight_on_input = true;
  c.seed = 29;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerTensorScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 128, 2048);
  c.weight_on_input = true;
  c.bias = true;
  c.seed = 8;
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 384, 2880);
  c.bias = true;
  c.seed = 9;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8PerChannelMatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8PerChannel, 96, 2048);
  c.bias = true;
  run_case(c);
  c = gemm2(Scheme::kFp8PerChannel, 128, 2880);
  c.seed = 10;
  run_case(c);
}

TEST(Sm90SwapAbGemm, Fp8Block128MatchesReference) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  run_case(c);
  c = gemm1(Scheme::kFp8Block128, 256, 2880);  // K tail: 2880 = 22.5 groups
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.seed = 11;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 2880);  // ragged last 64-row tile of K = 2880
  c.seed = 12;
  run_case(c);
}

TEST(Sm90SwapAbGemm, ManyTokensOnOneExpert) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 300, 0};  // 5 chunks of 64 tokens, the last partial
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {200, 3};
  run_case(c);
}

TEST(Sm90SwapAbGemm, EmptyProblemsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Case c = gemm1(Scheme::kBf16, 96, 256);
  c.rows = {0, 0, 0};  // max_rows = 3 > 0 but no expert has rows
  run_case(c);
  c = gemm2(Scheme::kFp8PerTensor, 96, 256);
  c.rows = {0};
  run_case(c);
}

TEST(Sm90SwapAbGemm, SplitKMatchesReference) {
  SKIP_WITHOUT_SM90();
  for (int split : {1, 2, 4, 8}) {
    Case c = gemm1(Scheme::kBf16, 128, 2048);
    c.split_k = split;
    c.bias = true;
    run_case(c);
    c = gemm2(Scheme::kFp8PerTensor, 96, 256);  // 2 K stages: ranks >= 2 have no K work at S = 4, 8
    c.split_k = split;
    run_case(c);
  }
  Case c = gemm1(Scheme::kFp8Block128, 128, 2048);
  c.split_k = 4;
  run_case(c);
  c = gemm2(Scheme::kBf16, 360, 2880);
  c.split_k = 8;
  c.weight_on_input = true;
  run_case(c);
  c = gemm1(Scheme::kFp8PerChannel, 360, 2880);
  c.split_k = 2;
  c.act = Activation::kSwigluOai;
  run_case(c);
}

TEST(Sm90SwapAbGemm, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  for (int split : {1, 4}) {
    Case c = gemm1(Scheme::kFp8PerTensor, 128, 2048);
    c.split_k = split;
    std::vector<float> first, second;
    run_case(c, &first);
    run_case(c, &second);
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "split_k=" << split;
  }
}

// E experts with 0..64 rows each (about one in eight empty), from a fixed seed.
std::vector<int> ragged_rows(int E, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> count(1, 64);
  std::vector<int> rows(E);
  for (int e = 0; e < E; ++e) rows[e] = (rng() % 8 == 0) ? 0 : count(rng);
  rows[0] = 1;
  rows[E - 1] = 64;
  return rows;
}

// GEMM2 at TP8: k_dim = N/8 of 96..360 elements (1 to 6 K stages), many experts with 1..64
// tokens each, several 64-row tiles per work item (auto and forced), router weights by slot or
// in sorted order.
TEST(Sm90SwapAbGemm, ShortKManyExpertsMatchesReference) {
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 20;
  for (std::int64_t n : {96, 192, 256, 360}) {
    for (int tiles : {0, 1, 3, 8}) {
      Case c = gemm2(Scheme::kBf16, n, 512);  // 8 output tiles of 64 rows
      c.rows = ragged_rows(40, seed);
      c.tiles_per_item = tiles;
      c.weights = static_cast<int>(seed % 3);
      c.bias = tiles == 3;
      c.seed = seed++;
      run_case(c);
    }
  }
  // fp8 per tensor (rows of N bytes: 360 is not a multiple of 16, declined).
  for (std::int64_t n : {96, 192, 256}) {
    for (int tiles : {0, 1, 5, 16}) {
      Case c = gemm2(Scheme::kFp8PerTensor, n, 576);  // 9 tiles: the last group is short at T = 5
      c.rows = ragged_rows(33, seed);
      c.tiles_per_item = tiles;
      c.weights = static_cast<int>(seed % 3);
      c.weight_on_input = tiles == 5;
      c.seed = seed++;
      run_case(c);
    }
  }
  // The other schemes with several tiles per item.
  Case c = gemm2(Scheme::kFp8PerChannel, 128, 512);
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 4;
  c.weights = 1;
  c.seed = seed++;
  run_case(c);
  c = gemm2(Scheme::kFp8Block128, 256, 640);
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 3;
  c.weights = 2;
  c.seed = seed++;
  run_case(c);
  c = gemm2(Scheme::kBf16, 192, 512);
  c.act_dtype = DType::kFp16;
  c.rows = ragged_rows(24, seed);
  c.tiles_per_item = 2;
  c.weights = 1;
  c.seed = seed++;
  run_case(c);
}

// GEMM1 with several tiles per work item: every scheme, weight_on_input (the routed weight
// multiplies the accumulators), split-K with T > 1 (ranks without K stages included).
TEST(Sm90SwapAbGemm, TilesPerItemMatchesReference) {
  SKIP_WITHOUT_SM90();
  std::uint64_t seed = 40;
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    for (int weights : {0, 1, 2}) {
      Case c = gemm1(scheme, 320, 256);  // 5 tiles: T = 2 leaves a short last group
      c.rows = ragged_rows(20, seed);
      c.tiles_per_item = 2 + weights;
      c.weights = weights;
      c.weight_on_input = weights != 0 || scheme == Scheme::kFp8PerTensor;
      c.bias = weights == 1;
      c.act = weights == 2 ? Activation::kSwigluOai : Activation::kSilu;
      c.seed = seed++;
      run_case(c);
    }
  }
  for (int split : {2, 4, 8}) {
    Case c = gemm1(Scheme::kBf16, 256, 2048);
    c.split_k = split;
    c.tiles_per_item = 3;
    c.weights = 1;
    c.seed = seed++;
    run_case(c);
    c = gemm2(Scheme::kFp8PerTensor, 96, 512);  // 1 K stage: ranks >= 1 have no K work
    c.rows = ragged_rows(16, seed);
    c.split_k = split;
    c.tiles_per_item = 4;
    c.weights = split == 4 ? 2 : 1;
    c.seed = seed++;
    run_case(c);
  }
}

// Tiles per item and the source of the router weights change which CTA computes a tile and
// where the weight is read from, never the arithmetic: the outputs are bitwise equal.
TEST(Sm90SwapAbGemm, TilesPerItemAndSortedWeightsBitwiseEqual) {
  SKIP_WITHOUT_SM90();
  for (Case base : {gemm2(Scheme::kBf16, 256, 512), gemm2(Scheme::kFp8PerTensor, 192, 640),
                    gemm1(Scheme::kFp8PerTensor, 320, 512)}) {
    base.rows = ragged_rows(24, 77);
    base.weight_on_input = base.epilogue == GemmEpilogue::kGateUpActivation;
    base.out_dtype = DType::kFp32;
    std::vector<float> first;
    run_case(base, &first);  // T = auto, weights by slot
    for (int tiles : {1, 2, 7}) {
      for (int weights : {1, 2}) {
        Case c = base;
        c.tiles_per_item = tiles;
        c.weights = weights;
        std::vector<float> got;
        run_case(c, &got);
        expect_same_bits(first, got, c.describe() + ": differs bitwise from T = auto with weights by slot");
      }
    }
  }
}

// Wide stages (two 128-byte K blocks a stage, swapab/config.hpp) run where no expert has more
// than 16 rows: every scheme but block128, both GEMMs, every split-K, K that ends inside a wide
// stage's second block (a TMA box wholly past K: zeros), experts of 0..16 rows, biases and
// swiglu_oai; then 17 rows on one expert (back to one block a stage).
TEST(Sm90SwapAbGemm, WideStagesMatchReference) {
  SKIP_WITHOUT_SM90();
  const std::vector<int> decode_rows = {0, 1, 5, 16, 3, 0, 16, 8, 2};
  for (int split : {1, 2, 4, 8}) {
    for (Case c : {gemm1(Scheme::kBf16, 208, 360), gemm2(Scheme::kBf16, 360, 720), gemm1(Scheme::kFp8PerTensor, 128, 2880),
                   gemm2(Scheme::kFp8PerTensor, 2880, 384), gemm1(Scheme::kFp8PerChannel, 96, 1152),
                   gemm2(Scheme::kBf16, 256, 2048)}) {
      c.rows = decode_rows;
      if (c.scheme == Scheme::kBf16 && c.N == 256) c.act_dtype = DType::kFp16;
      c.split_k = split;
      c.seed = 60 + split;
      c.bias = split == 2 || split == 8;
      if (c.epilogue == GemmEpilogue::kGateUpActivation && split == 4) c.act = Activation::kSwigluOai;
      run_case(c);
    }
  }
  Case c = gemm1(Scheme::kFp8PerTensor, 128, 2880);
  c.rows = {0, 1, 17, 4};
  run_case(c);
}

// Without split-K a wide stage adds the same K blocks in the same order as two narrow stages:
// the output is bitwise the same as with MOEKIT_SWAPAB_KBLOCKS=1 (one block a stage). (With
// split-K the ranks' K ranges are cut at different blocks, so the partial sums differ.)
TEST(Sm90SwapAbGemm, WideStagesBitwiseEqualToOneBlock) {
  SKIP_WITHOUT_SM90();
  // (gemm2 360 x 2880: GEMM2 rows of 8 bytes, copied by the producer, not TMA.)
  for (Case c : {gemm1(Scheme::kBf16, 208, 360), gemm2(Scheme::kFp8PerTensor, 2880, 384),
                 gemm1(Scheme::kFp8PerTensor, 128, 2880), gemm2(Scheme::kFp8PerTensor, 360, 2880)}) {
    c.rows = {0, 1, 5, 16, 3, 0, 16, 8, 2};
    c.split_k = 1;
    c.out_dtype = DType::kFp32;
    std::vector<float> wide;
    run_case(c, &wide);
    expect_same_bits(wide, run_with_env(c, "MOEKIT_SWAPAB_KBLOCKS", "1"),
                     c.describe() + ": wide stages differ bitwise from one block a stage");
  }
}

// GEMM2 on rows of 8 but not 16 bytes (gpt-oss fp8 at TP8: w2 and h rows of N = 360 bytes; no
// TMA map describes them): the producer copies the weight tiles and the token rows with 8-byte
// cp.async (params.hpp b_rows8). fp8 at the gpt-oss shape with biases, swiglu's GEMM2 side and
// router weights both ways; the default ragged experts (0..100 rows: one K block a stage, token
// widths 8..64) and decode-sized ones (wide stages); split-K 1, 2, 8; several tiles per item;
// bf16 (200-byte rows) and fp16 (72-byte rows, K ending inside the first 128-byte block); a NaN
// in one A row stays in its rows; graph replay bitwise equal to the launch.
TEST(Sm90SwapAbGemm, EightByteRowsMatchReference) {
  SKIP_WITHOUT_SM90();
  const std::vector<int> decode_rows = {0, 1, 5, 16, 3, 0, 16, 8, 2};
  int seed = 90;
  for (int split : {1, 2, 8}) {
    for (bool decode : {false, true}) {
      Case c = gemm2(Scheme::kFp8PerTensor, 360, 2880);
      if (decode) c.rows = decode_rows;
      c.split_k = split;
      c.bias = true;
      c.bias_dtype = DType::kBf16;
      c.weights = split == 2 ? 1 : 0;
      c.seed = ++seed;
      run_case(c);
    }
  }
  Case c = gemm2(Scheme::kFp8PerTensor, 360, 2880);
  c.tiles_per_item = 3;
  c.weight_on_input = true;
  c.nan_a_row = 2;
  c.seed = ++seed;
  run_case(c);
  c = gemm2(Scheme::kBf16, 100, 256);
  c.bias = true;
  c.graph_replay = true;
  c.seed = ++seed;
  run_case(c);
  c.rows = decode_rows;
  c.seed = ++seed;
  run_case(c);
  c = gemm2(Scheme::kBf16, 36, 512);
  c.act_dtype = DType::kFp16;
  c.weights = 2;
  c.seed = ++seed;
  run_case(c);
}

// GEMM2 at split 1 with two CTAs an SM (the default on short K; MOEKIT_SWAPAB_GEMM2_CTAS=1 / 2
// forces one / two: half the pipeline each, twice the grid): every tile is still one CTA's, its K
// blocks summed in the same order, so the output matches the reference and is bitwise the
// one-CTA output: per tensor (8-byte rows, TMA rows with biases), per channel, block128, wide
// stages, several tiles per item, both router-weight forms.
TEST(Sm90SwapAbGemm, Gemm2TwoCtasAnSmBitwiseEqualToOne) {
  SKIP_WITHOUT_SM90();
  int seed = 120;
  for (Case c : {gemm2(Scheme::kFp8PerTensor, 360, 2880), gemm2(Scheme::kBf16, 128, 2048), gemm2(Scheme::kFp8PerTensor, 384, 2880),
                 gemm2(Scheme::kFp8PerChannel, 256, 1024), gemm2(Scheme::kFp8Block128, 256, 1024)}) {
    c.split_k = 1;
    c.seed = ++seed;
    c.bias = seed % 2 == 0;
    c.weights = seed % 3 == 0 ? 1 : 0;
    if (c.N == 384) c.rows = {0, 1, 5, 16, 3, 0, 16, 8, 2};
    if (c.N == 128) c.tiles_per_item = 4;
    const std::vector<float> one = run_with_env(c, "MOEKIT_SWAPAB_GEMM2_CTAS", "1");
    expect_same_bits(one, run_with_env(c, "MOEKIT_SWAPAB_GEMM2_CTAS", "2"),
                     c.describe() + ": two CTAs an SM differ bitwise from one");
  }
}

// GEMM2's direct epilogue (the default at split 1; MOEKIT_SWAPAB_DIRECT=0 keeps the staged one):
// each consumer thread stores its own accumulators with the staged epilogue's arithmetic in its
// order, so the output matches the reference and is bitwise the staged output: per tensor (8-byte
// rows with bf16 biases, TMA rows), per channel, block128, bf16 and fp16 activations; router
// weights by slot, in sorted order and on the input; ragged experts (token widths 8..64, items
// walked in both buffer parities) and decode-sized ones (wide stages); several tiles per item; one
// and two CTAs an SM; a NaN in one token row stays in its rows; graph replay. A bad value of the
// switch is an error naming it.
TEST(Sm90SwapAbGemm, Gemm2DirectEpilogueBitwiseEqualToStaged) {
  SKIP_WITHOUT_SM90();
  const std::vector<int> decode_rows = {0, 1, 5, 16, 3, 0, 16, 8, 2};
  int seed = 140;
  std::vector<Case> cases;
  for (bool decode : {false, true}) {
    for (Case c : {gemm2(Scheme::kFp8PerTensor, 360, 2880), gemm2(Scheme::kBf16, 128, 2048), gemm2(Scheme::kFp8PerTensor, 384, 2880),
                   gemm2(Scheme::kFp8PerChannel, 256, 1024), gemm2(Scheme::kFp8Block128, 256, 1024), gemm2(Scheme::kBf16, 36, 512)}) {
      if (decode) c.rows = decode_rows;
      c.split_k = 1;
      c.seed = ++seed;
      c.bias = seed % 2 == 0;
      c.bias_dtype = DType::kBf16;
      c.weights = seed % 3;
      if (c.N == 36) c.act_dtype = DType::kFp16;
      if (c.N == 128) c.tiles_per_item = decode ? 3 : 4;
      cases.push_back(c);
    }
  }
  Case c = gemm2(Scheme::kFp8PerTensor, 360, 2880);
  c.split_k = 1;
  c.tiles_per_item = 3;
  c.weight_on_input = true;
  c.nan_a_row = 2;
  c.bias = true;
  c.seed = ++seed;
  cases.push_back(c);
  c = gemm2(Scheme::kBf16, 100, 256);
  c.split_k = 1;
  c.bias = true;
  c.graph_replay = true;
  c.seed = ++seed;
  cases.push_back(c);
  for (const Case& k : cases) {
    for (const char* ctas : {"1", "2"}) {
      moekit::testing::ScopedEnv two("MOEKIT_SWAPAB_GEMM2_CTAS", ctas);
      std::vector<float> direct;
      run_case(k, &direct);
      expect_same_bits(direct, run_with_env(k, "MOEKIT_SWAPAB_DIRECT", "0"),
                       k.describe() + " (CTAs an SM " + ctas + "): the direct epilogue differs bitwise from the staged one");
    }
  }
  c = gemm2(Scheme::kFp8PerTensor, 360, 2880);
  c.rows = decode_rows;
  c.seed = ++seed;
  moekit::testing::run_gemm_case(c, [&](const GroupedGemmParams& p, cudaStream_t stream) {
    moekit::testing::expect_bad_switch_throws(
        "MOEKIT_SWAPAB_DIRECT", [&] { moekit::cuda::launch_grouped_gemm_swapab_sm90(p, stream, 1, 0); });
    moekit::cuda::launch_grouped_gemm_swapab_sm90(p, stream, 1, 0);
  });
}

// Many items a CTA through the ring (the sanitizers' case for the stage hand-over and for the
// item token metadata the producer stages at an item's first K stage, which a later item rewrites
// in the same stage slot): 64 experts, n_out = 2048 (32 tiles), GEMM2 fp8 on 8-byte rows (N = 360)
// and bf16 on TMA rows (N = 128), T = 1 and 3 tiles an item, decode experts (<= 16 rows, wide
// stages) and ragged ones (up to 40 rows); every case against the reference, T = 1 and 3 bitwise
// equal (the same tiles on other CTAs).
TEST(Sm90SwapAbGemm, Gemm2ManyItemsPerCta) {
  SKIP_WITHOUT_SM90();
  const std::vector<int> decode_rows = {0, 1, 5, 16, 3, 0, 16, 8, 2, 9, 16, 1, 0, 12, 7, 16, 4};
  std::vector<int> many_decode(64), many_ragged(64);
  std::mt19937 rng(7);
  for (int e = 0; e < 64; ++e) {
    many_decode[e] = decode_rows[e % decode_rows.size()];
    many_ragged[e] = static_cast<int>(rng() % 41);
  }
  std::uint64_t seed = 240;
  for (Case c : {gemm2(Scheme::kFp8PerTensor, 360, 2048), gemm2(Scheme::kBf16, 128, 2048)}) {
    for (bool ragged : {false, true}) {
      c.split_k = 1;
      c.rows = ragged ? many_ragged : many_decode;
      c.bias = ragged;
      c.bias_dtype = DType::kBf16;
      c.weights = ragged ? 1 : 2;
      c.seed = seed++;
      std::vector<float> one, three;
      c.tiles_per_item = 1;
      run_case(c, &one);
      c.tiles_per_item = 3;
      run_case(c, &three);
      expect_same_bits(one, three, c.describe() + ": T = 1 and T = 3 differ bitwise");
    }
  }
}

// The kPlain kernels (MOEKIT_SWAPAB_PLAIN, on by default: the common small call, at most 16 rows in
// all by the host's bound, on the wide stage loop only with its features at compile time) give the
// general kernel's bits and take exactly the calls launch_sm90.cu's rule gives them: GEMM1 and
// GEMM2 in bf16, fp16 and fp8_per_tensor (GEMM1 with out_absmax), silu and swiglu_oai, with and
// without biases, router weights by slot and sorted, one expert with all 16 rows, graph replay;
// then calls the general kernel keeps: 17 rows, 16 rows under a looser bound (max_rows 19), split
// 2, fp8_per_channel, the weight on the input, GEMM2's 8-byte rows (fp8 and fp16), the staged GEMM2
// epilogue (MOEKIT_SWAPAB_DIRECT=0) and one-block stages (MOEKIT_SWAPAB_KBLOCKS=1). A bad value of
// the switch is an error naming it.
TEST(Sm90SwapAbGemm, PlainKernelBitwiseEqualToGeneral) {
  SKIP_WITHOUT_SM90();
  struct Run {
    Case c;
    bool plain;                  // the kPlain kernel takes every launch of it
    const char* env = nullptr;   // a switch set for both runs
    const char* value = nullptr;
  };
  std::vector<Run> runs;
  int seed = 170;
  // 16 rows in all over 8 experts (max_rows 16: extra_rows 0), split 1.
  const auto small = [&seed](Case c) {
    c.rows = {0, 1, 5, 0, 3, 4, 0, 3};
    c.extra_rows = 0;
    c.split_k = 1;
    c.seed = ++seed;
    return c;
  };
  Case c = small(gemm1(Scheme::kBf16, 208, 360));
  runs.push_back({c, true});
  c = small(gemm1(Scheme::kBf16, 208, 360));
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weights = 1;
  runs.push_back({c, true});
  c = small(gemm1(Scheme::kBf16, 128, 512));
  c.act_dtype = DType::kFp16;
  c.out_dtype = DType::kFp16;
  runs.push_back({c, true});
  c = small(gemm1(Scheme::kFp8PerTensor, 128, 2880));
  c.out_absmax = true;
  runs.push_back({c, true});
  c = small(gemm1(Scheme::kFp8PerTensor, 360, 2880));
  c.act = Activation::kSwigluOai;
  c.bias = true;
  c.weights = 1;
  runs.push_back({c, true});
  c = small(gemm2(Scheme::kBf16, 256, 2048));
  runs.push_back({c, true});
  c = small(gemm2(Scheme::kBf16, 256, 2048));
  c.bias = true;
  c.weights = 1;
  c.graph_replay = true;
  runs.push_back({c, true});
  c = small(gemm2(Scheme::kFp8PerTensor, 384, 2880));
  c.bias = true;
  c.bias_dtype = DType::kBf16;
  c.weights = 2;
  runs.push_back({c, true});
  c = small(gemm2(Scheme::kBf16, 64, 512));  // fp16 rows of 128 bytes (TMA)
  c.act_dtype = DType::kFp16;
  runs.push_back({c, true});
  c = small(gemm1(Scheme::kFp8PerTensor, 128, 2880));
  c.rows = {16};  // one expert with every row: a full wide token tile
  runs.push_back({c, true});
  c = small(gemm2(Scheme::kFp8PerTensor, 384, 2880));
  c.rows = {0, 16, 0};
  c.nan_a_row = 3;
  runs.push_back({c, true});
  // The general kernel's calls.
  c = small(gemm1(Scheme::kBf16, 208, 360));
  c.rows = {0, 1, 5, 0, 3, 4, 0, 4};  // 17 rows
  runs.push_back({c, false});
  c = small(gemm1(Scheme::kBf16, 208, 360));
  c.extra_rows = 3;  // max_rows 19: the host cannot tell that every expert fits a wide tile
  runs.push_back({c, false});
  c = small(gemm2(Scheme::kBf16, 256, 2048));
  c.split_k = 2;
  runs.push_back({c, false});
  c = small(gemm1(Scheme::kFp8PerChannel, 96, 1152));
  runs.push_back({c, false});
  c = small(gemm1(Scheme::kBf16, 208, 360));
  c.weight_on_input = true;
  runs.push_back({c, false});
  c = small(gemm2(Scheme::kFp8PerTensor, 360, 2880));  // rows of 360 bytes: the 8-byte producer
  c.bias = true;
  runs.push_back({c, false});
  c = small(gemm2(Scheme::kBf16, 36, 512));  // fp16 rows of 72 bytes: the 8-byte producer too
  c.act_dtype = DType::kFp16;
  runs.push_back({c, false});
  c = small(gemm2(Scheme::kBf16, 256, 2048));
  runs.push_back({c, false, "MOEKIT_SWAPAB_DIRECT", "0"});
  c = small(gemm1(Scheme::kBf16, 208, 360));
  runs.push_back({c, false, "MOEKIT_SWAPAB_KBLOCKS", "1"});
  for (const Run& r : runs) {
    const std::string what = r.c.describe() + (r.env != nullptr ? std::string(" ") + r.env + "=" + r.value : "");
    // The run's switch, or none: MOEKIT_SWAPAB_PLAIN unset (its default, on).
    moekit::testing::ScopedEnv env(r.env != nullptr ? r.env : "MOEKIT_SWAPAB_PLAIN", r.value);
    const int launches0 = moekit::cuda::swapab_launches(), plain0 = moekit::cuda::swapab_plain_launches();
    std::vector<float> plain;
    run_case(r.c, &plain);
    const int launches = moekit::cuda::swapab_launches() - launches0;
    const int took = moekit::cuda::swapab_plain_launches() - plain0;
    EXPECT_GT(launches, 0) << what;
    EXPECT_EQ(took, r.plain ? launches : 0)
        << what << (r.plain ? ": the plain kernel did not run it" : ": the plain kernel ran a call it does not fit");
    expect_same_bits(plain, run_with_env(r.c, "MOEKIT_SWAPAB_PLAIN", "0"),
                     what + ": the plain kernel differs bitwise from the general one");
  }
  moekit::testing::run_gemm_case(runs.front().c, [&](const GroupedGemmParams& p, cudaStream_t stream) {
    moekit::testing::expect_bad_switch_throws(
        "MOEKIT_SWAPAB_PLAIN", [&] { moekit::cuda::launch_grouped_gemm_swapab_sm90(p, stream, 1, 0); });
    moekit::cuda::launch_grouped_gemm_swapab_sm90(p, stream, 1, 0);
  });
}

// Small calls on the kPlain kernels for compute-sanitizer (gpu_check.sh's memcheck and racecheck
// filters): GEMM1 bf16 and fp8_per_tensor, GEMM2 bf16 and fp8_per_tensor with biases, 16 rows in all.
TEST(Sm90SwapAbGemm, PlainSmallForSanitizers) {
  SKIP_WITHOUT_SM90();
  int seed = 200;
  for (Case c : {gemm1(Scheme::kBf16, 128, 256), gemm1(Scheme::kFp8PerTensor, 128, 512), gemm2(Scheme::kBf16, 128, 256),
                 gemm2(Scheme::kFp8PerTensor, 128, 512)}) {
    c.rows = {0, 1, 5, 3, 4, 3};
    c.extra_rows = 0;
    c.split_k = 1;
    c.bias = !c.gate_up();
    c.seed = ++seed;
    const int plain0 = moekit::cuda::swapab_plain_launches();
    run_case(c);
    EXPECT_EQ(moekit::cuda::swapab_plain_launches() - plain0, 1) << c.describe() << ": not on the plain kernel";
  }
}

TEST(Sm90SwapAbGemm, DeclinesUnalignedPitch) {
  // GEMM1 reads w13 through TMA: rows of K = 360 fp8 bytes are not a multiple of 16 (TMA's
  // stride rule). GEMM2 takes rows of 8 bytes (above) but not of 4, and not fp8_block128.
  GroupedGemmParams p;
  p.scheme = Scheme::kFp8PerTensor;
  p.epilogue = GemmEpilogue::kGateUpActivation;
  p.num_experts = 4;
  p.n_out = 2880;
  p.k_dim = 360;
  std::string why;
  EXPECT_FALSE(moekit::cuda::can_implement_swapab_sm90(p, &why));
  EXPECT_NE(why.find("multiple of 16"), std::string::npos) << why;
  // Launching it anyway is an error, not a crash.
  p.max_rows = 8;
  EXPECT_THROW(moekit::cuda::launch_grouped_gemm_swapab_sm90(p, nullptr), moekit::Error);
  p.max_rows = 0;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.k_dim = 356;
  EXPECT_FALSE(moekit::cuda::can_implement_swapab_sm90(p, &why));
  EXPECT_NE(why.find("multiple of 8"), std::string::npos) << why;
  p.k_dim = 360;
  p.scheme = Scheme::kFp8Block128;
  EXPECT_FALSE(moekit::cuda::can_implement_swapab_sm90(p, &why));
  EXPECT_NE(why.find("multiple of 16"), std::string::npos) << why;
}

}  // namespace
