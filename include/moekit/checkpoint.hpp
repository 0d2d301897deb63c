// Reading expert weights from Hugging Face safetensors checkpoints (single file or sharded
// through model.safetensors.index.json) into moekit's stacked layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moekit/ops.hpp"
#include "moekit/problem.hpp"
#include "moekit/tensor.hpp"

namespace moekit {

/// One tensor of a safetensors file, read into host memory.
struct HostTensor {
  DType dtype = DType::kFp32;        ///< from "BF16", "F16", "F32", "F8_E4M3", "I32", "I64"
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;    ///< raw little-endian elements, row-major
  TensorView view() const;
};

/// A safetensors checkpoint: one file, or a folder / index.json of shards. Opening reads the
/// headers only; tensors are read on demand. Errors (missing file or key, truncated data, bad
/// header, unsupported dtype) throw Error naming the file and the key.
class Checkpoint {
 public:
  /// `path`: a .safetensors file, a model.safetensors.index.json, or a folder holding either.
  static Checkpoint open(const std::string& path);

  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;  ///< sorted
  /// dtype and shape without reading data.
  DType dtype_of(const std::string& key) const;
  std::vector<std::int64_t> shape_of(const std::string& key) const;
  HostTensor read(const std::string& key) const;

  struct Impl;
 private:
  std::shared_ptr<const Impl> impl_;
};

/// Write a single-file safetensors checkpoint (used by tests and tools to make small synthetic
/// checkpoints with real key names). `metadata` goes to "__metadata__".
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Hugging Face expert-key conventions.
enum class ExpertKeyStyle : int {
  kMixtral,   ///< {prefix}.block_sparse_moe.experts.{e}.w1 / w3 / w2 (.weight)
  kGateUpDown ///< {prefix}.mlp.experts.{e}.gate_proj / up_proj / down_proj (.weight) (Qwen3-MoE, DeepSeek)
};

/// One layer's experts stacked into moekit's layout: w13 [E, 2N, K] (gate rows first), w2 [E, K, N],
/// and for fp8 checkpoints the weight_scale_inv blocks stacked to [E, ceil(2N/128), ceil(K/128)] and
/// [E, ceil(K/128), ceil(N/128)].
struct StackedExperts {
  HostTensor w13;
  HostTensor w2;
  HostTensor w13_scale;  ///< empty data when the checkpoint is not fp8
  HostTensor w2_scale;
  std::int64_t num_experts = 0, hidden_size = 0, intermediate_size = 0;
  Scheme scheme = Scheme::kBf16;  ///< kFp8Block128 when weight_scale_inv keys are present
  ExpertWeights weights() const;  ///< host views for fused_experts
};

/// Load layer `layer`'s experts. `prefix` defaults to "model.layers.{layer}".
StackedExperts load_experts(const Checkpoint& ckpt, int layer, ExpertKeyStyle style,
                            std::int64_t num_experts, const std::string& prefix = "");

}  // namespace moekit
