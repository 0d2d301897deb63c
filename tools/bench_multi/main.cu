// moekit-bench-multi: one rank of the multi-GPU MoE benchmark (tools/scripts/bench_multigpu.sh
// starts one process per GPU). Measures the whole layer at tensor parallel (tp_fused_moe) and
// expert parallel (ep_fused_moe) degree = world size, including communication, and times the
// communication alone with the same messages; rank 0 prints the table and writes JSON rows in
// the format of bench/results (tools/bench/bench.hpp's Row, plus mode / world / comm_us).
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "moekit/moekit.hpp"
#include "moekit/parallel.hpp"

namespace moekit::bench_multi {
namespace {

using bench::Row;
using i64 = std::int64_t;

[[noreturn]] void die(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "moekit-bench-multi: %s\n", msg.c_str());
  std::exit(code);
}

#define CHECK_CUDA(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) throw Error(Status::kCudaError, std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define CHECK_NCCL(expr)                                                                          \
  do {                                                                                            \
    const ncclResult_t r_ = (expr);                                                               \
    if (r_ != ncclSuccess) throw Error(Status::kCudaError, std::string(#expr) + ": " + ncclGetErrorString(r_)); \
  } while (0)

struct Args {
  int world = 0, rank = -1, device = -1;
  std::string id_file, json, modes = "tp,ep";
  std::vector<std::string> presets;
  std::vector<std::string> schemes = {"bf16", "fp8"};
  std::vector<i64> tokens = {1, 8, 64, 256, 1024, 4096};
  int iters = 20, warmup = 5;
  std::uint64_t seed = 1;
  double dense_bf16 = 0, dense_fp8 = 0;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto v = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + k);
      return argv[++i];
    };
    if (k == "--world") a.world = std::stoi(v());
    else if (k == "--rank") a.rank = std::stoi(v());
    else if (k == "--device") a.device = std::stoi(v());
    else if (k == "--id-file") a.id_file = v();
    else if (k == "--json") a.json = v();
    else if (k == "--modes") a.modes = v();
    else if (k == "--presets") a.presets = split(v());
    else if (k == "--schemes") a.schemes = split(v());
    else if (k == "--tokens") {
      a.tokens.clear();
      for (const auto& t : split(v())) a.tokens.push_back(std::stoll(t));
    } else if (k == "--iters") a.iters = std::stoi(v());
    else if (k == "--warmup") a.warmup = std::stoi(v());
    else if (k == "--seed") a.seed = std::stoull(v());
    else if (k == "--dense-tflops-bf16") a.dense_bf16 = std::stod(v());
    else if (k == "--dense-tflops-fp8") a.dense_fp8 = std::stod(v());
    else if (k == "--help" || k == "-h") {
      std::printf(
          "usage: moekit-bench-multi --world W --rank R --id-file PATH [--device D] [--modes tp,ep]\n"
          "       [--presets a,b] [--schemes bf16,fp8] [--tokens 1,8,...] [--iters 20] [--warmup 5]\n"
          "       [--json PATH] [--dense-tflops-bf16 X --dense-tflops-fp8 Y]\n"
          "Run one process per rank; tools/scripts/bench_multigpu.sh does. 'fp8' = the preset's fp8 scheme\n"
          "(fp8_block128 for deepseek-v3, else fp8_per_tensor).\n");
      std::exit(0);
    } else die("unknown argument " + k);
  }
  if (a.world < 2) die("--world must be >= 2 (one process per GPU)");
  if (a.rank < 0 || a.rank >= a.world) die("--rank must be in [0, --world)");
  if (a.id_file.empty()) die("--id-file is required (rank 0 writes the NCCL unique id there)");
  if (a.device < 0) a.device = a.rank;
  if (a.presets.empty())
    for (const auto& p : model_presets()) a.presets.push_back(p.name);
  if (a.iters < 1) die("--iters must be >= 1");
  return a;
}

// ---- device fills (hash-based, reproducible) ----

template <class T>
__global__ void fill_kernel(T* p, i64 n, std::uint64_t seed, float amp) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const float v = bench::uniform_pm1(seed, static_cast<std::uint64_t>(i)) * amp;
    if constexpr (sizeof(T) == 1) p[i] = __nv_fp8_e4m3(v);
    else if constexpr (sizeof(T) == 2) p[i] = __float2bfloat16_rn(v);
    else p[i] = v;
  }
}

__global__ void fill_const_kernel(float* p, i64 n, float v) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    p[i] = v;
}

struct Buffers {
  std::vector<void*> ptrs;
  ~Buffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)));
    ptrs.push_back(p);
    return p;
  }
  TensorView make(DType dt, std::vector<i64> shape, int device, std::uint64_t seed, float amp) {
    TensorView v = TensorView::contiguous(nullptr, dt, shape.data(), static_cast<int>(shape.size()), Device::cuda(device));
    const i64 n = v.numel();
    v.data = alloc(static_cast<std::size_t>(n) * dtype_size(dt));
    const unsigned grid = static_cast<unsigned>(std::min<i64>((n + 255) / 256 + 1, 8192));
    if (dt == DType::kFp8E4m3) fill_kernel<__nv_fp8_e4m3><<<grid, 256>>>(static_cast<__nv_fp8_e4m3*>(v.data), n, seed, amp);
    else if (dt == DType::kBf16) fill_kernel<__nv_bfloat16><<<grid, 256>>>(static_cast<__nv_bfloat16*>(v.data), n, seed, amp);
    else if (dt == DType::kFp32 && seed == 0) fill_const_kernel<<<grid, 256>>>(static_cast<float*>(v.data), n, amp);
    else if (dt == DType::kFp32) fill_kernel<float><<<grid, 256>>>(static_cast<float*>(v.data), n, seed, amp);
    else if (n > 0) CHECK_CUDA(cudaMemset(v.data, 0, static_cast<std::size_t>(n) * dtype_size(dt)));
    CHECK_CUDA(cudaGetLastError());
    return v;
  }
};

// A rank's expert weights of E experts at intermediate size N, random, for `scheme`.
ExpertWeights make_weights(Buffers& b, const ModelPreset& p, i64 E, i64 N, Scheme scheme, bool with_b2, int dev,
                           std::uint64_t seed) {
  const i64 K = p.hidden_size, bq = kBlockQuant;
  const bool fp8 = scheme != Scheme::kBf16;
  const DType wt = fp8 ? DType::kFp8E4m3 : DType::kBf16;
  ExpertWeights w;
  // fp8: q ~ U(-448, 448) with scale amp/448, so values ~ U(-amp, amp) as in bf16.
  const float amp13 = bench::weight_amp(K), amp2 = bench::weight_amp(N);
  w.w13 = b.make(wt, {E, 2 * N, K}, dev, bench::mix_seed(seed, bench::kSeedW13), fp8 ? 448.f : amp13);
  w.w2 = b.make(wt, {E, K, N}, dev, bench::mix_seed(seed, bench::kSeedW2), fp8 ? 448.f : amp2);
  if (scheme == Scheme::kFp8PerTensor) {
    w.w13_scale = b.make(DType::kFp32, {E}, dev, 0, amp13 / 448.f);
    w.w2_scale = b.make(DType::kFp32, {E}, dev, 0, amp2 / 448.f);
  } else if (scheme == Scheme::kFp8PerChannel) {
    w.w13_scale = b.make(DType::kFp32, {E, 2 * N}, dev, 0, amp13 / 448.f);
    w.w2_scale = b.make(DType::kFp32, {E, K}, dev, 0, amp2 / 448.f);
  } else if (scheme == Scheme::kFp8Block128) {
    w.w13_scale = b.make(DType::kFp32, {E, (2 * N + bq - 1) / bq, (K + bq - 1) / bq}, dev, 0, amp13 / 448.f);
    w.w2_scale = b.make(DType::kFp32, {E, (K + bq - 1) / bq, (N + bq - 1) / bq}, dev, 0, amp2 / 448.f);
  }
  if (p.has_bias) {
    w.b13 = b.make(DType::kBf16, {E, 2 * N}, dev, bench::mix_seed(seed, bench::kSeedB13), bench::kBiasAmp);
    if (with_b2) w.b2 = b.make(DType::kBf16, {E, K}, dev, bench::mix_seed(seed, bench::kSeedB2), bench::kBiasAmp);
  }
  return w;
}

// Median over `iters` timed runs of fn (after `warmup`), in microseconds, on `stream`.
double time_us(const std::function<void()>& fn, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * iters));
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], stream));
    fn();
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t.push_back(ms * 1e3);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The slowest rank's value of each timing (every rank calls this with the same count).
std::vector<double> max_over_ranks(const Communicator& comm, const std::vector<double>& v, cudaStream_t stream) {
  std::vector<float> h(v.begin(), v.end());
  float* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, h.size() * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclAllReduce(d, d, h.size(), ncclFloat32, ncclMax, static_cast<ncclComm_t>(comm.nccl_comm()), stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(d);
  return std::vector<double>(h.begin(), h.end());
}

Scheme scheme_for(const std::string& s, const ModelPreset& p) {
  if (s == "fp8") return p.checkpoint_scheme == Scheme::kFp8Block128 ? Scheme::kFp8Block128 : Scheme::kFp8PerTensor;
  return parse_scheme(s);
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
      continue;
    }
    o += c;
  }
  return o + "\"";
}

std::string json_num(const std::optional<double>& v) {
  if (!v) return "null";
  if (!std::isfinite(*v)) return json_str(std::to_string(*v));
  std::ostringstream s;
  s.precision(6);
  s << *v;
  return s.str();
}

struct MultiRow {
  Row row;
  std::string mode;  // "tp" or "ep"
  int world = 0;
  std::optional<double> comm_us, compute_us;
};

void write_json(const std::string& path, const std::string& gpu, const bench::Ceilings& c,
                const std::vector<MultiRow>& rows) {
  // Provenance from the build (moekit::build_info(): git, or the build-info.json stamp), never typed.
  const BuildInfo& bi = build_info();
  const std::string commit = bi.commit;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ofstream f(path);
  if (!f) die("--json: cannot write '" + path + "'");
  f << "{\n  \"commit\": " << json_str(commit) << ",\n  \"dirty\": "
    << (bi.dirty < 0 ? "null" : bi.dirty ? "true" : "false") << ",\n  \"tree\": " << json_str(bi.tree)
    << ",\n  \"build_info_source\": " << json_str(bi.source) << ",\n  \"date\": " << json_str(date) << ",\n  \"gpu\": " << json_str(gpu)
    << ",\n  \"ceilings\": {\"hbm_gbps\": " << json_num(c.hbm.gbps) << ", \"hbm_source\": " << json_str(c.hbm.source)
    << ", \"dense_tflops_bf16\": "
    << json_num(c.dense_tflops_bf16) << ", \"dense_tflops_fp8\": " << json_num(c.dense_tflops_fp8)
    << "},\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i].row;
    f << (i ? ",\n" : "\n") << "    {\"preset\": " << json_str(r.preset) << ", \"tp\": " << r.tp
      << ", \"scheme\": " << json_str(r.scheme) << ", \"tokens\": " << r.tokens << ", \"backend\": " << json_str(r.backend)
      << ", \"path\": " << json_str(r.path) << ", \"us\": " << json_num(r.us) << ", \"tflops\": " << json_num(r.tflops)
      << ", \"gbps\": " << json_num(r.gbps) << ", \"roof_us\": " << json_num(r.roof_us)
      << ", \"roof_fraction\": " << json_num(r.roof_fraction)
      << ", \"tflops_fraction_of_dense\": " << json_num(r.tflops_fraction_of_dense)
      << ", \"baseline\": " << (r.baseline.empty() ? std::string("null") : json_str(r.baseline))
      << ", \"baseline_us\": " << json_num(r.baseline_us) << ", \"max_rel_err\": " << json_num(r.max_rel_err)
      << ", \"op\": " << json_str(r.op) << ", \"timing\": " << json_str(r.timing)
      << ", \"touched_experts\": " << r.touched_experts << ", \"mode\": " << json_str(rows[i].mode)
      << ", \"world\": " << rows[i].world << ", \"ep\": " << (rows[i].mode == "ep" ? rows[i].world : 1)
      << ", \"comm_us\": " << json_num(rows[i].comm_us) << ", \"compute_us\": " << json_num(rows[i].compute_us);
    if (!r.note.empty()) f << ", \"note\": " << json_str(r.note);
    f << ", \"reproduce\": " << json_str(r.reproduce) << "}";
  }
  f << "\n  ]\n}\n";
}

Communicator::UniqueId exchange_id(const Args& a) {
  Communicator::UniqueId id{};
  if (a.rank == 0) {
    id = Communicator::unique_id();
    const std::string tmp = a.id_file + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(id.data()), static_cast<std::streamsize>(id.size()));
      if (!f) die("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), a.id_file.c_str()) != 0) die("cannot rename " + tmp + " to " + a.id_file);
    return id;
  }
  for (int waited = 0; waited < 1200; ++waited) {  // 120 s
    std::ifstream f(a.id_file, std::ios::binary);
    if (f && f.read(reinterpret_cast<char*>(id.data()), static_cast<std::streamsize>(id.size()))) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  die("rank " + std::to_string(a.rank) + ": no NCCL id in " + a.id_file + " after 120 s (did rank 0 start?)");
}

}  // namespace

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // Shared GPU hosts: NVLink multicast (NVLS) stays off whatever the environment said.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::string(nvls) != "0") {
    if (nvls != nullptr && a.rank == 0)
      std::fprintf(stderr, "moekit-bench-multi: NCCL_NVLS_ENABLE=%s overridden to 0 (NVLink multicast stays off)\n", nvls);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  if (visible < a.world || a.device >= visible)
    die("asked for " + std::to_string(a.world) + " ranks (rank " + std::to_string(a.rank) + " on device " +
        std::to_string(a.device) + ") but only " + std::to_string(visible) + " GPU(s) are visible; nothing was run");
  std::string why;
  if (!nccl_available(&why)) die("NCCL unavailable: " + why);
  if (!cuda_available(&why)) die("CUDA backend unavailable: " + why);

  try {
    CHECK_CUDA(cudaSetDevice(a.device));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, a.device));
    const std::string gpu = std::to_string(a.world) + "x " + prop.name;
    const Communicator comm = Communicator::init_rank(exchange_id(a), a.world, a.rank, a.device);
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    bench::Ceilings ceilings;
    ceilings.hbm = bench::datasheet_hbm(prop.name);  // each rank's GPU: the roof is per GPU
    if (!ceilings.hbm.in_table && a.rank == 0) bench::warn_unlisted_gpu(prop.name, ceilings.hbm);
    if (a.dense_bf16 > 0) ceilings.dense_tflops_bf16 = a.dense_bf16;
    if (a.dense_fp8 > 0) ceilings.dense_tflops_fp8 = a.dense_fp8;
    std::vector<MultiRow> rows;
    const int W = a.world, r = a.rank;
    if (r == 0)
      std::printf("%-16s %-4s %-15s %6s %10s %10s %10s  %s\n", "preset", "mode", "scheme", "M", "total_us", "comm_us",
                  "compute_us", "note");

    for (const std::string& pname : a.presets) {
      const ModelPreset& p = find_preset(pname);
      for (const std::string& mode : split(a.modes)) {
        if (mode != "tp" && mode != "ep") die("--modes takes tp and/or ep, got " + mode);
        for (const std::string& sname : a.schemes) {
          const Scheme scheme = scheme_for(sname, p);
          const bool tp = mode == "tp";
          const i64 E = p.num_experts, K = p.hidden_size;
          std::string skip;
          if (tp && p.intermediate_size % W != 0) skip = "N not divisible by tp";
          if (tp && scheme == Scheme::kFp8Block128 && (p.intermediate_size / W) % kBlockQuant != 0)
            skip = "fp8_block128 needs N/tp % 128 == 0 (N/tp = " + std::to_string(p.intermediate_size / W) + ")";
          if (!tp && E < W) skip = "fewer experts than ranks";
          const i64 N = tp ? p.intermediate_size / W : p.intermediate_size;
          const ExpertRange range = tp ? ExpertRange{0, E} : expert_range_for_rank(E, W, r);
          Buffers wb;
          ExpertWeights weights;
          TensorView emap;
          if (skip.empty()) {
            weights = make_weights(wb, p, range.count, N, scheme, !tp || r == 0, a.device, a.seed + (tp ? r : range.first));
            if (!tp) {
              const std::vector<std::int32_t> map = expert_map_for_rank(E, W, r);
              emap = TensorView::contiguous(wb.alloc(map.size() * 4), DType::kInt32, {E}, Device::cuda(a.device));
              CHECK_CUDA(cudaMemcpy(emap.data, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
            }
          }
          for (const i64 M : a.tokens) {
            MultiRow mr;
            mr.mode = mode;
            mr.world = W;
            Row& row = mr.row;
            row.preset = p.name;
            row.tp = tp ? W : 1;
            row.scheme = scheme_name(scheme);
            row.tokens = M;
            row.backend = "cuda";
            row.op = tp ? "tp_fused_moe" : "ep_fused_moe";
            row.timing = "eager";
            row.reproduce = "tools/scripts/bench_multigpu.sh --world " + std::to_string(W) + " --modes " + mode +
                            " --presets " + p.name + " --schemes " + sname + " --tokens " + std::to_string(M);
            std::vector<double> t = {0, 0, 0, 0};  // total, comm, compute, failed (max over ranks)
            std::string note = skip;
            if (note.empty()) {
              try {
                Buffers b;
                FusedMoeArgs args;
                args.routing = p.routing;
                args.router_logits = b.make(DType::kFp32, {M, E}, a.device,
                                            bench::mix_seed(a.seed, bench::kSeedLogits, static_cast<std::uint64_t>(r)),
                                            bench::kLogitAmp);
                if (p.routing.method == RoutingMethod::kSigmoidGroupedTopk)
                  args.e_score_correction_bias = b.make(DType::kFp32, {E}, a.device,
                                                        bench::mix_seed(a.seed, bench::kSeedCorrection),
                                                        bench::kCorrectionAmp);
                FusedExpertsArgs& ex = args.experts;
                ex.hidden = b.make(DType::kBf16, {M, K}, a.device,
                                   bench::mix_seed(a.seed, bench::kSeedHidden, static_cast<std::uint64_t>(r)),
                                   bench::kHiddenAmp);
                ex.weights = weights;
                ex.scheme = scheme;
                ex.activation = p.activation;
                ex.expert_map = emap;
                ex.out = b.make(DType::kBf16, {M, K}, a.device, 0, 0);
                ex.topk_ids = b.make(DType::kInt32, {M, p.top_k}, a.device, 0, 0);
                ex.topk_weights = b.make(DType::kFp32, {M, p.top_k}, a.device, 0, 0);
                const MoeProblem prob = describe(args);
                Options o;
                o.stream = stream;
                if (tp) {
                  o.workspace_bytes = workspace_size(prob, Backend::kCuda);
                  o.workspace = b.alloc(o.workspace_bytes);
                  const double total = time_us([&] { tp_fused_moe(args, comm, o); }, stream, a.warmup, a.iters);
                  const double comm_us =
                      time_us([&] { comm.all_reduce_sum(ex.out, stream); }, stream, a.warmup, a.iters);
                  const double compute = time_us([&] { fused_moe(args, o); }, stream, a.warmup, a.iters);
                  t = {total, comm_us, compute, 0};
                } else {
                  o.workspace_bytes = ep_workspace_size(prob, W);
                  o.workspace = b.alloc(o.workspace_bytes);
                  const double total = time_us([&] { ep_fused_moe(args, comm, o); }, stream, a.warmup, a.iters);
                  // The same messages alone: counts, then C rows (+ meta) each way, then C rows back.
                  const i64 C = ep_capacity(M, p.top_k);
                  const std::size_t region = static_cast<std::size_t>(C * K * 2), meta = static_cast<std::size_t>(C * 8);
                  auto* sbuf = static_cast<std::uint8_t*>(b.alloc(W * (region + meta) + 4 * W));
                  auto* rbuf = static_cast<std::uint8_t*>(b.alloc(W * (region + meta) + 4 * W));
                  auto nc = static_cast<ncclComm_t>(comm.nccl_comm());
                  auto exchange = [&] {
                    CHECK_NCCL(ncclGroupStart());
                    for (int q = 0; q < W; ++q) {
                      CHECK_NCCL(ncclSend(sbuf + 4 * q, 4, ncclUint8, q, nc, stream));
                      CHECK_NCCL(ncclRecv(rbuf + 4 * q, 4, ncclUint8, q, nc, stream));
                    }
                    CHECK_NCCL(ncclGroupEnd());
                    for (int pass = 0; pass < 2; ++pass) {
                      const std::size_t bytes = region + (pass == 0 ? meta : 0);
                      CHECK_NCCL(ncclGroupStart());
                      for (int q = 0; q < W; ++q) {
                        CHECK_NCCL(ncclSend(sbuf + 4 * W + q * bytes, bytes, ncclUint8, q, nc, stream));
                        CHECK_NCCL(ncclRecv(rbuf + 4 * W + q * bytes, bytes, ncclUint8, q, nc, stream));
                      }
                      CHECK_NCCL(ncclGroupEnd());
                    }
                  };
                  const double comm_us = time_us(exchange, stream, a.warmup, a.iters);
                  t = {total, comm_us, std::max(0.0, total - comm_us), 0};
                }
                // Touched experts (this rank's routing) for the roofline of the TP row.
                std::vector<std::int32_t> ids(static_cast<std::size_t>(M * p.top_k));
                if (!ids.empty())
                  CHECK_CUDA(cudaMemcpy(ids.data(), ex.topk_ids.data, ids.size() * 4, cudaMemcpyDeviceToHost));
                row.touched_experts = bench::count_unique(ids.data(), static_cast<i64>(ids.size()), E);
                if (tp) {
                  row.us = t[0];
                  bench::fill_metrics(row, prob, ceilings);
                }
              } catch (const Error& e) {
                note = std::string("error: ") + e.what();
                t = {0, 0, 0, 1};
              }
            }
            // Every rank reaches this point for every row (skips are decided identically), so the
            // collective below always matches.
            const std::vector<double> tm = max_over_ranks(comm, t, stream);
            if (note.empty() && tm[3] == 0) {
              row.us = tm[0];
              mr.comm_us = tm[1];
              mr.compute_us = tm[2];
              if (!tp) row.note = "compute_us = total - comm_us (the exchange timed alone)";
              else row.note = "compute_us = fused_moe alone; comm_us = the all-reduce alone";
            } else {
              row.note = note.empty() ? "failed on another rank" : note;
              row.us.reset();
            }
            if (r == 0) {
              std::printf("%-16s %-4s %-15s %6lld %10s %10s %10s  %s\n", p.name, mode.c_str(), row.scheme.c_str(),
                          static_cast<long long>(M), json_num(row.us).c_str(), json_num(mr.comm_us).c_str(),
                          json_num(mr.compute_us).c_str(), note.c_str());
              std::fflush(stdout);
            }
            rows.push_back(mr);
          }
        }
      }
    }
    if (r == 0 && !a.json.empty()) {
      write_json(a.json, gpu, ceilings, rows);
      std::printf("wrote %s (%zu rows)\n", a.json.c_str(), rows.size());
    }
    cudaStreamDestroy(stream);
  } catch (const Error& e) {
    die(std::string("rank ") + std::to_string(a.rank) + ": " + e.what(), 1);
  }
  return 0;
}

}  // namespace moekit::bench_multi

int main(int argc, char** argv) { return moekit::bench_multi::run(argc, argv); }
