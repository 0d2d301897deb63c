// Argument validation: every public call passes through resolve() once, before any backend runs.
// It checks each tensor against the others, names the argument and the values in its errors, and
// fills the MoeCall / RouteCall (problem + raw pointers) that backends trust without re-checking.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend.hpp"
#include "env.hpp"
#include "moekit/error.hpp"
#include "moekit/faults.hpp"
#include "moekit/ops.hpp"
#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

// What is NOT checked here: the values inside topk_ids and expert_map. They may live in device
// memory, and reading them would synchronize the host (and break CUDA-graph capture). Backends
// therefore treat a slot whose id is outside [0, E_global), or whose expert_map entry is outside
// [0, E), as contributing nothing (the same as expert_map == -1), never index with it, and record
// the value unless it is -1 (moekit/faults.hpp: check_faults, the MOEKIT_DEBUG_FAULTS mode).
// Likewise the values of the static scales a13_scale / a2_scale and of the weight scales are
// the caller's: a zero or negative scale is not detected here.

namespace moekit::detail {
namespace {

// CUDA kernels load tensors with 16-byte vector accesses (and TMA wants 16-byte base addresses).
constexpr std::uintptr_t kCudaAlignment = 16;

[[noreturn]] void fail(const std::string& message) { throw Error(Status::kInvalidArgument, message); }

std::string str(std::int64_t v) { return std::to_string(v); }

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

std::string fmt_float(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

bool valid_dtype(DType d) { return static_cast<int>(d) >= 0 && static_cast<int>(d) <= static_cast<int>(DType::kInt64); }

std::string dtype_str(DType d) {
  if (!valid_dtype(d)) return "unknown dtype " + std::to_string(static_cast<int>(d));
  return dtype_name(d);
}

std::string strides_string(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.strides[i]);
  return s + "]";
}

// "w13 [8, 256, 128]": how a tensor is named in messages that cite it as the source of a size.
std::string cite(const char* name, const TensorView& v) { return std::string(name) + " " + v.shape_string(); }

// Where a size came from, as messages cite it: a tensor ("hidden [16, 4096]") or a routing
// parameter ("routing.top_k=8"); empty when the tensor being checked defines it. Spelled out only
// when a message needs it: a call that passes validation builds no strings.
struct Src {
  const char* name = nullptr;         // null: no source
  const TensorView* view = nullptr;   // the tensor cited, or null for "name=value"
  std::int64_t value = 0;

  static Src tensor(const char* name, const TensorView& v) { return Src{name, &v, 0}; }
  static Src param(const char* name, std::int64_t value) { return Src{name, nullptr, value}; }
  bool empty() const { return name == nullptr; }
  std::string str() const {
    if (name == nullptr) return std::string();
    if (view != nullptr) return cite(name, *view);
    return std::string(name) + "=" + std::to_string(value);
  }
};

// One expected dimension: a label ("2N"), its value (-1 = any) and where the value came from.
struct Dim {
  const char* label;
  std::int64_t value;
  Src source;
};

// Checks that v has exactly `dims`. The message lists the expected dims with their values and
// the tensors those values came from:
//   "w13 has shape [128, 1536, 2048], expected [E=128, 2N=1536, K=4096] (K from hidden [16, 4096])"
void expect_shape(const char* name, const TensorView& v, std::initializer_list<Dim> dims) {
  bool ok = v.ndim == static_cast<int>(dims.size());
  if (ok) {
    int i = 0;
    for (const Dim& d : dims) {
      if (d.value >= 0 && v.shape[i] != d.value) ok = false;
      ++i;
    }
  }
  if (ok) return;
  std::string expected = "[";
  // Group labels by source so "E, 2N from w13 [...]" reads as one clause.
  std::vector<std::pair<std::string, std::string>> sources;  // source -> labels
  // A free dim ("E" of w13 itself) shows the tensor's own value when the rank matches, so the
  // message reads as the full expected shape.
  const bool same_rank = v.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (const Dim& d : dims) {
    expected += (i ? ", " : "") + std::string(d.label);
    if (d.value >= 0) expected += "=" + str(d.value);
    else if (same_rank) expected += "=" + str(v.shape[i]);
    ++i;
    if (d.source.empty()) continue;
    const std::string source = d.source.str();
    bool found = false;
    for (auto& s : sources)
      if (s.first == source) {
        s.second += std::string(", ") + d.label;
        found = true;
      }
    if (!found) sources.emplace_back(source, d.label);
  }
  expected += "]";
  std::string msg = std::string(name) + " has shape " + v.shape_string() + ", expected " + expected;
  if (!sources.empty()) {
    msg += " (";
    for (std::size_t i = 0; i < sources.size(); ++i)
      msg += (i ? "; " : "") + sources[i].second + " from " + sources[i].first;
    msg += ")";
  }
  fail(msg);
}

// The checks that concern one view alone: a sane ndim, non-negative dims whose product fits in
// int64, a known dtype and device, row-major contiguity, and a non-null pointer when elements exist.
void check_view(const char* name, const TensorView& v) {
  if (v.ndim > TensorView::kMaxDims)
    fail(std::string(name) + " has ndim " + std::to_string(v.ndim) + ", more than the " +
         std::to_string(TensorView::kMaxDims) + " a TensorView holds");
  if (!valid_dtype(v.dtype))
    fail(std::string(name) + " has unknown dtype " + std::to_string(static_cast<int>(v.dtype)));
  if (v.device.type != DeviceType::kCpu && v.device.type != DeviceType::kCuda)
    fail(std::string(name) + " has unknown device type " + std::to_string(static_cast<int>(v.device.type)));
  if (v.device.type == DeviceType::kCuda && v.device.index < 0)
    fail(std::string(name) + " is on cuda:" + std::to_string(v.device.index) + ", a negative device index");
  std::int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) {
    if (v.shape[i] < 0) fail(std::string(name) + " has shape " + v.shape_string() + " with a negative dimension");
    // Byte offsets must fit in int64 too, hence the extra factor of 8 of headroom.
    if (__builtin_mul_overflow(n, v.shape[i], &n) || n > (INT64_MAX >> 3))
      fail(std::string(name) + " has shape " + v.shape_string() + ": too many elements for 64-bit indexing");
  }
  if (!v.is_contiguous())
    fail(std::string(name) + " is non-contiguous: shape " + v.shape_string() + ", strides " + strides_string(v) +
         " (moekit needs row-major contiguous tensors; strides are in elements)");
  if (n > 0 && v.data == nullptr)
    fail(std::string(name) + " has shape " + v.shape_string() + " (" + str(n) + " elements) but a null data pointer");
  if (n > 0) {
    const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(v.data);
    if (v.device.type == DeviceType::kCuda && addr % kCudaAlignment != 0)
      fail(std::string(name) + " data pointer " + hex(v.data) + " is misaligned: CUDA tensors must be " +
           std::to_string(kCudaAlignment) + "-byte aligned (address % 16 = " + std::to_string(addr % kCudaAlignment) + ")");
    // The CPU reference reads typed elements, so host pointers need the element's alignment.
    if (v.device.type == DeviceType::kCpu && addr % dtype_size(v.dtype) != 0)
      fail(std::string(name) + " data pointer " + hex(v.data) + " is misaligned for " + dtype_name(v.dtype) +
           " (address % " + std::to_string(dtype_size(v.dtype)) + " = " + std::to_string(addr % dtype_size(v.dtype)) + ")");
  }
}

// `why` is why + why2 (two pieces, so that the caller builds no string when the check passes).
void require(const char* name, const TensorView& v, const char* why, const char* why2 = "") {
  if (v.present()) return;
  const std::string w = std::string(why) + why2;
  fail(std::string(name) + " is required" + (w.empty() ? std::string() : " " + w) + " but absent");
}

void expect_dtype(const char* name, const TensorView& v, DType want, const char* why = "", const char* why2 = "") {
  if (v.dtype == want) return;
  const std::string w = std::string(why) + why2;
  fail(std::string(name) + " has dtype " + dtype_str(v.dtype) + ", expected " + dtype_name(want) +
       (w.empty() ? "" : " " + w));
}

// All tensors of a call share one device: the first present tensor sets it.
class DeviceCheck {
 public:
  void add(const char* name, const TensorView& v) {
    if (!v.present()) return;
    if (first_ == nullptr) {
      first_ = name;
      device_ = v.device;
      return;
    }
    const bool same = v.device.type == device_.type &&
                      (device_.type == DeviceType::kCpu || v.device.index == device_.index);
    if (!same)
      fail(std::string(name) + " is on " + device_name(v.device) + ", but " + first_ + " is on " +
           device_name(device_) + " (all tensors of a call must be on one device)");
  }
  Device device() const { return device_; }

 private:
  const char* first_ = nullptr;
  Device device_{};
};

// Outputs must not overlap inputs (or each other): backends read inputs after writing outputs.
void check_no_overlap(const char* out_name, const TensorView& out, const char* in_name, const TensorView& in) {
  if (views_overlap(out, in))
    fail(std::string(out_name) + " " + out.shape_string() + " at " + hex(out.data) + " overlaps " + in_name + " " +
         in.shape_string() + " at " + hex(in.data) + " (" + out_name + " must not alias an input or another output)");
}

void check_scheme(Scheme s) {
  const int v = static_cast<int>(s);
  if (v < 0 || v > static_cast<int>(Scheme::kFp8Block128))
    fail("unknown scheme " + std::to_string(v) + " (expected 0..3: bf16, fp8_per_tensor, fp8_per_channel, fp8_block128)");
}

void check_activation(const ActivationConfig& a) {
  const int v = static_cast<int>(a.kind);
  if (v < 0 || v > static_cast<int>(Activation::kSwigluOai))
    fail("unknown activation " + std::to_string(v) + " (expected 0..2: silu, gelu, swiglu_oai)");
  if (!std::isfinite(a.alpha)) fail("activation.alpha must be finite, got " + fmt_float(a.alpha));
  if (!std::isfinite(a.limit)) fail("activation.limit must be finite, got " + fmt_float(a.limit));
  // clamp(u, -limit, limit) needs limit > 0 to mean anything.
  if (a.kind == Activation::kSwigluOai && !(a.limit > 0.0f))
    fail("activation.limit must be > 0 for swiglu_oai, got " + fmt_float(a.limit));
}

// Routing parameters against E_global experts. A parameter that only another method reads is an
// error when set away from its default: silently ignoring it would give a silent wrong answer
// (e.g. DeepSeek-V2's group-limited softmax is not what softmax_topk computes).
void check_routing(const RoutingConfig& r, std::int64_t e_global, const Src& e_source) {
  const int m = static_cast<int>(r.method);
  if (m < 0 || m > static_cast<int>(RoutingMethod::kTopkSoftmax))
    fail("unknown routing method " + std::to_string(m) +
         " (expected 0..2: softmax_topk, sigmoid_grouped_topk, topk_softmax)");
  const char* method = routing_method_name(r.method);
  if (r.top_k < 1) fail("routing.top_k must be >= 1, got " + std::to_string(r.top_k));
  if (r.top_k > e_global)
    fail("routing.top_k=" + std::to_string(r.top_k) + " is larger than the number of experts E_global=" +
         str(e_global) + " from " + e_source.str());
  if (!std::isfinite(r.routed_scaling_factor) || !(r.routed_scaling_factor > 0.0f))
    fail("routing.routed_scaling_factor must be finite and > 0, got " + fmt_float(r.routed_scaling_factor));
  if (r.method == RoutingMethod::kSigmoidGroupedTopk) {
    if (r.num_groups < 1 || e_global % r.num_groups != 0)
      fail("routing.num_groups=" + std::to_string(r.num_groups) + " must be >= 1 and divide E_global=" + str(e_global) +
           " from " + e_source.str());
    if (r.topk_groups < 1 || r.topk_groups > r.num_groups)
      fail("routing.topk_groups=" + std::to_string(r.topk_groups) + " must be in [1, num_groups=" +
           std::to_string(r.num_groups) + "]");
    const std::int64_t per_group = e_global / r.num_groups;
    if (static_cast<std::int64_t>(r.topk_groups) * per_group < r.top_k)
      fail("routing.topk_groups=" + std::to_string(r.topk_groups) + " groups of " + str(per_group) +
           " experts (E_global=" + str(e_global) + " / num_groups=" + std::to_string(r.num_groups) +
           ") hold fewer than top_k=" + std::to_string(r.top_k) + " experts");
  } else {
    if (r.num_groups != 1 || r.topk_groups != 1)
      fail("routing.num_groups=" + std::to_string(r.num_groups) + " / topk_groups=" + std::to_string(r.topk_groups) +
           " are only used by sigmoid_grouped_topk; method " + method + " needs both = 1");
    if (r.routed_scaling_factor != 1.0f)
      fail("routing.routed_scaling_factor=" + fmt_float(r.routed_scaling_factor) +
           " is only used by sigmoid_grouped_topk; method " + method + " needs 1");
  }
}

void check_options(const Options& o) {
  const int b = static_cast<int>(o.backend);
  if (b < 0 || b > static_cast<int>(Backend::kCuda))
    fail("unknown backend " + std::to_string(b) + " (expected 0..2: auto, cpu, cuda)");
  if (o.num_threads < 0) fail("options.num_threads must be >= 0, got " + std::to_string(o.num_threads));
}

const char* forced_path(const Options& o) {
  if (o.path != nullptr && o.path[0] != '\0') return o.path;
  const char* env = env_value(EnvVar::kPath);
  return env != nullptr && env[0] != '\0' ? env : nullptr;
}

// Validates a FusedExpertsArgs. `routing` is null for fused_experts (topk_ids/topk_weights are
// required inputs) and set for fused_moe (they are optional outputs, k = routing->top_k).
// `devices` collects the tensors' device so fused_moe can add its routing tensors to the check.
MoeCall resolve_experts(const FusedExpertsArgs& a, const RoutingConfig* routing, DeviceCheck& devices,
                        const Options& options) {
  check_options(options);
  check_scheme(a.scheme);
  check_activation(a.activation);

  const ExpertWeights& w = a.weights;
  const struct {
    const char* name;
    const TensorView* v;
  } all[] = {{"hidden", &a.hidden},           {"out", &a.out},
             {"w13", &w.w13},                 {"w2", &w.w2},
             {"w13_scale", &w.w13_scale},     {"w2_scale", &w.w2_scale},
             {"b13", &w.b13},                 {"b2", &w.b2},
             {"topk_ids", &a.topk_ids},       {"topk_weights", &a.topk_weights},
             {"a13_scale", &a.a13_scale},     {"a2_scale", &a.a2_scale},
             {"expert_map", &a.expert_map}};
  for (const auto& t : all)
    if (t.v->present()) check_view(t.name, *t.v);

  // hidden defines M and K and the activation dtype.
  require("hidden", a.hidden, "");
  require("out", a.out, "");
  require("w13", w.w13, "");
  require("w2", w.w2, "");
  expect_shape("hidden", a.hidden, {{"M", -1, {}}, {"K", -1, {}}});
  const std::int64_t M = a.hidden.shape[0], K = a.hidden.shape[1];
  const Src h_src = Src::tensor("hidden", a.hidden);
  if (a.hidden.dtype != DType::kBf16 && a.hidden.dtype != DType::kFp16)
    fail("hidden has dtype " + dtype_str(a.hidden.dtype) + ", expected bf16 or fp16");
  if (K < 1) fail("hidden has shape " + a.hidden.shape_string() + ": K (hidden size) must be >= 1");
  const DType act = a.hidden.dtype;

  expect_shape("out", a.out, {{"M", M, h_src}, {"K", K, h_src}});
  expect_dtype("out", a.out, act, "(the dtype of hidden)");

  // w13 defines E and 2N.
  expect_shape("w13", w.w13, {{"E", -1, {}}, {"2N", -1, {}}, {"K", K, h_src}});
  const std::int64_t E = w.w13.shape[0], two_n = w.w13.shape[1];
  if (E < 1) fail("w13 has shape " + w.w13.shape_string() + ": E (number of experts) must be >= 1");
  if (two_n < 2 || two_n % 2 != 0)
    fail("w13 has shape " + w.w13.shape_string() + ": dim 1 is 2N (gate rows then up rows) and must be even and >= 2, got " +
         str(two_n));
  const std::int64_t N = two_n / 2;
  const Src w_src = Src::tensor("w13", w.w13);
  expect_shape("w2", w.w2, {{"E", E, w_src}, {"K", K, h_src}, {"N", N, w_src}});

  // Weight dtypes and scales per scheme.
  const bool fp8 = a.scheme != Scheme::kBf16;
  const char* scheme = scheme_name(a.scheme);
  if (!fp8) {
    expect_dtype("w13", w.w13, act, "(the dtype of hidden) for scheme ", scheme);
    expect_dtype("w2", w.w2, act, "(the dtype of hidden) for scheme ", scheme);
    if (w.w13_scale.present() || w.w2_scale.present())
      fail(std::string(w.w13_scale.present() ? "w13_scale" : "w2_scale") +
           " is given but scheme bf16 has no weight scales (pass the fp8 scheme the weights were quantized with)");
  } else {
    expect_dtype("w13", w.w13, DType::kFp8E4m3, "for scheme ", scheme);
    expect_dtype("w2", w.w2, DType::kFp8E4m3, "for scheme ", scheme);
    require("w13_scale", w.w13_scale, "for scheme ", scheme);
    require("w2_scale", w.w2_scale, "for scheme ", scheme);
    expect_dtype("w13_scale", w.w13_scale, DType::kFp32);
    expect_dtype("w2_scale", w.w2_scale, DType::kFp32);
    const std::int64_t bq = kBlockQuant;
    switch (a.scheme) {
      case Scheme::kFp8PerTensor:
        expect_shape("w13_scale", w.w13_scale, {{"E", E, w_src}});
        expect_shape("w2_scale", w.w2_scale, {{"E", E, w_src}});
        break;
      case Scheme::kFp8PerChannel:
        expect_shape("w13_scale", w.w13_scale, {{"E", E, w_src}, {"2N", two_n, w_src}});
        expect_shape("w2_scale", w.w2_scale, {{"E", E, w_src}, {"K", K, h_src}});
        break;
      case Scheme::kFp8Block128:
        expect_shape("w13_scale", w.w13_scale,
                     {{"E", E, w_src}, {"ceil(2N/128)", (two_n + bq - 1) / bq, w_src}, {"ceil(K/128)", (K + bq - 1) / bq, h_src}});
        expect_shape("w2_scale", w.w2_scale,
                     {{"E", E, w_src}, {"ceil(K/128)", (K + bq - 1) / bq, h_src}, {"ceil(N/128)", (N + bq - 1) / bq, w_src}});
        break;
      case Scheme::kBf16: break;
    }
  }

  // Biases: fp32 or the activation dtype, one dtype for both.
  DType bias_dtype = DType::kFp32;
  const char* bias_first = nullptr;
  for (const auto& b : {std::make_pair("b13", &w.b13), std::make_pair("b2", &w.b2)}) {
    if (!b.second->present()) continue;
    if (b.second->dtype != DType::kFp32 && b.second->dtype != act)
      fail(std::string(b.first) + " has dtype " + dtype_str(b.second->dtype) + ", expected fp32 or " + dtype_name(act) +
           " (the dtype of hidden)");
    if (bias_first != nullptr && b.second->dtype != bias_dtype)
      fail(std::string(b.first) + " has dtype " + dtype_name(b.second->dtype) + " but " + bias_first + " has " +
           dtype_name(bias_dtype) + " (both biases must have one dtype)");
    bias_first = b.first;
    bias_dtype = b.second->dtype;
  }
  if (w.b13.present()) expect_shape("b13", w.b13, {{"E", E, w_src}, {"2N", two_n, w_src}});
  if (w.b2.present()) expect_shape("b2", w.b2, {{"E", E, w_src}, {"K", K, h_src}});

  // E_global: expert_map's length, else E.
  std::int64_t e_global = E;
  Src e_src = w_src;  // where E_global comes from
  if (a.expert_map.present()) {
    expect_shape("expert_map", a.expert_map, {{"E_global", -1, {}}});
    expect_dtype("expert_map", a.expert_map, DType::kInt32);
    e_global = a.expert_map.shape[0];
    if (e_global < E)
      fail("expert_map has shape " + a.expert_map.shape_string() + ": E_global=" + str(e_global) +
           " is smaller than the E=" + str(E) + " local experts of " + w_src.str());
    e_src = Src::tensor("expert_map", a.expert_map);
  }
  // Expert ids are int32 (topk_ids), so more experts than that cannot be addressed.
  if (e_global > INT32_MAX)
    fail("E_global=" + str(e_global) + " from " + e_src.str() + " exceeds the int32 range of expert ids");

  // k: from topk_ids (fused_experts) or routing.top_k (fused_moe, where topk_ids is an output).
  std::int64_t k = 0;
  Src k_src;
  if (routing == nullptr) {
    require("topk_ids", a.topk_ids, "");
    require("topk_weights", a.topk_weights, "");
    expect_shape("topk_ids", a.topk_ids, {{"M", M, h_src}, {"k", -1, {}}});
    k = a.topk_ids.shape[1];
    k_src = Src::tensor("topk_ids", a.topk_ids);
    if (k < 1) fail("topk_ids has shape " + a.topk_ids.shape_string() + ": k must be >= 1");
    if (k > e_global)
      fail("topk_ids has shape " + a.topk_ids.shape_string() + ": k=" + str(k) + " is larger than E_global=" +
           str(e_global) + " from " + e_src.str());
  } else {
    check_routing(*routing, e_global, e_src);
    k = routing->top_k;
    k_src = Src::param("routing.top_k", k);
    if (a.topk_ids.present()) {
      expect_shape("topk_ids", a.topk_ids, {{"M", M, h_src}, {"k", k, k_src}});
    }
  }
  if (a.topk_ids.present()) expect_dtype("topk_ids", a.topk_ids, DType::kInt32);
  if (a.topk_weights.present()) {
    expect_shape("topk_weights", a.topk_weights, {{"M", M, h_src}, {"k", k, k_src}});
    expect_dtype("topk_weights", a.topk_weights, DType::kFp32);
  }

  // Static activation scales: kFp8PerTensor only; one fp32 value ([1], or a 0-dim scalar).
  for (const auto& s : {std::make_pair("a13_scale", &a.a13_scale), std::make_pair("a2_scale", &a.a2_scale)}) {
    if (!s.second->present()) continue;
    if (a.scheme != Scheme::kFp8PerTensor)
      fail(std::string(s.first) + " is given but scheme " + scheme_name(a.scheme) +
           " computes its activation scales dynamically (static scales are for fp8_per_tensor only)");
    if (s.second->ndim > 1 || s.second->numel() != 1)
      fail(std::string(s.first) + " has shape " + s.second->shape_string() + ", expected [1]");
    expect_dtype(s.first, *s.second, DType::kFp32);
  }

  for (const auto& t : all) devices.add(t.name, *t.v);
  for (const auto& t : all)
    if (t.v != &a.out) check_no_overlap("out", a.out, t.name, *t.v);

  MoeCall call;
  MoeProblem& p = call.problem;
  p.num_tokens = M;
  p.num_experts = E;
  p.num_experts_global = e_global;
  p.top_k = k;
  p.hidden_size = K;
  p.intermediate_size = N;
  p.scheme = a.scheme;
  p.act_dtype = act;
  p.activation = a.activation;
  p.has_expert_map = a.expert_map.present();
  p.apply_router_weight_on_input = a.apply_router_weight_on_input;
  p.has_bias13 = w.b13.present();
  p.has_bias2 = w.b2.present();
  p.bias_dtype = bias_dtype;
  p.static_a13_scale = a.a13_scale.present();
  p.static_a2_scale = a.a2_scale.present();

  auto ptr = [](const TensorView& v) -> void* { return v.present() ? v.data : nullptr; };
  call.hidden = ptr(a.hidden);
  call.out = ptr(a.out);
  call.w13 = ptr(w.w13);
  call.w2 = ptr(w.w2);
  call.w13_scale = static_cast<const float*>(ptr(w.w13_scale));
  call.w2_scale = static_cast<const float*>(ptr(w.w2_scale));
  call.b13 = ptr(w.b13);
  call.b2 = ptr(w.b2);
  call.a13_scale = static_cast<const float*>(ptr(a.a13_scale));
  call.a2_scale = static_cast<const float*>(ptr(a.a2_scale));
  call.expert_map = static_cast<const std::int32_t*>(ptr(a.expert_map));
  call.topk_ids = static_cast<const std::int32_t*>(ptr(a.topk_ids));
  call.topk_weights = static_cast<const float*>(ptr(a.topk_weights));
  call.workspace = options.workspace;
  call.workspace_bytes = options.workspace_bytes;
  call.stream = options.stream;
  call.forced_path = forced_path(options);
  call.num_threads = options.num_threads;
  call.debug_faults = debug_faults_enabled(options);
  return call;
}

// router_logits [M, E_global] fp32/bf16 and the optional correction bias [E_global] fp32.
void check_logits(const TensorView& logits, const TensorView& bias, const RoutingConfig& r, std::int64_t M,
                  const Src& m_src, std::int64_t e_global, const Src& e_src) {
  expect_shape("router_logits", logits, {{"M", M, m_src}, {"E_global", e_global, e_src}});
  if (logits.dtype != DType::kFp32 && logits.dtype != DType::kBf16)
    fail("router_logits has dtype " + dtype_str(logits.dtype) + ", expected fp32 or bf16");
  if (!bias.present()) return;
  if (r.method != RoutingMethod::kSigmoidGroupedTopk)
    fail(std::string("e_score_correction_bias is given but routing method ") + routing_method_name(r.method) +
         " does not use it (only sigmoid_grouped_topk does)");
  expect_shape("e_score_correction_bias", bias, {{"E_global", e_global, e_src}});
  expect_dtype("e_score_correction_bias", bias, DType::kFp32);
}

}  // namespace

bool views_overlap(const TensorView& a, const TensorView& b) {
  auto span = [](const TensorView& v, std::uintptr_t& lo, std::uintptr_t& hi) {
    if (!v.present() || v.numel() == 0) return false;
    std::int64_t last = 0;
    for (int d = 0; d < v.ndim; ++d) last += (v.shape[d] - 1) * v.strides[d];
    lo = reinterpret_cast<std::uintptr_t>(v.data);
    hi = lo + static_cast<std::uintptr_t>((last + 1) * static_cast<std::int64_t>(dtype_size(v.dtype)));
    return true;
  };
  std::uintptr_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  return span(a, a0, a1) && span(b, b0, b1) && a0 < b1 && b0 < a1;
}

MoeCall resolve(const FusedExpertsArgs& args, const Options& options) {
  DeviceCheck devices;
  MoeCall call = resolve_experts(args, nullptr, devices, options);
  call.device = devices.device().type == DeviceType::kCuda ? devices.device().index : 0;
  return call;
}

MoeCall resolve(const FusedMoeArgs& args, const Options& options) {
  const FusedExpertsArgs& a = args.experts;
  // Per-view checks of the routing inputs come first so that shape messages can cite them.
  if (args.router_logits.present()) check_view("router_logits", args.router_logits);
  if (args.e_score_correction_bias.present()) check_view("e_score_correction_bias", args.e_score_correction_bias);
  require("router_logits", args.router_logits, "by fused_moe");

  DeviceCheck devices;
  MoeCall call = resolve_experts(a, &args.routing, devices, options);
  const MoeProblem& p = call.problem;
  const Src e_src = a.expert_map.present() ? Src::tensor("expert_map", a.expert_map) : Src::tensor("w13", a.weights.w13);
  check_logits(args.router_logits, args.e_score_correction_bias, args.routing, p.num_tokens, Src::tensor("hidden", a.hidden),
               p.num_experts_global, e_src);
  devices.add("router_logits", args.router_logits);
  devices.add("e_score_correction_bias", args.e_score_correction_bias);
  // topk_ids / topk_weights are outputs here: they must not overlap an input either.
  for (const auto& o : {std::make_pair("topk_ids", &a.topk_ids), std::make_pair("topk_weights", &a.topk_weights)}) {
    check_no_overlap(o.first, *o.second, "router_logits", args.router_logits);
    check_no_overlap(o.first, *o.second, "e_score_correction_bias", args.e_score_correction_bias);
    check_no_overlap(o.first, *o.second, "hidden", a.hidden);
    check_no_overlap(o.first, *o.second, "expert_map", a.expert_map);
  }
  check_no_overlap("topk_ids", a.topk_ids, "topk_weights", a.topk_weights);
  check_no_overlap("out", a.out, "router_logits", args.router_logits);
  check_no_overlap("out", a.out, "e_score_correction_bias", args.e_score_correction_bias);

  call.problem.with_routing = true;
  call.problem.routing = args.routing;
  call.problem.logits_dtype = args.router_logits.dtype;
  call.problem.has_correction_bias = args.e_score_correction_bias.present();
  call.router_logits = args.router_logits.data;
  call.correction_bias = args.e_score_correction_bias.present()
                             ? static_cast<const float*>(args.e_score_correction_bias.data) : nullptr;
  // The caller's buffers, when given, receive the routing; the backend reads it back through
  // topk_ids / topk_weights (already set to the same pointers) or keeps it in its workspace.
  call.topk_ids_out = static_cast<std::int32_t*>(a.topk_ids.present() ? a.topk_ids.data : nullptr);
  call.topk_weights_out = static_cast<float*>(a.topk_weights.present() ? a.topk_weights.data : nullptr);
  call.device = devices.device().type == DeviceType::kCuda ? devices.device().index : 0;
  return call;
}

RouteCall resolve(const RouteArgs& args, const Options& options) {
  check_options(options);
  const struct {
    const char* name;
    const TensorView* v;
  } all[] = {{"router_logits", &args.router_logits},
             {"e_score_correction_bias", &args.e_score_correction_bias},
             {"topk_ids", &args.topk_ids},
             {"topk_weights", &args.topk_weights}};
  for (const auto& t : all)
    if (t.v->present()) check_view(t.name, *t.v);
  require("router_logits", args.router_logits, "");
  require("topk_ids", args.topk_ids, "(the output of route)");
  require("topk_weights", args.topk_weights, "(the output of route)");

  expect_shape("router_logits", args.router_logits, {{"M", -1, {}}, {"E_global", -1, {}}});
  const std::int64_t M = args.router_logits.shape[0], e_global = args.router_logits.shape[1];
  const Src l_src = Src::tensor("router_logits", args.router_logits);
  if (e_global < 1 || e_global > INT32_MAX)
    fail("router_logits has shape " + args.router_logits.shape_string() +
         ": E_global must be >= 1 and fit the int32 range of expert ids");
  check_routing(args.routing, e_global, l_src);
  check_logits(args.router_logits, args.e_score_correction_bias, args.routing, M, l_src, e_global, l_src);
  const std::int64_t k = args.routing.top_k;
  const Src k_src = Src::param("routing.top_k", k);
  expect_shape("topk_ids", args.topk_ids, {{"M", M, l_src}, {"k", k, k_src}});
  expect_dtype("topk_ids", args.topk_ids, DType::kInt32);
  expect_shape("topk_weights", args.topk_weights, {{"M", M, l_src}, {"k", k, k_src}});
  expect_dtype("topk_weights", args.topk_weights, DType::kFp32);

  DeviceCheck devices;
  for (const auto& t : all) devices.add(t.name, *t.v);
  for (const auto& o : {std::make_pair("topk_ids", &args.topk_ids), std::make_pair("topk_weights", &args.topk_weights)}) {
    check_no_overlap(o.first, *o.second, "router_logits", args.router_logits);
    check_no_overlap(o.first, *o.second, "e_score_correction_bias", args.e_score_correction_bias);
  }
  check_no_overlap("topk_ids", args.topk_ids, "topk_weights", args.topk_weights);

  RouteCall call;
  call.num_tokens = M;
  call.num_experts = e_global;
  call.routing = args.routing;
  call.logits_dtype = args.router_logits.dtype;
  call.router_logits = args.router_logits.data;
  call.correction_bias = args.e_score_correction_bias.present()
                             ? static_cast<const float*>(args.e_score_correction_bias.data) : nullptr;
  call.topk_ids = static_cast<std::int32_t*>(args.topk_ids.data);
  call.topk_weights = static_cast<float*>(args.topk_weights.data);
  call.stream = options.stream;
  call.device = devices.device().type == DeviceType::kCuda ? devices.device().index : 0;
  call.num_threads = options.num_threads;
  return call;
}

}  // namespace moekit::detail
