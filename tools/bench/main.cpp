// moekit-bench: times moekit's MoE layer on the presets of BRIEF §3 (or custom shapes) over a
// grid of tensor-parallel degrees, schemes and token counts, prints a table with the roofline
// and same-run baselines, and writes the JSON recorded in bench/results/.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "rope_quant_bench.hpp"

namespace moekit::bench {
namespace {

std::string build_info_json();

const char* kUsage = R"(usage: moekit-bench [options]

Times moekit::fused_experts (or fused_moe) on model presets or custom shapes and prints a
table; --json writes the results in the format of bench/results/.

  --preset NAME[,NAME...]|all   presets of BRIEF §3 (default: all):
                                mixtral-8x7b qwen3-30b-a3b qwen3-235b-a22b deepseek-v3 gpt-oss-120b
  --shape E,k,K,N               a custom shape (softmax top-k, silu, no bias); repeatable
  --tp LIST                     tensor-parallel degrees, N divided by each (default 1)
  --tokens LIST                 token counts M; "a..b" is the powers of two from a to b
                                (default 1..8192 on CUDA, 1,4,16,64 on the CPU)
  --scheme LIST|all             bf16 fp8_per_tensor fp8_per_channel fp8_block128 (default bf16)
  --backend auto|cpu|cuda       auto: CUDA when a Hopper GPU is usable, else the CPU reference
  --json PATH                   write the results as JSON (rewritten after every point: a run
                                cut short leaves the points it finished)
  --quick                       a small fast grid (the GPU check script's)
  --iters N                     timed iterations, median reported (default CPU 3; CUDA 50, fewer
                                (not under 5) when 50 calls would take over a second)
  --path NAME[,NAME...]         force a kernel path (Options::path): auto, mma, swapab, tokmajor,
                                fused, decode, gemv, expert_mlp; a list runs every point once per path, and rows other
                                than mma's get ratio_vs_mma (x_mma) = mma us / their us
  --op fused_experts|fused_moe  the timed call: experts with routing given (default), or routing
                                from the logits plus experts in one call
  --check / --no-check          compare each point's output with the CPU reference (default on):
                                all M tokens while M*k*K*N <= the budget, else a sample of
                                max(2, budget / (k*K*N)) evenly spaced tokens (first and last
                                included), each against the CPU reference on the experts it
                                touches. max_rel_err = the largest per-token ||out - ref|| / ||ref||;
                                a point above its scheme's tolerance (bf16 1e-2, fp8 3e-2, an
                                fp8_per_tensor sample 0.1) is marked CHECK FAILED and the exit
                                status is 1. On the CPU backend it re-runs the reference
                                on the sample (a test of the check, not a second implementation)
  --check-budget X              the M*k*K*N budget of --check (default 2^28 = 268435456)
  --op inv_rope_fp8_quant       DeepSeek-V4's inverse RoPE + FP8 quantization instead (CUDA; its
                                options: --tokens, --iters, --rows, --packed, --check, --json)
  --no-baseline                 skip the cuBLAS baselines (same-run A/Bs of two moekit variants)
  --first-call                  also time the first call at each never-seen M (CUDA: vs steady eager)
  --host-time / --no-host-time  the host side of one eager call (CUDA; default: at M <= 64, on
                                with --host-time at every M, off with --no-host-time): the host
                                wall time until fused_experts (fused_moe) returns, no sync inside,
                                median (host_us) and p90 over --host-iters calls timed one by one
                                (the stream drained every 8 calls, outside the timed regions), and
                                alone the same way: validation (moekit::describe, host_validate_us)
                                and the router (moekit::describe_dispatch, host_plan_us);
                                host_launch_us = host_us minus both (an estimate)
  --host-iters N                calls timed for host_us (default 200)
  --threads N                   CPU backend threads (default: all cores)
  --seed N                      input seed (default 1)
  --hbm-gbps X                  the roofline's HBM rate in GB/s (default: the GPU's datasheet
                                figure, from its name; BRIEF §4's H200 4800 for a GPU not in the
                                table: the run prints which, the JSON's ceilings.hbm_source says it)
  --hbm-datasheet NAME          print the rate and source the roofline takes for a GPU named NAME
                                (as cudaDeviceProp::name spells it), exit
  --build-info                  print this build's provenance (moekit::build_info()) as JSON, exit
  -h, --help                    this text

CUDA baselines, timed in the same run on the same expert GEMMs and token counts (GEMMs only, on
pre-gathered rows): cuBLAS bf16 for every scheme (base_us, x_base) and, for fp8 schemes,
cuBLASLt e4m3 with per-tensor scales, one matmul per expert (fp8_us, x_fp8): bf16 rows compare
against the first, fp8 rows against the second (like for like).
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "moekit-bench: %s\n(run moekit-bench --help for the options)\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

std::int64_t parse_int(const std::string& s, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') usage_error(std::string("bad ") + what + " '" + s + "': expected an integer");
  return v;
}

std::vector<std::int64_t> parse_tokens(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split(s, ',')) {
    const std::size_t dots = item.find("..");
    if (dots != std::string::npos) {
      std::int64_t a = parse_int(item.substr(0, dots), "--tokens range start");
      const std::int64_t b = parse_int(item.substr(dots + 2), "--tokens range end");
      if (a < 1 || b < a) usage_error("bad --tokens range '" + item + "': expected 1 <= a <= b");
      for (; a <= b; a *= 2) out.push_back(a);
    } else {
      const std::int64_t v = parse_int(item, "--tokens value");
      if (v < 0) usage_error("bad --tokens value " + item + ": must be >= 0");
      out.push_back(v);
    }
  }
  if (out.empty()) usage_error("--tokens needs at least one value");
  return out;
}

Shape preset_shape(const ModelPreset& p) {
  Shape s;
  s.name = p.name;
  s.cli = std::string("--preset ") + p.name;
  s.preset = p;
  return s;
}

Shape custom_shape(const std::string& spec) {
  const std::vector<std::string> f = split(spec, ',');
  if (f.size() != 4) usage_error("bad --shape '" + spec + "': expected E,k,K,N");
  const std::int64_t E = parse_int(f[0], "--shape E"), k = parse_int(f[1], "--shape k");
  const std::int64_t K = parse_int(f[2], "--shape K"), N = parse_int(f[3], "--shape N");
  if (E < 1 || k < 1 || k > E || K < 1 || N < 1)
    usage_error("bad --shape '" + spec + "': need E >= 1, 1 <= k <= E, K >= 1, N >= 1");
  Shape s;
  s.name = "custom-E" + f[0] + "-k" + f[1] + "-K" + f[2] + "-N" + f[3];
  s.cli = "--shape " + f[0] + "," + f[1] + "," + f[2] + "," + f[3];
  s.preset = ModelPreset{};
  s.preset.num_experts = E;
  s.preset.top_k = static_cast<int>(k);
  s.preset.hidden_size = K;
  s.preset.intermediate_size = N;
  s.preset.routing.method = RoutingMethod::kSoftmaxTopk;
  s.preset.routing.top_k = static_cast<int>(k);
  s.preset.routing.renormalize = true;
  s.preset.has_bias = false;
  s.preset.checkpoint_scheme = Scheme::kBf16;
  return s;
}

struct Cli {
  Config config;
  bool have_preset = false, have_tokens = false, have_tp = false, have_scheme = false;
};

Cli parse_args(int argc, char** argv) {
  Cli cli;
  Config& c = cli.config;
  std::vector<std::string> presets;
  std::vector<std::string> shapes;
  // "--flag=value" is the same as "--flag value".
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      args.push_back(a.substr(0, eq));
      args.push_back(a.substr(eq + 1));
    } else {
      args.push_back(a);
    }
  }
  const int n = static_cast<int>(args.size());
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= n) usage_error(args[i] + " needs a value");
    return args[++i];
  };
  for (int i = 0; i < n; ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--build-info") {
      std::printf("%s\n", build_info_json().c_str());
      std::exit(0);
    } else if (a == "--preset") {
      presets = split(value(i), ',');
      cli.have_preset = true;
    } else if (a == "--shape") {
      shapes.push_back(value(i));
    } else if (a == "--tp") {
      c.tps.clear();
      for (const std::string& t : split(value(i), ',')) c.tps.push_back(static_cast<int>(parse_int(t, "--tp")));
      cli.have_tp = true;
    } else if (a == "--tokens") {
      c.tokens = parse_tokens(value(i));
      cli.have_tokens = true;
    } else if (a == "--scheme") {
      c.schemes.clear();
      for (const std::string& s : split(value(i), ',')) {
        if (s == "all") {
          c.schemes = {Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128};
        } else {
          try {
            c.schemes.push_back(parse_scheme(s));
          } catch (const Error& e) {
            usage_error(e.what());
          }
        }
      }
      cli.have_scheme = true;
    } else if (a == "--backend") {
      try {
        c.backend = parse_backend(value(i));
      } catch (const Error& e) {
        usage_error(e.what());
      }
    } else if (a == "--json") {
      c.json_path = value(i);
    } else if (a == "--quick") {
      c.quick = true;
    } else if (a == "--iters") {
      c.iters = static_cast<int>(parse_int(value(i), "--iters"));
      if (c.iters < 1) usage_error("--iters must be >= 1");
    } else if (a == "--path") {
      c.paths = split(value(i), ',');
      if (c.paths.empty()) usage_error("--path needs at least one name");
      std::set<std::string> seen;
      for (const std::string& p : c.paths)
        if (!seen.insert(p).second) usage_error("--path names '" + p + "' twice");
    } else if (a == "--op") {
      const std::string op = value(i);
      if (op != "fused_experts" && op != "fused_moe")
        usage_error("bad --op '" + op + "': expected fused_experts or fused_moe");
      c.op_fused_moe = op == "fused_moe";
    } else if (a == "--check") {
      c.check = true;
    } else if (a == "--no-check") {
      c.check = false;
    } else if (a == "--check-budget") {
      const std::string v = value(i);
      char* end = nullptr;
      c.check_budget = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(c.check_budget > 0))
        usage_error("bad --check-budget '" + v + "': expected a positive number");
    } else if (a == "--first-call") {
      c.first_call = true;
    } else if (a == "--no-baseline") {
      c.baseline = false;
    } else if (a == "--host-time") {
      c.host_time = 1;
    } else if (a == "--no-host-time") {
      c.host_time = 0;
    } else if (a == "--host-iters") {
      c.host_iters = static_cast<int>(parse_int(value(i), "--host-iters"));
      if (c.host_iters < 1) usage_error("--host-iters must be >= 1");
    } else if (a == "--threads") {
      c.threads = static_cast<int>(parse_int(value(i), "--threads"));
    } else if (a == "--seed") {
      c.seed = static_cast<std::uint64_t>(parse_int(value(i), "--seed"));
    } else if (a == "--hbm-gbps") {
      const std::string v = value(i);
      char* end = nullptr;
      const double gbps = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(gbps > 0) || !std::isfinite(gbps))
        usage_error("bad --hbm-gbps '" + v + "': expected a positive number of GB/s");
      c.hbm_gbps = gbps;
    } else if (a == "--hbm-datasheet") {
      const HbmRate r = datasheet_hbm(value(i));
      std::printf("%.0f GB/s (%s)\n", r.gbps, r.source.c_str());
      std::exit(0);
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  for (int tp : c.tps)
    if (tp < 1) usage_error("--tp values must be >= 1, got " + std::to_string(tp));
  if (c.tps.empty()) usage_error("--tp needs at least one value");
  if (c.schemes.empty()) usage_error("--scheme needs at least one value");

  // Shapes: the presets named (or all of them when neither --preset nor --shape is given).
  std::vector<std::string> names;
  if (!cli.have_preset && shapes.empty()) names.push_back("all");
  for (const std::string& n : presets) names.push_back(n);
  for (const std::string& n : names) {
    if (n == "all") {
      for (const ModelPreset& p : model_presets()) c.shapes.push_back(preset_shape(p));
    } else {
      try {
        c.shapes.push_back(preset_shape(find_preset(n)));
      } catch (const Error& e) {
        usage_error(e.what());
      }
    }
  }
  for (const std::string& s : shapes) c.shapes.push_back(custom_shape(s));
  if (c.shapes.empty()) usage_error("no preset or shape to run");
  return cli;
}

// The quick grid and the backend's default token counts, where the command line left them open.
void apply_defaults(Cli& cli, bool cuda) {
  Config& c = cli.config;
  if (c.quick) {
    if (cuda) {
      if (!cli.have_tp) c.tps = {1, 8};
      if (!cli.have_scheme) c.schemes = {Scheme::kBf16, Scheme::kFp8PerTensor};
      if (!cli.have_tokens) c.tokens = {1, 16, 256, 4096};
    } else {
      // The CPU reference takes seconds per point: two small presets, TP8, two token counts.
      if (!cli.have_preset) {
        c.shapes.clear();
        c.shapes.push_back(preset_shape(find_preset("qwen3-30b-a3b")));
        c.shapes.push_back(preset_shape(find_preset("gpt-oss-120b")));
      }
      if (!cli.have_tp) c.tps = {8};
      if (!cli.have_scheme) c.schemes = {Scheme::kBf16, Scheme::kFp8PerTensor};
      if (!cli.have_tokens) c.tokens = {1, 4};
    }
  }
  if (c.tokens.empty()) {
    if (cuda) {
      for (std::int64_t m = 1; m <= 8192; m *= 2) c.tokens.push_back(m);
    } else {
      c.tokens = {1, 4, 16, 64};
    }
  }
  // Shapes keep the preset's name pointer valid after the vector stops growing.
  for (Shape& s : c.shapes) s.preset.name = s.name.c_str();
}

// Schemes run for one shape: the requested ones, plus the checkpoint's own under --quick.
std::vector<Scheme> schemes_for(const Config& c, const Shape& s) {
  std::vector<Scheme> out = c.schemes;
  if (c.quick && std::find(out.begin(), out.end(), s.preset.checkpoint_scheme) == out.end())
    out.push_back(s.preset.checkpoint_scheme);
  return out;
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// ---- output ----

std::optional<double> baseline_ratio(const std::optional<double>& base_us, const std::optional<double>& us) {
  if (!base_us || !us || !(*us > 0)) return std::nullopt;
  return *base_us / *us;
}

std::string fmt(const std::optional<double>& v, const char* f) {
  if (!v) return "-";
  if (std::isinf(*v)) return "inf";
  if (std::isnan(*v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, *v);
  return buf;
}

// Rates span GPU (hundreds) and CPU (thousandths) magnitudes: keep three significant digits.
std::string fmt_rate(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return fmt(v, "%g");
  const double a = std::fabs(*v);
  return fmt(v, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g");
}

void print_header() {
  std::printf("%-28s %3s %-15s %6s %-5s %-10s %10s %8s %8s %9s %6s %6s %10s %7s %10s %6s %6s %9s\n", "preset", "tp",
              "scheme", "M", "bknd", "path", "us", "TFLOP/s", "GB/s", "roof_us", "%roof", "%dense", "base_us", "x_base",
              "fp8_us", "x_fp8", "x_mma", "max_err");
  std::fflush(stdout);
}

void print_row(const Row& r) {
  const std::optional<double> ratio = baseline_ratio(r.baseline_us, r.us), ratio8 = baseline_ratio(r.baseline_fp8_us, r.us);
  std::optional<double> roof_pct, dense_pct;
  if (r.roof_fraction) roof_pct = 100.0 * *r.roof_fraction;
  if (r.tflops_fraction_of_dense) dense_pct = 100.0 * *r.tflops_fraction_of_dense;
  std::printf("%-28s %3d %-15s %6lld %-5s %-10s %10s %8s %8s %9s %6s %6s %10s %7s %10s %6s %6s %9s", r.preset.c_str(), r.tp,
              r.scheme.c_str(), static_cast<long long>(r.tokens), r.backend.c_str(), r.path.c_str(),
              fmt(r.us, "%.1f").c_str(), fmt_rate(r.tflops).c_str(), fmt_rate(r.gbps).c_str(),
              fmt(r.roof_us, "%.1f").c_str(), fmt(roof_pct, "%.0f").c_str(), fmt(dense_pct, "%.0f").c_str(),
              fmt(r.baseline_us, "%.1f").c_str(), fmt(ratio, "%.2f").c_str(), fmt(r.baseline_fp8_us, "%.1f").c_str(),
              fmt(ratio8, "%.2f").c_str(), fmt(r.ratio_vs_mma, "%.2f").c_str(), fmt(r.max_rel_err, "%.1e").c_str());
  if (r.check_ran && r.check_tokens < r.tokens)
    std::printf(" (%lld of %lld tokens)", static_cast<long long>(r.check_tokens), static_cast<long long>(r.tokens));
  if (!r.dispatch.empty()) std::printf("  {%s}", r.dispatch.c_str());
  if (r.us_in_graph) std::printf("  in_graph %s us", fmt(r.us_in_graph, "%.1f").c_str());
  if (r.first_call_us) {
    std::printf("  first_call %s us", fmt(r.first_call_us, "%.1f").c_str());
    if (r.eager_us) std::printf(" (steady eager %s us)", fmt(r.eager_us, "%.1f").c_str());
  }
  if (r.host_us)
    std::printf("  host %s us (p90 %s; validate %s, plan %s, launch ~%s)", fmt(r.host_us, "%.1f").c_str(),
                fmt(r.host_p90_us, "%.1f").c_str(), fmt(r.host_validate_us, "%.2f").c_str(),
                fmt(r.host_plan_us, "%.2f").c_str(), fmt(r.host_launch_us, "%.1f").c_str());
  if (!r.note.empty()) std::printf("  [%s]", r.note.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o + "\"";
}

// Numbers as JSON numbers; non-finite values (an error that is inf/NaN) as strings.
std::string json_num(const std::optional<double>& v) {
  if (!v) return "null";
  if (std::isinf(*v)) return *v > 0 ? "\"inf\"" : "\"-inf\"";
  if (std::isnan(*v)) return "\"nan\"";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", *v);
  return buf;
}

// The build's provenance (moekit::build_info(), baked in by CMake from git or build-info.json).
std::string build_info_json() {
  const BuildInfo& b = build_info();
  return std::string("{\"commit\": ") + json_str(b.commit) + ", \"dirty\": " +
         (b.dirty < 0 ? "null" : b.dirty ? "true" : "false") + ", \"tree\": " + json_str(b.tree) +
         ", \"date\": " + json_str(b.date) + ", \"source\": " + json_str(b.source) + "}";
}

void write_json(const std::string& path, const std::string& date, const std::string& gpu, const Ceilings& c,
                const std::vector<Row>& rows) {
  // Written beside the file and renamed over it: a run killed mid-write leaves the last whole file.
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp);
  if (!f) throw Error(Status::kInvalidArgument, "--json: cannot write '" + tmp + "'");
  const BuildInfo& b = build_info();
  f << "{\n  \"commit\": " << json_str(b.commit) << ",\n  \"dirty\": "
    << (b.dirty < 0 ? "null" : b.dirty ? "true" : "false") << ",\n  \"build_info\": " << build_info_json()
    << ",\n  \"date\": " << json_str(date) << ",\n  \"gpu\": " << json_str(gpu) << ",\n  \"ceilings\": {\"hbm_gbps\": " << json_num(c.hbm.gbps)
    << ", \"hbm_source\": " << json_str(c.hbm.source) << ", \"hbm_read_gbps_measured\": " << json_num(c.hbm_read_gbps)
    << ", \"dense_tflops_bf16\": " << json_num(c.dense_tflops_bf16)
    << ", \"dense_tflops_fp8\": " << json_num(c.dense_tflops_fp8) << "},\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << (i ? ",\n" : "\n") << "    {\"preset\": " << json_str(r.preset) << ", \"tp\": " << r.tp
      << ", \"scheme\": " << json_str(r.scheme) << ", \"tokens\": " << r.tokens
      << ", \"backend\": " << json_str(r.backend) << ", \"path\": " << json_str(r.path)
      << ", \"dispatch\": " << (r.dispatch.empty() ? std::string("null") : json_str(r.dispatch))
      << ", \"ratio_vs_mma\": " << json_num(r.ratio_vs_mma)
      << ", \"us\": " << json_num(r.us) << ", \"us_in_graph\": " << json_num(r.us_in_graph) << ", \"tflops\": " << json_num(r.tflops) << ", \"gbps\": " << json_num(r.gbps)
      << ", \"roof_us\": " << json_num(r.roof_us) << ", \"roof_fraction\": " << json_num(r.roof_fraction)
      << ", \"tflops_fraction_of_dense\": " << json_num(r.tflops_fraction_of_dense)
      << ", \"baseline\": " << (r.baseline.empty() ? std::string("null") : json_str(r.baseline))
      << ", \"baseline_us\": " << json_num(r.baseline_us)
      << ", \"baseline_ratio\": " << json_num(baseline_ratio(r.baseline_us, r.us))
      << ", \"baseline_fp8\": " << (r.baseline_fp8.empty() ? std::string("null") : json_str(r.baseline_fp8))
      << ", \"baseline_fp8_us\": " << json_num(r.baseline_fp8_us)
      << ", \"baseline_fp8_ratio\": " << json_num(baseline_ratio(r.baseline_fp8_us, r.us))
      << ", \"check_ran\": " << (r.check_ran ? "true" : "false") << ", \"check_tokens\": " << r.check_tokens
      << ", \"check_tol\": " << json_num(r.check_tol)
      << ", \"check_passed\": " << (r.check_passed ? (*r.check_passed ? "true" : "false") : "null")
      << ", \"max_rel_err\": " << json_num(r.max_rel_err);
    if (r.first_call_us) f << ", \"first_call_us\": " << json_num(r.first_call_us);
    if (r.eager_us) f << ", \"eager_us\": " << json_num(r.eager_us);
    if (r.host_us)
      f << ", \"host_us\": " << json_num(r.host_us) << ", \"host_p90_us\": " << json_num(r.host_p90_us)
        << ", \"host_validate_us\": " << json_num(r.host_validate_us) << ", \"host_plan_us\": " << json_num(r.host_plan_us)
        << ", \"host_launch_us\": " << json_num(r.host_launch_us);
    f << ", \"op\": " << json_str(r.op) << ", \"timing\": " << json_str(r.timing) << ", \"touched_experts\": " << r.touched_experts;
    if (!r.note.empty()) f << ", \"note\": " << json_str(r.note);
    f << ", \"reproduce\": " << json_str(r.reproduce) << "}";
  }
  f << "\n  ]\n}\n";
  f.close();
  if (!f) throw Error(Status::kInternal, "--json: writing '" + tmp + "' failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(Status::kInvalidArgument, "--json: cannot replace '" + path + "' with '" + tmp + "'");
}

int run_main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {  // --op inv_rope_fp8_quant: a sweep of its own (rope_quant_bench.cu)
    const std::string a = argv[i];
    if (a == "--op=inv_rope_fp8_quant" || (a == "--op" && i + 1 < argc && std::string(argv[i + 1]) == "inv_rope_fp8_quant")) {
#if defined(MOEKIT_BENCH_WITH_CUDA)
      return run_rope_quant_bench(argc, argv, std::string(build_info().commit) + (build_info().dirty > 0 ? "-dirty" : ""), today_utc());
#else
      usage_error("--op inv_rope_fp8_quant needs the CUDA build of moekit-bench");
#endif
    }
  }
  Cli cli = parse_args(argc, argv);
  Config& config = cli.config;

  // Resolve the backend: auto = CUDA when this build has it and a Hopper GPU is usable.
  std::string why;
  const bool cuda_ok = cuda_available(&why);
  (void)cuda_ok;
  bool use_cuda = false;
  if (config.backend == Backend::kCuda) {
#if defined(MOEKIT_BENCH_WITH_CUDA)
    if (!cuda_ok) {
      std::fprintf(stderr, "moekit-bench: --backend cuda, but the CUDA backend is not usable: %s\n", why.c_str());
      return 2;
    }
    use_cuda = true;
#else
    std::fprintf(stderr, "moekit-bench: --backend cuda, but this moekit-bench was built without CUDA\n");
    return 2;
#endif
  } else if (config.backend == Backend::kAuto) {
#if defined(MOEKIT_BENCH_WITH_CUDA)
    use_cuda = cuda_ok;
#else
    if (why.empty()) why = "this moekit-bench was built without CUDA";
#endif
    if (!use_cuda)
      std::printf("moekit-bench: no usable GPU (%s): running the CPU reference backend (wall clock, no roofline)\n",
                  why.c_str());
  }
  config.backend = use_cuda ? Backend::kCuda : Backend::kCpu;
  apply_defaults(cli, use_cuda);

  std::unique_ptr<Runner> runner;
#if defined(MOEKIT_BENCH_WITH_CUDA)
  if (use_cuda) runner = make_cuda_runner(config);
#endif
  if (!runner) runner = make_cpu_runner(config);

  const std::string date = today_utc(), gpu = runner->gpu_name();
  const BuildInfo& bi = build_info();
  std::printf("moekit-bench %s  commit %.12s%s (tree %.12s, from %s)  %s  gpu: %s  backend: %s\n", version(), bi.commit,
              bi.dirty > 0 ? "+dirty" : bi.dirty < 0 ? "?" : "", bi.tree, bi.source, date.c_str(), gpu.c_str(),
              runner->name());
  Ceilings ceilings;
  if (use_cuda) {
    std::fprintf(stderr, "measuring ceilings (a 4 GiB HBM read stream; dense GEMM: cuBLAS bf16, cuBLASLt fp8 e4m3, 8192^3)...\n");
    ceilings = runner->measure_ceilings();
    ceilings.hbm = config.hbm_gbps ? HbmRate{*config.hbm_gbps, "--hbm-gbps", false} : datasheet_hbm(gpu);
    std::printf("ceilings: HBM %.0f GB/s (%s; a read stream measured %s GB/s now), dense bf16 %s TFLOP/s, "
                "dense fp8 %s TFLOP/s (measured now)\n",
                ceilings.hbm.gbps, ceilings.hbm.source.c_str(), fmt(ceilings.hbm_read_gbps, "%.0f").c_str(),
                fmt(ceilings.dense_tflops_bf16, "%.0f").c_str(), fmt(ceilings.dense_tflops_fp8, "%.0f").c_str());
    if (!config.hbm_gbps && !ceilings.hbm.in_table) warn_unlisted_gpu(gpu, ceilings.hbm);
  }

  std::size_t total = 0;
  for (const Shape& s : config.shapes)
    total += config.tps.size() * schemes_for(config, s).size() * config.tokens.size() * config.paths.size();

  std::vector<Row> rows;
  std::size_t done = 0;
  int failures = 0, refused = 0, check_failures = 0;
  print_header();
  for (const Shape& shape : config.shapes) {
    for (int tp : config.tps) {
      for (Scheme scheme : schemes_for(config, shape)) {
        try {
          runner->prepare(shape, tp, scheme);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "moekit-bench: cannot run %s tp%d %s on the %s backend: %s\n", shape.name.c_str(), tp,
                       scheme_name(scheme), runner->name(), e.what());
          done += config.tokens.size() * config.paths.size();
          ++refused;
          continue;
        }
        for (std::int64_t m : config.tokens) {
          // Every path of --path at this point, side by side; rows other than mma's get
          // ratio_vs_mma from the mma row of the same point.
          std::vector<Row> point_rows;
          for (const std::string& path : config.paths) {
            ++done;
            Point pt;
            pt.shape = &shape;
            pt.tp = tp;
            pt.scheme = scheme;
            pt.tokens = m;
            pt.path = path;
            if (total > 1)
              std::fprintf(stderr, "[%zu/%zu] %s tp%d %s M=%lld%s%s ...\n", done, total, shape.name.c_str(), tp,
                           scheme_name(scheme), static_cast<long long>(m), path.empty() ? "" : " path ",
                           path.c_str());
            Row row;
            try {
              pt.problem = preset_problem(shape.preset, m, tp, scheme);
              row = runner->run(pt, ceilings);
            } catch (const std::exception& e) {
              row = Row{};
              row.preset = shape.name;
              row.tp = tp;
              row.scheme = scheme_name(scheme);
              row.tokens = m;
              row.backend = runner->name();
              row.path = effective_path(path);
              row.op = config.op_fused_moe ? "fused_moe" : "fused_experts";
              row.reproduce = reproduce_command(config, pt, runner->name());
              // A forced path that cannot run this point (kNotSupported) is a fact of the row,
              // not a failure of the run.
              const auto* err = dynamic_cast<const Error*>(&e);
              const bool declined = err != nullptr && err->status() == Status::kNotSupported && !path.empty() &&
                                    path != "auto";
              row.note = std::string(declined ? "declined: " : "error: ") + e.what();
              if (!declined) ++failures;
            }
            if (row.check_passed && !*row.check_passed) {
              ++check_failures;
              row.note = std::string("CHECK FAILED") +
                         (row.max_rel_err ? ": max_rel_err " + fmt(row.max_rel_err, "%.3g") + " > " +
                                                fmt(row.check_tol, "%.3g")
                                          : std::string()) +
                         (row.note.empty() ? "" : "; " + row.note);
            }
            point_rows.push_back(std::move(row));
          }
          const Row* mma = nullptr;
          for (const Row& r : point_rows)
            if (r.path == "mma" && r.us) mma = &r;
          for (Row& r : point_rows) {
            if (mma != nullptr && &r != mma && r.us && *r.us > 0) r.ratio_vs_mma = *mma->us / *r.us;
            print_row(r);
            rows.push_back(std::move(r));
          }
          // The file holds every finished point, so that a run cut short (a time limit on a lent
          // GPU) still leaves its rows; rewritten whole after each point (a few hundred KB at most).
          if (!config.json_path.empty()) write_json(config.json_path, date, gpu, ceilings, rows);
        }
        runner->release();
      }
    }
  }
  if (use_cuda)
    std::printf("x_base = base_us / us, cuBLAS bf16 (bf16's like-for-like baseline); x_fp8 = fp8_us / us, cuBLASLt "
                "e4m3 (fp8 schemes' like-for-like baseline); above 1: moekit faster; x_mma = mma path us / us; "
                "%%roof = roof_us / us; %%dense = TFLOP/s / dense GEMM rate; {the router's kernels}\n");
  if (config.check)
    std::printf("max_err: the largest per-token ||out - ref|| / ||ref|| against the CPU reference (--check; "
                "\"(S of M tokens)\" where a sample was checked)\n");
  if (!config.json_path.empty()) {
    write_json(config.json_path, date, gpu, ceilings, rows);
    std::printf("wrote %s (%zu rows)\n", config.json_path.c_str(), rows.size());
  }
  if (check_failures > 0)
    std::fprintf(stderr, "moekit-bench: %d point(s) failed --check (see the table's [CHECK FAILED ...] notes)\n",
                 check_failures);
  if (failures > 0)
    std::fprintf(stderr, "moekit-bench: %d point(s) failed (see the table's [error: ...] notes)\n", failures);
  if (failures > 0 || check_failures > 0) return 1;
  if (rows.empty() && refused > 0) return 2;
  return 0;
}

}  // namespace
}  // namespace moekit::bench

int main(int argc, char** argv) {
  try {
    return moekit::bench::run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moekit-bench: error: %s\n", e.what());
    return 1;
  }
}
