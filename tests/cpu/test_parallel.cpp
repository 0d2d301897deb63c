// Tensor and expert parallelism on the CPU reference: the TP shard math (the sum over ranks of
// fused_experts on each rank's shard equals the unsharded op), the EP bookkeeping (dispatch,
// unpack, combine) and a whole EP round trip emulated rank by rank in one process, and the
// expert_map / expert range helpers' edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/moe_case.hpp"
#include "common/tolerance.hpp"
#include "moekit/moekit.hpp"
#include "moekit/parallel.hpp"

namespace moekit::testing {
namespace {

using i64 = std::int64_t;

Options cpu_options() {
  Options o;
  o.backend = Backend::kCpu;
  return o;
}

// fused_experts of `a` on the CPU into a fresh [M, K] buffer, as floats.
std::vector<float> run_cpu(FusedExpertsArgs a, DType act) {
  const i64 M = a.hidden.shape[0], K = a.hidden.shape[1];
  std::vector<std::uint16_t> out(static_cast<std::size_t>(M * K), 0xffff);
  a.out = TensorView::contiguous(out.data(), act, {M, K});
  fused_experts(a, cpu_options());
  return to_float(out, act);
}

CaseSpec spec_for(Scheme scheme, bool bias, i64 N) {
  CaseSpec s;
  s.M = 24;
  s.E = 8;
  s.k = 2;
  s.K = 256;
  s.N = N;
  s.scheme = scheme;
  s.bias = bias;
  if (bias) s.activation.kind = Activation::kSwigluOai;  // gpt-oss: the preset with biases
  s.seed = 7;
  return s;
}

// Weights [E, R, C] of `q` dequantized (q * scale, the scheme's scale layout) and rounded to bf16.
std::vector<std::uint16_t> dequantize_bf16(const QuantizedWeights& q, Scheme scheme) {
  const i64 E = q.shape[0], R = q.shape[1], C = q.shape[2];
  const i64 RB = (R + 127) / 128, CB = (C + 127) / 128;
  std::vector<std::uint16_t> out(static_cast<std::size_t>(E * R * C));
  for (i64 e = 0; e < E; ++e)
    for (i64 r = 0; r < R; ++r)
      for (i64 c = 0; c < C; ++c) {
        const i64 i = (e * R + r) * C + c;
        float s = 1.0f;
        if (scheme == Scheme::kFp8PerTensor) s = q.scale[e];
        if (scheme == Scheme::kFp8PerChannel) s = q.scale[e * R + r];
        if (scheme == Scheme::kFp8Block128) s = q.scale[(e * RB + r / 128) * CB + c / 128];
        out[i] = float_to_bf16(load_as_float(q.data.data(), q.dtype, i) * s);
      }
  return out;
}

// The case computed without activation quantization: its fp8 weights dequantized, scheme bf16.
// The yardstick for calls whose dynamic activation scales legitimately differ from the unsharded
// op's (a rank's scale sees only its own channels or rows): they must be no less accurate.
std::vector<float> high_precision_output(const MoeCase& c) {
  const std::vector<std::uint16_t> w13 = dequantize_bf16(c.w13, c.spec.scheme);
  const std::vector<std::uint16_t> w2 = dequantize_bf16(c.w2, c.spec.scheme);
  FusedExpertsArgs a = c.host_args(nullptr);
  a.scheme = Scheme::kBf16;
  a.weights.w13 = TensorView::contiguous(w13.data(), DType::kBf16, {c.spec.E, 2 * c.spec.N, c.spec.K});
  a.weights.w2 = TensorView::contiguous(w2.data(), DType::kBf16, {c.spec.E, c.spec.K, c.spec.N});
  a.weights.w13_scale = TensorView{};
  a.weights.w2_scale = TensorView{};
  a.a13_scale = TensorView{};
  a.a2_scale = TensorView{};
  return run_cpu(a, c.spec.act_dtype);
}

// `got` (a sharded run) against the unsharded reference `ref`: within tolerance(scheme) when the
// sharding leaves every scale as it was; otherwise (scales_move) at least as accurate as the
// unsharded op against the high-precision result, and within 2x tolerance of it as a sanity bound.
void expect_matches_unsharded(const MoeCase& c, const std::vector<float>& got, const std::vector<float>& ref,
                              bool scales_move, const std::string& what) {
  const double err = relative_error(got, ref);
  if (!scales_move) {
    EXPECT_LE(err, tolerance(c.spec.scheme)) << c.spec.name() << " " << what;
    return;
  }
  const std::vector<float> hp = high_precision_output(c);
  const double err_sharded = relative_error(got, hp), err_unsharded = relative_error(ref, hp);
  if (std::getenv("MOEKIT_TEST_VERBOSE"))
    std::printf("%s %s: vs unsharded %.4f; vs high precision: sharded %.4f, unsharded %.4f\n", c.spec.name().c_str(),
                what.c_str(), err, err_sharded, err_unsharded);
  EXPECT_LE(err_sharded, 1.1 * err_unsharded + 2e-3)
      << c.spec.name() << " " << what << ": sharded " << err_sharded << " vs unsharded " << err_unsharded
      << " from the high-precision result";
  EXPECT_LE(err, 2 * tolerance(c.spec.scheme)) << c.spec.name() << " " << what;
}

// ---- expert ranges and maps ------------------------------------------------------------------

TEST(CpuParallel, ExpertRangesPartitionContiguously) {
  for (i64 E : {1, 3, 8, 10, 72, 257})
    for (int ep : {1, 2, 3, 4, 8, 16}) {
      i64 next = 0;
      for (int r = 0; r < ep; ++r) {
        const ExpertRange range = expert_range_for_rank(E, ep, r);
        EXPECT_EQ(range.first, next) << "E=" << E << " ep=" << ep << " r=" << r;
        EXPECT_EQ(range.count, E / ep + (r < E % ep ? 1 : 0));
        next += range.count;
        const std::vector<std::int32_t> map = expert_map_for_rank(E, ep, r);
        ASSERT_EQ(static_cast<i64>(map.size()), E);
        for (i64 e = 0; e < E; ++e) {
          const bool mine = e >= range.first && e < range.first + range.count;
          EXPECT_EQ(map[e], mine ? static_cast<std::int32_t>(e - range.first) : -1);
          if (mine) EXPECT_EQ(expert_owner(E, ep, e), r);
        }
      }
      EXPECT_EQ(next, E);
      EXPECT_EQ(expert_owner(E, ep, -1), -1);
      EXPECT_EQ(expert_owner(E, ep, E), -1);
    }
}

TEST(CpuParallel, ExpertRangeEdgeCases) {
  // More ranks than experts: the last ranks own nothing.
  EXPECT_EQ(expert_range_for_rank(3, 8, 2).count, 1);
  EXPECT_EQ(expert_range_for_rank(3, 8, 3).count, 0);
  EXPECT_EQ(expert_range_for_rank(3, 8, 7).first, 3);
  const std::vector<std::int32_t> empty = expert_map_for_rank(3, 8, 5);
  EXPECT_TRUE(std::all_of(empty.begin(), empty.end(), [](std::int32_t v) { return v == -1; }));
  // One rank: the identity.
  const std::vector<std::int32_t> id = expert_map_for_rank(5, 1, 0);
  for (int e = 0; e < 5; ++e) EXPECT_EQ(id[e], e);
  // DeepSeek-V3 at EP8: 32 experts a rank.
  EXPECT_EQ(expert_range_for_rank(256, 8, 5).first, 160);
  EXPECT_EQ(expert_owner(256, 8, 255), 7);
  for (auto bad : {std::make_tuple(i64{8}, 0, 0), std::make_tuple(i64{8}, 2, 2), std::make_tuple(i64{8}, 2, -1),
                   std::make_tuple(i64{0}, 1, 0)}) {
    try {
      expert_range_for_rank(std::get<0>(bad), std::get<1>(bad), std::get<2>(bad));
      ADD_FAILURE() << "no error for E=" << std::get<0>(bad) << " ep=" << std::get<1>(bad) << " r=" << std::get<2>(bad);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    }
  }
}

// ---- tensor parallel shards ------------------------------------------------------------------

TEST(CpuParallel, TpShardKeepsGateAndUpSlicesAndW2Columns) {
  const MoeCase c = make_case(spec_for(Scheme::kBf16, true, 128));
  const ExpertWeights full = c.host_args(nullptr).weights;
  const i64 E = 8, N = 128, K = 256, t = 4, n = N / t;
  for (int r = 0; r < t; ++r) {
    const ShardedExperts s = shard_experts_tp(full, Scheme::kBf16, t, r);
    ASSERT_EQ(s.w13.shape, (std::vector<i64>{E, 2 * n, K}));
    ASSERT_EQ(s.w2.shape, (std::vector<i64>{E, K, n}));
    const auto* w13 = reinterpret_cast<const std::uint16_t*>(s.w13.data.data());
    const auto* w2 = reinterpret_cast<const std::uint16_t*>(s.w2.data.data());
    const auto* f13 = reinterpret_cast<const std::uint16_t*>(c.w13.data.data());
    const auto* f2 = reinterpret_cast<const std::uint16_t*>(c.w2.data.data());
    for (i64 e = 0; e < E; ++e) {
      for (i64 i = 0; i < n; ++i)
        for (i64 col = 0; col < K; col += 17) {
          EXPECT_EQ(w13[(e * 2 * n + i) * K + col], f13[(e * 2 * N + r * n + i) * K + col]);
          EXPECT_EQ(w13[(e * 2 * n + n + i) * K + col], f13[(e * 2 * N + N + r * n + i) * K + col]);
        }
      for (i64 row = 0; row < K; row += 13)
        for (i64 i = 0; i < n; ++i) EXPECT_EQ(w2[(e * K + row) * n + i], f2[(e * K + row) * N + r * n + i]);
      for (i64 i = 0; i < n; ++i) {
        EXPECT_EQ(reinterpret_cast<const std::uint16_t*>(s.b13.data.data())[e * 2 * n + i], c.b13[e * 2 * N + r * n + i]);
        EXPECT_EQ(reinterpret_cast<const std::uint16_t*>(s.b13.data.data())[e * 2 * n + n + i],
                  c.b13[e * 2 * N + N + r * n + i]);
      }
    }
    // b2 on rank 0 only, so the sum over ranks adds it once.
    EXPECT_EQ(s.b2.data.empty(), r != 0);
    EXPECT_EQ(s.weights().b2.present(), r == 0);
  }
}

struct TpCase {
  Scheme scheme;
  bool bias;
  i64 N;
  int tp;
  bool static_scales = false;  // kFp8PerTensor: a13_scale / a2_scale given
};

class CpuParallelTp : public ::testing::TestWithParam<TpCase> {};

TEST_P(CpuParallelTp, SumOfRankShardsEqualsUnshardedOp) {
  const TpCase tc = GetParam();
  CaseSpec spec = spec_for(tc.scheme, tc.bias, tc.N);
  spec.static_scales = tc.static_scales;
  const MoeCase c = make_case(spec);
  const std::vector<float> ref = reference_output(c);
  const FusedExpertsArgs base = c.host_args(nullptr);
  std::vector<float> sum(ref.size(), 0.0f);
  for (int r = 0; r < tc.tp; ++r) {
    const ShardedExperts s = shard_experts_tp(base.weights, tc.scheme, tc.tp, r);
    FusedExpertsArgs a = base;
    a.weights = s.weights();
    const std::vector<float> part = run_cpu(a, c.spec.act_dtype);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  // The all-reduce sums the ranks' act-dtype outputs: round the fp32 sum once more, as it would.
  for (float& v : sum) v = round_to(c.spec.act_dtype, v);
  // A rank re-quantizes GEMM2's input from its N/tp channels: dynamic per-tensor and per-token
  // scales then differ from the unsharded op's (1x128 groups and static scales do not).
  const bool scales_move =
      (tc.scheme == Scheme::kFp8PerTensor && !tc.static_scales) || tc.scheme == Scheme::kFp8PerChannel;
  expect_matches_unsharded(c, sum, ref, scales_move, "tp=" + std::to_string(tc.tp));
}

std::string tp_name(const ::testing::TestParamInfo<TpCase>& info) {
  std::string s = std::string(scheme_name(info.param.scheme)) + (info.param.bias ? "_bias" : "") +
                  (info.param.static_scales ? "_static" : "") + "_N" + std::to_string(info.param.N) + "_tp" +
                  std::to_string(info.param.tp);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, CpuParallelTp,
    ::testing::Values(TpCase{Scheme::kBf16, false, 128, 2}, TpCase{Scheme::kBf16, true, 128, 4},
                      TpCase{Scheme::kBf16, false, 96, 8}, TpCase{Scheme::kFp8PerTensor, false, 128, 2},
                      TpCase{Scheme::kFp8PerTensor, true, 128, 4},
                      TpCase{Scheme::kFp8PerTensor, false, 128, 2, true}, TpCase{Scheme::kFp8PerTensor, true, 128, 8, true},
                      TpCase{Scheme::kFp8PerChannel, false, 128, 2},
                      TpCase{Scheme::kFp8PerChannel, true, 128, 4}, TpCase{Scheme::kFp8Block128, false, 256, 2},
                      TpCase{Scheme::kFp8Block128, true, 512, 4}),
    tp_name);

TEST(CpuParallel, TpShardRejectsIllegalCuts) {
  const MoeCase c = make_case(spec_for(Scheme::kFp8Block128, false, 256));
  const ExpertWeights full = c.host_args(nullptr).weights;
  try {
    shard_experts_tp(full, Scheme::kFp8Block128, 4, 0);  // N/tp = 64: scale blocks straddle ranks
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
  }
  const MoeCase b = make_case(spec_for(Scheme::kBf16, false, 96));
  for (auto bad : {std::make_pair(5, 0), std::make_pair(2, 2), std::make_pair(0, 0)}) {
    try {
      shard_experts_tp(b.host_args(nullptr).weights, Scheme::kBf16, bad.first, bad.second);
      ADD_FAILURE() << "no error for tp=" << bad.first << " rank=" << bad.second;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    }
  }
  // Wrong scheme for the weights: the same message fused_experts would give.
  EXPECT_THROW(shard_experts_tp(b.host_args(nullptr).weights, Scheme::kFp8PerTensor, 2, 0), Error);
}

// ---- expert parallel ----------------------------------------------------------------------

TEST(CpuParallel, EpExpertMapSlicesSumToUnshardedOp) {
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    CaseSpec spec = spec_for(scheme, true, 128);
    spec.E = 10;
    const MoeCase c = make_case(spec);
    const std::vector<float> ref = reference_output(c);
    const FusedExpertsArgs base = c.host_args(nullptr);
    const int ep = 4;
    std::vector<float> sum(ref.size(), 0.0f);
    for (int r = 0; r < ep; ++r) {
      const ShardedExperts s = shard_experts_ep(base.weights, scheme, ep, r);
      EXPECT_EQ(s.first_expert, expert_range_for_rank(10, ep, r).first);
      const std::vector<std::int32_t> map = expert_map_for_rank(10, ep, r);
      FusedExpertsArgs a = base;
      a.weights = s.weights();
      a.expert_map = TensorView::contiguous(map.data(), DType::kInt32, {10});
      const std::vector<float> part = run_cpu(a, spec.act_dtype);
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    for (float& v : sum) v = round_to(spec.act_dtype, v);
    EXPECT_LE(relative_error(sum, ref), tolerance(scheme)) << spec.name();
  }
}

TEST(CpuParallel, EpDispatchPacksSlotsInOrderPerDestination) {
  // M = 3 tokens, k = 2, E = 6 over ep = 3 (experts {0,1}, {2,3}, {4,5}); id 9 is out of range.
  const i64 M = 3, k = 2, K = 8, ep = 3, C = M * k;
  const std::vector<std::int32_t> ids = {4, 1, 0, 5, 9, 4};
  const std::vector<float> w = {0.5f, 0.25f, 1.f, 2.f, 3.f, 4.f};
  std::vector<std::uint16_t> hidden(M * K);
  for (i64 i = 0; i < M * K; ++i) hidden[i] = float_to_bf16(static_cast<float>(i));
  std::vector<std::int32_t> route(M * k), counts(ep), meta(ep * C * 2, -7);
  std::vector<std::uint16_t> send(ep * C * K, 0xdead);
  EpDispatchArgs a;
  a.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {M, K});
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {M, k});
  a.topk_weights = TensorView::contiguous(w.data(), DType::kFp32, {M, k});
  a.num_experts_global = 6;
  a.ep_size = ep;
  a.slot_route = TensorView::contiguous(route.data(), DType::kInt32, {M * k});
  a.send_counts = TensorView::contiguous(counts.data(), DType::kInt32, {ep});
  a.send_hidden = TensorView::contiguous(send.data(), DType::kBf16, {ep, C, K});
  a.send_meta = TensorView::contiguous(meta.data(), DType::kInt32, {ep, C, 2});
  ep_dispatch(a);
  EXPECT_EQ(counts, (std::vector<std::int32_t>{2, 0, 3}));
  EXPECT_EQ(route, (std::vector<std::int32_t>{2 * C + 0, 0, 1, 2 * C + 1, -1, 2 * C + 2}));
  // Row 2*C+1 is token 1 (slot 3: expert 5, weight 2).
  EXPECT_EQ(meta[2 * (2 * C + 1)], 5);
  float wt;
  std::memcpy(&wt, &meta[2 * (2 * C + 1) + 1], 4);
  EXPECT_EQ(wt, 2.f);
  for (i64 c = 0; c < K; ++c) EXPECT_EQ(send[(2 * C + 1) * K + c], hidden[1 * K + c]);

  // Unpack on rank 2 (experts 4, 5) of what rank 0 sent it, as if ranks 1 and 2 sent nothing.
  std::vector<std::int32_t> rcounts = {3, 0, 0}, rmeta(ep * C * 2, 0), lids(ep * C);
  std::vector<float> lw(ep * C);
  std::vector<std::uint16_t> rhidden(ep * C * K, 0x3f80);
  std::copy(meta.begin() + 2 * 2 * C, meta.begin() + 2 * 3 * C, rmeta.begin());
  EpUnpackArgs u;
  u.recv_counts = TensorView::contiguous(rcounts.data(), DType::kInt32, {ep});
  u.recv_meta = TensorView::contiguous(rmeta.data(), DType::kInt32, {ep, C, 2});
  u.recv_hidden = TensorView::contiguous(rhidden.data(), DType::kBf16, {ep, C, K});
  u.first_expert = 4;
  u.num_local_experts = 2;
  u.zero_unused_rows = true;
  u.local_ids = TensorView::contiguous(lids.data(), DType::kInt32, {ep * C});
  u.local_weights = TensorView::contiguous(lw.data(), DType::kFp32, {ep * C});
  ep_unpack(u);
  EXPECT_EQ(lids[0], 0);
  EXPECT_EQ(lids[1], 1);
  EXPECT_EQ(lids[2], 0);
  EXPECT_EQ(lw[2], 4.f);
  for (i64 r = 3; r < ep * C; ++r) {
    EXPECT_EQ(lids[r], -1);
    EXPECT_EQ(lw[r], 0.f);
    EXPECT_EQ(rhidden[r * K], 0);  // zeroed
  }
  EXPECT_EQ(rhidden[0], 0x3f80);  // valid rows untouched

  // Combine: token 0 = returned[2C] + returned[0]; token 2 = returned[2C+2] (slot 4 unrouted).
  std::vector<std::uint16_t> ret(ep * C * K), out(M * K, 0xffff);
  for (i64 r = 0; r < ep * C; ++r)
    for (i64 c = 0; c < K; ++c) ret[r * K + c] = float_to_bf16(static_cast<float>(r) + 0.5f * c);
  EpCombineArgs cb;
  cb.slot_route = a.slot_route;
  cb.returned = TensorView::contiguous(ret.data(), DType::kBf16, {ep, C, K});
  cb.out = TensorView::contiguous(out.data(), DType::kBf16, {M, K});
  cb.top_k = k;
  ep_combine(cb);
  for (i64 c = 0; c < K; ++c) {
    EXPECT_EQ(bf16_to_float(out[0 * K + c]), round_to(DType::kBf16, (2 * C + 0.5f * c) + (0 + 0.5f * c)));
    EXPECT_EQ(bf16_to_float(out[2 * K + c]), round_to(DType::kBf16, 2 * C + 2 + 0.5f * c));
  }
}

// One EP rank's buffers in the emulation.
struct EpRank {
  i64 m0 = 0, M = 0;
  ExpertRange range;
  ShardedExperts weights;
  std::vector<std::int32_t> route, counts, send_meta, recv_meta, recv_counts, local_ids;
  std::vector<float> local_weights;
  std::vector<std::uint16_t> send_hidden, recv_hidden, expert_out, returned;
};

// The whole EP round trip of ep_fused_experts, rank after rank in one process: each rank owns
// tokens [m0, m0 + M) of the case and experts range; "the network" is memcpy of the regions.
std::vector<float> emulate_ep(const MoeCase& c, int ep) {
  const CaseSpec& s = c.spec;
  const i64 Mt = s.M, k = s.k, K = s.K, E = s.E;
  const DType act = s.act_dtype;
  const FusedExpertsArgs base = c.host_args(nullptr);
  std::vector<EpRank> ranks(static_cast<std::size_t>(ep));
  // Uneven token counts: rank r starts at Mt * r(r+1) / (ep(ep+1)), so later ranks hold more.
  for (int r = 0; r < ep; ++r) ranks[r].m0 = Mt * r * (r + 1) / (ep * (ep + 1));
  i64 max_m = 0;
  for (int r = 0; r < ep; ++r) {
    ranks[r].M = (r + 1 < ep ? ranks[r + 1].m0 : Mt) - ranks[r].m0;
    max_m = std::max(max_m, ranks[r].M);
  }
  const i64 C = ep_capacity(max_m, k), rows = ep * C;
  const std::size_t region = static_cast<std::size_t>(C * K);
  for (int r = 0; r < ep; ++r) {
    EpRank& R = ranks[r];
    R.range = expert_range_for_rank(E, ep, r);
    R.weights = shard_experts_ep(base.weights, s.scheme, ep, r);
    R.route.resize(R.M * k);
    R.counts.resize(ep);
    R.send_meta.assign(rows * 2, 0x7fffffff);
    R.send_hidden.assign(rows * K, 0x7fc1);  // garbage (a bf16 NaN) where nothing is packed
    EpDispatchArgs a;
    a.hidden = TensorView::contiguous(c.hidden.data() + R.m0 * K, act, {R.M, K});
    a.topk_ids = TensorView::contiguous(c.topk_ids.data() + R.m0 * k, DType::kInt32, {R.M, k});
    a.topk_weights = TensorView::contiguous(c.topk_weights.data() + R.m0 * k, DType::kFp32, {R.M, k});
    a.num_experts_global = E;
    a.ep_size = ep;
    a.slot_route = TensorView::contiguous(R.route.data(), DType::kInt32, {R.M * k});
    a.send_counts = TensorView::contiguous(R.counts.data(), DType::kInt32, {ep});
    a.send_hidden = TensorView::contiguous(R.send_hidden.data(), act, {ep, C, K});
    a.send_meta = TensorView::contiguous(R.send_meta.data(), DType::kInt32, {ep, C, 2});
    ep_dispatch(a);
  }
  // Exchange: rank d's region s <- rank s's region d.
  for (int d = 0; d < ep; ++d) {
    EpRank& D = ranks[d];
    D.recv_counts.resize(ep);
    D.recv_meta.resize(rows * 2);
    D.recv_hidden.resize(rows * K);
    for (int src = 0; src < ep; ++src) {
      D.recv_counts[src] = ranks[src].counts[d];
      std::copy_n(ranks[src].send_meta.begin() + d * C * 2, C * 2, D.recv_meta.begin() + src * C * 2);
      std::copy_n(ranks[src].send_hidden.begin() + d * region, region, D.recv_hidden.begin() + src * region);
    }
  }
  for (int d = 0; d < ep; ++d) {
    EpRank& D = ranks[d];
    D.local_ids.resize(rows);
    D.local_weights.resize(rows);
    EpUnpackArgs u;
    u.recv_counts = TensorView::contiguous(D.recv_counts.data(), DType::kInt32, {ep});
    u.recv_meta = TensorView::contiguous(D.recv_meta.data(), DType::kInt32, {ep, C, 2});
    u.recv_hidden = TensorView::contiguous(D.recv_hidden.data(), act, {ep, C, K});
    u.first_expert = D.range.first;
    u.num_local_experts = D.range.count;
    u.zero_unused_rows = true;  // the garbage rows hold NaN; per-tensor absmax must not see them
    u.local_ids = TensorView::contiguous(D.local_ids.data(), DType::kInt32, {rows});
    u.local_weights = TensorView::contiguous(D.local_weights.data(), DType::kFp32, {rows});
    ep_unpack(u);
    FusedExpertsArgs in = base;
    in.weights = D.weights.weights();
    in.hidden = TensorView::contiguous(D.recv_hidden.data(), act, {rows, K});
    in.topk_ids = TensorView::contiguous(D.local_ids.data(), DType::kInt32, {rows, 1});
    in.topk_weights = TensorView::contiguous(D.local_weights.data(), DType::kFp32, {rows, 1});
    in.expert_map = TensorView{};
    D.expert_out.assign(rows * K, 0);
    in.out = TensorView::contiguous(D.expert_out.data(), act, {rows, K});
    fused_experts(in, cpu_options());
  }
  std::vector<std::uint16_t> out(static_cast<std::size_t>(Mt * K), 0xffff);
  for (int src = 0; src < ep; ++src) {
    EpRank& S = ranks[src];
    S.returned.resize(rows * K);
    for (int d = 0; d < ep; ++d)
      std::copy_n(ranks[d].expert_out.begin() + src * region, region, S.returned.begin() + d * region);
    EpCombineArgs cb;
    cb.slot_route = TensorView::contiguous(S.route.data(), DType::kInt32, {S.M * k});
    cb.returned = TensorView::contiguous(S.returned.data(), act, {ep, C, K});
    cb.out = TensorView::contiguous(out.data() + S.m0 * K, act, {S.M, K});
    cb.top_k = k;
    ep_combine(cb);
  }
  return to_float(out, act);
}

struct EpCase {
  Scheme scheme;
  int ep;
  i64 E;
  bool bias;
  bool weight_on_input;
  bool static_scales = false;
};

class CpuParallelEp : public ::testing::TestWithParam<EpCase> {};

TEST_P(CpuParallelEp, EmulatedRoundTripEqualsUnshardedOp) {
  const EpCase ec = GetParam();
  CaseSpec spec = spec_for(ec.scheme, ec.bias, 128);
  spec.E = ec.E;
  spec.k = 3;
  spec.weight_on_input = ec.weight_on_input;
  spec.static_scales = ec.static_scales;
  const MoeCase c = make_case(spec);
  const std::vector<float> ref = reference_output(c);
  const std::vector<float> got = emulate_ep(c, ec.ep);
  // A rank's dynamic per-tensor scales see only the rows sent to it; per-token and 1x128 scales
  // see the same rows as unsharded.
  const bool scales_move = ec.scheme == Scheme::kFp8PerTensor && !ec.static_scales;
  expect_matches_unsharded(c, got, ref, scales_move, "ep=" + std::to_string(ec.ep));
}

std::string ep_name(const ::testing::TestParamInfo<EpCase>& info) {
  return std::string(scheme_name(info.param.scheme)) + "_ep" + std::to_string(info.param.ep) + "_E" +
         std::to_string(info.param.E) + (info.param.bias ? "_bias" : "") +
         (info.param.weight_on_input ? "_won" : "") + (info.param.static_scales ? "_static" : "");
}

INSTANTIATE_TEST_SUITE_P(Schemes, CpuParallelEp,
                         ::testing::Values(EpCase{Scheme::kBf16, 2, 8, false, false},
                                           EpCase{Scheme::kBf16, 4, 10, true, false},
                                           EpCase{Scheme::kBf16, 3, 8, false, true},
                                           EpCase{Scheme::kBf16, 8, 8, false, false},
                                           EpCase{Scheme::kFp8PerTensor, 2, 8, false, false},
                                           EpCase{Scheme::kFp8PerTensor, 4, 10, true, false},
                                           EpCase{Scheme::kFp8PerTensor, 4, 10, true, false, true},
                                           EpCase{Scheme::kFp8PerChannel, 4, 8, false, false},
                                           EpCase{Scheme::kFp8Block128, 4, 8, true, false}),
                         ep_name);

TEST(CpuParallel, EpBookkeepingRejectsBadBuffers) {
  const i64 M = 2, k = 2, K = 8, ep = 2;
  std::vector<std::uint16_t> hidden(M * K), send(ep * 3 * K);
  std::vector<std::int32_t> ids(M * k), route(M * k), counts(ep), meta(ep * 3 * 2);
  std::vector<float> w(M * k);
  EpDispatchArgs a;
  a.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {M, K});
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {M, k});
  a.topk_weights = TensorView::contiguous(w.data(), DType::kFp32, {M, k});
  a.num_experts_global = 4;
  a.ep_size = ep;
  a.slot_route = TensorView::contiguous(route.data(), DType::kInt32, {M * k});
  a.send_counts = TensorView::contiguous(counts.data(), DType::kInt32, {ep});
  a.send_hidden = TensorView::contiguous(send.data(), DType::kBf16, {ep, 3, K});  // C = 3 < M*k = 4
  a.send_meta = TensorView::contiguous(meta.data(), DType::kInt32, {ep, 3, 2});
  try {
    ep_dispatch(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos) << e.what();
  }
}

TEST(CpuParallel, CommunicatorNeedsCudaAndNccl) {
  std::string why;
  if (nccl_available(&why)) GTEST_SKIP() << "this binary has NCCL; the multigpu suite tests it";
  EXPECT_FALSE(why.empty());
  try {
    Communicator::unique_id();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported) << e.what();
  }
}

}  // namespace
}  // namespace moekit::testing
