// Argument validation (src/core/validate.cpp): every bad input of BRIEF §5 gets an Error with the
// right Status whose message names the argument and the values; valid inputs describe() to the
// right MoeProblem. Validation never touches tensor data, so "CUDA" views here wrap host memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "moekit/moekit.hpp"

namespace moekit {
namespace {

// Runs `fn`, expects Error with `status` and every one of `parts` in its message.
void expect_error(const std::function<void()>& fn, Status status, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "message lacks \"" << p << "\": " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-moekit exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

void expect_invalid(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  expect_error(fn, Status::kInvalidArgument, parts);
}

// Host buffers of one valid call, sized from the dims; views are made fresh by args().
// Memory comes from std::vector<std::uint64_t> so every pointer is 16-byte aligned (glibc malloc).
struct Buffer {
  std::vector<std::uint64_t> words;
  void* data(std::size_t bytes) {
    words.assign(bytes / 8 + 2, 0);
    return words.data();
  }
};

struct CallBufs {
  std::int64_t M = 4, E = 8, k = 2, K = 256, N = 128;
  Scheme scheme = Scheme::kBf16;
  DType act = DType::kBf16;
  Device device = Device::cpu();
  bool bias = false;
  DType bias_dtype = DType::kFp32;
  std::int64_t e_global = 0;  // > 0: pass an expert_map of this length
  bool static_scales = false;

  Buffer hidden_, out_, w13_, w2_, s13_, s2_, b13_, b2_, ids_, wts_, map_, a13_, a2_, logits_, cbias_;

  TensorView view(Buffer& b, DType d, std::initializer_list<std::int64_t> shape) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    return TensorView::contiguous(b.data(static_cast<std::size_t>(n) * dtype_size(d)), d, shape, device);
  }

  FusedExpertsArgs args() {
    FusedExpertsArgs a;
    a.scheme = scheme;
    a.hidden = view(hidden_, act, {M, K});
    a.out = view(out_, act, {M, K});
    const bool fp8 = scheme != Scheme::kBf16;
    const DType wd = fp8 ? DType::kFp8E4m3 : act;
    a.weights.w13 = view(w13_, wd, {E, 2 * N, K});
    a.weights.w2 = view(w2_, wd, {E, K, N});
    const std::int64_t b = kBlockQuant;
    switch (scheme) {
      case Scheme::kBf16: break;
      case Scheme::kFp8PerTensor:
        a.weights.w13_scale = view(s13_, DType::kFp32, {E});
        a.weights.w2_scale = view(s2_, DType::kFp32, {E});
        break;
      case Scheme::kFp8PerChannel:
        a.weights.w13_scale = view(s13_, DType::kFp32, {E, 2 * N});
        a.weights.w2_scale = view(s2_, DType::kFp32, {E, K});
        break;
      case Scheme::kFp8Block128:
        a.weights.w13_scale = view(s13_, DType::kFp32, {E, (2 * N + b - 1) / b, (K + b - 1) / b});
        a.weights.w2_scale = view(s2_, DType::kFp32, {E, (K + b - 1) / b, (N + b - 1) / b});
        break;
    }
    if (bias) {
      a.weights.b13 = view(b13_, bias_dtype, {E, 2 * N});
      a.weights.b2 = view(b2_, bias_dtype, {E, K});
    }
    a.topk_ids = view(ids_, DType::kInt32, {M, k});
    a.topk_weights = view(wts_, DType::kFp32, {M, k});
    if (e_global > 0) a.expert_map = view(map_, DType::kInt32, {e_global});
    if (static_scales) {
      a.a13_scale = view(a13_, DType::kFp32, {1});
      a.a2_scale = view(a2_, DType::kFp32, {1});
    }
    return a;
  }

  FusedMoeArgs moe_args(RoutingConfig routing = {}) {
    FusedMoeArgs m;
    routing.top_k = static_cast<int>(k);
    m.routing = routing;
    m.experts = args();
    m.router_logits = view(logits_, DType::kFp32, {M, e_global > 0 ? e_global : E});
    return m;
  }
};

RoutingConfig deepseek_routing(int k) {
  RoutingConfig r;
  r.method = RoutingMethod::kSigmoidGroupedTopk;
  r.top_k = k;
  r.num_groups = 8;
  r.topk_groups = 4;
  r.routed_scaling_factor = 2.5f;
  return r;
}

// ---------------------------------------------------------------- valid inputs

TEST(CpuValidation, DescribesBf16Problem) {
  CallBufs s;
  const MoeProblem p = describe(s.args());
  EXPECT_EQ(p.num_tokens, 4);
  EXPECT_EQ(p.num_experts, 8);
  EXPECT_EQ(p.num_experts_global, 8);
  EXPECT_EQ(p.top_k, 2);
  EXPECT_EQ(p.hidden_size, 256);
  EXPECT_EQ(p.intermediate_size, 128);
  EXPECT_EQ(p.scheme, Scheme::kBf16);
  EXPECT_EQ(p.act_dtype, DType::kBf16);
  EXPECT_FALSE(p.has_expert_map);
  EXPECT_FALSE(p.has_bias13);
  EXPECT_FALSE(p.has_bias2);
  EXPECT_FALSE(p.static_a13_scale);
  EXPECT_FALSE(p.with_routing);
  EXPECT_FALSE(p.apply_router_weight_on_input);
}

TEST(CpuValidation, DescribesFp16Activations) {
  CallBufs s;
  s.act = DType::kFp16;
  EXPECT_EQ(describe(s.args()).act_dtype, DType::kFp16);
}

TEST(CpuValidation, DescribesEveryFp8Scheme) {
  for (Scheme scheme : {Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    for (std::int64_t N : {128, 96, 200}) {  // N % 128 != 0: ceil'd block scales
      CallBufs s;
      s.scheme = scheme;
      s.N = N;
      s.K = 300;
      const MoeProblem p = describe(s.args());
      EXPECT_EQ(p.scheme, scheme) << scheme_name(scheme);
      EXPECT_EQ(p.intermediate_size, N);
      EXPECT_EQ(p.hidden_size, 300);
      EXPECT_FALSE(p.static_a13_scale);
    }
  }
}

TEST(CpuValidation, DescribesOptionalTensors) {
  CallBufs s;
  s.scheme = Scheme::kFp8PerTensor;
  s.bias = true;
  s.bias_dtype = DType::kBf16;
  s.static_scales = true;
  s.e_global = 32;
  s.k = 12;  // k > E is fine when k <= E_global
  FusedExpertsArgs a = s.args();
  a.apply_router_weight_on_input = true;
  a.activation.kind = Activation::kSwigluOai;
  const MoeProblem p = describe(a);
  EXPECT_TRUE(p.has_bias13);
  EXPECT_TRUE(p.has_bias2);
  EXPECT_EQ(p.bias_dtype, DType::kBf16);
  EXPECT_TRUE(p.static_a13_scale);
  EXPECT_TRUE(p.static_a2_scale);
  EXPECT_TRUE(p.has_expert_map);
  EXPECT_EQ(p.num_experts, 8);
  EXPECT_EQ(p.num_experts_global, 32);
  EXPECT_EQ(p.top_k, 12);
  EXPECT_TRUE(p.apply_router_weight_on_input);
  EXPECT_EQ(p.activation.kind, Activation::kSwigluOai);

  CallBufs f;
  f.bias = true;
  f.bias_dtype = DType::kFp32;
  FusedExpertsArgs b = f.args();
  b.weights.b2 = TensorView{};  // b13 alone
  const MoeProblem q = describe(b);
  EXPECT_TRUE(q.has_bias13);
  EXPECT_FALSE(q.has_bias2);
  EXPECT_EQ(q.bias_dtype, DType::kFp32);
}

TEST(CpuValidation, AcceptsZeroTokens) {
  CallBufs s;
  s.M = 0;
  FusedExpertsArgs a = s.args();
  // A view with zero elements may have a null pointer.
  a.hidden.data = nullptr;
  a.out.data = nullptr;
  a.topk_ids.data = nullptr;
  a.topk_weights.data = nullptr;
  const MoeProblem p = describe(a);
  EXPECT_EQ(p.num_tokens, 0);
  EXPECT_EQ(p.top_k, 2);
}

TEST(CpuValidation, AcceptsKEqualsE) {
  CallBufs s;
  s.k = s.E;
  EXPECT_EQ(describe(s.args()).top_k, 8);
}

TEST(CpuValidation, AcceptsScalarStaticScale) {
  CallBufs s;
  s.scheme = Scheme::kFp8PerTensor;
  FusedExpertsArgs a = s.args();
  float scale = 0.5f;
  a.a13_scale = TensorView::contiguous(&scale, DType::kFp32, {});
  EXPECT_TRUE(describe(a).static_a13_scale);
}

TEST(CpuValidation, DescribesFusedMoe) {
  CallBufs s;
  s.E = 16;
  s.k = 4;
  FusedMoeArgs m = s.moe_args(deepseek_routing(4));
  float cb[16] = {};
  m.e_score_correction_bias = TensorView::contiguous(cb, DType::kFp32, {16});
  const MoeProblem p = describe(m);
  EXPECT_TRUE(p.with_routing);
  EXPECT_EQ(p.routing.method, RoutingMethod::kSigmoidGroupedTopk);
  EXPECT_EQ(p.routing.num_groups, 8);
  EXPECT_EQ(p.top_k, 4);
  EXPECT_TRUE(p.has_correction_bias);
  EXPECT_EQ(p.logits_dtype, DType::kFp32);

  // topk_ids / topk_weights are optional outputs of fused_moe.
  m.experts.topk_ids = TensorView{};
  m.experts.topk_weights = TensorView{};
  m.e_score_correction_bias = TensorView{};
  EXPECT_FALSE(describe(m).has_correction_bias);
  const detail::MoeCall call = detail::resolve(m, Options{});
  EXPECT_EQ(call.topk_ids_out, nullptr);
  EXPECT_EQ(call.topk_weights_out, nullptr);
}

TEST(CpuValidation, FusedMoeBf16LogitsAndExpertMap) {
  CallBufs s;
  s.e_global = 24;
  FusedMoeArgs m = s.moe_args();
  std::vector<std::uint16_t> logits(static_cast<std::size_t>(s.M * 24));
  m.router_logits = TensorView::contiguous(logits.data(), DType::kBf16, {s.M, 24});
  const MoeProblem p = describe(m);
  EXPECT_EQ(p.logits_dtype, DType::kBf16);
  EXPECT_EQ(p.num_experts_global, 24);
  const detail::MoeCall call = detail::resolve(m, Options{});
  EXPECT_EQ(call.router_logits, logits.data());
  EXPECT_EQ(static_cast<const void*>(call.topk_ids_out), m.experts.topk_ids.data);
}

TEST(CpuValidation, ResolveFillsPointersAndOptions) {
  CallBufs s;
  s.scheme = Scheme::kFp8Block128;
  s.bias = true;
  FusedExpertsArgs a = s.args();
  Options o;
  o.path = "fused";
  o.num_threads = 3;
  const detail::MoeCall c = detail::resolve(a, o);
  EXPECT_EQ(c.hidden, a.hidden.data);
  EXPECT_EQ(c.out, a.out.data);
  EXPECT_EQ(c.w13, a.weights.w13.data);
  EXPECT_EQ(c.w2, a.weights.w2.data);
  EXPECT_EQ(static_cast<const void*>(c.w13_scale), a.weights.w13_scale.data);
  EXPECT_EQ(static_cast<const void*>(c.w2_scale), a.weights.w2_scale.data);
  EXPECT_EQ(c.b13, a.weights.b13.data);
  EXPECT_EQ(c.b2, a.weights.b2.data);
  EXPECT_EQ(static_cast<const void*>(c.topk_ids), a.topk_ids.data);
  EXPECT_EQ(static_cast<const void*>(c.topk_weights), a.topk_weights.data);
  EXPECT_EQ(c.expert_map, nullptr);
  EXPECT_EQ(c.a13_scale, nullptr);
  EXPECT_STREQ(c.forced_path, "fused");
  EXPECT_EQ(c.num_threads, 3);
  EXPECT_EQ(c.device, 0);
}

TEST(CpuValidation, ForcedPathFromEnvironment) {
  CallBufs s;
  ::setenv("MOEKIT_PATH", "swap_ab", 1);
  const detail::MoeCall c = detail::resolve(s.args(), Options{});
  ASSERT_NE(c.forced_path, nullptr);
  EXPECT_STREQ(c.forced_path, "swap_ab");
  Options o;
  o.path = "token_major";  // the option wins over the environment
  EXPECT_STREQ(detail::resolve(s.args(), o).forced_path, "token_major");
  ::unsetenv("MOEKIT_PATH");
  EXPECT_EQ(detail::resolve(s.args(), Options{}).forced_path, nullptr);
}

TEST(CpuValidation, CudaDeviceIndexFromTensors) {
  CallBufs s;
  s.device = Device::cuda(3);
  const detail::MoeCall c = detail::resolve(s.args(), Options{});
  EXPECT_EQ(c.device, 3);
}

TEST(CpuValidation, ResolvesRoute) {
  CallBufs s;
  s.E = 64;
  s.k = 6;
  RouteArgs r;
  r.routing = deepseek_routing(6);
  r.router_logits = s.view(s.logits_, DType::kBf16, {s.M, 64});
  r.e_score_correction_bias = s.view(s.cbias_, DType::kFp32, {64});
  r.topk_ids = s.view(s.ids_, DType::kInt32, {s.M, 6});
  r.topk_weights = s.view(s.wts_, DType::kFp32, {s.M, 6});
  const detail::RouteCall c = detail::resolve(r, Options{});
  EXPECT_EQ(c.num_tokens, 4);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.routing.top_k, 6);
  EXPECT_EQ(c.logits_dtype, DType::kBf16);
  EXPECT_EQ(static_cast<void*>(c.topk_ids), r.topk_ids.data);
  EXPECT_NE(c.correction_bias, nullptr);
}

// ---------------------------------------------------------------- missing tensors

TEST(CpuValidation, RejectsMissingTensors) {
  CallBufs s;
  for (const char* name : {"hidden", "out", "w13", "w2", "topk_ids", "topk_weights"}) {
    FusedExpertsArgs a = s.args();
    const std::string n = name;
    if (n == "hidden") a.hidden = {};
    if (n == "out") a.out = {};
    if (n == "w13") a.weights.w13 = {};
    if (n == "w2") a.weights.w2 = {};
    if (n == "topk_ids") a.topk_ids = {};
    if (n == "topk_weights") a.topk_weights = {};
    expect_invalid([&] { describe(a); }, {n + " is required"});
  }
  CallBufs q;
  q.scheme = Scheme::kFp8PerChannel;
  FusedExpertsArgs a = q.args();
  a.weights.w2_scale = {};
  expect_invalid([&] { describe(a); }, {"w2_scale is required", "fp8_per_channel"});
  FusedMoeArgs m = s.moe_args();
  m.router_logits = {};
  expect_invalid([&] { describe(m); }, {"router_logits is required"});
}

// ---------------------------------------------------------------- wrong shapes

TEST(CpuValidation, RejectsW13WithWrongK) {
  CallBufs s;
  s.M = 16;
  s.K = 4096;
  s.E = 2;
  s.N = 8;
  FusedExpertsArgs a = s.args();
  // Validation never reads weights, so a large shape over a small buffer is enough here.
  std::vector<std::uint16_t> w(8);
  a.weights.w13 = TensorView::contiguous(w.data(), DType::kBf16, {128, 1536, 2048});
  expect_invalid([&] { describe(a); },
                 {"w13 has shape [128, 1536, 2048], expected [E=128, 2N=1536, K=4096] (K from hidden [16, 4096])"});
  a.weights.w13 = TensorView::contiguous(w.data(), DType::kBf16, {1536, 4096});
  expect_invalid([&] { describe(a); }, {"w13 has shape [1536, 4096], expected [E, 2N, K=4096]"});
}

TEST(CpuValidation, RejectsW2WithWrongShape) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  std::vector<std::uint16_t> w(8);
  a.weights.w2 = TensorView::contiguous(w.data(), DType::kBf16, {8, 256, 64});
  expect_invalid([&] { describe(a); },
                 {"w2 has shape [8, 256, 64], expected [E=8, K=256, N=128]", "w13 [8, 256, 256]", "hidden [4, 256]"});
  a.weights.w2 = TensorView::contiguous(w.data(), DType::kBf16, {8, 256});
  expect_invalid([&] { describe(a); }, {"w2 has shape [8, 256], expected [E=8, K=256, N=128]"});
}

TEST(CpuValidation, RejectsOddW13Rows) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.weights.w13.shape[1] = 255;
  a.weights.w13.strides[0] = 255 * 256;
  expect_invalid([&] { describe(a); }, {"w13 has shape [8, 255, 256]", "even", "255"});
}

TEST(CpuValidation, RejectsHiddenAndOutShapes) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.hidden = TensorView::contiguous(a.hidden.data, DType::kBf16, {4, 16, 16});
  expect_invalid([&] { describe(a); }, {"hidden has shape [4, 16, 16], expected [M, K]"});
  a = s.args();
  a.out = TensorView::contiguous(a.out.data, DType::kBf16, {4, 128});
  expect_invalid([&] { describe(a); }, {"out has shape [4, 128], expected [M=4, K=256]", "hidden [4, 256]"});
}

TEST(CpuValidation, RejectsTopkShapes) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.topk_ids = TensorView::contiguous(a.topk_ids.data, DType::kInt32, {3, 2});
  expect_invalid([&] { describe(a); }, {"topk_ids has shape [3, 2], expected [M=4, k=2]", "hidden [4, 256]"});
  a = s.args();
  a.topk_weights = TensorView::contiguous(a.topk_weights.data, DType::kFp32, {4, 3});
  expect_invalid([&] { describe(a); }, {"topk_weights has shape [4, 3], expected [M=4, k=2]", "topk_ids [4, 2]"});
}

TEST(CpuValidation, RejectsScaleShapesPerScheme) {
  {
    CallBufs s;
    s.scheme = Scheme::kFp8PerTensor;
    FusedExpertsArgs a = s.args();
    a.weights.w13_scale = TensorView::contiguous(a.weights.w13_scale.data, DType::kFp32, {8, 1});
    expect_invalid([&] { describe(a); }, {"w13_scale has shape [8, 1], expected [E=8]"});
  }
  {
    CallBufs s;
    s.scheme = Scheme::kFp8PerChannel;
    FusedExpertsArgs a = s.args();
    a.weights.w2_scale = TensorView::contiguous(a.weights.w2_scale.data, DType::kFp32, {8, 128});
    expect_invalid([&] { describe(a); }, {"w2_scale has shape [8, 128], expected [E=8, K=256]"});
  }
  {
    CallBufs s;
    s.scheme = Scheme::kFp8Block128;
    s.N = 200;  // ceil(400/128) = 4
    s.K = 300;  // ceil(300/128) = 3
    FusedExpertsArgs a = s.args();
    a.weights.w13_scale = TensorView::contiguous(a.weights.w13_scale.data, DType::kFp32, {8, 3, 3});
    expect_invalid([&] { describe(a); },
                   {"w13_scale has shape [8, 3, 3], expected [E=8, ceil(2N/128)=4, ceil(K/128)=3]"});
    a = s.args();
    a.weights.w2_scale = TensorView::contiguous(a.weights.w2_scale.data, DType::kFp32, {8, 3, 1});
    expect_invalid([&] { describe(a); }, {"w2_scale has shape [8, 3, 1], expected [E=8, ceil(K/128)=3, ceil(N/128)=2]"});
  }
}

TEST(CpuValidation, RejectsBiasShape) {
  CallBufs s;
  s.bias = true;
  FusedExpertsArgs a = s.args();
  a.weights.b13 = TensorView::contiguous(a.weights.b13.data, DType::kFp32, {8, 128});
  expect_invalid([&] { describe(a); }, {"b13 has shape [8, 128], expected [E=8, 2N=256]"});
  a = s.args();
  a.weights.b2 = TensorView::contiguous(a.weights.b2.data, DType::kFp32, {7, 256});
  expect_invalid([&] { describe(a); }, {"b2 has shape [7, 256], expected [E=8, K=256]"});
}

TEST(CpuValidation, RejectsBadDimensions) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.hidden.shape[0] = -3;
  expect_invalid([&] { describe(a); }, {"hidden", "negative"});
  a = s.args();
  a.weights.w13.ndim = 7;
  expect_invalid([&] { describe(a); }, {"w13 has ndim 7"});
  a = s.args();
  // [2^40, 2^40] elements overflow 64-bit indexing.
  // Built by hand: TensorView::contiguous's stride product would itself overflow.
  a.hidden.shape[0] = a.hidden.shape[1] = a.hidden.strides[0] = std::int64_t{1} << 40;
  expect_invalid([&] { describe(a); }, {"hidden", "too many elements"});
  a = s.args();
  a.hidden = TensorView::contiguous(a.hidden.data, DType::kBf16, {4, 0});
  expect_invalid([&] { describe(a); }, {"hidden has shape [4, 0]", "K"});
}

// ---------------------------------------------------------------- wrong dtypes

TEST(CpuValidation, RejectsActivationDtypes) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.hidden.dtype = DType::kFp32;
  expect_invalid([&] { describe(a); }, {"hidden has dtype fp32, expected bf16 or fp16"});
  a = s.args();
  a.out.dtype = DType::kFp16;
  expect_invalid([&] { describe(a); }, {"out has dtype fp16, expected bf16"});
  a = s.args();
  a.hidden.dtype = static_cast<DType>(42);
  expect_invalid([&] { describe(a); }, {"hidden has unknown dtype 42"});
}

TEST(CpuValidation, RejectsWeightDtypes) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.weights.w13.dtype = DType::kFp16;
  expect_invalid([&] { describe(a); }, {"w13 has dtype fp16, expected bf16", "scheme bf16"});
  a = s.args();
  a.weights.w2.dtype = DType::kFp8E4m3;
  expect_invalid([&] { describe(a); }, {"w2 has dtype fp8_e4m3, expected bf16"});

  CallBufs q;
  q.scheme = Scheme::kFp8Block128;
  a = q.args();
  a.weights.w13.dtype = DType::kBf16;
  expect_invalid([&] { describe(a); }, {"w13 has dtype bf16, expected fp8_e4m3 for scheme fp8_block128"});
  a = q.args();
  a.weights.w2_scale.dtype = DType::kBf16;
  expect_invalid([&] { describe(a); }, {"w2_scale has dtype bf16, expected fp32"});
}

TEST(CpuValidation, RejectsScalesWithBf16Scheme) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  std::vector<float> sc(8);
  a.weights.w13_scale = TensorView::contiguous(sc.data(), DType::kFp32, {8});
  expect_invalid([&] { describe(a); }, {"w13_scale is given but scheme bf16"});
}

TEST(CpuValidation, RejectsBiasDtypes) {
  CallBufs s;
  s.bias = true;
  s.bias_dtype = DType::kFp16;  // neither fp32 nor the bf16 activation dtype
  FusedExpertsArgs a = s.args();
  expect_invalid([&] { describe(a); }, {"b13 has dtype fp16, expected fp32 or bf16"});
  CallBufs m;
  m.bias = true;
  a = m.args();
  a.weights.b2.dtype = DType::kBf16;  // only the dtype differs from b13's fp32
  expect_invalid([&] { describe(a); }, {"b2 has dtype bf16 but b13 has fp32"});
}

TEST(CpuValidation, RejectsRoutingDtypes) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.topk_ids.dtype = DType::kInt64;
  expect_invalid([&] { describe(a); }, {"topk_ids has dtype int64, expected int32"});
  a = s.args();
  a.topk_weights.dtype = DType::kBf16;
  expect_invalid([&] { describe(a); }, {"topk_weights has dtype bf16, expected fp32"});
  s.e_global = 16;
  a = s.args();
  a.expert_map.dtype = DType::kInt64;
  expect_invalid([&] { describe(a); }, {"expert_map has dtype int64, expected int32"});
  FusedMoeArgs m = s.moe_args();
  m.router_logits.dtype = DType::kFp16;
  expect_invalid([&] { describe(m); }, {"router_logits has dtype fp16, expected fp32 or bf16"});
}

// ---------------------------------------------------------------- device, layout, pointers

TEST(CpuValidation, RejectsMixedDevices) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.weights.w2.device = Device::cuda(0);
  expect_invalid([&] { describe(a); }, {"w2 is on cuda:0, but hidden is on cpu"});
  CallBufs g;
  g.device = Device::cuda(0);
  a = g.args();
  a.topk_weights.device = Device::cuda(1);
  expect_invalid([&] { describe(a); }, {"topk_weights is on cuda:1, but hidden is on cuda:0"});
  FusedMoeArgs m = g.moe_args();
  m.router_logits.device = Device::cpu();
  expect_invalid([&] { describe(m); }, {"router_logits is on cpu, but hidden is on cuda:0"});
}

TEST(CpuValidation, RejectsNonContiguous) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  // A transposed w2 view: [E, K, N] with column-major inner dims.
  a.weights.w2.strides[1] = 1;
  a.weights.w2.strides[2] = 256;
  expect_invalid([&] { describe(a); }, {"w2 is non-contiguous", "shape [8, 256, 128]", "strides [32768, 1, 256]"});
  a = s.args();
  a.hidden.strides[0] = 512;  // a row slice of a wider tensor
  expect_invalid([&] { describe(a); }, {"hidden is non-contiguous", "strides [512, 1]"});
}

TEST(CpuValidation, RejectsMisalignedCudaPointer) {
  CallBufs s;
  s.device = Device::cuda(0);
  FusedExpertsArgs a = s.args();
  a.weights.w13.data = static_cast<char*>(a.weights.w13.data) + 2;
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(a.weights.w13.data)));
  expect_invalid([&] { describe(a); }, {"w13 data pointer", addr, "16-byte aligned", "misaligned"});
  a = s.args();
  a.out.data = static_cast<char*>(a.out.data) + 8;
  expect_invalid([&] { describe(a); }, {"out data pointer", "misaligned"});
}

TEST(CpuValidation, RejectsMisalignedHostPointer) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.topk_weights.data = static_cast<char*>(a.topk_weights.data) + 1;
  expect_invalid([&] { describe(a); }, {"topk_weights data pointer", "misaligned for fp32"});
}

TEST(CpuValidation, RejectsNullData) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.weights.w2.data = nullptr;
  expect_invalid([&] { describe(a); }, {"w2 has shape [8, 256, 128]", "262144 elements", "null data pointer"});
}

TEST(CpuValidation, RejectsOutAliasingInputs) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.out.data = a.hidden.data;
  expect_invalid([&] { describe(a); }, {"out [4, 256]", "overlaps hidden [4, 256]"});
  // A partial overlap: out starts inside hidden.
  std::vector<std::uint16_t> both(4 * 256 + 256);
  a.hidden.data = both.data();
  a.out.data = both.data() + 256;
  expect_invalid([&] { describe(a); }, {"overlaps hidden"});
  a = s.args();
  a.out.data = a.weights.w13.data;
  expect_invalid([&] { describe(a); }, {"overlaps w13"});
}

TEST(CpuValidation, RejectsRouteOutputAliasingLogits) {
  CallBufs s;
  FusedMoeArgs m = s.moe_args();
  m.experts.topk_weights.data = m.router_logits.data;
  expect_invalid([&] { describe(m); }, {"topk_weights", "overlaps router_logits"});
}

// ---------------------------------------------------------------- k, experts, enums, parameters

TEST(CpuValidation, RejectsKLargerThanE) {
  CallBufs s;
  s.k = 9;
  expect_invalid([&] { describe(s.args()); }, {"k=9 is larger than E_global=8", "w13 [8, 256, 256]"});
  s.e_global = 8;
  expect_invalid([&] { describe(s.args()); }, {"k=9 is larger than E_global=8", "expert_map [8]"});
  CallBufs z;
  z.k = 0;
  expect_invalid([&] { describe(z.args()); }, {"topk_ids has shape [4, 0]", "k must be >= 1"});
}

TEST(CpuValidation, RejectsExpertMapShorterThanE) {
  CallBufs s;
  s.e_global = 4;
  s.k = 2;
  expect_invalid([&] { describe(s.args()); }, {"expert_map has shape [4]", "E_global=4", "E=8"});
  CallBufs t;
  t.e_global = 16;
  FusedExpertsArgs a = t.args();
  a.expert_map = TensorView::contiguous(a.expert_map.data, DType::kInt32, {4, 4});
  expect_invalid([&] { describe(a); }, {"expert_map has shape [4, 4], expected [E_global]"});
}

TEST(CpuValidation, RejectsMoreExpertsThanInt32Ids) {
  CallBufs s;
  s.e_global = 16;
  FusedExpertsArgs a = s.args();
  // Validation never reads expert_map, so a huge shape over a small buffer is enough here.
  a.expert_map = TensorView::contiguous(a.expert_map.data, DType::kInt32, {std::int64_t{1} << 31});
  expect_invalid([&] { describe(a); }, {"E_global=2147483648", "expert_map [2147483648]", "int32"});
}

TEST(CpuValidation, RejectsUnknownEnums) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.scheme = static_cast<Scheme>(7);
  expect_invalid([&] { describe(a); }, {"unknown scheme 7"});
  a = s.args();
  a.activation.kind = static_cast<Activation>(-1);
  expect_invalid([&] { describe(a); }, {"unknown activation -1"});
  RoutingConfig r;
  r.method = static_cast<RoutingMethod>(5);
  FusedMoeArgs m = s.moe_args(r);
  expect_invalid([&] { describe(m); }, {"unknown routing method 5"});
  Options o;
  o.backend = static_cast<Backend>(9);
  expect_invalid([&] { detail::resolve(s.args(), o); }, {"unknown backend 9"});
  a = s.args();
  a.hidden.device.type = static_cast<DeviceType>(4);
  expect_invalid([&] { describe(a); }, {"hidden has unknown device type 4"});
}

TEST(CpuValidation, RejectsNonFiniteActivationParams) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.activation.kind = Activation::kSwigluOai;
  a.activation.alpha = std::numeric_limits<float>::quiet_NaN();
  expect_invalid([&] { describe(a); }, {"activation.alpha must be finite", "nan"});
  a.activation.alpha = 1.702f;
  a.activation.limit = std::numeric_limits<float>::infinity();
  expect_invalid([&] { describe(a); }, {"activation.limit must be finite", "inf"});
  a.activation.limit = -1.0f;
  expect_invalid([&] { describe(a); }, {"activation.limit must be > 0", "-1"});
}

TEST(CpuValidation, RejectsStaticScalesOutsidePerTensor) {
  for (Scheme scheme : {Scheme::kBf16, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    CallBufs s;
    s.scheme = scheme;
    s.static_scales = true;
    expect_invalid([&] { describe(s.args()); }, {"a13_scale is given but scheme", scheme_name(scheme)});
  }
  CallBufs p;
  p.scheme = Scheme::kFp8PerTensor;
  FusedExpertsArgs a = p.args();
  std::vector<float> two(2);
  a.a2_scale = TensorView::contiguous(two.data(), DType::kFp32, {2});
  expect_invalid([&] { describe(a); }, {"a2_scale has shape [2], expected [1]"});
  a.a2_scale = TensorView::contiguous(two.data(), DType::kBf16, {1});
  expect_invalid([&] { describe(a); }, {"a2_scale has dtype bf16, expected fp32"});
}

TEST(CpuValidation, RejectsRoutingParams) {
  CallBufs s;
  s.E = 16;
  s.k = 4;
  {
    FusedMoeArgs m = s.moe_args();
    m.routing.top_k = 3;  // topk_ids holds k = 4
    expect_invalid([&] { describe(m); }, {"topk_ids has shape [4, 4], expected [M=4, k=3]", "routing.top_k=3"});
  }
  {
    FusedMoeArgs m = s.moe_args();
    m.routing.top_k = 17;
    expect_invalid([&] { describe(m); }, {"routing.top_k=17 is larger than the number of experts E_global=16"});
  }
  {
    RoutingConfig r = deepseek_routing(4);
    r.num_groups = 3;
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.num_groups=3", "divide E_global=16"});
  }
  {
    RoutingConfig r = deepseek_routing(4);
    r.topk_groups = 9;
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.topk_groups=9", "[1, num_groups=8]"});
    r.topk_groups = 0;
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.topk_groups=0"});
  }
  {
    RoutingConfig r = deepseek_routing(4);
    r.topk_groups = 1;  // 1 group of 2 experts cannot hold 4
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.topk_groups=1 groups of 2 experts", "top_k=4"});
  }
  for (float bad : {0.0f, -2.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    RoutingConfig r = deepseek_routing(4);
    r.routed_scaling_factor = bad;
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.routed_scaling_factor must be finite and > 0"});
  }
  {
    RoutingConfig r;
    r.num_groups = 4;  // group-limited softmax is not what softmax_topk computes
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routing.num_groups=4", "softmax_topk"});
    r.num_groups = 1;
    r.routed_scaling_factor = 2.5f;
    expect_invalid([&] { describe(s.moe_args(r)); }, {"routed_scaling_factor=2.5", "softmax_topk"});
  }
}

TEST(CpuValidation, RejectsLogitsAndCorrectionBias) {
  CallBufs s;
  s.E = 16;
  s.k = 4;
  FusedMoeArgs m = s.moe_args(deepseek_routing(4));
  std::vector<float> l(64 * 16), cb(32);
  m.router_logits = TensorView::contiguous(l.data(), DType::kFp32, {4, 12});
  expect_invalid([&] { describe(m); }, {"router_logits has shape [4, 12], expected [M=4, E_global=16]", "w13 [16, 256, 256]"});
  m.router_logits = TensorView::contiguous(l.data(), DType::kFp32, {4, 16});
  m.e_score_correction_bias = TensorView::contiguous(cb.data(), DType::kFp32, {32});
  expect_invalid([&] { describe(m); }, {"e_score_correction_bias has shape [32], expected [E_global=16]"});
  m.e_score_correction_bias = TensorView::contiguous(cb.data(), DType::kBf16, {16});
  expect_invalid([&] { describe(m); }, {"e_score_correction_bias has dtype bf16, expected fp32"});
  FusedMoeArgs soft = s.moe_args();
  soft.e_score_correction_bias = TensorView::contiguous(cb.data(), DType::kFp32, {16});
  expect_invalid([&] { describe(soft); }, {"e_score_correction_bias is given but routing method softmax_topk"});
}

TEST(CpuValidation, RejectsBadRouteArgs) {
  CallBufs s;
  RouteArgs r;
  r.routing.top_k = 2;
  r.router_logits = s.view(s.logits_, DType::kFp32, {4, 8});
  r.topk_ids = s.view(s.ids_, DType::kInt32, {4, 2});
  r.topk_weights = s.view(s.wts_, DType::kFp32, {4, 2});
  EXPECT_NO_THROW(detail::resolve(r, Options{}));
  RouteArgs bad = r;
  bad.topk_ids = {};
  expect_invalid([&] { detail::resolve(bad, Options{}); }, {"topk_ids is required"});
  bad = r;
  bad.topk_weights = s.view(s.wts_, DType::kFp32, {4, 3});
  expect_invalid([&] { detail::resolve(bad, Options{}); }, {"topk_weights has shape [4, 3], expected [M=4, k=2]", "router_logits [4, 8]"});
  bad = r;
  bad.routing.top_k = 9;
  expect_invalid([&] { detail::resolve(bad, Options{}); }, {"routing.top_k=9", "E_global=8"});
  bad = r;
  bad.topk_ids.data = r.router_logits.data;
  expect_invalid([&] { detail::resolve(bad, Options{}); }, {"topk_ids", "overlaps router_logits"});
  bad = r;
  bad.router_logits.device = Device::cuda(0);
  expect_invalid([&] { detail::resolve(bad, Options{}); }, {"topk_ids is on cpu, but router_logits is on cuda:0"});
  Options o;
  o.num_threads = -1;
  expect_invalid([&] { detail::resolve(r, o); }, {"options.num_threads must be >= 0, got -1"});
}

// The public entry points validate before any backend runs.
TEST(CpuValidation, PublicCallsThrowBeforeRunning) {
  CallBufs s;
  FusedExpertsArgs a = s.args();
  a.scheme = static_cast<Scheme>(7);
  expect_invalid([&] { fused_experts(a); }, {"unknown scheme 7"});
  CallBufs k;
  k.k = 9;
  FusedMoeArgs m = k.moe_args();
  expect_invalid([&] { fused_moe(m); }, {"routing.top_k=9"});
}

}  // namespace
}  // namespace moekit
