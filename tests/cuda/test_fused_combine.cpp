// The combine folded into token-major GEMM2 (GroupedGemmParams::combine_*; docs/design.md step 6):
// on the ping-pong consumers (decode-sized, K-short GEMM2) each token's k y rows are summed in j
// order by the warp whose count completes the token's column tile, as the combine kernel sums
// them, so the output must be bitwise the combine launch's (MOEKIT_FUSED_COMBINE=0) and every row
// written (outputs NaN-poisoned first), tokens with no local slot included (zeros). Each case
// also checks that the fused form really ran (cuda::chain_combine_was_fused), so that the
// equality cannot hold by both sides taking the launch. Label gpu; skipped without a Hopper GPU.
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
#include "cuda/kernels/combine/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

constexpr std::uint16_t kPoison = 0xffff;  // DeviceCase::run memsets out to 0xff bytes: a 16-bit NaN

// For both call modes and each M: the token-major path's output with the fused combine off and
// on, bitwise equal and fully written; the fused form must have run at every call (the shapes are
// chosen so that GEMM2 takes the ping-pong consumers: K-short, at most 64 rows an expert). The
// calls share one workspace, so a count left over from the call before would show.
void check_fused_combine(const CaseSpec& spec, std::initializer_list<std::int64_t> Ms) {
  const MoeCase c = make_case(spec);
  DeviceCase d(c);
  int fused = 0, calls = 0;
  for (CallMode mode : {CallMode::kFusedExperts, CallMode::kFusedMoe})
    for (std::int64_t M : Ms) {
      if (M > spec.M) continue;
      SCOPED_TRACE(spec.name() + " " + call_mode_name(mode) + " M=" + std::to_string(M));
      try {
        std::vector<std::uint16_t> launched, folded;
        {
          ScopedEnv off("MOEKIT_FUSED_COMBINE", "0");
          launched = d.run(M, mode, "tokmajor");
          ASSERT_FALSE(cuda::chain_combine_was_fused()) << "MOEKIT_FUSED_COMBINE=0 still folded the combine";
        }
        {
          ScopedEnv on("MOEKIT_FUSED_COMBINE", "1");
          folded = d.run(M, mode, "tokmajor");
          fused += cuda::chain_combine_was_fused() ? 1 : 0;
          ++calls;
        }
        ASSERT_EQ(0, std::count(launched.begin(), launched.end(), kPoison)) << "combine launch: out not written";
        ASSERT_EQ(0, std::count(folded.begin(), folded.end(), kPoison)) << "fused combine: out not written";
        EXPECT_TRUE(folded == launched) << "the fused combine changed the output";
      } catch (const Error& e) {
        ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
      }
    }
  EXPECT_EQ(fused, calls) << spec.name() << ": the fused combine ran at " << fused << " of " << calls << " calls";
}

CaseSpec spec_of(std::int64_t E, std::int64_t k, std::int64_t K, std::int64_t N, Scheme scheme, std::uint64_t seed) {
  CaseSpec s;
  s.M = 200;
  s.E = E;
  s.k = k;
  s.K = K;
  s.N = N;
  s.scheme = scheme;
  s.seed = seed;
  return s;
}

// qwen3-30b's TP8 shard shrunk (k = 8, N = 96: one or two K stages in GEMM2), bf16 and fp8 with
// dynamic scales; K = 1000 / 1008: a last column tile of 232 / 240 columns (fp8's token-major
// GEMM1 needs 16-byte rows). M up to 200 (<= 64 rows an expert); 480 tokens on 64 experts.
TEST(Sm90FusedCombine, BitwiseEqualToCombineLaunch) {
  SKIP_WITHOUT_SM90();
  check_fused_combine(spec_of(32, 8, 1024, 96, Scheme::kBf16, 51), {1, 3, 37, 64, 200});
  check_fused_combine(spec_of(32, 8, 1000, 96, Scheme::kBf16, 57), {5, 200});
  check_fused_combine(spec_of(32, 8, 1008, 96, Scheme::kFp8PerTensor, 52), {1, 5, 64, 200});
  CaseSpec h = spec_of(32, 8, 512, 96, Scheme::kBf16, 53);
  h.act_dtype = DType::kFp16;
  check_fused_combine(h, {2, 37, 128});
  CaseSpec big = spec_of(64, 8, 256, 64, Scheme::kBf16, 58);
  big.M = 480;
  check_fused_combine(big, {480});
}

// Half the global experts remote (expert_map -1): tokens with no local slot (k = 2: a quarter of
// them) must come out as zeros, written by GEMM2 since no slot of theirs counts; with biases and
// swiglu_oai the epilogue's column terms run too; k = E (every token on every expert).
TEST(Sm90FusedCombine, ExpertMapBiasAndKEqualsE) {
  SKIP_WITHOUT_SM90();
  CaseSpec m = spec_of(16, 2, 512, 64, Scheme::kBf16, 54);
  m.expert_map = true;
  check_fused_combine(m, {1, 7, 64, 200});
  CaseSpec b = spec_of(16, 4, 768, 96, Scheme::kFp8PerTensor, 55);
  b.bias = true;
  b.activation.kind = Activation::kSwigluOai;
  check_fused_combine(b, {3, 64});
  CaseSpec all = spec_of(8, 8, 512, 64, Scheme::kBf16, 56);
  check_fused_combine(all, {1, 16, 40});
}

// fp8_per_channel scales (GEMM2's per-column terms) and the router weight applied on the input.
TEST(Sm90FusedCombine, PerChannelAndWeightOnInput) {
  SKIP_WITHOUT_SM90();
  CaseSpec c = spec_of(32, 8, 1024, 96, Scheme::kFp8PerChannel, 59);
  check_fused_combine(c, {4, 64});
  CaseSpec w = spec_of(16, 1, 512, 64, Scheme::kBf16, 60);
  w.weight_on_input = true;
  check_fused_combine(w, {1, 33});
}

// Under CUDA-graph capture: the routing launch zeroes the counts at every replay, so two replays
// of one captured fused call give the eager call's bits, which match the CPU reference. 480
// tokens at k = 8: the multi-CTA permutation's count launch prepares the counts.
TEST(Sm90FusedCombine, GraphReplayEqualsEager) {
  SKIP_WITHOUT_SM90();
  ScopedEnv on("MOEKIT_FUSED_COMBINE", "1");
  for (std::int64_t M : {64, 480}) {
    CaseSpec s = spec_of(64, 8, 512, 64, Scheme::kBf16, 61);
    s.M = M;
    const MoeCase c = make_case(s);
    DeviceCase d(c);
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const std::vector<std::uint16_t> eager = d.run(M, CallMode::kFusedMoe, "tokmajor", stream);
    ASSERT_TRUE(cuda::chain_combine_was_fused()) << "M=" << M << ": the fused combine did not run";
    const auto replays = d.replay_in_graph(M, CallMode::kFusedMoe, "tokmajor", stream, 2);
    ASSERT_EQ(replays.size(), 2u) << "M=" << M;
    ASSERT_TRUE(cuda::chain_combine_was_fused()) << "M=" << M << ": the captured call did not fold the combine";
    for (std::size_t replay = 0; replay < replays.size(); ++replay)
      EXPECT_TRUE(replays[replay] == eager) << "M=" << M << ": graph replay " << replay << " differs from eager";
    cudaStreamDestroy(stream);
    EXPECT_TRUE(rows_match(to_float(eager, s.act_dtype), reference_output(c), s.K, s.scheme, "fused combine, eager"));
  }
}

}  // namespace
}  // namespace moekit::testing
