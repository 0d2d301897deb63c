// Test cases shared by the CPU, CUDA and benchmark code: a problem spec, random inputs made
// from it (fresh per seed, never zeros), host views for moekit calls, and the comparison.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moekit/moekit.hpp"

namespace moekit::testing {

/// How topk_ids are drawn when a case is made with given routing.
enum class RoutingPattern {
  kFromLogits,  ///< route random logits with spec.routing on the CPU reference (realistic)
  kAllToOne,    ///< every slot of every token goes to expert `hot_expert` and then distinct others
  kSkewed,      ///< half the experts get no tokens
  kDuplicates,  ///< k >= 2: every other token's first two slots name the same expert (each slot counts)
};

struct CaseSpec {
  std::int64_t M = 4, E = 8, k = 2, K = 256, N = 128;
  Scheme scheme = Scheme::kBf16;
  DType act_dtype = DType::kBf16;
  ActivationConfig activation{};
  RoutingConfig routing{};        ///< routing.top_k is forced to k
  RoutingPattern pattern = RoutingPattern::kFromLogits;
  int hot_expert = 0;
  bool bias = false;              ///< b13 and b2 (in the act dtype)
  bool expert_map = false;        ///< E_global = 2E; odd global ids map to -1, even ones to local ids
  bool weight_on_input = false;
  bool static_scales = false;     ///< kFp8PerTensor: pass a13_scale / a2_scale
  std::uint64_t seed = 1;
  std::string name() const;       ///< "M=4 E=8 k=2 K=256 N=128 bf16 silu seed=1"
};

/// Host inputs of one case, owned here. Weights are quantized with moekit::quantize_weights.
struct MoeCase {
  CaseSpec spec;
  std::int64_t E_global = 0;
  std::vector<std::uint16_t> hidden;     ///< [M, K] act dtype bits
  std::vector<float> router_logits;      ///< [M, E_global] fp32
  std::vector<float> correction_bias;    ///< [E_global] (sigmoid_grouped_topk), else empty
  QuantizedWeights w13, w2;              ///< [E, 2N, K], [E, K, N]
  std::vector<std::uint16_t> b13, b2;    ///< [E, 2N], [E, K] act-dtype bits, empty without bias (or one dropped by a test)
  std::vector<std::int32_t> topk_ids;    ///< [M, k]
  std::vector<float> topk_weights;       ///< [M, k]
  std::vector<std::int32_t> expert_map;  ///< [E_global], empty without
  float a13_scale = 0.f, a2_scale = 0.f; ///< static scales (static_scales)

  /// fused_experts arguments viewing this case's host memory, writing to `out` ([M, K] act dtype).
  FusedExpertsArgs host_args(void* out) const;
};

/// Random inputs for `spec` (hidden ~ N(0,1), weights ~ N(0, 1/sqrt(K)) so outputs stay O(1)).
MoeCase make_case(const CaseSpec& spec);

/// The CPU reference output of the case as fp32 [M, K] (after rounding to the act dtype).
std::vector<float> reference_output(const MoeCase& c);

/// ||got - ref|| / ||ref|| over finite ref entries; +inf if got has a NaN where ref is finite.
double relative_error(const std::vector<float>& got, const std::vector<float>& ref);

/// Read a [n] array of act-dtype bits as floats.
std::vector<float> to_float(const std::vector<std::uint16_t>& bits, DType dtype);

}  // namespace moekit::testing
