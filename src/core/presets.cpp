// The model presets (BRIEF §3): shapes of the released checkpoints' MoE layers.
#include "moekit/presets.hpp"

#include "moekit/error.hpp"

namespace moekit {

namespace {
RoutingConfig softmax_topk(int k) {
  RoutingConfig r;
  r.method = RoutingMethod::kSoftmaxTopk;
  r.top_k = k;
  r.renormalize = true;
  return r;
}
}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> p;
    p.push_back({"mixtral-8x7b", 8, 2, 4096, 14336, softmax_topk(2), {}, false, Scheme::kBf16});
    p.push_back({"qwen3-30b-a3b", 128, 8, 2048, 768, softmax_topk(8), {}, false, Scheme::kBf16});
    p.push_back({"qwen3-235b-a22b", 128, 8, 4096, 1536, softmax_topk(8), {}, false, Scheme::kBf16});
    RoutingConfig ds;
    ds.method = RoutingMethod::kSigmoidGroupedTopk;
    ds.top_k = 8;
    ds.renormalize = true;
    ds.num_groups = 8;
    ds.topk_groups = 4;
    ds.routed_scaling_factor = 2.5f;
    p.push_back({"deepseek-v3", 256, 8, 7168, 2048, ds, {}, false, Scheme::kFp8Block128});
    RoutingConfig oss;
    oss.method = RoutingMethod::kTopkSoftmax;
    oss.top_k = 4;
    oss.renormalize = false;
    ActivationConfig swiglu;
    swiglu.kind = Activation::kSwigluOai;
    p.push_back({"gpt-oss-120b", 128, 4, 2880, 2880, oss, swiglu, true, Scheme::kBf16});
    return p;
  }();
  return presets;
}

const ModelPreset& find_preset(const std::string& name) {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (name == p.name) return p;
    names += std::string(names.empty() ? "" : ", ") + p.name;
  }
  throw Error(Status::kInvalidArgument, "unknown preset '" + name + "' (expected one of: " + names + ")");
}

MoeProblem preset_problem(const ModelPreset& preset, std::int64_t num_tokens, int tp, Scheme scheme) {
  if (tp < 1 || preset.intermediate_size % tp != 0)
    throw Error(Status::kInvalidArgument, std::string("tp=") + std::to_string(tp) + " does not divide N=" +
                                              std::to_string(preset.intermediate_size) + " of " + preset.name);
  if (num_tokens < 0) throw Error(Status::kInvalidArgument, "num_tokens must be >= 0, got " + std::to_string(num_tokens));
  MoeProblem p;
  p.num_tokens = num_tokens;
  p.num_experts = preset.num_experts;
  p.num_experts_global = preset.num_experts;
  p.top_k = preset.top_k;
  p.hidden_size = preset.hidden_size;
  p.intermediate_size = preset.intermediate_size / tp;
  p.scheme = scheme;
  p.act_dtype = DType::kBf16;
  p.activation = preset.activation;
  p.has_bias13 = p.has_bias2 = preset.has_bias;
  p.bias_dtype = DType::kBf16;
  p.routing = preset.routing;
  return p;
}

}  // namespace moekit
