// The roofline arithmetic of BRIEF §4 and the small helpers both runners share.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "bench.hpp"

namespace moekit::bench {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

HbmRate datasheet_hbm(const std::string& gpu_name) {
  // The device name's words, upper-cased: "NVIDIA H100 80GB HBM3" -> {NVIDIA, H100, 80GB, HBM3}.
  std::vector<std::string> words;
  std::istringstream in(gpu_name);
  for (std::string w; in >> w;) {
    for (char& ch : w) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    words.push_back(w);
  }
  auto has = [&](const char* w) { return std::find(words.begin(), words.end(), w) != words.end(); };
  double gbps = 0;
  if (has("H200")) gbps = 4800;                                   // SXM and NVL: HBM3e 4.8 TB/s
  else if (has("GH200")) gbps = has("144G") || has("HBM3E") ? 4900 : 4000;
  else if (has("H100") || has("H800")) gbps = has("PCIE") ? 2000 : has("NVL") ? 3900 : 3350;
  else if (has("H20")) gbps = 4000;
  if (gbps > 0) return HbmRate{gbps, "datasheet: " + gpu_name, true};
  return HbmRate{kHbmGbps, "not in the table, BRIEF §4's H200 rate: " + gpu_name, false};
}

void warn_unlisted_gpu(const std::string& gpu, const HbmRate& rate) {
  std::fprintf(stderr, "moekit-bench: %s is not in the HBM table: the roofline assumes an H200's %.0f GB/s "
                       "(moekit-bench --hbm-gbps sets this GPU's)\n", gpu.c_str(), rate.gbps);
}

double weight_elem_bytes(const MoeProblem& p) {
  return p.scheme == Scheme::kBf16 ? static_cast<double>(dtype_size(p.act_dtype)) : 1.0;
}

double expert_bytes(const MoeProblem& p) {
  const double K = static_cast<double>(p.hidden_size);
  const double N = static_cast<double>(p.intermediate_size);
  double bytes = (2.0 * N * K + K * N) * weight_elem_bytes(p);
  switch (p.scheme) {
    case Scheme::kBf16: break;
    case Scheme::kFp8PerTensor: bytes += 2 * 4.0; break;
    case Scheme::kFp8PerChannel: bytes += (2.0 * N + K) * 4.0; break;
    case Scheme::kFp8Block128: {
      const std::int64_t kb = ceil_div(p.hidden_size, kBlockQuant);
      const std::int64_t nb = ceil_div(p.intermediate_size, kBlockQuant);
      const std::int64_t n2b = ceil_div(2 * p.intermediate_size, kBlockQuant);
      bytes += static_cast<double>(n2b * kb + kb * nb) * 4.0;
      break;
    }
  }
  const double bias_bytes = static_cast<double>(dtype_size(p.bias_dtype));
  if (p.has_bias13) bytes += 2.0 * N * bias_bytes;
  if (p.has_bias2) bytes += K * bias_bytes;
  return bytes;
}

double min_bytes(const MoeProblem& p, std::int64_t touched_experts) {
  const double act = static_cast<double>(dtype_size(p.act_dtype));
  return static_cast<double>(touched_experts) * expert_bytes(p) +
         2.0 * static_cast<double>(p.num_tokens) * static_cast<double>(p.hidden_size) * act;
}

void fill_metrics(Row& row, const MoeProblem& p, const Ceilings& c) {
  if (!row.us || *row.us <= 0) return;
  const double us = *row.us;
  const double flops = p.flops();
  const double bytes = min_bytes(p, row.touched_experts);
  row.tflops = flops / (us * 1e6);
  row.gbps = bytes / (us * 1e3);
  const std::optional<double>& dense =
      p.scheme == Scheme::kBf16 ? c.dense_tflops_bf16 : c.dense_tflops_fp8;
  // The roofline is a GPU roofline: it needs the dense rate measured in this run.
  if (!dense || *dense <= 0) return;
  row.roof_us = std::max(bytes / (c.hbm.gbps * 1e3), flops / (*dense * 1e6));
  row.roof_fraction = *row.roof_us / us;
  row.tflops_fraction_of_dense = *row.tflops / *dense;
}

std::int64_t count_unique(const std::int32_t* ids, std::int64_t n, std::int64_t num_experts) {
  std::vector<char> seen(static_cast<std::size_t>(std::max<std::int64_t>(num_experts, 1)), 0);
  std::int64_t unique = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t e = ids[i];
    if (e < 0 || e >= num_experts) continue;
    if (!seen[static_cast<std::size_t>(e)]) {
      seen[static_cast<std::size_t>(e)] = 1;
      ++unique;
    }
  }
  return unique;
}

std::string effective_path(const std::string& forced) {
  if (!forced.empty()) return forced;
  const char* env = std::getenv("MOEKIT_PATH");
  return env != nullptr && env[0] != '\0' ? env : "auto";
}

std::string reproduce_command(const Config& config, const Point& point, const char* backend) {
  std::ostringstream s;
  s << "moekit-bench " << point.shape->cli << " --tp " << point.tp << " --scheme "
    << scheme_name(point.scheme) << " --tokens " << point.tokens << " --backend " << backend;
  if (!point.path.empty()) s << " --path " << point.path;
  if (config.iters > 0) s << " --iters " << config.iters;
  if (config.seed != 1) s << " --seed " << config.seed;
  if (config.op_fused_moe) s << " --op fused_moe";
  if (!config.check) s << " --no-check";
  if (config.check && config.check_budget != kCheckBudget) s << " --check-budget " << config.check_budget;
  if (config.first_call) s << " --first-call";
  if (config.host_time > 0) s << " --host-time";
  if (config.host_time == 0) s << " --no-host-time";
  if (config.host_iters != 200) s << " --host-iters " << config.host_iters;
  return s.str();
}

}  // namespace moekit::bench
