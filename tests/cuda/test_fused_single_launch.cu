// GPU tests of the single-launch fused MoE path (run_fused_moe_sm90, label gpu) against the CPU
// reference, fused_experts and fused_moe (routed in the launch): the presets' real TP8 shapes (E cut where weight generation would be slow),
// M in {1, 2, 3, 7, 16}, every scheme / activation / bias / weight-on-input option the path
// takes, empty and hot experts, expert_map, more than 16 slots on one expert, NaN-poisoned
// outputs, bitwise determinism, CUDA-graph replay (counters reset between launches), a stress
// run of two streams x eager / graph replays x M under concurrent SM hogs, and the phase timer.
// Skipped without a Hopper (sm_90) GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/kernel_api.hpp"
#include "common/moe_case.hpp"
#include "common/tolerance.hpp"
#include "core/backend.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

// A case on the GPU (the shared DeviceCase: tensors uploaded once, calls on the first M rows)
// run on the fused path directly (run_fused_moe_sm90), with a workspace of its own.
class FusedCase {
 public:
  explicit FusedCase(const MoeCase& c) : dev_(c), spec_(c.spec) {}

  // fused_moe for the first M tokens: routed from the logits in the launch; the routing goes
  // to the case's ids / weights output buffers (read back by run_moe).
  detail::MoeCall call_moe(std::int64_t M, cudaStream_t stream) const {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    return detail::resolve(dev_.moe(M), o);
  }

  std::vector<std::uint16_t> run_moe(std::int64_t M, std::vector<std::int32_t>* ids, std::vector<float>* wts) {
    const detail::MoeCall c = call_moe(M, nullptr);
    void* ws = workspace(c.problem);
    poison(M, nullptr);
    const FusedMoeArgs a = dev_.moe(M);
    EXPECT_EQ(cudaSuccess, cudaMemset(a.experts.topk_ids.data, 0xff, static_cast<std::size_t>(M * spec_.k) * 4));
    cuda::run_fused_moe_sm90(c, ws);
    std::vector<std::uint16_t> bits = fetch(M, nullptr);
    *ids = download<std::int32_t>(a.experts.topk_ids.data, static_cast<std::size_t>(M * spec_.k));
    *wts = download<float>(a.experts.topk_weights.data, static_cast<std::size_t>(M * spec_.k));
    return bits;
  }

  // The resolved call for the first M tokens (validation included).
  detail::MoeCall call(std::int64_t M, cudaStream_t stream) const {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    return detail::resolve(dev_.experts(M), o);
  }

  void* workspace(const MoeProblem& p) {
    const std::size_t need = cuda::fused_workspace_size(p);
    if (need > ws_bytes_) {
      ws_ = dev_alloc(need);
      ws_bytes_ = need;
      // Garbage, not zeros: the launcher must zero what it needs. cudaMemset runs on the legacy
      // default stream, asynchronously to the host: without the synchronization it can land in
      // the middle of a call on a non-blocking stream (GraphReplayEqualsEager's eager call), on
      // counters the launcher has just zeroed (garbage grp_done: GEMM2 reads an unwritten
      // intermediate = 0x5a5a5a5a ~ 1.5e16 -> outputs ~2^51; garbage split tickets: no GEMM1
      // epilogue, the GEMM2 waits never end -> hang) or on an intermediate already written.
      EXPECT_EQ(cudaSuccess, cudaMemset(ws_.get(), 0x5a, need));
      EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
    }
    return ws_.get();
  }

  void poison(std::int64_t M, cudaStream_t stream) {
    EXPECT_EQ(cudaSuccess,
              cudaMemsetAsync(dev_.experts(M).out.data, 0xff, static_cast<std::size_t>(M * spec_.K) * 2, stream));
  }

  // One eager call on `stream` (out NaN-poisoned first); returns out's bits.
  std::vector<std::uint16_t> run(std::int64_t M, cudaStream_t stream = nullptr) {
    const detail::MoeCall c = call(M, stream);
    void* ws = workspace(c.problem);
    poison(M, stream);
    cuda::run_fused_moe_sm90(c, ws);
    return fetch(M, stream);
  }

  std::vector<std::uint16_t> fetch(std::int64_t M, cudaStream_t stream) {
    std::vector<std::uint16_t> bits = dev_.fetch(M, stream);  // synchronizes the stream
    EXPECT_EQ(cudaSuccess, cudaGetLastError());
    return bits;
  }

 private:
  DeviceCase dev_;
  CaseSpec spec_;
  DevPtr ws_;
  std::size_t ws_bytes_ = 0;
};

// The case restricted to its first M tokens (host copy; the reference of the prefix).
MoeCase prefix(const MoeCase& c, std::int64_t M) {
  MoeCase p = c;
  p.spec.M = M;
  p.hidden.resize(static_cast<std::size_t>(M * c.spec.K));
  p.router_logits.resize(static_cast<std::size_t>(M * c.E_global));
  p.topk_ids.resize(static_cast<std::size_t>(M * c.spec.k));
  p.topk_weights.resize(static_cast<std::size_t>(M * c.spec.k));
  return p;
}

// Runs the first M tokens of `c` on the fused path and compares with the CPU reference.
void check_prefix(FusedCase& d, const MoeCase& c, std::int64_t M) {
  SCOPED_TRACE(c.spec.name() + " M=" + std::to_string(M));
  std::string why;
  const detail::MoeCall call = d.call(M, nullptr);
  ASSERT_TRUE(cuda::can_implement_fused_sm90(call.problem, &why)) << why;
  const std::vector<float> got = to_float(d.run(M), c.spec.act_dtype);
  const std::vector<float> ref = reference_output(prefix(c, M));
  // Row by row: an element left NaN (not written) or a wrong token fails at any M.
  EXPECT_TRUE(rows_match(got, ref, c.spec.K, c.spec.scheme, "fused path"));
}

void check_case(const CaseSpec& s, std::initializer_list<std::int64_t> Ms) {
  const MoeCase c = make_case(s);
  FusedCase d(c);
  for (std::int64_t M : Ms) {
    if (M > s.M) continue;
    check_prefix(d, c, M);
  }
}

struct Preset {
  const char* name;
  std::int64_t E, k, K, N;  // N already divided by 8 (TP8)
  Activation act;
  bool bias;
  RoutingMethod routing;
};

// Real TP8 shapes; E is cut (same k, K, N) where generating every expert's weights on the host
// would dominate the test time: the kernel's cost depends on the touched experts only.
const Preset kPresetsTp8[] = {
    {"qwen3-30b-a3b", 128, 8, 2048, 96, Activation::kSilu, false, RoutingMethod::kSoftmaxTopk},
    {"gpt-oss-120b (E cut to 32)", 32, 4, 2880, 360, Activation::kSwigluOai, true, RoutingMethod::kTopkSoftmax},
    {"mixtral-8x7b", 8, 2, 4096, 1792, Activation::kSilu, false, RoutingMethod::kSoftmaxTopk},
    {"qwen3-235b-a22b (E cut to 64)", 64, 8, 4096, 192, Activation::kSilu, false, RoutingMethod::kSoftmaxTopk},
    {"deepseek-v3 (E cut to 32)", 32, 8, 7168, 256, Activation::kSilu, false, RoutingMethod::kSoftmaxTopk},
};

CaseSpec preset_spec(const Preset& p, Scheme scheme, std::int64_t M) {
  CaseSpec s;
  s.M = M;
  s.E = p.E;
  s.k = p.k;
  s.K = p.K;
  s.N = p.N;
  s.scheme = scheme;
  s.activation.kind = p.act;
  s.bias = p.bias;
  s.routing.method = p.routing;
  s.routing.renormalize = true;
  return s;
}

TEST(Sm90FusedSingleLaunch, CanImplementStatesReasons) {
  MoeProblem p;
  p.num_tokens = 4;
  p.num_experts = p.num_experts_global = 8;
  p.top_k = 2;
  p.hidden_size = 256;
  p.intermediate_size = 128;
  std::string why;
  EXPECT_TRUE(cuda::can_implement_fused_sm90(p, &why)) << why;
  MoeProblem q = p;
  q.scheme = Scheme::kFp8Block128;
  EXPECT_TRUE(cuda::can_implement_fused_sm90(q, &why)) << why;
  q = p;
  q.with_routing = true;
  EXPECT_TRUE(cuda::can_implement_fused_sm90(q, &why)) << why;
  q.num_experts = q.num_experts_global = 2048;
  EXPECT_FALSE(cuda::can_implement_fused_sm90(q, &why));
  q = p;
  q.num_tokens = 4096;
  EXPECT_FALSE(cuda::can_implement_fused_sm90(q, &why));
  EXPECT_NE(why.find("slots"), std::string::npos) << why;
  q = p;
  q.hidden_size = 250;
  EXPECT_FALSE(cuda::can_implement_fused_sm90(q, &why));
}

TEST(Sm90FusedSingleLaunch, PresetsTp8Bf16MatchReference) {
  SKIP_WITHOUT_SM90();
  for (const Preset& p : kPresetsTp8) {
    SCOPED_TRACE(p.name);
    check_case(preset_spec(p, Scheme::kBf16, 16), {1, 2, 3, 7, 16});
  }
}

TEST(Sm90FusedSingleLaunch, PresetsTp8Fp8PerTensorMatchReference) {
  SKIP_WITHOUT_SM90();
  for (const Preset& p : kPresetsTp8) {
    SCOPED_TRACE(p.name);
    check_case(preset_spec(p, Scheme::kFp8PerTensor, 16), {1, 2, 3, 7, 16});
    CaseSpec s = preset_spec(p, Scheme::kFp8PerTensor, 16);
    s.static_scales = true;
    check_case(s, {1, 7, 16});
  }
}

TEST(Sm90FusedSingleLaunch, PresetsTp8Fp8PerChannelMatchReference) {
  SKIP_WITHOUT_SM90();
  for (const Preset& p : kPresetsTp8) {
    SCOPED_TRACE(p.name);
    check_case(preset_spec(p, Scheme::kFp8PerChannel, 16), {1, 3, 16});
  }
}

TEST(Sm90FusedSingleLaunch, PresetsTp8Fp8Block128MatchReference) {
  SKIP_WITHOUT_SM90();
  for (const Preset& p : kPresetsTp8) {
    SCOPED_TRACE(p.name);
    check_case(preset_spec(p, Scheme::kFp8Block128, 16), {1, 3, 16});
  }
}

TEST(Sm90FusedSingleLaunch, RoutesFromLogitsLikeTheReference) {
  SKIP_WITHOUT_SM90();
  // qwen3 (softmax_topk, renormalized), gpt-oss (topk_softmax), deepseek (sigmoid_grouped_topk,
  // 8 groups keep 4, scale 2.5, correction bias; E cut to 32, so groups of 4).
  for (int preset : {0, 1, 4}) {
    for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
      CaseSpec s = preset_spec(kPresetsTp8[preset], scheme, 16);
      if (preset == 4) {
        s.routing.method = RoutingMethod::kSigmoidGroupedTopk;
        s.routing.num_groups = 8;
        s.routing.topk_groups = 4;
        s.routing.routed_scaling_factor = 2.5f;
      }
      const MoeCase c = make_case(s);
      FusedCase d(c);
      for (std::int64_t M : {1, 3, 16}) {
        SCOPED_TRACE(s.name() + " fused_moe M=" + std::to_string(M));
        std::string why;
        ASSERT_TRUE(cuda::can_implement_fused_sm90(d.call_moe(M, nullptr).problem, &why)) << why;
        std::vector<std::int32_t> ids;
        std::vector<float> wts;
        const std::vector<float> got = to_float(d.run_moe(M, &ids, &wts), s.act_dtype);
        const MoeCase ref_case = prefix(c, M);
        EXPECT_EQ(ids, ref_case.topk_ids);
        for (std::size_t i = 0; i < wts.size(); ++i) EXPECT_NEAR(wts[i], ref_case.topk_weights[i], 1e-6f) << i;
        EXPECT_TRUE(rows_match(got, reference_output(ref_case), s.K, scheme, "fused_moe"));
      }
    }
  }
}

TEST(Sm90FusedSingleLaunch, OptionsMatchReference) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    for (Activation act : {Activation::kSilu, Activation::kGelu, Activation::kSwigluOai}) {
      for (int variant = 0; variant < 4; ++variant) {
        CaseSpec s;
        s.M = 7;
        s.E = 12;  // not a power of two
        s.k = 3;
        s.K = 264;  // not a multiple of the stage width
        s.N = 40;
        s.scheme = scheme;
        s.activation.kind = act;
        s.bias = variant & 1;
        s.weight_on_input = (variant & 2) != 0;
        s.seed = 11 + variant;
        check_case(s, {1, 2, 7});
      }
    }
  }
}

TEST(Sm90FusedSingleLaunch, Fp16ActivationsMatchReference) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s;
    s.M = 16;
    s.E = 16;
    s.k = 4;
    s.K = 512;
    s.N = 96;
    s.scheme = scheme;
    s.act_dtype = DType::kFp16;
    s.bias = true;
    check_case(s, {1, 3, 16});
  }
}

TEST(Sm90FusedSingleLaunch, EmptyAndHotExperts) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = preset_spec(kPresetsTp8[0], scheme, 16);
    s.pattern = RoutingPattern::kSkewed;  // half of the experts get no tokens
    check_case(s, {1, 16});
    s.pattern = RoutingPattern::kAllToOne;  // every token on experts hot..hot+k-1
    s.hot_expert = 5;
    check_case(s, {1, 2, 16});
  }
}

TEST(Sm90FusedSingleLaunch, MoreThan16SlotsOnOneExpert) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    CaseSpec s;
    s.M = 64;  // 64 slots on each of the k hot experts: 4 token groups each
    s.E = 8;
    s.k = 2;
    s.K = 512;
    s.N = 128;
    s.scheme = scheme;
    s.pattern = RoutingPattern::kAllToOne;
    check_case(s, {17, 33, 64});
  }
}

TEST(Sm90FusedSingleLaunch, ExpertMapDropsRemoteExperts) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    CaseSpec s = preset_spec(kPresetsTp8[0], scheme, 16);
    s.E = 64;  // E_global = 128: odd global ids are on other ranks (-1)
    s.expert_map = true;
    check_case(s, {1, 3, 16});
  }
  // Every slot remote or out of range: the output is zeros, still written everywhere.
  CaseSpec s = preset_spec(kPresetsTp8[0], Scheme::kBf16, 4);
  s.E = 64;
  s.expert_map = true;
  MoeCase c = make_case(s);
  for (std::size_t i = 0; i < c.topk_ids.size(); ++i)
    c.topk_ids[i] = (i % 3 == 0) ? -1 : (i % 3 == 1 ? 1 + 2 * static_cast<std::int32_t>(i % 10) : 100000);
  FusedCase d(c);
  check_prefix(d, c, 4);
}

TEST(Sm90FusedSingleLaunch, NanRowStaysInItsRow) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    CaseSpec s;
    s.M = 5;
    s.E = 8;
    s.k = 2;
    s.K = 256;
    s.N = 64;
    s.scheme = scheme;
    MoeCase c = make_case(s);
    c.hidden[2 * s.K + 17] = 0x7fc0;  // NaN in token 2 (bf16 bits)
    FusedCase d(c);
    const std::vector<float> got = to_float(d.run(s.M), s.act_dtype);
    const std::vector<float> ref = reference_output(c);
    for (std::int64_t m = 0; m < s.M; ++m) {
      bool any_nan = false;
      for (std::int64_t i = 0; i < s.K; ++i) any_nan |= std::isnan(got[m * s.K + i]);
      EXPECT_EQ(any_nan, m == 2) << "token " << m << " " << scheme_name(scheme);
    }
    EXPECT_TRUE(rows_match(got, ref, s.K, scheme, "NaN row case (NaN exactly where the reference has it)"));
  }
}

TEST(Sm90FusedSingleLaunch, BitwiseDeterministic) {
  SKIP_WITHOUT_SM90();
  // qwen3 (GEMM1 split along K) and mixtral (both GEMMs split): the cross-CTA reductions.
  for (int preset : {0, 2}) {
    for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
      const MoeCase c = make_case(preset_spec(kPresetsTp8[preset], scheme, 16));
      FusedCase d(c);
      for (std::int64_t M : {1, 16}) {
        const std::vector<std::uint16_t> first = d.run(M);
        for (int rep = 0; rep < 3; ++rep) EXPECT_EQ(first, d.run(M)) << kPresetsTp8[preset].name << " M=" << M;
      }
    }
  }
}

TEST(Sm90FusedSingleLaunch, GraphReplayEqualsEager) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    const MoeCase c = make_case(preset_spec(kPresetsTp8[0], scheme, 16));
    FusedCase d(c);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (std::int64_t M : {1, 7, 16}) {
      const std::vector<std::uint16_t> eager = d.run(M, stream);
      // The eager result is the yardstick of the replays: check it against the CPU first, so a
      // bad eager call is not reported as ten bad replays.
      ASSERT_TRUE(rows_match(to_float(eager, c.spec.act_dtype), reference_output(prefix(c, M)), c.spec.K, scheme,
                             "M=" + std::to_string(M) + ": the eager call on a non-blocking stream"));
      const detail::MoeCall call = d.call(M, stream);
      void* ws = d.workspace(call.problem);
      // (a) the default launcher (counters zeroed by a memset node in the graph);
      // (b) zero_counters = false: the kernel's own reset must leave them zero for the next replay.
      for (int variant = 0; variant < 2; ++variant) {
        cuda::FusedMoeParams fp = cuda::fused_moe_params(call, ws);
        fp.zero_counters = variant == 0;
        if (!fp.zero_counters) {
          // One zeroing up front; every replay after must find the counters zero again.
          ASSERT_EQ(cudaSuccess, cudaMemsetAsync(ws, 0, fp.workspace_bytes, stream));
        }
        cudaGraph_t graph = nullptr;
        ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        cuda::launch_fused_moe_sm90(fp, stream);
        ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 5; ++rep) {
          d.poison(M, stream);
          ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, stream));
          EXPECT_EQ(eager, d.fetch(M, stream)) << scheme_name(scheme) << " M=" << M << " variant=" << variant
                                                << " replay " << rep;
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      }
    }
    cudaStreamDestroy(stream);
  }
}


// ---- Stress: co-residency, counter reset and workspace ordering under concurrency ----

// Holds SMs for `ns` nanoseconds with `smem` bytes of shared memory per CTA, so that a fused
// grid launched meanwhile cannot find one free SM per CTA: a non-cooperative launch then runs
// part of its grid while the rest waits, and with a second fused launch on another stream both
// can end up spinning on CTAs that never get an SM.
__global__ void hog_sms_kernel(unsigned long long ns) {
  extern __shared__ unsigned char hog_smem[];
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(256);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (threadIdx.x == 0) hog_smem[blockIdx.x & 1023] = 1;
}

// Waits for `ev` at most `seconds`; on a hang it reports and aborts (a hung kernel would block
// the process forever; abort tears its context down). ctest's timeout is the backstop.
void wait_or_abort(cudaEvent_t ev, double seconds, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      ADD_FAILURE() << what << ": " << cudaGetErrorName(e) << " " << cudaGetErrorString(e);
      return;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::fprintf(stderr, "FATAL: %s did not finish in %.0f s: the fused kernel hangs (co-residency or counter "
                           "protocol, see kernel_sm90.cuh); aborting\n", what.c_str(), seconds);
      std::fflush(stderr);
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Back-to-back launches on two non-blocking streams, alternating eager calls, graph replays
// (default launcher: memset node + kernel; zero_counters = false: the kernel's own reset only)
// and M in {1, 7, 16}, while a third stream keeps launching SM hogs. Every launch's output is
// NaN-poisoned before it, copied aside after it, and must equal bitwise the result of a lone
// eager call of the same M (checked against the CPU reference). Catches: a grid that is not
// co-resident (hang), counters left dirty by a launch (hang or garbage in the next one),
// eager-after-graph / graph-after-eager counter mix-ups, missing ordering of the workspace
// initialization. Runs in a few seconds; a hang aborts after 20 s (see wait_or_abort).
TEST(Sm90FusedSingleLaunch, StressStreamsGraphsEagerUnderLoad) {
  SKIP_WITHOUT_SM90();
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaSuccess, cudaGetDevice(&dev));
  ASSERT_EQ(cudaSuccess, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  constexpr int kHogSmem = 100 * 1024;  // + the fused CTA's ~200 KB > 228 KB: never together
  ASSERT_EQ(cudaSuccess, cudaFuncSetAttribute(hog_sms_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHogSmem));
  const std::int64_t kMs[3] = {1, 7, 16};
  constexpr int kLanes = 2, kRounds = 16, kPerRound = 24;

  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerTensor}) {
    SCOPED_TRACE(scheme_name(scheme));
    const MoeCase c = make_case(preset_spec(kPresetsTp8[0], scheme, 16));
    FusedCase d(c);
    const std::int64_t K = c.spec.K;

    // References: lone eager calls on the legacy stream, checked against the CPU.
    std::vector<std::uint16_t> ref[3];
    for (int mi = 0; mi < 3; ++mi) {
      ref[mi] = d.run(kMs[mi]);
      const std::vector<float> cpu = reference_output(prefix(c, kMs[mi]));
      ASSERT_TRUE(rows_match(to_float(ref[mi], c.spec.act_dtype), cpu, K, scheme, "M=" + std::to_string(kMs[mi])));
    }

    cudaStream_t noise = nullptr;
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&noise, cudaStreamNonBlocking));
    struct Lane {
      cudaStream_t stream = nullptr;
      DevPtr out, ws;                // ws: eager calls and default graphs, every M
      DevPtr ws_nozero[3];           // one per M: zero_counters = false graphs only
      DevPtr history;                // [kRounds * kPerRound][16 * K] bf16 bits
      cudaGraphExec_t exec[3][2] = {};  // [M][zero_counters ? 0 : 1]
      std::vector<int> launched_m;   // M index of each launch, in order
    };
    Lane lanes[kLanes];
    const MoeProblem p16 = d.call(16, nullptr).problem;
    const std::size_t ws_bytes = cuda::fused_workspace_size(p16);
    const std::size_t out_bytes = static_cast<std::size_t>(16 * K) * 2;
    for (Lane& L : lanes) {
      ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&L.stream, cudaStreamNonBlocking));
      L.out = dev_alloc(out_bytes);
      L.ws = dev_alloc(ws_bytes);
      L.history = dev_alloc(out_bytes * kRounds * kPerRound);
      ASSERT_EQ(cudaSuccess, cudaMemset(L.ws.get(), 0x5a, ws_bytes));  // garbage: the launcher zeroes
      for (int mi = 0; mi < 3; ++mi) {
        const std::size_t b = cuda::fused_workspace_size(d.call(kMs[mi], nullptr).problem);
        L.ws_nozero[mi] = dev_alloc(b);
        ASSERT_EQ(cudaSuccess, cudaMemset(L.ws_nozero[mi].get(), 0, b));  // the one zeroing they get
      }
    }
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());  // the legacy-stream memsets, before any lane

    auto params = [&](const detail::MoeCall& call, Lane& L, int mi, bool zero) {
      cuda::FusedMoeParams fp = cuda::fused_moe_params(call, zero ? L.ws.get() : L.ws_nozero[mi].get());
      fp.out = L.out.get();
      fp.workspace_bytes = zero ? ws_bytes : cuda::fused_workspace_size(call.problem);
      fp.zero_counters = zero;
      return fp;
    };
    for (Lane& L : lanes) {
      for (int mi = 0; mi < 3; ++mi) {
        const detail::MoeCall call = d.call(kMs[mi], L.stream);
        for (int v = 0; v < 2; ++v) {
          const cuda::FusedMoeParams fp = params(call, L, mi, v == 0);
          cudaGraph_t graph = nullptr;
          ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(L.stream, cudaStreamCaptureModeThreadLocal));
          cuda::launch_fused_moe_sm90(fp, L.stream);
          ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(L.stream, &graph));
          ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&L.exec[mi][v], graph, 0));
          cudaGraphDestroy(graph);
        }
      }
    }

    // The schedule: per lane, launch n has M index and kind from a fixed pseudo-random walk
    // (kind 0: eager default launcher, 1: graph with memset node, 2: graph without).
    std::uint32_t rng = 12345u;
    auto next = [&rng]() {
      rng = rng * 1664525u + 1013904223u;
      return rng >> 8;
    };
    const unsigned long long hog_ns[3] = {4000ull, 15000ull, 40000ull};
    const int hog_grid[3] = {sms / 4, sms / 2 + 3, sms};
    cudaEvent_t done = nullptr;
    ASSERT_EQ(cudaSuccess, cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kPerRound; ++i) {
        for (int l = 0; l < kLanes; ++l) {
          Lane& L = lanes[l];
          const int mi = static_cast<int>(next() % 3);
          const int kind = static_cast<int>(next() % 3);
          const std::uint32_t h = next();
          hog_sms_kernel<<<hog_grid[h % 3], 128, kHogSmem, noise>>>(hog_ns[(h / 3) % 3]);
          ASSERT_EQ(cudaSuccess, cudaGetLastError());
          ASSERT_EQ(cudaSuccess, cudaMemsetAsync(L.out.get(), 0xff, out_bytes, L.stream));  // NaN poison
          if (kind == 0) {
            detail::MoeCall call = d.call(kMs[mi], L.stream);
            call.out = L.out.get();
            cuda::run_fused_moe_sm90(call, L.ws.get());
          } else {
            ASSERT_EQ(cudaSuccess, cudaGraphLaunch(L.exec[mi][kind - 1], L.stream));
          }
          const std::size_t n = L.launched_m.size();
          ASSERT_EQ(cudaSuccess, cudaMemcpyAsync(static_cast<char*>(L.history.get()) + n * out_bytes, L.out.get(),
                                                 static_cast<std::size_t>(kMs[mi] * K) * 2, cudaMemcpyDeviceToDevice,
                                                 L.stream));
          L.launched_m.push_back(mi * 3 + kind);
        }
      }
      for (Lane& L : lanes) {
        ASSERT_EQ(cudaSuccess, cudaEventRecord(done, L.stream));
        wait_or_abort(done, 20.0, "stress round " + std::to_string(round));
      }
    }
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    ASSERT_EQ(cudaSuccess, cudaGetLastError());

    const char* kinds[3] = {"eager", "graph(memset node)", "graph(kernel reset only)"};
    for (int l = 0; l < kLanes; ++l) {
      Lane& L = lanes[l];
      int bad = 0;
      for (std::size_t n = 0; n < L.launched_m.size(); ++n) {
        const int mi = L.launched_m[n] / 3, kind = L.launched_m[n] % 3;
        std::vector<std::uint16_t> got(static_cast<std::size_t>(kMs[mi] * K));
        ASSERT_EQ(cudaSuccess, cudaMemcpy(got.data(), static_cast<char*>(L.history.get()) + n * out_bytes,
                                          got.size() * 2, cudaMemcpyDeviceToHost));
        if (got != ref[mi] && ++bad <= 5) {
          std::size_t first = 0;
          while (first < got.size() && got[first] == ref[mi][first]) ++first;
          ADD_FAILURE() << "lane " << l << " launch " << n << " (" << kinds[kind] << ", M=" << kMs[mi]
                        << "): differs from the lone eager call, first at element " << first << ": 0x" << std::hex
                        << got[first] << " vs 0x" << ref[mi][first] << std::dec;
        }
      }
      EXPECT_EQ(bad, 0) << "lane " << l << ": " << bad << " of " << L.launched_m.size() << " launches differ";
      for (auto& per_m : L.exec)
        for (cudaGraphExec_t& e : per_m) cudaGraphExecDestroy(e);
      cudaStreamDestroy(L.stream);
    }
    cudaEventDestroy(done);
    cudaStreamDestroy(noise);
  }
}

// The in-kernel phase timer (build with -DMOEKIT_FUSED_PHASE_TIMER=ON; skipped otherwise):
// prints, per CTA, where the single launch's time goes (qwen3-30b TP8, bf16, M = 1 and 16), in
// microseconds from the earliest CTA start; MOEKIT_PHASE_CSV=<path> also writes every record.
TEST(Sm90FusedSingleLaunch, PhaseTimerDump) {
  SKIP_WITHOUT_SM90();
  if (!cuda::fused_phase_timer_enabled()) GTEST_SKIP() << "built without MOEKIT_FUSED_PHASE_TIMER";
  namespace fm = cuda::fused_moe;
  constexpr int kMaxCtas = 1024;
  DevPtr buf = dev_alloc(static_cast<std::size_t>(kMaxCtas) * fm::kPhaseWords * 8);
  const MoeCase c = make_case(preset_spec(kPresetsTp8[0], Scheme::kBf16, 16));
  FusedCase d(c);
  const char* csv_path = std::getenv("MOEKIT_PHASE_CSV");
  std::FILE* csv = csv_path != nullptr ? std::fopen(csv_path, "w") : nullptr;
  if (csv != nullptr)
    std::fprintf(csv, "M,cta,smid,items1,items2,combines,start_us,routed_us,setup_us,gemm1_done_us,first_wait_us,"
                      "last_wait_end_us,wait_us,gemm2_done_us,combine_done_us,end_us\n");
  for (std::int64_t M : {1, 16}) {
    // Warm-up: the timed call then finds the touched weights in L2 (a few MB of a 50 MB L2), as
    // a benchmark loop over one layer does; a real decode step over many layers would not.
    for (int warm = 0; warm < 5; ++warm) d.run(M);
    ASSERT_EQ(cudaSuccess, cudaMemset(buf.get(), 0, static_cast<std::size_t>(kMaxCtas) * fm::kPhaseWords * 8));
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    cuda::set_fused_phase_buffer(static_cast<std::uint64_t*>(buf.get()), kMaxCtas);
    d.run(M);
    cuda::set_fused_phase_buffer(nullptr, 0);
    std::vector<std::uint64_t> r(static_cast<std::size_t>(kMaxCtas) * fm::kPhaseWords);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(r.data(), buf.get(), r.size() * 8, cudaMemcpyDeviceToHost));
    const int grid = static_cast<int>(r[fm::kPhaseGrid]);
    ASSERT_GT(grid, 0) << "no record written (M=" << M << ")";
    std::uint64_t t0 = ~0ull, t1 = 0;
    for (int b = 0; b < grid; ++b) {
      t0 = std::min(t0, r[b * fm::kPhaseWords + fm::kPhaseStart]);
      t1 = std::max(t1, r[b * fm::kPhaseWords + fm::kPhaseEnd]);
    }
    auto us = [t0](std::uint64_t t) { return t == 0 ? -1.0 : static_cast<double>(t - t0) * 1e-3; };
    std::printf("fused phase timer: qwen3-30b TP8 bf16 M=%lld, grid %d, %llu items, first start -> last end %.2f us\n",
                static_cast<long long>(M), grid, static_cast<unsigned long long>(r[fm::kPhaseTotalItems]),
                static_cast<double>(t1 - t0) * 1e-3);
    const fm::PhaseWord cols[] = {fm::kPhaseStart,       fm::kPhaseRouted,       fm::kPhaseSetup,
                                  fm::kPhaseGemm1Done,   fm::kPhaseFirstWait,    fm::kPhaseLastWaitEnd,
                                  fm::kPhaseGemm2Done,   fm::kPhaseCombineDone,  fm::kPhaseEnd};
    const char* names[] = {"start", "routed", "setup", "gemm1_done", "first_wait", "last_wait_end", "gemm2_done",
                           "combine_done", "end"};
    std::printf("  %-14s %8s %8s %8s  (us from the first start, over CTAs that reach the phase)\n", "phase", "min",
                "median", "max");
    for (int ci = 0; ci < 9; ++ci) {
      std::vector<double> v;
      for (int b = 0; b < grid; ++b)
        if (r[b * fm::kPhaseWords + cols[ci]] != 0) v.push_back(us(r[b * fm::kPhaseWords + cols[ci]]));
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf("  %-14s %8.2f %8.2f %8.2f  (%zu CTAs)\n", names[ci], v.front(), v[v.size() / 2], v.back(), v.size());
    }
    std::vector<double> w;
    for (int b = 0; b < grid; ++b) w.push_back(static_cast<double>(r[b * fm::kPhaseWords + fm::kPhaseWaitNs]) * 1e-3);
    std::sort(w.begin(), w.end());
    std::printf("  %-14s %8.2f %8.2f %8.2f  (us spent spinning, per CTA)\n", "wait_total", w.front(), w[w.size() / 2],
                w.back());
    std::printf("  cta smid it1 it2 cmb  routed   setup  g1done  wait0  waitEnd  waitUs  g2done   comb     end\n");
    for (int b = 0; b < grid; ++b) {
      const std::uint64_t* x = &r[static_cast<std::size_t>(b) * fm::kPhaseWords];
      auto n = [x](fm::PhaseWord w) { return static_cast<unsigned long long>(x[w]); };
      const double wait_us = static_cast<double>(x[fm::kPhaseWaitNs]) * 1e-3;
      std::printf("  %3d %4llu %3llu %3llu %3llu %7.2f %7.2f %7.2f %6.2f %8.2f %7.2f %7.2f %6.2f %7.2f\n", b,
                  n(fm::kPhaseSmid), n(fm::kPhaseItems1), n(fm::kPhaseItems2), n(fm::kPhaseCombines),
                  us(x[fm::kPhaseRouted]), us(x[fm::kPhaseSetup]), us(x[fm::kPhaseGemm1Done]),
                  us(x[fm::kPhaseFirstWait]), us(x[fm::kPhaseLastWaitEnd]), wait_us, us(x[fm::kPhaseGemm2Done]),
                  us(x[fm::kPhaseCombineDone]), us(x[fm::kPhaseEnd]));
      if (csv != nullptr)
        std::fprintf(csv, "%lld,%d,%llu,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
                     static_cast<long long>(M), b, n(fm::kPhaseSmid), n(fm::kPhaseItems1), n(fm::kPhaseItems2),
                     n(fm::kPhaseCombines), us(x[fm::kPhaseStart]), us(x[fm::kPhaseRouted]), us(x[fm::kPhaseSetup]),
                     us(x[fm::kPhaseGemm1Done]), us(x[fm::kPhaseFirstWait]), us(x[fm::kPhaseLastWaitEnd]), wait_us,
                     us(x[fm::kPhaseGemm2Done]), us(x[fm::kPhaseCombineDone]), us(x[fm::kPhaseEnd]));
    }
  }
  if (csv != nullptr) std::fclose(csv);
}

}  // namespace
}  // namespace moekit::testing
