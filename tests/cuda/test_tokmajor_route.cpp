// The routing in the token-major GEMM1 (MOEKIT_TOKMAJOR_ROUTE; docs/tokmajor.md "Routing in
// GEMM1"): a bf16 / fp16 or fp8_per_tensor fused_experts chain whose GEMM1 counts and places the
// call's slots itself,
// with no routing launch, against the same chain with the routing launch, bit for bit, and
// against the CPU reference. The slots each unit places are the routing launch's stable order,
// GEMM1 writes the offsets, sorted slots and router weights GEMM2 reads, and bad ids / expert_map
// entries are dropped and recorded as the routing launch does. Skipped without a Hopper GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "cuda/kernels/tokmajor/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

Options cuda_options() {
  Options o;
  o.backend = Backend::kCuda;
  return o;
}

// One call of the first M tokens on the token-major path with the routing in GEMM1 off ("0") or
// forced on ("1"); `routed` says whether GEMM1 took it (one route launch more). The workspace is
// poisoned first, so that GEMM2 cannot read tables a previous call's routing launch left there.
std::vector<std::uint16_t> run_route(DeviceCase& d, std::int64_t M, const char* route, bool* routed) {
  ScopedEnv env("MOEKIT_TOKMAJOR_ROUTE", route);
  d.poison_workspace(M, CallMode::kFusedExperts);
  const int before = cuda::tokmajor_route_launches();
  std::vector<std::uint16_t> out = d.run(M, CallMode::kFusedExperts, "tokmajor");
  *routed = cuda::tokmajor_route_launches() == before + 1;
  return out;
}

struct RouteCase {
  std::string name;
  CaseSpec spec;
  std::vector<std::int64_t> tokens;
};

std::vector<RouteCase> route_cases() {
  std::vector<RouteCase> v;
  auto base = [](std::int64_t M, std::int64_t E, std::int64_t k, std::int64_t K, std::int64_t N) {
    CaseSpec s;
    s.M = M;
    s.E = E;
    s.k = k;
    s.K = K;
    s.N = N;
    s.scheme = Scheme::kBf16;
    s.seed = 45;
    return s;
  };
  // Decode-sized: a few rows an expert, two column tiles (N = 256), K with a tail stage.
  v.push_back({"qwen-like", base(64, 32, 8, 1056, 256), {1, 3, 17, 64}});
  // Experts of several token tiles (up to 300 rows: three tiles, the last partial), one expert
  // holding every slot, k = 1.
  {
    RouteCase c{"all-on-one", base(300, 16, 1, 256, 128), {1, 129, 300}};
    c.spec.pattern = RoutingPattern::kAllToOne;
    c.spec.hot_expert = 5;
    v.push_back(c);
  }
  // The most slots the kernel routes (512 x 8 = 4096: four id batches, every producer warp's
  // share of the list), experts without rows, an expert_map with remote experts (-1 entries).
  {
    RouteCase c{"many-slots-map", base(512, 64, 8, 256, 128), {129, 511, 512}};
    c.spec.expert_map = true;
    v.push_back(c);
  }
  {
    RouteCase c{"skewed", base(256, 64, 8, 256, 128), {64, 256}};
    c.spec.pattern = RoutingPattern::kSkewed;
    v.push_back(c);
  }
  // Two slots of one token on the same expert, odd E, fp16 activations, swiglu_oai with biases.
  {
    RouteCase c{"duplicates-fp16", base(65, 257, 4, 256, 128), {1, 65}};
    c.spec.pattern = RoutingPattern::kDuplicates;
    c.spec.act_dtype = DType::kFp16;
    v.push_back(c);
  }
  {
    RouteCase c{"bias-swiglu", base(40, 16, 4, 512, 192), {1, 40}};
    c.spec.bias = true;
    c.spec.activation.kind = Activation::kSwigluOai;
    v.push_back(c);
  }
  // fp8_per_tensor (e4m3 weights, per-expert scales): hidden's dynamic scale from the
  // quantization's own absmax instead of the routing launch's absmax CTAs (the same max, so the
  // same bytes): the one-CTA quantization up to M x K = 32 K elements (M = 1, 3, 17), the absmax
  // and quantization launches past it (M = 64).
  {
    RouteCase c{"qwen-like-fp8", base(64, 32, 8, 1056, 256), {1, 3, 17, 64}};
    c.spec.scheme = Scheme::kFp8PerTensor;
    v.push_back(c);
  }
  // 4096 slots: the routing launch it replaces is the multi-CTA permutation (count + scatter).
  {
    RouteCase c{"many-slots-map-fp8", base(512, 64, 8, 256, 128), {129, 512}};
    c.spec.scheme = Scheme::kFp8PerTensor;
    c.spec.expert_map = true;
    v.push_back(c);
  }
  // Static activation scales (a13_scale, a2_scale): no absmax at all.
  {
    RouteCase c{"static-scales-fp8", base(48, 16, 4, 512, 192), {1, 48}};
    c.spec.scheme = Scheme::kFp8PerTensor;
    c.spec.static_scales = true;
    v.push_back(c);
  }
  return v;
}

TEST(Sm90TokmajorRoute, MatchesTheRoutingLaunchBitwise) {
  SKIP_WITHOUT_SM90();
  take_fault(nullptr, cuda_options());
  for (const RouteCase& rc : route_cases()) {
    MoeCase c = make_case(rc.spec);
    DeviceCase d(c);
    for (std::int64_t M : rc.tokens) {
      const std::string what = rc.name + " M = " + std::to_string(M);
      bool routed_off = true, routed_on = false, routed_again = false;
      const std::vector<std::uint16_t> launch = run_route(d, M, "0", &routed_off);
      const std::vector<std::uint16_t> in_gemm1 = run_route(d, M, "1", &routed_on);
      const std::vector<std::uint16_t> again = run_route(d, M, "1", &routed_again);
      EXPECT_FALSE(routed_off) << what << ": MOEKIT_TOKMAJOR_ROUTE=0 routed in GEMM1";
      ASSERT_TRUE(routed_on && routed_again) << what << ": GEMM1 did not route the call (the switch did not take)";
      EXPECT_TRUE(launch == in_gemm1) << what << ": the routing in GEMM1 differs from the routing launch";
      EXPECT_TRUE(in_gemm1 == again) << what << ": two runs differ";
      EXPECT_TRUE(rows_match(to_float(in_gemm1, rc.spec.act_dtype), reference_rows(c, 0, M), rc.spec.K, rc.spec.scheme,
                             "routing in GEMM1, " + what));
      // No bad id or entry here (remote experts' -1 entries are not faults): nothing recorded.
      Fault f;
      EXPECT_FALSE(take_fault(&f, cuda_options())) << what << ": " << f.to_string();
    }
  }
}

TEST(Sm90TokmajorRoute, GraphReplayEqualsEager) {
  SKIP_WITHOUT_SM90();
  // The memset of the tile counters and GEMM1's writes of the sorted lists replay with the graph.
  CaseSpec s;
  s.M = 96;
  s.E = 32;
  s.k = 8;
  s.K = 512;
  s.N = 256;
  s.seed = 46;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  ScopedEnv env("MOEKIT_TOKMAJOR_ROUTE", "1");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int before = cuda::tokmajor_route_launches();
  const std::vector<std::uint16_t> eager = d.run(96, CallMode::kFusedExperts, "tokmajor", stream);
  ASSERT_EQ(cuda::tokmajor_route_launches(), before + 1) << "the eager call did not route in GEMM1";
  // The workspace poisoned before every replay: the graph's memset and GEMM1 rebuild what GEMM2 reads.
  const auto replays = d.replay_in_graph(96, CallMode::kFusedExperts, "tokmajor", stream, 3, /*poison_ws=*/true);
  EXPECT_EQ(cuda::tokmajor_route_launches(), before + 2) << "the captured call did not route in GEMM1";
  ASSERT_EQ(replays.size(), 3u);
  for (const auto& r : replays) EXPECT_TRUE(r == eager) << "a replay differs from the eager call";
  EXPECT_TRUE(rows_match(to_float(eager, s.act_dtype), reference_rows(c, 0, 96), s.K, Scheme::kBf16, "graph case"));
  cudaStreamDestroy(stream);
}

TEST(Sm90TokmajorRoute, BadIdsAreDroppedAndRecorded) {
  SKIP_WITHOUT_SM90();
  // A bad id (out of range) and a bad expert_map entry: the slot is dropped (the output equals the
  // routing launch's with the same ids) and the call records the fault. (The combine records a
  // dropped slot too; Sm90TokMajorGemm.RouteInKernelMatchesTheTables checks GEMM1's own record.)
  CaseSpec s;
  s.M = 33;
  s.E = 16;
  s.k = 4;
  s.K = 256;
  s.N = 128;
  s.expert_map = true;
  s.seed = 47;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  const FusedExpertsArgs a = d.experts(s.M);
  std::vector<std::int32_t> ids = c.topk_ids;
  ids[5 * s.k + 2] = static_cast<std::int32_t>(c.E_global) + 3;
  ASSERT_EQ(cudaSuccess, cudaMemcpy(a.topk_ids.data, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  take_fault(nullptr, cuda_options());
  bool routed = true;
  const std::vector<std::uint16_t> launch = run_route(d, s.M, "0", &routed);
  EXPECT_FALSE(routed);
  Fault f_launch;
  ASSERT_TRUE(take_fault(&f_launch, cuda_options())) << "the routing launch did not record the bad id";
  const std::vector<std::uint16_t> in_gemm1 = run_route(d, s.M, "1", &routed);
  ASSERT_TRUE(routed);
  Fault f;
  ASSERT_TRUE(take_fault(&f, cuda_options())) << "the routed call did not record the bad id";
  EXPECT_TRUE(launch == in_gemm1) << "the dropped slot changed other values";
  EXPECT_EQ(f.tensor, FaultTensor::kTopkIds);
  EXPECT_EQ(f.row, 5);
  EXPECT_EQ(f.slot, 2);
  EXPECT_EQ(f.value, f_launch.value);
  // A map entry out of range (not -1: a remote expert is not a fault).
  std::vector<std::int32_t> map = c.expert_map;
  const std::int32_t id = ids[7 * s.k + 1];
  map[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(s.E) + 9;
  ids[5 * s.k + 2] = c.topk_ids[5 * s.k + 2];
  ASSERT_EQ(cudaSuccess, cudaMemcpy(a.topk_ids.data, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_EQ(cudaSuccess, cudaMemcpy(a.expert_map.data, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
  take_fault(nullptr, cuda_options());
  const std::vector<std::uint16_t> launch2 = run_route(d, s.M, "0", &routed);
  EXPECT_FALSE(routed);
  ASSERT_TRUE(take_fault(nullptr, cuda_options())) << "the routing launch did not record the bad map entry";
  const std::vector<std::uint16_t> in_gemm1_2 = run_route(d, s.M, "1", &routed);
  ASSERT_TRUE(routed);
  ASSERT_TRUE(take_fault(&f, cuda_options())) << "the routed call did not record the bad map entry";
  EXPECT_TRUE(launch2 == in_gemm1_2);
  EXPECT_EQ(f.tensor, FaultTensor::kExpertMap);
  EXPECT_EQ(f.value, static_cast<std::int32_t>(s.E) + 9);
  EXPECT_EQ(f.expert, id);
  ASSERT_EQ(cudaSuccess, cudaMemcpy(a.expert_map.data, c.expert_map.data(), map.size() * 4, cudaMemcpyHostToDevice));
}

TEST(Sm90TokmajorRoute, DeclinesWhatItCannotRoute) {
  SKIP_WITHOUT_SM90();
  // More slots than the kernel routes, per-channel fp8, router weights on the input: the chain keeps the
  // routing launch (MOEKIT_TOKMAJOR_ROUTE=1 forces it only where GEMM1 can route) and is right.
  struct Decline {
    const char* name;
    CaseSpec spec;
    std::int64_t M;
  };
  std::vector<Decline> v;
  {
    CaseSpec s;
    s.M = 520;
    s.E = 16;
    s.k = 8;  // 4160 slots > 4096
    v.push_back({"4160 slots", s, 520});
  }
  {
    CaseSpec s;
    s.M = 17;
    s.scheme = Scheme::kFp8PerChannel;
    v.push_back({"fp8_per_channel", s, 17});
  }
  {
    CaseSpec s;
    s.M = 17;
    s.weight_on_input = true;
    s.k = 1;
    v.push_back({"weight on input", s, 17});
  }
  for (Decline& x : v) {
    x.spec.seed = 48;
    MoeCase c = make_case(x.spec);
    DeviceCase d(c);
    bool routed = true;
    const std::vector<std::uint16_t> out = run_route(d, x.M, "1", &routed);
    EXPECT_FALSE(routed) << x.name << ": GEMM1 routed a call it cannot";
    EXPECT_TRUE(rows_match(to_float(out, x.spec.act_dtype), reference_rows(c, 0, x.M), x.spec.K, x.spec.scheme, x.name));
  }
}

TEST(Sm90TokmajorRoute, SmallForSanitizers) {
  SKIP_WITHOUT_SM90();
  // One small routed call for compute-sanitizer (memcheck; racecheck: the producer warps' unit
  // slots, written and read across the producer warpgroup's named barrier).
  CaseSpec s;
  s.M = 24;
  s.E = 8;
  s.k = 4;
  s.K = 256;
  s.N = 128;
  s.expert_map = true;
  s.seed = 49;
  MoeCase c = make_case(s);
  DeviceCase d(c);
  bool routed = false;
  const std::vector<std::uint16_t> out = run_route(d, s.M, "1", &routed);
  ASSERT_TRUE(routed);
  EXPECT_TRUE(rows_match(to_float(out, s.act_dtype), reference_rows(c, 0, s.M), s.K, Scheme::kBf16, "small"));
}

}  // namespace
}  // namespace moekit::testing
