// GPU tests of the sm_90 grouped expert GEMMs (src/cuda/kernels/mma/): small random
// problems for every scheme and both epilogues against a double-precision host loop of
// docs/design.md's formulas, with NaN-poisoned outputs (every owned element must be written,
// nothing else may be); the shared harness tests/common/gemm_harness.hpp builds, runs and checks
// each case. Skipped without an sm_90 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/gemm_harness.hpp"
#include "moekit/error.hpp"

namespace {

using moekit::Activation;
using moekit::DType;
using moekit::Scheme;
using moekit::cuda::GemmEpilogue;
using moekit::cuda::GroupedGemmParams;

// One grouped GEMM problem (tests/common/gemm_harness.hpp).
using Spec = moekit::testing::GemmCase;

Spec gate_up(Scheme scheme, std::int64_t N, std::int64_t K, Activation act, DType out) {
  Spec s;
  s.scheme = scheme;
  s.epilogue = GemmEpilogue::kGateUpActivation;
  s.rows = {0, 1, 7, 65, 130, 0, 3};
  s.extra_rows = 5;
  s.N = N;
  s.K = K;
  s.act = act;
  s.out_dtype = out;
  return s;
}

// GEMM2: K_out output columns (the hidden size), N_in the reduction (the intermediate size).
Spec down(Scheme scheme, std::int64_t K_out, std::int64_t N_in) {
  Spec s;
  s.scheme = scheme;
  s.epilogue = GemmEpilogue::kBiasWeightScatter;
  s.rows = {0, 1, 7, 65, 130, 0, 3};
  s.extra_rows = 5;
  s.K = K_out;
  s.N = N_in;
  s.out_dtype = DType::kFp32;
  return s;
}

// Runs `s` on the mma.sync grouped GEMM (optionally replayed through a CUDA graph) and checks it.
void check(Spec s, bool graph = false) {
  s.graph_replay = graph;
  moekit::testing::run_gemm_case(s, [](const GroupedGemmParams& p, cudaStream_t stream) {
    moekit::cuda::launch_grouped_gemm(p, stream);
  });
}

// ---------------------------------------------------------------------------------------------

TEST(Sm90GroupedGemm, Bf16GateUpSiluMatchesReference) {
  SKIP_WITHOUT_SM90();
  check(gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16));
}

TEST(Sm90GroupedGemm, Fp16GateUpGeluBiasMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 72, 200, Activation::kGelu, DType::kFp16);
  s.act_dtype = DType::kFp16;
  s.bias = true;
  s.bias_dtype = DType::kFp16;
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpSwigluOaiWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 136, 264, Activation::kSwigluOai, DType::kBf16);
  s.bias = true;
  s.bias_dtype = DType::kBf16;
  s.weight_on_input = true;
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpFp32OutLargeKMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 7168, Activation::kSilu, DType::kFp32);
  s.rows = {1, 65, 0};
  check(s);
}

TEST(Sm90GroupedGemm, Bf16GateUpManyExpertsMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 64, 128, Activation::kSilu, DType::kBf16);
  s.rows.clear();
  std::mt19937 rng(7);
  for (int e = 0; e < 77; ++e) s.rows.push_back(static_cast<int>(rng() % 5 == 0 ? 0 : rng() % 70));
  check(s);
}

TEST(Sm90GroupedGemm, Bf16DownScatterBiasMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kBf16, 200, 96);
  s.bias = true;
  check(s, /*graph=*/true);
}

TEST(Sm90GroupedGemm, Bf16DownScatterWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kBf16, 130, 136);
  s.weight_on_input = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerTensorGateUpSiluMatchesReference) {
  SKIP_WITHOUT_SM90();
  check(gate_up(Scheme::kFp8PerTensor, 96, 384, Activation::kSilu, DType::kFp32));
}

TEST(Sm90GroupedGemm, Fp8PerChannelGateUpGeluWeightOnInputMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kFp8PerChannel, 104, 272, Activation::kGelu, DType::kFp32);
  s.weight_on_input = true;
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8Block128GateUpSiluN360MatchesReference) {
  SKIP_WITHOUT_SM90();
  // N = 360: the up rows N + n straddle 128-row scale blocks; K = 392: a partial last group.
  Spec s = gate_up(Scheme::kFp8Block128, 360, 392, Activation::kSilu, DType::kFp32);
  s.bias = true;
  s.bias_dtype = DType::kBf16;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8Block128GateUpSwigluOaiK2880MatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kFp8Block128, 96, 2880, Activation::kSwigluOai, DType::kFp32);
  s.rows = {1, 65, 0, 2};
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerTensorDownScatterPitch360MatchesReference) {
  SKIP_WITHOUT_SM90();
  check(down(Scheme::kFp8PerTensor, 256, 360), /*graph=*/true);  // 360-byte rows: 8-byte loads
}

TEST(Sm90GroupedGemm, Fp8Block128DownScatterMatchesReference) {
  SKIP_WITHOUT_SM90();
  Spec s = down(Scheme::kFp8Block128, 200, 360);
  s.bias = true;
  check(s);
}

TEST(Sm90GroupedGemm, Fp8PerChannelDownScatterPitch108MatchesReference) {
  SKIP_WITHOUT_SM90();
  check(down(Scheme::kFp8PerChannel, 64, 108));  // 108-byte rows: 4-byte loads
}

TEST(Sm90GroupedGemm, NanInOneTokenStaysInItsRows) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16);
  s.nan_a_row = 3;
  check(s);
  Spec f = gate_up(Scheme::kFp8Block128, 96, 256, Activation::kSilu, DType::kFp32);
  f.nan_a_row = 5;
  check(f);
  Spec d = down(Scheme::kFp8PerChannel, 128, 96);
  d.nan_a_row = 70;
  check(d);
}

// out_absmax (GEMM1 of fp8_per_tensor, fp32 out; the fused quant(h) of backend.cu): the word is
// the absmax of exactly what the epilogue stored: tail row tiles (1, 7, 65, 130 rows in 64-row
// tiles, 5 rows past the last one in max_rows), tail column tiles (N = 96, 208 in 64-column
// tiles), a NaN token (its rows never win), a bias with weight_on_input, a graph replay.
TEST(Sm90GroupedGemm, Fp8PerTensorOutAbsmaxIsTheStoredAbsmax) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t N : {96, 208}) {
    Spec s = gate_up(Scheme::kFp8PerTensor, N, 256, Activation::kSilu, DType::kFp32);
    s.out_absmax = true;
    check(s);
    s.nan_a_row = 3;
    s.seed = 2;
    check(s);
  }
  Spec s = gate_up(Scheme::kFp8PerTensor, 360, 2880, Activation::kSwigluOai, DType::kFp32);
  s.out_absmax = true;
  s.bias = true;
  s.weight_on_input = true;
  s.seed = 3;
  check(s, /*graph=*/true);
}

TEST(Sm90GroupedGemm, EmptyExpertsWriteNothing) {
  SKIP_WITHOUT_SM90();
  Spec s = gate_up(Scheme::kBf16, 96, 256, Activation::kSilu, DType::kBf16);
  s.rows = {0, 0, 0};
  s.extra_rows = 10;
  check(s);
  Spec d = down(Scheme::kFp8Block128, 128, 256);
  d.rows = {0, 0};
  d.extra_rows = 3;
  check(d);
}

// Argument checks run before any CUDA call: no GPU needed.
TEST(Sm90GroupedGemm, RejectsBadArguments) {
  static std::int32_t offsets[2] = {0, 1};
  static float scale = 1.f;
  static std::uint8_t data[64];
  GroupedGemmParams good;
  good.num_experts = 1;
  good.n_out = 8;
  good.k_dim = 16;
  good.max_rows = 1;
  good.row_offsets = offsets;
  good.sorted_slots = offsets;
  good.a = data;
  good.b = data;
  good.topk_weights = &scale;
  good.out = data;
  good.out_dtype = DType::kBf16;

  auto expect_status = [](const GroupedGemmParams& p, moekit::Status status) {
    try {
      moekit::cuda::launch_grouped_gemm(p, nullptr);
      ADD_FAILURE() << "no error";
    } catch (const moekit::Error& e) {
      EXPECT_EQ(e.status(), status) << e.what();
    }
  };
  GroupedGemmParams p = good;
  p.n_out = 7;
  expect_status(p, moekit::Status::kNotSupported);
  p = good;
  p.act_dtype = DType::kFp32;
  expect_status(p, moekit::Status::kInvalidArgument);
  p = good;
  p.scheme = Scheme::kFp8Block128;
  expect_status(p, moekit::Status::kInvalidArgument);  // no scales
  p = good;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  expect_status(p, moekit::Status::kInvalidArgument);  // bf16 out for GEMM2
  p = good;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  p.out_dtype = DType::kFp32;
  p.sorted_slots = nullptr;
  expect_status(p, moekit::Status::kInvalidArgument);
  p = good;
  p.scheme = Scheme::kFp8PerTensor;
  p.a_scale = &scale;
  p.b_scale = &scale;
  p.k_dim = 6;  // 6-byte fp8 rows
  expect_status(p, moekit::Status::kNotSupported);
  p = good;
  p.num_experts = 0;
  expect_status(p, moekit::Status::kInvalidArgument);
  // out_absmax: GEMM1 of fp8_per_tensor with fp32 out only.
  static std::uint32_t word = 0;
  p = good;
  p.out_absmax = &word;
  expect_status(p, moekit::Status::kInvalidArgument);  // bf16 scheme
  p.scheme = Scheme::kFp8PerTensor;
  p.a_scale = &scale;
  p.b_scale = &scale;
  expect_status(p, moekit::Status::kInvalidArgument);  // bf16 out
  p.out_dtype = DType::kFp32;
  p.epilogue = GemmEpilogue::kBiasWeightScatter;
  expect_status(p, moekit::Status::kInvalidArgument);  // GEMM2
  // Nothing to do is not an error, whatever the pointers.
  GroupedGemmParams empty;
  empty.num_experts = 4;
  EXPECT_NO_THROW(moekit::cuda::launch_grouped_gemm(empty, nullptr));
}

}  // namespace
