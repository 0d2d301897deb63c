// Names of moekit's enums, their parsers, and the small methods of TensorView and MoeProblem.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "call.hpp"
#include "moekit/error.hpp"
#include "moekit/ops.hpp"
#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"
#include "moekit/version.hpp"

namespace moekit {

const char* version() noexcept { return "0.1.0"; }

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::kSuccess: return "success";
    case Status::kInvalidArgument: return "invalid_argument";
    case Status::kNotSupported: return "not_supported";
    case Status::kCudaError: return "cuda_error";
    case Status::kInternal: return "internal";
  }
  return "unknown";
}

const char* dtype_name(DType d) noexcept {
  switch (d) {
    case DType::kBf16: return "bf16";
    case DType::kFp16: return "fp16";
    case DType::kFp32: return "fp32";
    case DType::kFp8E4m3: return "fp8_e4m3";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

std::size_t dtype_size(DType d) noexcept {
  switch (d) {
    case DType::kBf16:
    case DType::kFp16: return 2;
    case DType::kFp32:
    case DType::kInt32: return 4;
    case DType::kFp8E4m3: return 1;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string device_name(Device d) {
  return d.type == DeviceType::kCpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

std::int64_t TensorView::numel() const noexcept {
  if (ndim < 0) return 0;
  // Saturates instead of overflowing; validation rejects such shapes before anything reads them.
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  if (ndim < 0) return false;
  if (numel() == 0) return true;
  std::int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string TensorView::shape_string() const {
  if (ndim < 0) return "(absent)";
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorView TensorView::contiguous(const void* data, DType dtype, const std::int64_t* shape, int ndim,
                                  Device device) {
  if (ndim < 0 || ndim > kMaxDims)
    throw Error(Status::kInvalidArgument,
                "TensorView supports 0 to " + std::to_string(kMaxDims) + " dims, got " + std::to_string(ndim));
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.device = device;
  v.ndim = ndim;
  std::int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    if (i > 0 && __builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
  return v;
}

TensorView TensorView::contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                                  Device device) {
  return contiguous(data, dtype, shape.begin(), static_cast<int>(shape.size()), device);
}

const char* scheme_name(Scheme s) noexcept {
  switch (s) {
    case Scheme::kBf16: return "bf16";
    case Scheme::kFp8PerTensor: return "fp8_per_tensor";
    case Scheme::kFp8PerChannel: return "fp8_per_channel";
    case Scheme::kFp8Block128: return "fp8_block128";
  }
  return "unknown";
}

const char* activation_name(Activation a) noexcept {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kSwigluOai: return "swiglu_oai";
  }
  return "unknown";
}

const char* routing_method_name(RoutingMethod m) noexcept {
  switch (m) {
    case RoutingMethod::kSoftmaxTopk: return "softmax_topk";
    case RoutingMethod::kSigmoidGroupedTopk: return "sigmoid_grouped_topk";
    case RoutingMethod::kTopkSoftmax: return "topk_softmax";
  }
  return "unknown";
}

const char* backend_name(Backend b) noexcept {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "unknown";
}

namespace {
template <class Enum, int N>
Enum parse_enum(std::string_view name, const char* what, const Enum (&values)[N],
                const char* (*to_name)(Enum) noexcept) {
  std::string accepted;
  for (Enum v : values) {
    if (name == to_name(v)) return v;
    accepted += std::string(accepted.empty() ? "" : ", ") + to_name(v);
  }
  throw Error(Status::kInvalidArgument,
              std::string("unknown ") + what + " '" + std::string(name) + "' (expected one of: " + accepted + ")");
}
}  // namespace

Scheme parse_scheme(std::string_view name) {
  static const Scheme all[] = {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128};
  return parse_enum(name, "scheme", all, scheme_name);
}
Activation parse_activation(std::string_view name) {
  static const Activation all[] = {Activation::kSilu, Activation::kGelu, Activation::kSwigluOai};
  return parse_enum(name, "activation", all, activation_name);
}
RoutingMethod parse_routing_method(std::string_view name) {
  static const RoutingMethod all[] = {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSigmoidGroupedTopk,
                                      RoutingMethod::kTopkSoftmax};
  return parse_enum(name, "routing method", all, routing_method_name);
}
Backend parse_backend(std::string_view name) {
  static const Backend all[] = {Backend::kAuto, Backend::kCpu, Backend::kCuda};
  return parse_enum(name, "backend", all, backend_name);
}

double MoeProblem::flops() const noexcept {
  const double mk = static_cast<double>(num_tokens) * static_cast<double>(top_k);
  const double K = static_cast<double>(hidden_size), N = static_cast<double>(intermediate_size);
  return 2.0 * mk * (K * 2.0 * N + N * K);
}

namespace detail {

// The number of fields of aggregate T: the most initializers T{...} takes (each one converts to
// whatever the field is). Unevaluated only.
struct AnyField {
  template <class T>
  operator T() const noexcept;  // declared, never defined
};
template <class T, class... A>
constexpr auto initializable(int) -> decltype(T{std::declval<A>()...}, true) {
  return true;
}
template <class T, class... A>
constexpr bool initializable(long) {
  return false;
}
template <class T, class... A>
constexpr std::size_t field_count() {
  if constexpr (initializable<T, A..., AnyField>(0)) return field_count<T, A..., AnyField>();
  else return sizeof...(A);
}

// A field added to MoeProblem, ActivationConfig or RoutingConfig changes these counts: compare it
// in same_problem too, or calls that differ only in it would share the CUDA backend's memo.
static_assert(field_count<MoeProblem>() == 20 && field_count<ActivationConfig>() == 3 &&
                  field_count<RoutingConfig>() == 6,
              "MoeProblem, ActivationConfig or RoutingConfig has a field same_problem does not compare");

bool same_problem(const MoeProblem& a, const MoeProblem& b) noexcept {
  return a.num_tokens == b.num_tokens && a.num_experts == b.num_experts &&
         a.num_experts_global == b.num_experts_global && a.top_k == b.top_k && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.scheme == b.scheme && a.act_dtype == b.act_dtype &&
         a.activation.kind == b.activation.kind && a.activation.alpha == b.activation.alpha &&
         a.activation.limit == b.activation.limit && a.has_expert_map == b.has_expert_map &&
         a.apply_router_weight_on_input == b.apply_router_weight_on_input && a.has_bias13 == b.has_bias13 &&
         a.has_bias2 == b.has_bias2 && a.bias_dtype == b.bias_dtype && a.static_a13_scale == b.static_a13_scale &&
         a.static_a2_scale == b.static_a2_scale && a.with_routing == b.with_routing &&
         a.routing.method == b.routing.method && a.routing.top_k == b.routing.top_k &&
         a.routing.renormalize == b.routing.renormalize && a.routing.num_groups == b.routing.num_groups &&
         a.routing.topk_groups == b.routing.topk_groups &&
         a.routing.routed_scaling_factor == b.routing.routed_scaling_factor && a.logits_dtype == b.logits_dtype &&
         a.has_correction_bias == b.has_correction_bias;
}

}  // namespace detail

std::string MoeProblem::to_string() const {
  std::ostringstream s;
  s << "M=" << num_tokens << " E=" << num_experts << " k=" << top_k << " K=" << hidden_size
    << " N=" << intermediate_size << " " << scheme_name(scheme) << " " << activation_name(activation.kind)
    << " " << dtype_name(act_dtype);
  if (has_expert_map) s << " E_global=" << num_experts_global;
  if (apply_router_weight_on_input) s << " weight_on_input";
  if (has_bias13 || has_bias2) s << " bias";
  if (with_routing) s << " routing=" << routing_method_name(routing.method);
  return s.str();
}

}  // namespace moekit
