// moekit-host-cost: where the host side of one eager moekit call goes (issue 13 bounds it at 10 us
// for M = 1..64; docs/perf.md "Host side of an eager call"). moekit-bench times the whole call and
// two public pieces of it (validation, the router); this tool times the pieces in between and the
// CUDA runtime primitives they are made of, each alone, on the host wall clock, median of --iters
// calls after a warm-up, the stream drained every 8 calls outside the timed regions (as
// moekit-bench's host time: a full launch queue would time the GPU instead):
//   - primitives: a getenv miss and the one scan of the environment that replaces a call's getenvs
//     of its MOEKIT_* switches (core/env.hpp's EnvScope), with the process's environment and with
//     150 more variables set;
//     cudaGetDevice, and an empty kernel's launch: <<<>>>, cudaLaunchKernelEx with no attribute,
//     with the PDL attribute, in clusters of 2 / 4 / 8, with the decode kernel's parameter size
//     (sizeof DecodeParams) and its 210 KB of dynamic shared memory;
//   - per call (--preset, --tp, --scheme, --tokens; fused_experts, routing given): the whole call,
//     moekit::describe (validation), moekit::workspace_size (which the call repeats to check the
//     workspace), describe_dispatch (the router), can_implement_decode_sm90 and gemv_support_sm90
//     alone (the router's queries), and run_decode_sm90 alone on the resolved call (the decode
//     path's host setup and its launches) where the router takes decode.
//
//   moekit-host-cost [--preset NAME] [--tp N] [--scheme LIST] [--tokens LIST] [--iters N] [--json PATH]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/env.hpp"
#include "cuda/common/pdl.cuh"
#include "cuda/kernels/decode/launch_sm90.hpp"
#include "cuda/kernels/decode/params.hpp"
#include "cuda/kernels/gemv/launch_sm90.hpp"
#include "moekit/moekit.hpp"

extern char** environ;

namespace {

#define HC_CHECK(x)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

constexpr int kWarmup = 50;
constexpr int kDrainEvery = 8;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Host wall clock of f() alone, median over iters calls; the stream drained every kDrainEvery
// calls outside the timed regions when `drain`.
double host_us(const std::function<void()>& f, int iters, cudaStream_t stream, bool drain) {
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < kWarmup + iters; ++i) {
    if (drain && i % kDrainEvery == 0) HC_CHECK(cudaStreamSynchronize(stream));
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= kWarmup) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (drain) HC_CHECK(cudaStreamSynchronize(stream));
  return median(t);
}

template <int kBytes>
struct Blob {
  unsigned char b[kBytes];
};

template <int kBytes>
__global__ void empty_kernel(Blob<kBytes> p) {
  if (p.b[0] == 0xAB && threadIdx.x == 1000) asm volatile("trap;");  // never: keeps p live
}

struct Result {
  std::string name;
  double us;
};

std::vector<Result> g_results;

void record(const std::string& name, double us) {
  std::printf("  %-58s %8.2f us\n", name.c_str(), us);
  g_results.push_back({name, us});
}

template <int kBytes>
void launch_cases(cudaStream_t s, int iters, const char* tag, int grid, std::size_t smem) {
  auto* k = &empty_kernel<kBytes>;
  if (smem > 48 * 1024) HC_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  Blob<kBytes> p{};
  const std::string base = std::string(tag) + ", grid " + std::to_string(grid) + ", smem " + std::to_string(smem >> 10) + " KB";
  record("<<<>>> " + base, host_us([&] { k<<<grid, 384, smem, s>>>(p); }, iters, s, true));
  for (int cluster : {1, 2, 4, 8}) {
    for (bool pdl : {false, true}) {
      if (grid % cluster != 0) continue;  // a cluster launch needs a grid of whole clusters
      record("Ex cluster " + std::to_string(cluster) + (pdl ? " +PDL " : "       ") + base, host_us([&] {
               cudaLaunchAttribute attr[2];
               cudaLaunchConfig_t cfg = moekit::cuda::cluster_launch_config(static_cast<unsigned>(grid), 384, smem, s, cluster, attr);
               moekit::cuda::add_pdl_attribute(cfg, attr, pdl);
               HC_CHECK(cudaLaunchKernelEx(&cfg, k, p));
             }, iters, s, true));
    }
  }
}

std::vector<std::int64_t> parse_list(const char* s) {
  std::vector<std::int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

std::vector<std::string> parse_names(const char* s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(std::size_t bytes) {
    HC_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)));
    HC_CHECK(cudaMemset(p, 0, std::max<std::size_t>(bytes, 256)));
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

moekit::TensorView dev_view(void* p, moekit::DType t, std::vector<std::int64_t> shape) {
  return moekit::TensorView::contiguous(p, t, shape.data(), static_cast<int>(shape.size()), moekit::Device::cuda(0));
}

void call_cases(const std::string& preset_name, int tp, moekit::Scheme scheme, std::int64_t M, cudaStream_t s, int iters) {
  using namespace moekit;
  const ModelPreset& preset = find_preset(preset_name);
  const MoeProblem pp = preset_problem(preset, M, tp, scheme);
  const std::int64_t E = pp.num_experts, K = pp.hidden_size, N = pp.intermediate_size, k = pp.top_k;
  const bool fp8 = scheme != Scheme::kBf16;
  const DType wt = fp8 ? DType::kFp8E4m3 : DType::kBf16;
  const std::size_t we = fp8 ? 1 : 2;
  DevBuf hidden(static_cast<std::size_t>(M * K * 2)), out(static_cast<std::size_t>(M * K * 2));
  DevBuf w13(static_cast<std::size_t>(E * 2 * N * K) * we), w2(static_cast<std::size_t>(E * K * N) * we);
  std::vector<std::int64_t> s13, s2;
  if (scheme == Scheme::kFp8PerTensor) s13 = s2 = {E};
  if (scheme == Scheme::kFp8PerChannel) s13 = {E, 2 * N}, s2 = {E, K};
  if (scheme == Scheme::kFp8Block128) s13 = {E, (2 * N + 127) / 128, (K + 127) / 128}, s2 = {E, (K + 127) / 128, (N + 127) / 128};
  std::int64_t n13 = 1, n2 = 1;
  for (auto d : s13) n13 *= d;
  for (auto d : s2) n2 *= d;
  DevBuf sc13(static_cast<std::size_t>(n13) * 4), sc2(static_cast<std::size_t>(n2) * 4);
  std::vector<std::int32_t> h_ids(static_cast<std::size_t>(M * k));
  for (std::size_t i = 0; i < h_ids.size(); ++i) h_ids[i] = static_cast<std::int32_t>((i * 7 + i / k) % E);
  DevBuf ids(h_ids.size() * 4), wts(h_ids.size() * 4);
  HC_CHECK(cudaMemcpy(ids.p, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice));

  FusedExpertsArgs a;
  a.hidden = dev_view(hidden.p, DType::kBf16, {M, K});
  a.out = dev_view(out.p, DType::kBf16, {M, K});
  a.weights.w13 = dev_view(w13.p, wt, {E, 2 * N, K});
  a.weights.w2 = dev_view(w2.p, wt, {E, K, N});
  if (fp8) {
    a.weights.w13_scale = dev_view(sc13.p, DType::kFp32, s13);
    a.weights.w2_scale = dev_view(sc2.p, DType::kFp32, s2);
  }
  a.topk_ids = dev_view(ids.p, DType::kInt32, {M, k});
  a.topk_weights = dev_view(wts.p, DType::kFp32, {M, k});
  a.scheme = scheme;
  a.activation = preset.activation;
  const MoeProblem problem = describe(a);
  const std::size_t ws_bytes = workspace_size(problem, Backend::kCuda);
  DevBuf ws(ws_bytes);
  Options o;
  o.backend = Backend::kCuda;
  o.stream = s;
  o.workspace = ws.p;
  o.workspace_bytes = ws_bytes;
  std::string why;
  const std::string path = describe_dispatch(problem, o, &why);
  char tag[160];
  std::snprintf(tag, sizeof tag, "%s TP%d %s M=%lld [%s]", preset_name.c_str(), tp, scheme_name(scheme),
                static_cast<long long>(M), path.c_str());
  std::printf("%s\n", tag);
  const std::string t(tag);
  record(t + " fused_experts (whole call)", host_us([&] { fused_experts(a, o); }, iters, s, true));
  record(t + " describe (validation)", host_us([&] { (void)describe(a); }, iters, s, false));
  record(t + " workspace_size", host_us([&] { (void)workspace_size(problem, Backend::kCuda); }, iters, s, false));
  record(t + " describe_dispatch (router + reason)", host_us([&] { (void)describe_dispatch(problem, o); }, iters, s, false));
  record(t + " can_implement_decode_sm90",
         host_us([&] { (void)cuda::can_implement_decode_sm90(problem, 132, nullptr); }, iters, s, false));
  record(t + " gemv_support_sm90", host_us([&] { (void)cuda::gemv_support_sm90(problem, nullptr); }, iters, s, false));
  if (path.rfind("decode", 0) == 0) {
    const detail::MoeCall call = detail::resolve(a, o);
    record(t + " run_decode_sm90 alone", host_us([&] { cuda::run_decode_sm90(call, 0.0); }, iters, s, true));
  }
  HC_CHECK(cudaStreamSynchronize(s));
}

// A getenv miss, and the scan of the environment for every MOEKIT_* switch that a call's EnvScope
// makes once instead of a getenv per switch (core/env.hpp), with `n` variables set.
void env_cases(int n, int iters, cudaStream_t s) {
  const std::string vars = " (" + std::to_string(n) + " variables)";
  record("getenv miss" + vars,
         host_us([] { if (std::getenv("MOEKIT_HOST_COST_UNSET") != nullptr) std::abort(); }, iters, s, false));
  record("MOEKIT_* switch scan, one per call" + vars, host_us([] {
           const moekit::detail::EnvScope scope;
           if (moekit::detail::env_value(moekit::detail::EnvVar::kPath) == reinterpret_cast<const char*>(1)) std::abort();
         }, iters, s, false));
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen3-30b-a3b";
  int tp = 8;
  std::vector<std::string> schemes = {"bf16", "fp8_per_tensor", "fp8_per_channel"};
  std::vector<std::int64_t> tokens = {1, 8, 64};
  int iters = 2000;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
    else if (!std::strcmp(argv[i], "--tp") && i + 1 < argc) tp = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--scheme") && i + 1 < argc) schemes = parse_names(argv[++i]);
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: moekit-host-cost [--preset NAME] [--tp N] [--scheme LIST] [--tokens LIST] [--iters N] "
                   "[--json PATH]\n");
      return 1;
    }
  }
  HC_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  HC_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  (void)moekit::preload(0);
  int env_n = 0;
  for (char** e = environ; *e != nullptr; ++e) ++env_n;
  const moekit::BuildInfo& bi = moekit::build_info();
  std::printf("moekit-host-cost %s, commit %s (dirty %d, %s), %d environment variables\n", moekit::version(), bi.commit,
              bi.dirty, bi.source, env_n);

  std::printf("primitives\n");
  env_cases(env_n, iters, s);
  int dev = 0;
  record("cudaGetDevice", host_us([&] { HC_CHECK(cudaGetDevice(&dev)); }, iters, s, false));
  record("cudaGetLastError", host_us([] { (void)cudaGetLastError(); }, iters, s, false));
  launch_cases<8>(s, iters, "8 B params", 1, 0);
  launch_cases<8>(s, iters, "8 B params", 120, 0);
  launch_cases<sizeof(moekit::cuda::decode::DecodeParams)>(s, iters, "DecodeParams", 120, 210 * 1024);

  for (const std::string& sc : schemes)
    for (std::int64_t M : tokens) call_cases(preset, tp, moekit::parse_scheme(sc), M, s, iters);

  // The same two with 150 more variables (a serving process's environment is often that size).
  for (int i = 0; i < 150; ++i) setenv(("HOST_COST_PAD_VARIABLE_" + std::to_string(i)).c_str(), "some value of a typical length", 1);
  env_cases(env_n + 150, iters, s);
  if (!schemes.empty() && !tokens.empty())
    call_cases(preset, tp, moekit::parse_scheme(schemes[0]), tokens[0], s, iters);

  if (json != nullptr) {
    std::ofstream f(json);
    f << "{\"tool\": \"moekit-host-cost\", \"commit\": \"" << bi.commit << "\", \"dirty\": " << bi.dirty
      << ", \"tree\": \"" << bi.tree << "\", \"environ_size\": " << env_n
      << ", \"iters\": " << iters << ", \"rows\": [\n";
    for (std::size_t i = 0; i < g_results.size(); ++i)
      f << "  {\"name\": \"" << g_results[i].name << "\", \"host_us\": " << g_results[i].us << "}"
        << (i + 1 < g_results.size() ? ",\n" : "\n");
    f << "]}\n";
  }
  return 0;
}
