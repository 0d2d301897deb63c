// What one MoE layer call computes: schemes, activations, routing methods and the validated
// problem description that every backend receives. docs/design.md gives the exact numerics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/tensor.hpp"

namespace moekit {

/// How the expert weights (and so the activations) are quantized.
enum class Scheme : int {
  kBf16,          ///< no quantization; weights in the activation dtype (bf16 or fp16)
  kFp8PerTensor,  ///< e4m3 weights, one fp32 scale per expert; activation scale per tensor
  kFp8PerChannel, ///< e4m3 weights, one scale per output channel; per-token activation scales
  kFp8Block128,   ///< e4m3 weights, one scale per 128x128 block; per-token 1x128 activation groups
};

/// Applied to GEMM1's [2N] row (gate g = first N, up u = last N).
enum class Activation : int {
  kSilu,      ///< silu(g) * u
  kGelu,      ///< gelu(g) * u (exact, erf form)
  kSwigluOai, ///< gpt-oss: g = min(g, limit), u = clamp(u, -limit, limit), g*sigmoid(alpha*g)*(u+1)
};

/// How router logits become topk_ids / topk_weights.
enum class RoutingMethod : int {
  kSoftmaxTopk,        ///< softmax over E, top-k, optional renormalize (Mixtral, Qwen3-MoE)
  kSigmoidGroupedTopk, ///< DeepSeek-V3: sigmoid, biased group selection, renormalize, scale
  kTopkSoftmax,        ///< gpt-oss: top-k of the logits, softmax over the k
};

const char* scheme_name(Scheme s) noexcept;            ///< "bf16", "fp8_per_tensor", ...
const char* activation_name(Activation a) noexcept;    ///< "silu", "gelu", "swiglu_oai"
const char* routing_method_name(RoutingMethod m) noexcept;  ///< "softmax_topk", ...
/// Parse a name; throws Error(kInvalidArgument) naming the accepted values.
Scheme parse_scheme(std::string_view name);
Activation parse_activation(std::string_view name);
RoutingMethod parse_routing_method(std::string_view name);

/// Activation and its parameters (alpha and limit are used by kSwigluOai only).
struct ActivationConfig {
  Activation kind = Activation::kSilu;
  float alpha = 1.702f;
  float limit = 7.0f;
};

/// Routing method and its parameters. Ties always break toward the lower expert id.
struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kSoftmaxTopk;
  int top_k = 1;
  bool renormalize = true;            ///< kSoftmaxTopk / kSigmoidGroupedTopk: divide by the sum of the k
  int num_groups = 1;                 ///< kSigmoidGroupedTopk: n_group (divides E)
  int topk_groups = 1;                ///< kSigmoidGroupedTopk: groups kept (topk_group)
  float routed_scaling_factor = 1.0f; ///< kSigmoidGroupedTopk: multiplies the final weights
};

/// A validated description of one call: the sizes, the scheme and every option that changes
/// the arithmetic. Backends and the dispatch heuristic see only this plus raw pointers.
struct MoeProblem {
  std::int64_t num_tokens = 0;          ///< M
  std::int64_t num_experts = 0;         ///< E: experts whose weights are passed (local experts)
  std::int64_t num_experts_global = 0;  ///< expert ids in topk_ids range over [0, this); == E without expert_map
  std::int64_t top_k = 0;               ///< k
  std::int64_t hidden_size = 0;         ///< K
  std::int64_t intermediate_size = 0;   ///< N (per tensor-parallel shard)
  Scheme scheme = Scheme::kBf16;
  DType act_dtype = DType::kBf16;       ///< hidden and out: kBf16 or kFp16
  ActivationConfig activation{};
  bool has_expert_map = false;
  bool apply_router_weight_on_input = false;
  bool has_bias13 = false;
  bool has_bias2 = false;
  DType bias_dtype = DType::kFp32;      ///< kFp32 or act_dtype, when a bias is present
  bool static_a13_scale = false;        ///< kFp8PerTensor: a13_scale given (else dynamic absmax)
  bool static_a2_scale = false;         ///< kFp8PerTensor: a2_scale given (else dynamic absmax)
  bool with_routing = false;            ///< fused_moe: routing computed from logits in the same call
  RoutingConfig routing{};              ///< meaningful when with_routing
  DType logits_dtype = DType::kFp32;    ///< when with_routing
  bool has_correction_bias = false;     ///< kSigmoidGroupedTopk e_score_correction_bias

  /// FLOPs of the expert GEMMs: 2*M*k*(K*2N + N*K) (routing and combine not counted).
  double flops() const noexcept;
  /// "M=16 E=128 k=8 K=2048 N=768 fp8_per_tensor silu"
  std::string to_string() const;
};

/// The scale of 128x128 blocks and 1x128 activation groups in kFp8Block128.
inline constexpr int kBlockQuant = 128;
/// Largest finite e4m3 value; quantization saturates to +-448.
inline constexpr float kFp8Max = 448.0f;
/// Floor of every dynamic scale (absmax / 448), so all-zero rows quantize to zeros, not NaN.
inline constexpr float kMinDynamicScale = 1.0f / (448.0f * 512.0f);

}  // namespace moekit
