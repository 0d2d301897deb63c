// The kernel-path router's choice function (src/core/path_router.cpp), host only: deterministic;
// the fused single launch only where it can run and wins (smallest shards, fewest slots); decode
// -> Swap-AB, prefill -> token-major wgmma (mma where token-major cannot run, and between the two
// for small shards); a GEMM Swap-AB or token-major declines falls back per GEMM under auto; split-K
// fills the SMs; forced names ("auto", "mma", "swapab", "tokmajor", "fused") are honoured, unknown
// names and impossible forced paths are errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/scoped_env.hpp"
#include "core/call.hpp"
#include "core/path_router.hpp"
#include "moekit/moekit.hpp"

namespace moekit {
namespace {

using detail::choose_paths;
using detail::GemmImpl;

MoeProblem preset(const char* name, std::int64_t M, int tp, Scheme scheme = Scheme::kBf16) {
  return preset_problem(find_preset(name), M, tp, scheme);
}

TEST(CpuPathRouter, Deterministic) {
  for (const ModelPreset& pr : model_presets())
    for (std::int64_t M : {1, 7, 64, 256, 1000, 4096, 8192})
      for (int tp : {1, 8})
        for (const char* forced : {static_cast<const char*>(nullptr), "auto", "mma", "swapab"}) {
          const MoeProblem p = preset_problem(pr, M, tp, Scheme::kFp8PerTensor);
          const detail::DispatchPlan a = choose_paths(p, 132, forced, true, true);
          const detail::DispatchPlan b = choose_paths(p, 132, forced, true, true);
          EXPECT_EQ(a.describe(), b.describe()) << p.to_string();
          EXPECT_EQ(a.reason, b.reason);
          EXPECT_EQ(a.log_line(p), b.log_line(p));
        }
}

TEST(CpuPathRouter, DecodeTakesSwapabPrefillTakesMma) {
  const detail::DispatchPlan d = choose_paths(preset("qwen3-30b-a3b", 1, 8), 132, nullptr, true, true);
  EXPECT_EQ(d.gemm[0].impl, GemmImpl::kSwapab);
  EXPECT_EQ(d.gemm[1].impl, GemmImpl::kSwapab);
  EXPECT_NEAR(d.tokens_per_expert, 1.0, 1e-9);
  // GEMM1 at TP8: 2 tiles x 8 experts = 16 items on 132 SMs -> split-K over clusters of 8.
  EXPECT_EQ(d.gemm[0].split_k, 8);
  EXPECT_EQ(d.describe(), "gemm1=swapab(split_k=8) gemm2=swapab");
  EXPECT_EQ(d.requested, "auto");

  const detail::DispatchPlan m = choose_paths(preset("mixtral-8x7b", 1, 1), 132, nullptr, true, true);
  EXPECT_EQ(m.gemm[0].impl, GemmImpl::kSwapab);
  EXPECT_EQ(m.gemm[1].impl, GemmImpl::kSwapab);

  // bf16 prefill runs token-major.
  for (const char* name : {"qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"}) {
    const detail::DispatchPlan pf = choose_paths(preset(name, 4096, 1), 132, nullptr, true, true);
    EXPECT_EQ(pf.describe(), "gemm1=mma gemm2=mma") << name << ": " << pf.reason;
    EXPECT_GT(pf.tokens_per_expert, detail::kRouterTable.swapab_max_tokens_per_expert_bf16);
  }
  // The bf16 crossover follows tokens per expert, not M alone (measured: mixtral (E = 8, k = 2)
  // between M = 64 and 256, qwen3-30b (E = 128, k = 8) between M = 256 and 1024).
  auto gemm1 = [](const char* name, std::int64_t M, int tp, Scheme s = Scheme::kBf16) {
    return choose_paths(preset(name, M, tp, s), 132, nullptr, true, true).gemm[0].impl;
  };
  EXPECT_EQ(gemm1("mixtral-8x7b", 64, 1), GemmImpl::kSwapab);
  EXPECT_EQ(gemm1("mixtral-8x7b", 256, 1), GemmImpl::kMma);
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 256, 1), GemmImpl::kSwapab);
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 1024, 1), GemmImpl::kMma);
  // Small shards: qwen3-30b at TP8 (N = 96) keeps Swap-AB for 32 slots (M = 4), not for 128.
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 4, 8), GemmImpl::kSwapab);
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 16, 8), GemmImpl::kMma);
  // fp8 crosses at 24 tokens/expert (48 until session 21).
  EXPECT_EQ(gemm1("mixtral-8x7b", 64, 1, Scheme::kFp8PerTensor), GemmImpl::kSwapab);
  EXPECT_EQ(gemm1("mixtral-8x7b", 4096, 1, Scheme::kFp8PerTensor), GemmImpl::kMma);
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 256, 1, Scheme::kFp8PerTensor), GemmImpl::kSwapab);
  EXPECT_EQ(gemm1("qwen3-30b-a3b", 1024, 1, Scheme::kFp8PerTensor), GemmImpl::kMma);
}

TEST(CpuPathRouter, AutoFallsBackPerGemm) {
  // gpt-oss TP8 fp8: w2 rows of N = 360 bytes are not a multiple of 16, Swap-AB declines GEMM2.
  const MoeProblem p = preset("gpt-oss-120b", 1, 8, Scheme::kFp8PerTensor);
  detail::RouterInputs in;
  in.swapab_ok[1] = false;
  in.swapab_why[1] = "k_dim = 360 gives a 360-byte row pitch";
  const detail::DispatchPlan plan = choose_paths(p, in);
  EXPECT_EQ(plan.gemm[0].impl, GemmImpl::kSwapab);
  EXPECT_EQ(plan.gemm[1].impl, GemmImpl::kMma);
  EXPECT_EQ(plan.gemm[1].split_k, 0);
  EXPECT_NE(plan.reason.find("360-byte"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.log_line(p).find(p.to_string()), std::string::npos);
  EXPECT_NE(plan.log_line(p).find("gemm2=mma"), std::string::npos);
}

TEST(CpuPathRouter, ForcedNames) {
  const MoeProblem decode = preset("qwen3-30b-a3b", 1, 8);
  const MoeProblem prefill = preset("qwen3-30b-a3b", 8192, 1);
  for (const MoeProblem& p : {decode, prefill}) {
    EXPECT_EQ(choose_paths(p, 132, "mma", true, true).describe(), "gemm1=mma gemm2=mma");
    const detail::DispatchPlan s = choose_paths(p, 132, "swapab", true, true);
    EXPECT_EQ(s.gemm[0].impl, GemmImpl::kSwapab);
    EXPECT_EQ(s.gemm[1].impl, GemmImpl::kSwapab);
    EXPECT_EQ(s.requested, "swapab");
    EXPECT_EQ(choose_paths(p, 132, "auto", true, true).describe(), choose_paths(p, 132, nullptr, true, true).describe());
    EXPECT_EQ(choose_paths(p, 132, "", true, true).describe(), choose_paths(p, 132, nullptr, true, true).describe());
  }
  // mma is never refused by the router (its own launcher checks its limits).
  EXPECT_NO_THROW(choose_paths(decode, 132, "mma", false, false));
}

TEST(CpuPathRouter, UnknownNameListsTheNames) {
  const MoeProblem p = preset("qwen3-30b-a3b", 1, 8);
  for (const char* bad : {"swap_ab", "token_major", "MMA", "cuda"}) {
    try {
      choose_paths(p, 132, bad, true, true);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << bad;
      const std::string msg = e.what();
      EXPECT_NE(msg.find(bad), std::string::npos) << msg;
      for (const char* name : detail::kPathNames) EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
}

TEST(CpuPathRouter, ForcedPathThatCannotRunIsNotSupported) {
  const MoeProblem p = preset("gpt-oss-120b", 1, 8, Scheme::kFp8PerTensor);
  detail::RouterInputs in;
  in.forced = "swapab";
  in.swapab_ok[1] = false;
  in.swapab_why[1] = "k_dim = 360 gives a 360-byte row pitch";
  try {
    choose_paths(p, in);
    ADD_FAILURE() << "forced swapab ran a GEMM it cannot implement";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("GEMM2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("360-byte"), std::string::npos) << msg;
  }
  // The single-launch fused path is a known name, not built yet: kNotSupported, not a fallback.
  try {
    choose_paths(p, 132, "fused", true, true);
    ADD_FAILURE() << "forced fused did not refuse";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
  }
  in.forced = "fused";
  in.fused_ok = true;
  EXPECT_EQ(choose_paths(p, in).describe(), "fused");
}

TEST(CpuPathRouter, DecodePathWhereTheSweepMeasuredItWinning) {
  // bench/results/2026-12-01-6434031-h200-decode-cluster-ab.json against the grid at 875d60a:
  // decode won the smallest TP8 shards at the fewest slots (N < 128 up to 512 slots, N < 320 up
  // to 32, N < 512 up to 8), lost or tied elsewhere; bf16 on N < 320 up to 128 slots since session
  // 20 (deepseek-v3 TP8 M = 16, 86c683c's sweep).
  detail::RouterInputs in;
  const MoeProblem tiny = preset("qwen3-30b-a3b", 32, 8);    // N = 96, 256 slots (512 until session 46)
  const MoeProblem tiny_more = preset("qwen3-30b-a3b", 33, 8);  // 264 slots
  const MoeProblem small = preset("deepseek-v3", 16, 8);      // N = 256, 128 slots
  const MoeProblem small_more = preset("deepseek-v3", 17, 8);  // 136 slots
  const MoeProblem mid = preset("gpt-oss-120b", 2, 8);      // N = 360, 8 slots
  const MoeProblem mid_more = preset("gpt-oss-120b", 3, 8); // 12 slots
  const MoeProblem tp1 = preset("qwen3-30b-a3b", 1, 1);     // N = 768
  EXPECT_FALSE(choose_paths(tiny, in).decode);  // decode_ok is false by default (not built)
  in.decode_ok = true;
  in.fused_ok = true;
  EXPECT_TRUE(choose_paths(tiny, in).decode);
  EXPECT_FALSE(choose_paths(tiny, in).fused);  // decode replaces the fused launch there
  EXPECT_EQ(choose_paths(tiny, in).describe(), "decode");
  EXPECT_NE(choose_paths(tiny, in).log_line(tiny).find("-> decode |"), std::string::npos);
  EXPECT_FALSE(choose_paths(tiny_more, in).decode);
  EXPECT_TRUE(choose_paths(small, in).decode);
  EXPECT_FALSE(choose_paths(small_more, in).decode);
  // fp8_per_tensor (the split call): N < 128 up to 128 slots, N < 320 up to 32.
  const Scheme f8 = Scheme::kFp8PerTensor;
  const MoeProblem fp8_tiny = preset("qwen3-30b-a3b", 16, 8, f8), fp8_tiny_more = preset("qwen3-30b-a3b", 17, 8, f8);
  const MoeProblem fp8_small = preset("deepseek-v3", 4, 8, f8), fp8_small_more = preset("deepseek-v3", 5, 8, f8);
  EXPECT_TRUE(choose_paths(fp8_tiny, in).decode);
  EXPECT_FALSE(choose_paths(fp8_tiny_more, in).decode);
  EXPECT_TRUE(choose_paths(fp8_small, in).decode);
  EXPECT_FALSE(choose_paths(fp8_small_more, in).decode);
  // fp8_block128 (one launch; session 27's sweep): N < 128 up to 1024 slots, N < 320 up to 8.
  const Scheme b128 = Scheme::kFp8Block128;
  EXPECT_TRUE(choose_paths(preset("qwen3-30b-a3b", 128, 8, b128), in).decode);
  EXPECT_FALSE(choose_paths(preset("qwen3-30b-a3b", 129, 8, b128), in).decode);
  EXPECT_TRUE(choose_paths(preset("deepseek-v3", 1, 8, b128), in).decode);
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 2, 8, b128), in).decode);
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 1, 8, b128), in).decode);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 2, 8, b128), in).decode);
  EXPECT_TRUE(choose_paths(mid, in).decode);
  EXPECT_FALSE(choose_paths(mid_more, in).decode);
  EXPECT_FALSE(choose_paths(tp1, in).decode);
  // fp8_per_channel (session 28's sweep): qwen3-30b TP8 (N < 128) from 8 tokens (gemv(mma) keeps
  // 1..4) up to 512 slots, mixtral TP8 (N < 2048) at 2 slots where gemv(mma) cannot run it (it
  // takes mixtral first since session 39); not deepseek-v3 / qwen3-235b.
  {
    const Scheme pc = Scheme::kFp8PerChannel;
    detail::RouterInputs ci = in;
    ci.gemv_mma_ok = true;  // the tensor-core GEMV kernel runs per channel (the CUDA-core one does not)
    const auto plan = [&](const char* name, std::int64_t M) { return choose_paths(preset(name, M, 8, pc), ci); };
    EXPECT_TRUE(plan("qwen3-30b-a3b", 4).gemv);
    EXPECT_FALSE(plan("qwen3-30b-a3b", 4).decode);
    EXPECT_TRUE(plan("qwen3-30b-a3b", 5).decode);
    EXPECT_TRUE(plan("qwen3-30b-a3b", 64).decode);
    EXPECT_FALSE(plan("qwen3-30b-a3b", 65).decode);
    EXPECT_TRUE(plan("deepseek-v3", 1).gemv);
    EXPECT_FALSE(plan("deepseek-v3", 32).decode);
    EXPECT_FALSE(plan("qwen3-235b-a22b", 32).decode);
    EXPECT_TRUE(plan("mixtral-8x7b", 1).gemv_mma());
    EXPECT_FALSE(plan("mixtral-8x7b", 2).decode);
    {
      detail::RouterInputs no_mma = ci;
      no_mma.gemv_mma_ok = false;
      EXPECT_TRUE(choose_paths(preset("mixtral-8x7b", 1, 8, pc), no_mma).decode);
      EXPECT_FALSE(choose_paths(preset("mixtral-8x7b", 2, 8, pc), no_mma).decode);
    }
    EXPECT_FALSE(choose_paths(preset("mixtral-8x7b", 1, 1, pc), ci).decode);  // TP1: N = 14336
    EXPECT_FALSE(choose_paths(preset("mixtral-8x7b", 1, 8, Scheme::kFp8PerTensor), ci).decode);  // per channel only
    // More slots than decode's own rule takes (k = 80 at M = 8: 640 > 512): gemv(mma) keeps the
    // call rather than a chain.
    MoeProblem many = preset("qwen3-30b-a3b", 8, 8, pc);
    many.top_k = 80;
    EXPECT_TRUE(choose_paths(many, ci).gemv);
    ci.decode_in_auto = false;  // MOEKIT_DECODE=0: the GEMV rule as before
    EXPECT_TRUE(plan("qwen3-30b-a3b", 8).gemv);
  }
  in.decode_in_auto = false;  // MOEKIT_DECODE=0
  EXPECT_FALSE(choose_paths(tiny, in).decode);
  in.forced = "decode";  // forcing works either way
  EXPECT_TRUE(choose_paths(tp1, in).decode);
  in.decode_ok = false;
  in.decode_why = "decode_sm90: M*k = 8192 slots > 4096 (every CTA routes the call in shared memory)";
  try {
    choose_paths(tp1, in);
    ADD_FAILURE() << "forced decode that cannot run did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("8192 slots"), std::string::npos) << e.what();
  }
}

TEST(CpuPathRouter, MayTakeDecodeOnlyForAutoOrDecodeOrGemv) {
  // plan_call's decode-first pass runs for these requests only; the names are choose_paths'.
  EXPECT_TRUE(detail::may_take_decode(nullptr));
  EXPECT_TRUE(detail::may_take_decode(""));
  EXPECT_TRUE(detail::may_take_decode("auto"));
  EXPECT_TRUE(detail::may_take_decode("decode"));
  EXPECT_TRUE(detail::may_take_decode("gemv"));
  for (const char* other : {"mma", "swapab", "fused", "tokmajor"}) EXPECT_FALSE(detail::may_take_decode(other)) << other;
  EXPECT_THROW(detail::may_take_decode("decoder"), Error);
}

TEST(CpuPathRouter, DecodeReadsNoOtherAnswer) {
  // The CUDA backend asks the GEMM and fused can_implement only when the plan is not decode
  // (plan_call): whether the plan is decode, and its reason, must not depend on those answers.
  for (const ModelPreset& pr : model_presets())
    for (std::int64_t M : {1, 2, 4, 8, 16, 32, 64, 128, 512})
      for (int tp : {1, 8})
        for (Scheme s : {Scheme::kBf16, Scheme::kFp8PerTensor})
          for (const char* forced : {static_cast<const char*>(nullptr), "auto", "decode", "gemv"}) {
            const MoeProblem p = preset_problem(pr, M, tp, s);
            detail::RouterInputs none;  // the defaults plan_call's first pass runs with
            none.forced = forced;
            none.decode_ok = true;
            none.gemv_cuda_ok = true;
            detail::RouterInputs all = none;
            all.swapab_ok[0] = all.swapab_ok[1] = all.tokmajor_ok[0] = all.tokmajor_ok[1] = all.fused_ok = true;
            detail::RouterInputs declined = none;
            declined.swapab_ok[0] = declined.swapab_ok[1] = false;
            declined.swapab_why[0] = declined.swapab_why[1] = declined.tokmajor_why[0] = "not in this test";
            declined.tokmajor_why[1] = declined.fused_why = "not in this test";
            const detail::DispatchPlan a = choose_paths(p, none);
            for (const detail::RouterInputs* in : {&all, &declined}) {
              const detail::DispatchPlan b = choose_paths(p, *in);
              ASSERT_EQ(a.decode, b.decode) << p.to_string();
              ASSERT_EQ(a.gemv, b.gemv) << p.to_string();
              if (a.decode || a.gemv) EXPECT_EQ(a.log_line(p), b.log_line(p));
            }
          }
}

TEST(CpuPathRouter, GemvFirstWhereItWonWhenItCanRun) {
  // Measured (kRouterTable's comment): bf16 up to 4 tokens and 32 slots, fp8 up to 2 tokens and
  // 16 slots on experts of at most 4 M weights a matrix.
  const MoeProblem q1 = preset("qwen3-30b-a3b", 1, 8);
  const MoeProblem q4 = preset("qwen3-30b-a3b", 4, 8);   // 32 slots
  const MoeProblem q8 = preset("qwen3-30b-a3b", 8, 8);   // 64 slots
  const MoeProblem m8 = preset("mixtral-8x7b", 8, 8);    // 16 slots, but 8 tokens
  const MoeProblem f2 = preset("qwen3-30b-a3b", 2, 8, Scheme::kFp8PerTensor);
  const MoeProblem f4 = preset("qwen3-30b-a3b", 4, 8, Scheme::kFp8PerTensor);
  const MoeProblem fm = preset("mixtral-8x7b", 1, 8, Scheme::kFp8PerTensor);  // N x K = 7.3 M
  const MoeProblem ft = preset("qwen3-30b-a3b", 1, 1, Scheme::kFp8PerTensor);  // TP1: 1.6 M
  detail::RouterInputs in;
  in.decode_ok = true;
  EXPECT_FALSE(choose_paths(q1, in).gemv);  // neither kernel can run it by default (not built)
  in.gemv_cuda_ok = true;
  const bool on = detail::kRouterTable.gemv_in_auto;
  EXPECT_EQ(choose_paths(q1, in).gemv, on);
  EXPECT_EQ(choose_paths(q4, in).gemv, on);
  EXPECT_FALSE(choose_paths(q8, in).gemv);
  EXPECT_FALSE(choose_paths(m8, in).gemv);
  EXPECT_EQ(choose_paths(f2, in).gemv, on);
  EXPECT_FALSE(choose_paths(f4, in).gemv);
  EXPECT_FALSE(choose_paths(fm, in).gemv);
  EXPECT_EQ(choose_paths(ft, in).gemv, on);
  if (on) {
    EXPECT_FALSE(choose_paths(q1, in).decode);  // gemv comes before decode
    EXPECT_EQ(choose_paths(q1, in).describe(), "gemv");
    EXPECT_NE(choose_paths(q1, in).log_line(q1).find("-> gemv |"), std::string::npos);
  }
  in.gemv_in_auto = false;  // MOEKIT_GEMV=0
  EXPECT_FALSE(choose_paths(q1, in).gemv);
  in.forced = "gemv";  // forcing works either way
  EXPECT_TRUE(choose_paths(q8, in).gemv);
  in.gemv_cuda_ok = false;
  in.gemv_why = "gemv_sm90: scheme fp8_block128 is not supported";
  try {
    choose_paths(q8, in);
    ADD_FAILURE() << "forced gemv that cannot run did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("fp8_block128"), std::string::npos) << e.what();
  }
}

TEST(CpuPathRouter, GemvTensorCoreKernelWhereItWon) {
  // Measured (kRouterTable's gemv_mma comment): TP8 bf16 M = 8, 16 on N < 512, fp8 M <= 16 on
  // N < 512 but qwen3-30b M = 1 (M <= 2 until session 20; fp8_per_channel from M = 1) and
  // deepseek-v3 past 4 tokens,
  // mixtral TP8 (8 experts) up to 8 tokens (9 in fp8_per_channel, 1 in fp8_per_tensor); at TP1 fp8_per_tensor only, at one token
  // (a few on the smallest experts) since session 39.
  detail::RouterInputs in;
  in.decode_ok = in.gemv_cuda_ok = in.gemv_mma_ok = true;
  const bool on = detail::kRouterTable.gemv_in_auto && detail::kRouterTable.gemv_mma_in_auto;
  auto mma = [&in](const char* preset_name, std::int64_t M, int tp, Scheme s) {
    const detail::DispatchPlan plan = choose_paths(preset(preset_name, M, tp, s), in);
    return plan.gemv_mma();
  };
  const Scheme bf = Scheme::kBf16, f8 = Scheme::kFp8PerTensor;
  EXPECT_EQ(mma("qwen3-30b-a3b", 8, 8, bf), on);
  EXPECT_EQ(mma("qwen3-235b-a22b", 16, 8, bf), on);
  EXPECT_EQ(mma("gpt-oss-120b", 8, 8, bf), on);
  EXPECT_EQ(mma("mixtral-8x7b", 8, 8, bf), on);
  EXPECT_EQ(mma("mixtral-8x7b", 4, 8, bf), on);
  EXPECT_FALSE(mma("mixtral-8x7b", 16, 8, bf));  // ties: left to the chain (token-major since session 20)
  EXPECT_FALSE(mma("qwen3-30b-a3b", 4, 8, bf));  // the CUDA-core kernel's
  EXPECT_EQ(mma("qwen3-30b-a3b", 20, 8, bf), on);  // the smallest shard experts up to 20 tokens (session 37)
  EXPECT_FALSE(mma("qwen3-30b-a3b", 21, 8, bf));
  EXPECT_FALSE(mma("qwen3-30b-a3b", 32, 8, bf));
  EXPECT_FALSE(mma("qwen3-235b-a22b", 17, 8, bf));
  EXPECT_FALSE(mma("qwen3-30b-a3b", 8, 1, bf));  // TP1
  EXPECT_EQ(mma("deepseek-v3", 1, 8, f8), on);
  EXPECT_EQ(mma("deepseek-v3", 4, 8, f8), on);
  EXPECT_EQ(mma("deepseek-v3", 8, 8, f8), on);  // up to 16 tokens again since session 37
  EXPECT_EQ(mma("deepseek-v3", 16, 8, f8), on);
  EXPECT_FALSE(mma("deepseek-v3", 17, 8, f8));
  EXPECT_EQ(mma("deepseek-v3", 8, 8, bf), on);  // bf16 keeps it
  EXPECT_EQ(mma("gpt-oss-120b", 8, 8, f8), on);
  EXPECT_FALSE(mma("gpt-oss-120b", 16, 8, f8));  // Swap-AB past 8 tokens on experts of >= 1 M weights (session 26)
  EXPECT_FALSE(mma("gpt-oss-120b", 16, 8, bf));
  EXPECT_EQ(mma("qwen3-235b-a22b", 16, 8, f8), on);
  EXPECT_EQ(mma("qwen3-30b-a3b", 4, 8, f8), on);
  EXPECT_EQ(mma("mixtral-8x7b", 1, 8, f8), on);
  EXPECT_FALSE(mma("qwen3-30b-a3b", 1, 8, f8));  // the CUDA-core kernel's
  EXPECT_EQ(mma("qwen3-30b-a3b", 2, 8, f8), on);  // since session 20 (86c683c's sweep)
  EXPECT_FALSE(mma("mixtral-8x7b", 16, 8, f8));
  EXPECT_EQ(mma("qwen3-30b-a3b", 20, 8, f8), on);  // the smallest shard experts up to 20 tokens (32 in session 37)
  EXPECT_FALSE(mma("qwen3-30b-a3b", 21, 8, f8));   // token-major from 21 (session 54's sweep)
  EXPECT_FALSE(mma("qwen3-30b-a3b", 32, 8, f8));
  EXPECT_EQ(mma("qwen3-235b-a22b", 20, 8, f8), on);  // the next shard experts up to 20 tokens (session 37)
  EXPECT_FALSE(mma("qwen3-235b-a22b", 21, 8, f8));
  EXPECT_FALSE(mma("gpt-oss-120b", 9, 8, f8));        // >= 1 M weights: not past 8 (the wide clause)
  // few experts' shards in fp8_per_tensor: not from 2 to 8 tokens since session 83 (Swap-AB's plain
  // kernels ahead there, up to 16 slots), but at 1 and 9; fp8_per_channel keeps 1..9 (below).
  EXPECT_FALSE(mma("mixtral-8x7b", 2, 8, f8));
  EXPECT_FALSE(mma("mixtral-8x7b", 8, 8, f8));
  EXPECT_EQ(mma("mixtral-8x7b", 9, 8, f8), on);
  EXPECT_FALSE(mma("mixtral-8x7b", 10, 8, f8));
  EXPECT_FALSE(mma("mixtral-8x7b", 9, 8, bf));
  // TP1 fp8_per_tensor (session 39): one token up to deepseek-v3's 14.7 M weights an expert, four
  // on qwen3-30b's 1.6 M; not mixtral (58.7 M), not gpt-oss (biases), not bf16.
  EXPECT_EQ(mma("qwen3-235b-a22b", 1, 1, f8), on);
  EXPECT_FALSE(mma("qwen3-235b-a22b", 2, 1, f8));
  EXPECT_EQ(mma("deepseek-v3", 1, 1, f8), on);
  EXPECT_FALSE(mma("deepseek-v3", 2, 1, f8));
  EXPECT_EQ(mma("qwen3-30b-a3b", 4, 1, f8), on);
  EXPECT_FALSE(mma("qwen3-30b-a3b", 5, 1, f8));
  EXPECT_FALSE(mma("mixtral-8x7b", 1, 1, f8));
  EXPECT_FALSE(mma("gpt-oss-120b", 1, 1, f8));  // experts with biases keep Swap-AB
  EXPECT_FALSE(mma("qwen3-235b-a22b", 1, 1, bf));
  EXPECT_FALSE(mma("qwen3-235b-a22b", 1, 1, Scheme::kFp8PerChannel));
  // fp8_per_channel: the TP8 shards up to 16 tokens but the wide ones (>= 1 M weights) up to 8,
  // qwen3-30b's from M = 1; mixtral TP8 up to 9 (session 39); not TP1.
  const Scheme pc = Scheme::kFp8PerChannel;
  EXPECT_EQ(mma("qwen3-235b-a22b", 16, 8, pc), on);
  EXPECT_EQ(mma("qwen3-30b-a3b", 1, 8, pc), on);
  EXPECT_EQ(mma("gpt-oss-120b", 8, 8, pc), on);
  EXPECT_FALSE(mma("gpt-oss-120b", 9, 8, pc));
  EXPECT_EQ(mma("deepseek-v3", 8, 8, pc), on);
  EXPECT_FALSE(mma("deepseek-v3", 16, 8, pc));
  EXPECT_EQ(mma("mixtral-8x7b", 1, 8, pc), on);
  EXPECT_EQ(mma("mixtral-8x7b", 9, 8, pc), on);
  EXPECT_FALSE(mma("mixtral-8x7b", 10, 8, pc));
  EXPECT_FALSE(mma("mixtral-8x7b", 1, 1, pc));
  EXPECT_FALSE(mma("qwen3-30b-a3b", 32, 8, pc));
  EXPECT_FALSE(mma("deepseek-v3", 1, 1, pc));
  EXPECT_FALSE(mma("qwen3-30b-a3b", 1, 8, Scheme::kFp8Block128));
  if (on) EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 8, 8), in).describe(), "gemv(mma)");
  {
    // Past gemv(mma)'s 20 tokens at qwen3-30b TP8 fp8_per_tensor: the token-major chain (session
    // 54's sweep), with every other path able to run the call.
    detail::RouterInputs all = in;
    all.decode_ok = all.fused_ok = true;
    all.swapab_ok[0] = all.swapab_ok[1] = all.tokmajor_ok[0] = all.tokmajor_ok[1] = true;
    if (on) EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 20, 8, f8), all).describe(), "gemv(mma)");
    for (std::int64_t m : {21, 24, 32})
      EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", m, 8, f8), all).describe(), "gemm1=tokmajor gemm2=tokmajor") << m;
  }
  in.gemv_mma_ok = false;  // it cannot run the call: the rules before it decide
  EXPECT_FALSE(mma("qwen3-30b-a3b", 8, 8, bf));
  in.gemv_mma_ok = true;
  in.gemv_mma_in_auto = false;  // MOEKIT_GEMV_MMA=0
  EXPECT_FALSE(mma("qwen3-235b-a22b", 16, 8, f8));
  EXPECT_TRUE(choose_paths(preset("qwen3-30b-a3b", 1, 8), in).gemv == on);  // the CUDA-core rule stays
  in.forced = "gemv";  // forced: the kernel auto would take, else the CUDA-core one where it can run
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 16, 8, f8), in).gemv_mma());
  EXPECT_FALSE(choose_paths(preset("qwen3-30b-a3b", 1, 8), in).gemv_mma());
  in.gemv_cuda_ok = false;
  EXPECT_TRUE(choose_paths(preset("qwen3-30b-a3b", 1, 8), in).gemv_mma());
}

TEST(CpuPathRouter, MixtralTp8Fp8TakesPlainSwapAbFromTwoTokens) {
  // Session 83 (RouterTable::gemv_mma_few_experts_max_tokens_per_tensor_shard): with every path able
  // to run, mixtral TP8 fp8_per_tensor runs gemv(mma) at M = 1 and 9, Swap-AB at M = 2..8 (at most 16
  // slots, the plain kernels' rows); bf16 and fp8_per_channel keep gemv(mma) at M = 8.
  detail::RouterInputs in;
  in.decode_ok = in.gemv_cuda_ok = in.gemv_mma_ok = true;
  in.sm_count = 132;
  in.swapab_ok[0] = in.swapab_ok[1] = true;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  if (!detail::kRouterTable.gemv_in_auto || !detail::kRouterTable.gemv_mma_in_auto) GTEST_SKIP();
  auto describe = [&in](std::int64_t M, Scheme s) { return choose_paths(preset("mixtral-8x7b", M, 8, s), in).describe(); };
  const Scheme f8 = Scheme::kFp8PerTensor;
  EXPECT_EQ(describe(1, f8), "gemv(mma)");
  for (std::int64_t M : {2, 3, 4, 6, 8}) EXPECT_EQ(describe(M, f8), "gemm1=swapab gemm2=swapab") << "M=" << M;
  EXPECT_EQ(describe(9, f8), "gemv(mma)");
  EXPECT_EQ(describe(10, f8), "gemm1=tokmajor gemm2=tokmajor");
  EXPECT_EQ(describe(8, Scheme::kBf16), "gemv(mma)");
  EXPECT_EQ(describe(8, Scheme::kFp8PerChannel), "gemv(mma)");
  // TP1 (N = 14336) is not a shard: Swap-AB to 10 slots there, as before.
  EXPECT_EQ(choose_paths(preset("mixtral-8x7b", 6, 1, f8), in).describe(), "gemm1=tokmajor gemm2=tokmajor");
}

TEST(CpuPathRouter, GemvKernelOverrideWhereTheKernelCanRun) {
  // MOEKIT_GEMV_KERNEL=cuda|mma (gemv_kernel_override) moves a GEMV plan to the named kernel where
  // that kernel can run the call, auto or forced; it never makes a plan GEMV, and the plan's
  // describe() names the kernel that runs.
  detail::RouterInputs in;
  in.decode_ok = in.gemv_cuda_ok = in.gemv_mma_ok = true;
  const bool on = detail::kRouterTable.gemv_in_auto && detail::kRouterTable.gemv_mma_in_auto;
  const MoeProblem cuda_rule = preset("qwen3-30b-a3b", 1, 8);  // the CUDA-core rule's point
  const MoeProblem mma_rule = preset("qwen3-30b-a3b", 8, 8);   // the tensor-core rule's point
  const MoeProblem neither = preset("qwen3-30b-a3b", 256, 8);  // no GEMV rule
  in.gemv_kernel = detail::GemvKernel::kMma;
  if (on) {
    EXPECT_TRUE(choose_paths(cuda_rule, in).gemv_mma());
    EXPECT_EQ(choose_paths(cuda_rule, in).describe(), "gemv(mma)");
    EXPECT_NE(choose_paths(cuda_rule, in).reason.find("MOEKIT_GEMV_KERNEL"), std::string::npos);
  }
  EXPECT_FALSE(choose_paths(neither, in).gemv);
  in.gemv_kernel = detail::GemvKernel::kCuda;
  if (on) {
    EXPECT_TRUE(choose_paths(mma_rule, in).gemv);
    EXPECT_FALSE(choose_paths(mma_rule, in).gemv_mma());
  }
  in.gemv_cuda_ok = false;  // the named kernel cannot run it: the router's kernel stays
  if (on) EXPECT_TRUE(choose_paths(mma_rule, in).gemv_mma());
  in.forced = "gemv";
  EXPECT_TRUE(choose_paths(cuda_rule, in).gemv_mma());  // only the tensor-core kernel can run it
  in.gemv_cuda_ok = true;
  EXPECT_FALSE(choose_paths(mma_rule, in).gemv_mma());
  in.gemv_kernel = detail::GemvKernel::kMma;
  EXPECT_TRUE(choose_paths(cuda_rule, in).gemv_mma());
  EXPECT_EQ(choose_paths(cuda_rule, in).describe(), "gemv(mma)");
}

// Each value of `bad` in the environment variable `var` makes `parse` throw kInvalidArgument with the
// value in its message.
template <class Parse>
void expect_refused(const char* var, std::initializer_list<const char*> bad, Parse parse) {
  for (const char* v : bad) {
    testing::ScopedEnv e(var, v);
    try {
      parse();
      ADD_FAILURE() << var << "='" << v << "' was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(err.what()).find(v), std::string::npos) << err.what();
    }
  }
}

TEST(CpuPathRouter, GemvKernelOverrideIsParsed) {
  using testing::ScopedEnv;
  ScopedEnv unset_first("MOEKIT_GEMV_KERNEL", "");
  EXPECT_FALSE(detail::gemv_kernel_override().has_value());
  {
    ScopedEnv e("MOEKIT_GEMV_KERNEL", "cuda");
    EXPECT_TRUE(detail::gemv_kernel_override() == detail::GemvKernel::kCuda);
  }
  {
    ScopedEnv e("MOEKIT_GEMV_KERNEL", "mma");
    EXPECT_TRUE(detail::gemv_kernel_override() == detail::GemvKernel::kMma);
  }
  expect_refused("MOEKIT_GEMV_KERNEL", {"MMA", "tensor", "0", "ring"}, [] { detail::gemv_kernel_override(); });
}

TEST(CpuPathRouter, Gemm2PathOverrideIsParsed) {
  using testing::ScopedEnv;
  ScopedEnv unset_first("MOEKIT_GEMM2_PATH", "");
  EXPECT_FALSE(detail::gemm2_impl_override().has_value());
  const std::pair<const char*, GemmImpl> good[] = {
      {"mma", GemmImpl::kMma}, {"swapab", GemmImpl::kSwapab}, {"tokmajor", GemmImpl::kTokmajor}};
  for (const auto& [name, impl] : good) {
    ScopedEnv e("MOEKIT_GEMM2_PATH", name);
    EXPECT_TRUE(detail::gemm2_impl_override() == impl) << name;
  }
  expect_refused("MOEKIT_GEMM2_PATH", {"auto", "decode", "SWAPAB", "1"}, [] { detail::gemm2_impl_override(); });
}

TEST(CpuPathRouter, Gemm2PathOverrideMovesOnlyAnAutomaticGemmPlansGemm2) {
  // qwen3-30b TP8 fp8 M = 64: token-major for both GEMMs in auto (the early crossover).
  detail::RouterInputs in;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  in.swapab_ok[0] = in.swapab_ok[1] = true;
  in.sm_count = 132;
  const MoeProblem p = preset("qwen3-30b-a3b", 64, 8, Scheme::kFp8PerTensor);
  ASSERT_EQ(choose_paths(p, in).describe(), "gemm1=tokmajor gemm2=tokmajor");
  in.gemm2_impl = GemmImpl::kSwapab;
  const detail::DispatchPlan moved = choose_paths(p, in);
  EXPECT_EQ(moved.gemm[0].impl, GemmImpl::kTokmajor);
  EXPECT_EQ(moved.gemm[1].impl, GemmImpl::kSwapab);
  EXPECT_EQ(moved.gemm[1].split_k, detail::swapab_split_k(p, 2, in.sm_count));  // the router's split
  EXPECT_NE(moved.reason.find("MOEKIT_GEMM2_PATH"), std::string::npos) << moved.reason;
  in.gemm2_impl = GemmImpl::kMma;
  EXPECT_EQ(choose_paths(p, in).describe(), "gemm1=tokmajor gemm2=mma");
  // Where the named kernel cannot run GEMM2, the router's choice stands.
  in.gemm2_impl = GemmImpl::kSwapab;
  in.swapab_ok[1] = false;
  EXPECT_EQ(choose_paths(p, in).describe(), "gemm1=tokmajor gemm2=tokmajor");
  // A forced path is left alone.
  in.swapab_ok[1] = true;
  in.forced = "tokmajor";
  EXPECT_EQ(choose_paths(p, in).describe(), "gemm1=tokmajor gemm2=tokmajor");
}

TEST(CpuPathRouter, SwapAbSplitOverride) {
  using testing::ScopedEnv;
  ScopedEnv unset_first("MOEKIT_SWAPAB_SPLIT", "");
  EXPECT_FALSE(detail::swapab_split_override().has_value());
  for (int s : {1, 2, 4, 8}) {
    ScopedEnv e("MOEKIT_SWAPAB_SPLIT", std::to_string(s).c_str());
    EXPECT_EQ(detail::swapab_split_override(), s);
  }
  expect_refused("MOEKIT_SWAPAB_SPLIT", {"0", "3", "16", "two", "fill"}, [] { detail::swapab_split_override(); });
  // Forced Swap-AB: every GEMM takes the given split; without it, the router's.
  detail::RouterInputs in;
  in.forced = "swapab";
  in.swapab_ok[0] = in.swapab_ok[1] = true;
  in.sm_count = 132;
  const MoeProblem p = preset("gpt-oss-120b", 1, 1);
  const detail::DispatchPlan routed = choose_paths(p, in);
  in.swapab_split = 2;
  const detail::DispatchPlan forced = choose_paths(p, in);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(routed.gemm[g].impl, detail::GemmImpl::kSwapab);
    EXPECT_EQ(routed.gemm[g].split_k, detail::swapab_split_k(p, g + 1, 132));
    EXPECT_EQ(forced.gemm[g].split_k, 2);
  }
}

TEST(CpuPathRouter, Fp8MidExpertsKeepSwapAbToAFewTokensPerExpert) {
  // Session 22 (RouterTable::early_swapab_fp8_*): fp8 on experts of N >= 512 and K <= 4096 keeps
  // Swap-AB up to ~2.5 tokens per expert, past the 32 slots of the early crossover.
  detail::RouterInputs in;  // GEMV, decode and fused unavailable: the GEMM crossovers decide
  in.sm_count = 132;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  auto impl = [&](const char* name, std::int64_t M, int tp, Scheme s) {
    const detail::DispatchPlan d = choose_paths(preset(name, M, tp, s), in);
    EXPECT_EQ(d.gemm[0].impl, d.gemm[1].impl) << name << " M=" << M;
    return d.gemm[0].impl;
  };
  const Scheme fp8 = Scheme::kFp8PerTensor;
  for (std::int64_t M : {8, 16, 32}) {
    EXPECT_EQ(impl("qwen3-30b-a3b", M, 1, fp8), detail::GemmImpl::kSwapab) << "M=" << M;
    EXPECT_EQ(impl("qwen3-235b-a22b", M, 1, fp8), detail::GemmImpl::kSwapab) << "M=" << M;
  }
  EXPECT_EQ(impl("qwen3-30b-a3b", 64, 1, fp8), detail::GemmImpl::kTokmajor);      // ~4 tokens/expert
  EXPECT_EQ(impl("deepseek-v3", 8, 1, fp8), detail::GemmImpl::kTokmajor);         // K = 7168
  EXPECT_EQ(impl("qwen3-30b-a3b", 8, 1, Scheme::kBf16), detail::GemmImpl::kTokmajor);  // bf16
  EXPECT_EQ(impl("qwen3-235b-a22b", 8, 8, fp8), detail::GemmImpl::kTokmajor);     // TP8: N = 192
  EXPECT_EQ(impl("mixtral-8x7b", 32, 1, fp8), detail::GemmImpl::kTokmajor);       // 8 tokens/expert
}

TEST(CpuPathRouter, Block128KeepsSwapAbWhereItsSweepMeasuredItAhead) {
  // Session 27 (RouterTable::block128_swapab_*): fp8_block128 keeps Swap-AB up to 1024 local slots
  // on N < 512 and up to 24 tokens per expert on N >= 512; token-major above; per tensor unchanged.
  detail::RouterInputs in;  // GEMV, decode and fused unavailable: the GEMM crossovers decide
  in.sm_count = 132;
  in.swapab_ok[0] = in.swapab_ok[1] = true;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  auto impl = [&](const char* name, std::int64_t M, int tp, Scheme s) {
    const detail::DispatchPlan d = choose_paths(preset(name, M, tp, s), in);
    EXPECT_EQ(d.gemm[0].impl, d.gemm[1].impl) << name << " M=" << M;
    return d.gemm[0].impl;
  };
  const Scheme b128 = Scheme::kFp8Block128;
  for (std::int64_t M : {8, 32, 128}) {
    EXPECT_EQ(impl("deepseek-v3", M, 8, b128), detail::GemmImpl::kSwapab) << "M=" << M;
    EXPECT_EQ(impl("qwen3-235b-a22b", M, 8, b128), detail::GemmImpl::kSwapab) << "M=" << M;
  }
  EXPECT_EQ(impl("deepseek-v3", 256, 8, b128), detail::GemmImpl::kTokmajor);      // 2048 slots
  EXPECT_EQ(impl("qwen3-235b-a22b", 256, 8, b128), detail::GemmImpl::kTokmajor);
  EXPECT_EQ(impl("deepseek-v3", 256, 1, b128), detail::GemmImpl::kSwapab);        // 8 tokens/expert
  EXPECT_EQ(impl("qwen3-235b-a22b", 256, 1, b128), detail::GemmImpl::kSwapab);    // 16
  EXPECT_EQ(impl("mixtral-8x7b", 64, 8, b128), detail::GemmImpl::kSwapab);        // 16
  EXPECT_EQ(impl("mixtral-8x7b", 128, 8, b128), detail::GemmImpl::kTokmajor);     // 32
  EXPECT_EQ(impl("mixtral-8x7b", 128, 1, b128), detail::GemmImpl::kTokmajor);
  EXPECT_EQ(impl("deepseek-v3", 8, 8, Scheme::kFp8PerTensor), detail::GemmImpl::kTokmajor);  // per tensor
  const std::string why = choose_paths(preset("deepseek-v3", 8, 8, b128), in).reason;
  EXPECT_NE(why.find("fp8_block128"), std::string::npos) << why;
}

TEST(CpuPathRouter, AutoTakesFusedOnlyWhenItCanRunAndWhereItWins) {
  // Measured: the fused launch wins for small shards (qwen3-30b TP8, N = 96) up to 16 slots.
  detail::RouterInputs in;
  const MoeProblem small = preset("qwen3-30b-a3b", 2, 8);  // 16 slots
  const MoeProblem big = preset("qwen3-30b-a3b", 3, 8);    // 24 slots
  const MoeProblem wide = preset("gpt-oss-120b", 1, 8);    // N = 360
  EXPECT_FALSE(choose_paths(small, in).fused);  // not built: fused_ok is false by default
  in.fused_ok = true;
  EXPECT_EQ(choose_paths(small, in).fused, detail::kRouterTable.fused_in_auto);
  EXPECT_FALSE(choose_paths(big, in).fused);
  EXPECT_FALSE(choose_paths(wide, in).fused);
  in.forced = "swapab";
  EXPECT_FALSE(choose_paths(small, in).fused);  // a forced GEMM path wins
}

TEST(CpuPathRouter, ShardsUnder512FollowTheirOwnCrossovers) {
  // The late crossovers (token-major cannot run both GEMMs, or the experts have biases): bf16 on
  // mid shards (256 <= N < 512) and fp8 on any shard under 512 keep Swap-AB up to 16 tokens/expert
  // (session 26: 2 in bf16 and 8 in fp8 before), then bf16 goes to mma (past the prefill limit,
  // token-major) and fp8 to token-major for the GEMMs it can run.
  detail::RouterInputs in;
  in.tokmajor_ok[0] = true;
  in.tokmajor_ok[1] = false;
  in.tokmajor_why[1] = "not in this test";
  auto plan = [&](const char* name, std::int64_t M, Scheme s) { return choose_paths(preset(name, M, 8, s), in); };
  EXPECT_EQ(plan("deepseek-v3", 16, Scheme::kBf16).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_EQ(plan("deepseek-v3", 64, Scheme::kBf16).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_EQ(plan("deepseek-v3", 640, Scheme::kBf16).describe(), "gemm1=mma gemm2=mma");  // 20 tokens/expert
  EXPECT_EQ(plan("gpt-oss-120b", 16, Scheme::kBf16).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_EQ(plan("gpt-oss-120b", 512, Scheme::kBf16).describe(), "gemm1=swapab gemm2=swapab");
  auto swapab_both = [](const detail::DispatchPlan& d) {
    return d.gemm[0].impl == GemmImpl::kSwapab && d.gemm[1].impl == GemmImpl::kSwapab;
  };
  EXPECT_TRUE(swapab_both(plan("qwen3-30b-a3b", 64, Scheme::kFp8PerTensor)));
  EXPECT_TRUE(swapab_both(plan("qwen3-30b-a3b", 256, Scheme::kFp8PerTensor)));  // 16 tokens/expert
  const detail::DispatchPlan q = plan("qwen3-30b-a3b", 512, Scheme::kFp8PerTensor);
  EXPECT_EQ(q.describe(), "gemm1=tokmajor gemm2=mma") << q.reason;
  EXPECT_NE(q.reason.find("token-major"), std::string::npos) << q.reason;
  // Large shards keep the general rule: mixtral TP8 (N = 1792) fp8 at 16 tokens/expert is decode.
  EXPECT_TRUE(swapab_both(plan("mixtral-8x7b", 64, Scheme::kFp8PerTensor)));
  // With both GEMMs on token-major, experts with biases (gpt-oss) still take the late crossovers.
  in.tokmajor_ok[1] = true;
  EXPECT_EQ(plan("gpt-oss-120b", 64, Scheme::kBf16).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_NE(plan("gpt-oss-120b", 64, Scheme::kBf16).reason.find("biases"), std::string::npos);
  EXPECT_EQ(plan("gpt-oss-120b", 256, Scheme::kFp8PerTensor).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_EQ(plan("gpt-oss-120b", 1024, Scheme::kFp8PerTensor).describe(), "gemm1=tokmajor gemm2=tokmajor");
  EXPECT_EQ(plan("gpt-oss-120b", 1024, Scheme::kBf16).describe(), "gemm1=tokmajor gemm2=tokmajor");
  // fp8 at TP1 (N = 2880): Swap-AB up to 24 tokens/expert (M = 512: 16), token-major above
  // (M = 1024: 32; session 21, 1028 against 1247 us).
  auto tp1 = [&](std::int64_t M) { return choose_paths(preset("gpt-oss-120b", M, 1, Scheme::kFp8PerTensor), in); };
  EXPECT_EQ(tp1(512).describe(), "gemm1=swapab gemm2=swapab") << tp1(512).reason;
  EXPECT_EQ(tp1(1024).describe(), "gemm1=tokmajor gemm2=tokmajor") << tp1(1024).reason;
}

TEST(CpuPathRouter, EarlyTokenMajorCrossover) {
  // Where token-major runs both GEMMs (RouterTable, measured at cda930d, bf16 retuned at 86c683c):
  // Swap-AB up to 32 local slots in fp8 (10 on mixtral's few experts, both schemes), 512 in
  // fp8_per_channel on the TP8 shards, and 16 in bf16, token-major above; tiny bf16 shards
  // (N < 128) take Swap-AB up to 64 slots and mma up to 3 tokens/expert in between.
  detail::RouterInputs in;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  auto plan = [&](const char* name, std::int64_t M, int tp, Scheme s = Scheme::kBf16) {
    return choose_paths(preset(name, M, tp, s), in);
  };
  const std::string swapab = "gemm1=swapab gemm2=swapab", tokmajor = "gemm1=tokmajor gemm2=tokmajor";
  EXPECT_EQ(plan("deepseek-v3", 2, 1).describe(), swapab);      // 16 slots
  EXPECT_EQ(plan("deepseek-v3", 4, 1).describe(), tokmajor);    // 32 slots, bf16
  EXPECT_EQ(plan("deepseek-v3", 4, 1, Scheme::kFp8PerTensor).describe(), swapab);  // fp8: to 32
  EXPECT_EQ(plan("deepseek-v3", 8, 1).describe(), tokmajor);    // 64 slots
  EXPECT_EQ(plan("mixtral-8x7b", 5, 1).describe(), swapab);     // k = 2: 10 slots
  EXPECT_EQ(plan("mixtral-8x7b", 8, 1).describe(), tokmajor);   // 16 slots on few experts (session 39)
  EXPECT_EQ(plan("mixtral-8x7b", 16, 1).describe(), tokmajor);  // 32 slots, bf16
  EXPECT_EQ(plan("mixtral-8x7b", 6, 1).describe(), tokmajor);   // 12 slots
  // fp8_per_tensor on few experts (mixtral): Swap-AB to 10 slots, then token-major (sessions 37, 39),
  // also where the tokens per expert are few enough for the TP1-sized clause (M = 6: 1.5).
  EXPECT_EQ(plan("mixtral-8x7b", 5, 1, Scheme::kFp8PerTensor).describe(), swapab);
  EXPECT_EQ(plan("mixtral-8x7b", 6, 1, Scheme::kFp8PerTensor).describe(), tokmajor);
  EXPECT_EQ(plan("mixtral-8x7b", 9, 1, Scheme::kFp8PerTensor).describe(), tokmajor);
  EXPECT_EQ(plan("mixtral-8x7b", 16, 1, Scheme::kFp8PerTensor).describe(), tokmajor);
  // ... but on their TP8 shards (N < few_experts_shard_max_n) to 16 slots, the plain Swap-AB
  // kernels' rows (session 83).
  EXPECT_EQ(plan("mixtral-8x7b", 6, 8, Scheme::kFp8PerTensor).describe(), swapab);
  EXPECT_EQ(plan("mixtral-8x7b", 8, 8, Scheme::kFp8PerTensor).describe(), swapab);
  EXPECT_EQ(plan("mixtral-8x7b", 9, 8, Scheme::kFp8PerTensor).describe(), tokmajor);
  EXPECT_EQ(plan("mixtral-8x7b", 16, 8, Scheme::kFp8PerTensor).describe(), tokmajor);
  EXPECT_EQ(plan("mixtral-8x7b", 6, 8).describe(), tokmajor);  // bf16 keeps 10 slots
  EXPECT_EQ(plan("mixtral-8x7b", 16, 8, Scheme::kFp8Block128).describe(), swapab);  // per tensor only
  EXPECT_EQ(plan("mixtral-8x7b", 32, 1).describe(), tokmajor);
  EXPECT_EQ(plan("qwen3-235b-a22b", 8, 8).describe(), tokmajor);  // N = 192 is not tiny
  EXPECT_EQ(plan("deepseek-v3", 256, 8, Scheme::kFp8PerTensor).describe(), tokmajor);
  EXPECT_NE(plan("deepseek-v3", 8, 1).reason.find("token-major"), std::string::npos);
  // qwen3-30b TP8, N = 96: Swap-AB to 64 slots, bf16 mma to 3 tokens/expert, then token-major;
  // fp8 token-major right after Swap-AB.
  EXPECT_EQ(plan("qwen3-30b-a3b", 8, 8).describe(), swapab);
  EXPECT_EQ(plan("qwen3-30b-a3b", 32, 8).describe(), "gemm1=mma gemm2=mma");
  EXPECT_EQ(plan("qwen3-30b-a3b", 64, 8).describe(), tokmajor);
  EXPECT_EQ(plan("qwen3-30b-a3b", 16, 8, Scheme::kFp8PerTensor).describe(), tokmajor);
  // fp8_per_channel on the TP8 shards from tiny_n to mid_n: Swap-AB up to 512 slots (session 39).
  const Scheme pc = Scheme::kFp8PerChannel;
  EXPECT_EQ(plan("deepseek-v3", 16, 8, pc).describe(), swapab);
  EXPECT_EQ(plan("deepseek-v3", 64, 8, pc).describe(), swapab);
  EXPECT_EQ(plan("deepseek-v3", 128, 8, pc).describe(), tokmajor);
  EXPECT_EQ(plan("qwen3-235b-a22b", 32, 8, pc).describe(), swapab);
  EXPECT_NE(plan("qwen3-235b-a22b", 32, 8, pc).reason.find("fp8_per_channel"), std::string::npos);
  EXPECT_EQ(plan("qwen3-30b-a3b", 16, 8, pc).describe(), tokmajor);  // tiny: its own bound
  EXPECT_EQ(plan("deepseek-v3", 8, 1, pc).describe(), tokmajor);     // TP1-sized experts
  // A GEMM Swap-AB declines at decode runs token-major, and the reason says why.
  in.swapab_ok[1] = false;
  in.swapab_why[1] = "rows of 360 bytes";
  const detail::DispatchPlan d = plan("deepseek-v3", 1, 1);
  EXPECT_EQ(d.describe(), "gemm1=swapab gemm2=tokmajor");
  EXPECT_NE(d.reason.find("rows of 360 bytes"), std::string::npos) << d.reason;
}

TEST(CpuPathRouter, SplitKFillsTheSms) {
  // Fewer SMs -> no more split than they hold; never above 8; 1 when items already fill the SMs.
  const MoeProblem p = preset("qwen3-30b-a3b", 1, 8);
  EXPECT_EQ(detail::swapab_split_k(p, 1, 132), 8);
  EXPECT_EQ(detail::swapab_split_k(p, 1, 64), 4);  // 16 x 4 x 2 > 64 stops at 4
  EXPECT_EQ(detail::swapab_split_k(p, 2, 132), 1);  // 32 tiles x 8 experts = 256 items
  EXPECT_EQ(detail::swapab_split_k(preset("mixtral-8x7b", 1, 1), 2, 132), 1);  // 64 tiles x 2
  EXPECT_EQ(detail::swapab_split_k(preset("mixtral-8x7b", 1, 8), 1, 132), 2);  // N = 1792: 28 x 2 items
  // A partial last wave is left alone (measured: splitting more to fill it lost, RouterTable).
  EXPECT_EQ(detail::swapab_split_k(preset("qwen3-30b-a3b", 1, 1), 1, 132), 1);  // 96 items
  EXPECT_EQ(detail::choose_swapab_split(16, 132, 8), 4);  // stages stop it: 8 < 4 x 4
}

TEST(CpuPathRouter, ExpertMapCountsLocalSlots) {
  MoeProblem p = preset("qwen3-30b-a3b", 512, 8);
  p.has_expert_map = true;
  p.num_experts_global = 128;
  p.num_experts = 16;  // EP8: 1/8 of the slots are local
  const detail::DispatchPlan plan = choose_paths(p, 132, nullptr, true, true);
  EXPECT_NEAR(plan.local_slots, 512.0 * 8 / 8, 1e-9);
  EXPECT_LE(plan.touched, 16.0);
}

TEST(CpuPathRouter, DescribeDispatchOnTheCpuBackend) {
  Options o;
  o.backend = Backend::kCpu;
  EXPECT_EQ(describe_dispatch(preset("qwen3-30b-a3b", 1, 8), o), "cpu");
}

TEST(CpuPathRouter, PrefillTakesTokenMajorWhenItCanRun) {
  detail::RouterInputs in;
  in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  const MoeProblem prefill = preset("mixtral-8x7b", 4096, 1);
  EXPECT_EQ(choose_paths(prefill, in).describe(), "gemm1=tokmajor gemm2=tokmajor");
  // Decode stays on Swap-AB; a small shard between the two stays on mma.
  EXPECT_EQ(choose_paths(preset("mixtral-8x7b", 1, 1), in).describe(), "gemm1=swapab gemm2=swapab");
  EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 16, 8), in).describe(), "gemm1=mma gemm2=mma");
  // A GEMM tokmajor declines runs on mma, and the reason says so.
  in.tokmajor_ok[1] = false;
  in.tokmajor_why[1] = "rows of N = 360 bytes";
  const detail::DispatchPlan d = choose_paths(prefill, in);
  EXPECT_EQ(d.describe(), "gemm1=tokmajor gemm2=mma");
  EXPECT_NE(d.reason.find("rows of N = 360 bytes"), std::string::npos) << d.reason;
  // Forced tokmajor that cannot run is kNotSupported, except at M = 0 where nothing launches.
  in.forced = "tokmajor";
  EXPECT_THROW(choose_paths(prefill, in), Error);
  EXPECT_NO_THROW(choose_paths(preset("mixtral-8x7b", 0, 1), in));
}

// The CUDA backend keeps a per-thread memo of problem-only answers (workspace size, which paths can
// run it) keyed on same_problem: two problems that differ in any field must not share an entry.
TEST(CpuSameProblem, EveryFieldCounts) {
  const MoeProblem base = preset("deepseek-v3", 4, 8);
  EXPECT_TRUE(detail::same_problem(base, base));
  MoeProblem copy = base;
  EXPECT_TRUE(detail::same_problem(base, copy));
  const std::vector<std::pair<const char*, void (*)(MoeProblem&)>> edits = {
      {"num_tokens", [](MoeProblem& p) { p.num_tokens += 1; }},
      {"num_experts", [](MoeProblem& p) { p.num_experts += 1; }},
      {"num_experts_global", [](MoeProblem& p) { p.num_experts_global += 1; }},
      {"top_k", [](MoeProblem& p) { p.top_k += 1; }},
      {"hidden_size", [](MoeProblem& p) { p.hidden_size += 16; }},
      {"intermediate_size", [](MoeProblem& p) { p.intermediate_size += 16; }},
      {"scheme", [](MoeProblem& p) { p.scheme = Scheme::kFp8PerTensor; }},
      {"act_dtype", [](MoeProblem& p) { p.act_dtype = DType::kFp16; }},
      {"activation.kind", [](MoeProblem& p) { p.activation.kind = Activation::kGelu; }},
      {"activation.alpha", [](MoeProblem& p) { p.activation.alpha += 0.5f; }},
      {"activation.limit", [](MoeProblem& p) { p.activation.limit += 0.5f; }},
      {"has_expert_map", [](MoeProblem& p) { p.has_expert_map = !p.has_expert_map; }},
      {"apply_router_weight_on_input", [](MoeProblem& p) { p.apply_router_weight_on_input = !p.apply_router_weight_on_input; }},
      {"has_bias13", [](MoeProblem& p) { p.has_bias13 = !p.has_bias13; }},
      {"has_bias2", [](MoeProblem& p) { p.has_bias2 = !p.has_bias2; }},
      {"bias_dtype", [](MoeProblem& p) { p.bias_dtype = p.bias_dtype == DType::kFp32 ? DType::kBf16 : DType::kFp32; }},
      {"static_a13_scale", [](MoeProblem& p) { p.static_a13_scale = !p.static_a13_scale; }},
      {"static_a2_scale", [](MoeProblem& p) { p.static_a2_scale = !p.static_a2_scale; }},
      {"with_routing", [](MoeProblem& p) { p.with_routing = !p.with_routing; }},
      {"routing.method",
       [](MoeProblem& p) {
         p.routing.method = p.routing.method == RoutingMethod::kSoftmaxTopk ? RoutingMethod::kSigmoidGroupedTopk
                                                                             : RoutingMethod::kSoftmaxTopk;
       }},
      {"routing.top_k", [](MoeProblem& p) { p.routing.top_k += 1; }},
      {"routing.renormalize", [](MoeProblem& p) { p.routing.renormalize = !p.routing.renormalize; }},
      {"routing.num_groups", [](MoeProblem& p) { p.routing.num_groups += 1; }},
      {"routing.topk_groups", [](MoeProblem& p) { p.routing.topk_groups += 1; }},
      {"routing.routed_scaling_factor", [](MoeProblem& p) { p.routing.routed_scaling_factor += 1.0f; }},
      {"logits_dtype", [](MoeProblem& p) { p.logits_dtype = p.logits_dtype == DType::kFp32 ? DType::kBf16 : DType::kFp32; }},
      {"has_correction_bias", [](MoeProblem& p) { p.has_correction_bias = !p.has_correction_bias; }},
  };
  for (const auto& [name, edit] : edits) {
    MoeProblem other = base;
    edit(other);
    EXPECT_FALSE(detail::same_problem(base, other)) << name;
    EXPECT_FALSE(detail::same_problem(other, base)) << name;
  }
}

TEST(CpuPathRouter, ExpertMlpWhereItWonAndForcedByName) {
  // The per-expert MLP kernel (RouterTable::expert_mlp_*): auto where it can run the call, from 32
  // (bf16) or 24 (fp8_per_tensor) to 2048 local slots at N = 96, and over the cluster form's band
  // at N = 97..256 (from 128 slots, from 40 / 24 where the expected units fit the resident
  // clusters in one round), ahead of the GEMV, decode and GEMM rules; MOEKIT_EXPERT_MLP = 0
  // (expert_mlp_in_auto) keeps auto off it; forced by name, or an error naming why not.
  detail::RouterInputs in;
  in.decode_ok = in.gemv_cuda_ok = in.gemv_mma_ok = in.fused_ok = true;
  in.swapab_ok[0] = in.swapab_ok[1] = in.tokmajor_ok[0] = in.tokmajor_ok[1] = true;
  const MoeProblem m16 = preset("qwen3-30b-a3b", 16, 8), m3 = preset("qwen3-30b-a3b", 3, 8);
  const MoeProblem m256 = preset("qwen3-30b-a3b", 256, 8), m257 = preset("qwen3-30b-a3b", 257, 8);
  EXPECT_FALSE(choose_paths(m16, in).expert_mlp);  // expert_mlp_ok false by default (not built)
  in.expert_mlp_ok = true;
  EXPECT_EQ(choose_paths(m16, in).describe(), "expert_mlp");
  EXPECT_NE(choose_paths(m16, in).log_line(m16).find("-> expert_mlp |"), std::string::npos);
  EXPECT_TRUE(choose_paths(m256, in).expert_mlp);
  EXPECT_FALSE(choose_paths(m3, in).expert_mlp);    // 24 slots: gemv keeps it
  // Its band starts at 32 slots for bf16 (M = 4) and 24 for fp8_per_tensor (M = 3; session 80).
  EXPECT_TRUE(choose_paths(preset("qwen3-30b-a3b", 4, 8), in).expert_mlp);
  EXPECT_TRUE(choose_paths(preset("qwen3-30b-a3b", 8, 8), in).expert_mlp);
  EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 3, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 8, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_FALSE(choose_paths(preset("qwen3-30b-a3b", 2, 8, Scheme::kFp8PerTensor), in).expert_mlp);
  EXPECT_FALSE(choose_paths(m257, in).expert_mlp);  // 2056 slots: not measured
  // N = 192: the cluster form's band, 128 to 4096 slots (M = 16..512 at k = 8) while the resident
  // clusters are unknown.
  const MoeProblem wide = preset("qwen3-235b-a22b", 64, 8);
  EXPECT_EQ(wide.intermediate_size, 192);
  EXPECT_TRUE(choose_paths(wide, in).expert_mlp);
  EXPECT_NE(choose_paths(wide, in).reason.find("a cluster an expert's token tile"), std::string::npos)
      << choose_paths(wide, in).reason;
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 16, 8), in).expert_mlp);
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 512, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 12, 8), in).expert_mlp);   // 96 slots
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 8, 8), in).expert_mlp);    // one round unknown
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 513, 8), in).expert_mlp);  // past 4096 slots
  // N = 256 (clusters of 3): 128 to 256 slots in fp8_per_tensor, to 128 in bf16.
  const MoeProblem ds = preset("deepseek-v3", 16, 8);
  EXPECT_EQ(ds.intermediate_size, 256);
  EXPECT_TRUE(choose_paths(ds, in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 32, 8), in).expert_mlp);  // bf16, 256 slots: token-major
  EXPECT_EQ(choose_paths(preset("deepseek-v3", 32, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 64, 8, Scheme::kFp8PerTensor), in).expert_mlp);  // 512 slots
  // One round: the expected units (touched experts) within the resident clusters, from 40 slots
  // (bf16) and 24 (fp8). qwen3-235b on 66 clusters of 2: M = 8 (~52 experts), M = 5 (40 slots) and
  // fp8 M = 3 (24 slots) take it, bf16 M = 4 does not, M = 12 (~69 experts: two rounds) does not.
  in.expert_mlp_clusters = 66;
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 8, 8), in).expert_mlp);
  EXPECT_NE(choose_paths(preset("qwen3-235b-a22b", 8, 8), in).reason.find("one round"), std::string::npos);
  EXPECT_TRUE(choose_paths(preset("qwen3-235b-a22b", 5, 8), in).expert_mlp);
  EXPECT_EQ(choose_paths(preset("qwen3-235b-a22b", 3, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 4, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 12, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 2, 8, Scheme::kFp8PerTensor), in).expert_mlp);  // 16 slots
  // deepseek-v3 on 39 clusters of 3: fp8 M = 3 / 4 (~23 / ~31 experts) and bf16 M = 5 (~37) take
  // it, M = 8 (~58: two rounds) not, bf16 M = 6 (~44: two rounds) not.
  in.expert_mlp_clusters = 39;
  EXPECT_EQ(choose_paths(preset("deepseek-v3", 4, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_EQ(choose_paths(preset("deepseek-v3", 3, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_TRUE(choose_paths(preset("deepseek-v3", 5, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 6, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 8, 8, Scheme::kFp8PerTensor), in).expert_mlp);
  in.expert_mlp_clusters = 0;
  // Clusters of four (gpt-oss TP8, N = 360): bf16 from 32 to 512 slots (M = 8..128 at k = 4), not
  // M = 4 or 256; fp8_per_tensor (w2 as row pairs) from 16 to 1024 (M = 4..256), by the fp8 switch;
  // not fp8_per_channel (the kernel declines it at N = 360).
  const MoeProblem oss = preset("gpt-oss-120b", 8, 8);
  EXPECT_EQ(oss.intermediate_size, 360);
  EXPECT_TRUE(choose_paths(oss, in).expert_mlp);
  EXPECT_TRUE(choose_paths(preset("gpt-oss-120b", 128, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("gpt-oss-120b", 4, 8), in).expert_mlp);
  EXPECT_FALSE(choose_paths(preset("gpt-oss-120b", 256, 8), in).expert_mlp);
  EXPECT_EQ(choose_paths(preset("gpt-oss-120b", 64, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_EQ(choose_paths(preset("gpt-oss-120b", 4, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_FALSE(choose_paths(preset("gpt-oss-120b", 2, 8, Scheme::kFp8PerTensor), in).expert_mlp);
  EXPECT_EQ(choose_paths(preset("gpt-oss-120b", 256, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);
  EXPECT_FALSE(choose_paths(preset("gpt-oss-120b", 257, 8, Scheme::kFp8PerTensor), in).expert_mlp);
  {
    // The GPU dispatch test's shape (Sm90Dispatch.ForcedPathThatCannotRunIsNotSupported: gpt-oss TP8
    // fp8 rows on 16 experts, k = 4): 17 and 66 tokens (68, 264 slots) on the kernel; with it
    // switched off, 66 both GEMMs on Swap-AB (16.5 an expert), token-major declining GEMM2's 360-byte rows.
    detail::RouterInputs g = in;
    g.tokmajor_ok[1] = false;
    g.tokmajor_why[1] = "rows of N = 360 bytes";
    MoeProblem q = preset("gpt-oss-120b", 17, 8, Scheme::kFp8PerTensor);
    q.num_experts = q.num_experts_global = 16;
    EXPECT_EQ(choose_paths(q, g).describe(), "expert_mlp");
    q.num_tokens = 66;
    EXPECT_EQ(choose_paths(q, g).describe(), "expert_mlp");
    g.expert_mlp_in_auto = false;  // MOEKIT_EXPERT_MLP=0
    const detail::DispatchPlan sw = choose_paths(q, g);
    EXPECT_EQ(sw.describe(), "gemm1=swapab gemm2=swapab") << sw.reason;
  }
  const MoeProblem narrow = preset("qwen3-30b-a3b", 64, 16);  // N = 48: not measured, forced only
  EXPECT_EQ(narrow.intermediate_size, 48);
  EXPECT_FALSE(choose_paths(narrow, in).expert_mlp);
  EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 64, 8, Scheme::kFp8PerTensor), in).expert_mlp,
            detail::kRouterTable.expert_mlp_fp8_in_auto);  // fp8: by its own switch
  // fp8_per_channel on its one-CTA form from its own slot floor (48: M = 8 at k = 8), by its switch,
  // and on the cluster form from 32 slots (qwen3-235b TP8, N = 192: M = 4; deepseek-v3 TP8, N = 256)
  // to 2048, whatever the round count.
  const MoeProblem channel = preset("qwen3-30b-a3b", 64, 8, Scheme::kFp8PerChannel);
  EXPECT_EQ(choose_paths(channel, in).expert_mlp, detail::kRouterTable.expert_mlp_channel_in_auto);
  EXPECT_EQ(choose_paths(preset("qwen3-30b-a3b", 8, 8, Scheme::kFp8PerChannel), in).expert_mlp,
            detail::kRouterTable.expert_mlp_channel_in_auto);
  EXPECT_FALSE(choose_paths(preset("qwen3-30b-a3b", 4, 8, Scheme::kFp8PerChannel), in).expert_mlp);  // 32 slots
  EXPECT_EQ(choose_paths(preset("qwen3-235b-a22b", 64, 8, Scheme::kFp8PerChannel), in).expert_mlp,
            detail::kRouterTable.expert_mlp_channel_in_auto);
  EXPECT_EQ(choose_paths(preset("qwen3-235b-a22b", 4, 8, Scheme::kFp8PerChannel), in).expert_mlp,
            detail::kRouterTable.expert_mlp_channel_in_auto);
  EXPECT_EQ(choose_paths(preset("deepseek-v3", 256, 8, Scheme::kFp8PerChannel), in).expert_mlp,
            detail::kRouterTable.expert_mlp_channel_in_auto);
  EXPECT_FALSE(choose_paths(preset("qwen3-235b-a22b", 2, 8, Scheme::kFp8PerChannel), in).expert_mlp);  // 16 slots
  EXPECT_FALSE(choose_paths(preset("deepseek-v3", 512, 8, Scheme::kFp8PerChannel), in).expert_mlp);    // 4096 slots
  in.expert_mlp_in_auto = false;
  EXPECT_FALSE(choose_paths(m16, in).expert_mlp);
  in.forced = "expert_mlp";
  EXPECT_TRUE(choose_paths(m3, in).expert_mlp);  // forced: any call it can run
  EXPECT_EQ(choose_paths(m3, in).reason, "forced");
  EXPECT_TRUE(choose_paths(ds, in).expert_mlp);
  EXPECT_TRUE(choose_paths(narrow, in).expert_mlp);
  EXPECT_TRUE(choose_paths(channel, in).expert_mlp);
  in.expert_mlp_ok = false;
  in.expert_mlp_why = "expert_mlp: intermediate_size must be a multiple of 8 from 16 up to 384";
  try {
    choose_paths(m16, in);
    ADD_FAILURE() << "forced expert_mlp that cannot run did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("intermediate_size must be a multiple of 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moekit
