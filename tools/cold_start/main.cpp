// moekit-cold-start: the first moekit call of a fresh process, timed phase by phase (CUDA context,
// inputs, kernel preload, first call, steady calls), for docs/perf.md "Cold start" and the GPU
// test Sm90ColdStart.FirstCallUnderBound (tests/CMakeLists.txt). One process = one measurement:
// run it again (tools/scripts/cold_start.py does, with CUDA_MODULE_LOADING=LAZY and EAGER).
//   moekit-cold-start [--preset qwen3-30b-a3b] [--tokens 37] [--tp 1] [--scheme bf16]
//                     [--preload-first] [--path NAME] [--steady 20] [--json FILE] [--max-ms 200]
// Exit status: 0 ok, 1 the first call (kernel loading included) took longer than --max-ms,
// 2 bad usage or a CUDA / moekit error, 77 no Hopper GPU (ctest reports the test skipped).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "moekit/moekit.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Config {
  std::string preset = "qwen3-30b-a3b";
  std::int64_t tokens = 37;  // the measurement: qwen3-30b, M = 37
  int tp = 1;
  std::string scheme = "bf16";
  bool preload_first = false;
  std::string path;
  int steady = 20;
  std::string json;
  double max_ms = -1;  // < 0: no bound
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "moekit-cold-start: %s\n"
               "usage: moekit-cold-start [--preset NAME] [--tokens M] [--tp N] [--scheme bf16|fp8_per_tensor]\n"
               "                         [--preload-first] [--path NAME] [--steady N] [--json FILE] [--max-ms X]\n",
               why);
  std::exit(2);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--preset") c.preset = next();
    else if (a == "--tokens") c.tokens = std::atoll(next().c_str());
    else if (a == "--tp") c.tp = std::atoi(next().c_str());
    else if (a == "--scheme") c.scheme = next();
    else if (a == "--preload-first") c.preload_first = true;
    else if (a == "--path") c.path = next();
    else if (a == "--steady") c.steady = std::atoi(next().c_str());
    else if (a == "--json") c.json = next();
    else if (a == "--max-ms") c.max_ms = std::atof(next().c_str());
    else if (a == "-h" || a == "--help") usage("help");
    else usage(("unknown argument " + a).c_str());
  }
  if (c.tokens < 1 || c.steady < 1) usage("--tokens and --steady must be >= 1");
  if (c.scheme != "bf16" && c.scheme != "fp8_per_tensor") usage("--scheme: bf16 or fp8_per_tensor");
  return c;
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "moekit-cold-start: %s: %s (%s)\n", what, cudaGetErrorName(err), cudaGetErrorString(err));
  std::exit(2);
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) o += ch;
  }
  return o + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  const Config cfg = parse(argc, argv);

  // A Hopper GPU? Probed without moekit: moekit::cuda_available() would load the kernels, the
  // very thing this program times.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("moekit-cold-start: no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("moekit-cold-start: device 0 is %s (sm_%d%d), not Hopper: skipped\n", prop.name, prop.major, prop.minor);
    return 77;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const char* loading = std::getenv("CUDA_MODULE_LOADING");

  try {
    // 1. The CUDA context (the application's, not moekit's: torch or the engine makes it). Under
    // CUDA_MODULE_LOADING=EAGER this is also where every module of the process loads.
    auto t = Clock::now();
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaFree(nullptr), "cudaFree(0)");
    const double context_ms = ms_since(t);

    // 2. Inputs (the application's too): weights filled with a constant, ids distinct per row.
    const moekit::Scheme scheme = moekit::parse_scheme(cfg.scheme);
    const moekit::MoeProblem p = moekit::preset_problem(moekit::find_preset(cfg.preset), cfg.tokens, cfg.tp, scheme);
    const std::int64_t M = p.num_tokens, E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    const int k = static_cast<int>(p.top_k);
    const bool fp8 = scheme != moekit::Scheme::kBf16;
    const moekit::DType wdt = fp8 ? moekit::DType::kFp8E4m3 : moekit::DType::kBf16;
    const std::size_t wbytes = fp8 ? 1 : 2;
    t = Clock::now();
    void *hidden = nullptr, *w13 = nullptr, *w2 = nullptr, *out = nullptr, *ids = nullptr, *wts = nullptr;
    void *s13 = nullptr, *s2 = nullptr, *ws = nullptr;
    check(cudaMalloc(&hidden, M * K * 2), "cudaMalloc hidden");
    check(cudaMalloc(&out, M * K * 2), "cudaMalloc out");
    check(cudaMalloc(&w13, E * 2 * N * K * wbytes), "cudaMalloc w13");
    check(cudaMalloc(&w2, E * K * N * wbytes), "cudaMalloc w2");
    check(cudaMalloc(&ids, M * k * 4), "cudaMalloc topk_ids");
    check(cudaMalloc(&wts, M * k * 4), "cudaMalloc topk_weights");
    check(cudaMemset(hidden, 0x3c, M * K * 2), "cudaMemset");  // bf16 0x3c3c ~ 0.0115; e4m3 0x3c = 1.5
    check(cudaMemset(w13, 0x3c, E * 2 * N * K * wbytes), "cudaMemset");
    check(cudaMemset(w2, 0x3c, E * K * N * wbytes), "cudaMemset");
    std::vector<std::int32_t> h_ids(M * k);
    std::vector<float> h_wts(M * k, 1.0f / k);
    std::uint32_t lcg = 12345;
    for (std::int64_t m = 0; m < M; ++m) {
      lcg = lcg * 1664525u + 1013904223u;
      const std::int64_t first = lcg % E;
      for (int j = 0; j < k; ++j) h_ids[m * k + j] = static_cast<std::int32_t>((first + j) % E);
    }
    check(cudaMemcpy(ids, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy ids");
    check(cudaMemcpy(wts, h_wts.data(), h_wts.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy weights");
    if (fp8) {
      std::vector<float> scale(E, 1e-2f);
      check(cudaMalloc(&s13, E * 4), "cudaMalloc");
      check(cudaMalloc(&s2, E * 4), "cudaMalloc");
      check(cudaMemcpy(s13, scale.data(), E * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      check(cudaMemcpy(s2, scale.data(), E * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    const std::size_t ws_bytes = moekit::workspace_size(p, moekit::Backend::kCuda);
    if (ws_bytes > 0) check(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
    check(cudaDeviceSynchronize(), "inputs");
    const double inputs_ms = ms_since(t);

    const moekit::Device dev = moekit::Device::cuda(0);
    moekit::FusedExpertsArgs a;
    a.hidden = moekit::TensorView::contiguous(hidden, moekit::DType::kBf16, {M, K}, dev);
    a.out = moekit::TensorView::contiguous(out, moekit::DType::kBf16, {M, K}, dev);
    a.weights.w13 = moekit::TensorView::contiguous(w13, wdt, {E, 2 * N, K}, dev);
    a.weights.w2 = moekit::TensorView::contiguous(w2, wdt, {E, K, N}, dev);
    if (fp8) {
      a.weights.w13_scale = moekit::TensorView::contiguous(s13, moekit::DType::kFp32, {E}, dev);
      a.weights.w2_scale = moekit::TensorView::contiguous(s2, moekit::DType::kFp32, {E}, dev);
    }
    a.topk_ids = moekit::TensorView::contiguous(ids, moekit::DType::kInt32, {M, k}, dev);
    a.topk_weights = moekit::TensorView::contiguous(wts, moekit::DType::kFp32, {M, k}, dev);
    a.scheme = scheme;
    a.activation = p.activation;
    moekit::Options o;
    o.backend = moekit::Backend::kCuda;
    o.workspace = ws;
    o.workspace_bytes = ws_bytes;
    if (!cfg.path.empty()) o.path = cfg.path.c_str();

    // 3. (--preload-first) the kernels, loaded before the first call as an engine would at model
    // load; otherwise the first call loads them.
    double preload_ms = 0;
    if (cfg.preload_first) {
      t = Clock::now();
      (void)moekit::preload(0);
      preload_ms = ms_since(t);
    }

    // 4. The first call, to completion.
    t = Clock::now();
    moekit::fused_experts(a, o);
    check(cudaDeviceSynchronize(), "first call");
    const double first_ms = ms_since(t);

    // 5. Steady calls, each to completion (the same host clock as the first call).
    std::vector<double> steady;
    for (int i = 0; i < cfg.steady; ++i) {
      t = Clock::now();
      moekit::fused_experts(a, o);
      check(cudaDeviceSynchronize(), "steady call");
      steady.push_back(ms_since(t));
    }
    std::sort(steady.begin(), steady.end());
    const double steady_ms = steady[steady.size() / 2];

    const moekit::PreloadReport pr = moekit::preload(0);  // the numbers of the load that happened
    const double cold_ms = preload_ms + first_ms;
    const std::string dispatch = moekit::describe_dispatch(p, o);

    std::printf("moekit-cold-start: %s on %s (driver %d, runtime %d, CUDA_MODULE_LOADING=%s)\n", p.to_string().c_str(),
                prop.name, driver, runtime, loading ? loading : "(unset)");
    std::printf("  paths %s\n", dispatch.c_str());
    std::printf("  CUDA context           %9.2f ms\n", context_ms);
    std::printf("  inputs                 %9.2f ms\n", inputs_ms);
    if (cfg.preload_first) std::printf("  moekit::preload        %9.2f ms\n", preload_ms);
    std::printf("  first call             %9.2f ms%s\n", first_ms, cfg.preload_first ? "" : " (kernel preload included)");
    std::printf("    preload: %d kernels in %.2f ms (context %.2f ms); slowest:", pr.kernels, pr.load_ms, pr.context_ms);
    for (const auto& [name, ms] : pr.slowest) std::printf(" %s %.2f ms;", name.c_str(), ms);
    std::printf("\n  steady call (median)   %9.3f ms (min %.3f, %d calls)\n", steady_ms, steady.front(), cfg.steady);
    std::printf("  cold = preload + first %9.2f ms = %.1fx steady%s\n", cold_ms, cold_ms / steady_ms,
                cfg.max_ms >= 0 ? (cold_ms <= cfg.max_ms ? " (within the bound)" : " (ABOVE the bound)") : "");

    if (!cfg.json.empty()) {
      std::ostringstream j;
      j << "{\"tool\": \"moekit-cold-start\", \"problem\": " << json_str(p.to_string())
        << ", \"preset\": " << json_str(cfg.preset) << ", \"tokens\": " << M << ", \"tp\": " << cfg.tp
        << ", \"scheme\": " << json_str(cfg.scheme) << ", \"paths\": " << json_str(dispatch)
        << ", \"device\": " << json_str(prop.name) << ", \"driver\": " << driver << ", \"runtime\": " << runtime
        << ", \"cuda_module_loading\": " << json_str(loading ? loading : "") << ", \"preload_first\": "
        << (cfg.preload_first ? "true" : "false") << ", \"context_ms\": " << context_ms
        << ", \"inputs_ms\": " << inputs_ms << ", \"preload_ms\": " << preload_ms << ", \"first_call_ms\": " << first_ms
        << ", \"cold_ms\": " << cold_ms << ", \"steady_ms\": " << steady_ms << ", \"steady_min_ms\": " << steady.front()
        << ", \"preload\": {\"kernels\": " << pr.kernels << ", \"load_ms\": " << pr.load_ms
        << ", \"context_ms\": " << pr.context_ms << ", \"slowest\": [";
      for (std::size_t i = 0; i < pr.slowest.size(); ++i)
        j << (i ? ", " : "") << "[" << json_str(pr.slowest[i].first) << ", " << pr.slowest[i].second << "]";
      j << "]}, \"max_ms\": " << cfg.max_ms << "}\n";
      std::ofstream(cfg.json) << j.str();
    }
    for (void* ptr : {hidden, out, w13, w2, ids, wts, s13, s2, ws})
      if (ptr != nullptr) cudaFree(ptr);
    if (cfg.max_ms >= 0 && cold_ms > cfg.max_ms) {
      std::fprintf(stderr, "moekit-cold-start: the first call took %.1f ms (kernel loading included), above the %.0f ms bound\n",
                   cold_ms, cfg.max_ms);
      return 1;
    }
  } catch (const moekit::Error& e) {
    std::fprintf(stderr, "moekit-cold-start: %s\n", e.what());
    return 2;
  }
  return 0;
}
