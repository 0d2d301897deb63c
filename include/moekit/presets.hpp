// The model presets of moekit's benchmarks and tests: real MoE layer shapes at tensor-parallel
// degree 1 (N is divided by tp when sharded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moekit/problem.hpp"

namespace moekit {

struct ModelPreset {
  const char* name;              ///< "mixtral-8x7b", "qwen3-30b-a3b", ...
  std::int64_t num_experts;      ///< E
  int top_k;                     ///< k
  std::int64_t hidden_size;      ///< K
  std::int64_t intermediate_size;///< N at tp = 1
  RoutingConfig routing;
  ActivationConfig activation;
  bool has_bias;                 ///< gpt-oss: b13 and b2
  Scheme checkpoint_scheme;      ///< how the released checkpoint is stored
};

/// mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, gpt-oss-120b.
const std::vector<ModelPreset>& model_presets();
/// Throws Error(kInvalidArgument) listing the names when `name` is unknown.
const ModelPreset& find_preset(const std::string& name);
/// The problem of one layer call: M tokens, N = intermediate_size / tp (tp must divide it).
MoeProblem preset_problem(const ModelPreset& preset, std::int64_t num_tokens, int tp, Scheme scheme);

}  // namespace moekit
