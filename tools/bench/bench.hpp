// moekit-bench's shared pieces: what one benchmark point is, what a measured row holds, the
// roofline arithmetic of BRIEF §4, and the interface the CPU and CUDA runners implement.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moekit/moekit.hpp"

namespace moekit::bench {

// The datasheet HBM3e bandwidth of the H200 that defines the memory side of BRIEF §4's roofline.
inline constexpr double kHbmGbps = 4800.0;

/// The roofline's HBM rate on the GPU a run is on: its datasheet figure, found from the device
/// name (H100 SXM 3350 GB/s, H100 NVL 3900, H100 PCIe 2000, H800 3350, H20 4000, GH200 4000 or
/// 4900, H200 4800). A name not in the table gets BRIEF §4's H200 rate, and `source` says so:
/// a roof, a roof_fraction and a target ratio then assume an H200. --hbm-gbps overrides both.
struct HbmRate {
  double gbps = kHbmGbps;
  std::string source = "BRIEF §4 (H200)";  // "datasheet: NVIDIA H100 80GB HBM3" / "not in the table, ..." / "--hbm-gbps"
  bool in_table = false;                    // the GPU's own datasheet figure (else BRIEF's or --hbm-gbps)
};
HbmRate datasheet_hbm(const std::string& gpu_name);
/// Says on stderr that `gpu` is not in datasheet_hbm's table and the roofline assumes an H200.
void warn_unlisted_gpu(const std::string& gpu, const HbmRate& rate);

/// The default cost rule of --check: the reference runs on tokens whose M·k·K·N is at most this
/// (2^28: ~0.8 G multiply-adds, about a second of the reference on 16 cores). Above it a sample.
inline constexpr double kCheckBudget = 268435456.0;
/// A sample never has fewer tokens than this (a layer whose one token costs over the budget).
inline constexpr std::int64_t kCheckMinTokens = 2;

/// A layer shape: a preset of BRIEF §3 or a custom --shape E,k,K,N (N at tp = 1).
struct Shape {
  std::string name;     // "qwen3-30b-a3b" or "custom-E128-k8-K2048-N768"
  std::string cli;      // how the reproduce command names it: "--preset X" / "--shape E,k,K,N"
  ModelPreset preset;   // preset.name points into `name` (fixed up by the owner)
};

/// One point of the sweep.
struct Point {
  const Shape* shape = nullptr;
  int tp = 1;
  Scheme scheme = Scheme::kBf16;
  std::int64_t tokens = 0;
  MoeProblem problem;  // preset_problem(shape, tokens, tp, scheme)
  std::string path;    // forced as Options::path ("" = none: the router decides)
};

/// What the command line asked for (after defaults were applied).
struct Config {
  std::vector<Shape> shapes;
  std::vector<int> tps{1};
  std::vector<Scheme> schemes{Scheme::kBf16};
  std::vector<std::int64_t> tokens;
  Backend backend = Backend::kAuto;  // resolved to kCpu or kCuda before running
  std::string json_path;
  // --path LIST: each point runs once per name, forwarded as Options::path; {""} when not given
  // (the router decides, MOEKIT_PATH applies).
  std::vector<std::string> paths{""};
  int iters = 0;                     // 0 = the backend's default (CUDA 50, CPU 3)
  int threads = 0;                   // CPU backend threads (0 = all)
  // --check (default on) / --no-check: compare with the CPU reference on the sampled tokens
  // (check_sample: all of them while M·k·K·N <= check_budget).
  bool check = true;
  double check_budget = kCheckBudget;  // or --check-budget
  bool first_call = false;
  // --no-baseline: skip the cuBLAS / cuBLASLt baselines (same-run A/Bs of two moekit variants,
  // where both sides would time the same baseline; baseline_us is then null).
  bool baseline = true;
  // The host side of one eager call (host_us, CUDA): -1 = for M <= kHostTimeAutoMaxTokens (the
  // default), 0 = off (--no-host-time), 1 = at every M (--host-time). host_iters calls are timed.
  int host_time = -1;
  int host_iters = 200;
  bool quick = false;
  bool op_fused_moe = false;         // --op fused_moe: time routing + experts (else fused_experts)
  std::optional<double> hbm_gbps;    // --hbm-gbps: the roofline's HBM rate instead of the datasheet's
  std::uint64_t seed = 1;
};

/// --host-time's default covers the decode sizes eager callers (Hugging Face transformers) run.
inline constexpr std::int64_t kHostTimeAutoMaxTokens = 64;

/// One measured row of the table and of the JSON (null where not measured).
struct Row {
  std::string preset;
  int tp = 1;
  std::string scheme;
  std::int64_t tokens = 0;
  std::string backend;
  std::string path;                  // the path run: a forced name, or "auto" (MOEKIT_PATH's when set)
  std::string dispatch;              // the router's kernels: "gemm1=swapab(split_k=8) gemm2=mma"
  std::optional<double> ratio_vs_mma;  // mma row's us / this row's us, same point, same run
  std::string op = "fused_experts";  // the timed call: fused_experts or fused_moe
  std::optional<double> us, tflops, gbps, roof_us, roof_fraction, tflops_fraction_of_dense;
  // The call timed inside the graph (graph_timing.cuh): [flush, event, call, event] in one graph,
  // no graph launch in the interval, as a layer of a captured decode step; median. CUDA graph rows.
  std::optional<double> us_in_graph;
  std::string baseline;              // "" = none: cuBLAS bf16 (the like-for-like baseline of bf16)
  std::optional<double> baseline_us;
  std::string baseline_fp8;          // "" = none: cuBLASLt e4m3 (fp8 schemes' like-for-like baseline)
  std::optional<double> baseline_fp8_us;
  // --check: max over the checked rows of ||out[m] - ref[m]||_2 / ||ref[m]||_2 (may be +inf /
  // NaN, written as a string then); check_tokens rows of M were compared, against check_tol.
  std::optional<double> max_rel_err;
  bool check_ran = false;
  std::int64_t check_tokens = 0;
  std::optional<double> check_tol;
  std::optional<bool> check_passed;  // null when the check did not run
  std::optional<double> first_call_us, eager_us;
  // The host side of one eager call (CUDA; Config::host_time): the wall time until the moekit
  // call returns on the host, nothing synchronized inside the timed region (the GPU work is only
  // enqueued). Median and p90 over host_iters calls, each timed alone, the stream drained every
  // kHostSyncEvery calls outside the timed regions. host_validate_us: moekit::describe(args) alone
  // (validate.cpp's resolve); host_plan_us: moekit::describe_dispatch alone (the device check and
  // the router with its can_implement queries; it also spells out the reason and re-checks the
  // device, which a call does not, so it bounds the router's share from above); host_launch_us =
  // host_us - both, the rest (workspace check, parameter setup, the launches), a difference of
  // medians, so an estimate (a lower bound, for the same reason).
  std::optional<double> host_us, host_p90_us, host_validate_us, host_plan_us, host_launch_us;
  std::string timing;                // "graph", "eager" (CUDA) or "wall" (CPU)
  std::int64_t touched_experts = 0;
  std::string reproduce;
  std::string note;                  // why a field is missing, or an error
};

/// Dense GEMM rates measured in this run (TFLOP/s); absent on the CPU backend.
struct Ceilings {
  HbmRate hbm;  // the roofline's HBM rate: the GPU's datasheet figure (datasheet_hbm) or --hbm-gbps
  std::optional<double> hbm_read_gbps;  // measured: a pure 16-byte read stream (context only)
  std::optional<double> dense_tflops_bf16, dense_tflops_fp8;
};

// ---- roofline arithmetic (BRIEF §4) ----

/// Bytes per stored weight element of a scheme (bf16: the activation dtype).
double weight_elem_bytes(const MoeProblem& p);
/// Bytes of one expert as stored: w13 + w2 + their scales + biases.
double expert_bytes(const MoeProblem& p);
/// Bytes a call moves at least: touched experts' weights + hidden in + out.
double min_bytes(const MoeProblem& p, std::int64_t touched_experts);
/// Fill tflops, gbps, roof_us, roof_fraction, tflops_fraction_of_dense from row.us.
void fill_metrics(Row& row, const MoeProblem& p, const Ceilings& c);

/// Distinct ids in topk_ids (global ids; all local here since the bench passes no expert_map).
std::int64_t count_unique(const std::int32_t* ids, std::int64_t n, std::int64_t num_experts);

// ---- the correctness check (check.cpp) ----

/// The tokens --check compares: all M while M·k·K·N <= budget, else
/// max(kCheckMinTokens, budget / (k·K·N)) evenly spaced tokens, the first and the last included.
std::vector<std::int64_t> check_sample(std::int64_t M, std::int64_t k, std::int64_t K, std::int64_t N,
                                       double budget);
/// max over rows of ||got_r - ref_r|| / ||ref_r|| (entries where ref is non-finite skipped; a
/// non-finite got where ref is finite, or a nonzero row where ref's is zero: +inf).
double max_row_rel_err(const float* got, const float* ref, std::int64_t rows, std::int64_t cols);
/// The bound max_rel_err must meet: tests/common/tolerance.hpp's per scheme, looser for an
/// fp8_per_tensor subset (its intermediate scale is the sample's absmax; check.cpp says why).
double check_tolerance(Scheme scheme, bool subset_of_per_tensor);

/// Where a runner keeps its expert tensors ([E, ...] like ExpertWeights) and how to copy from there.
struct ExpertSource {
  MoeProblem problem;  // E, k, K, N, scheme, activation
  const void *w13 = nullptr, *w2 = nullptr, *s13 = nullptr, *s2 = nullptr, *b13 = nullptr, *b2 = nullptr;  // bf16 biases
  std::vector<std::int64_t> s13_shape, s2_shape;
  std::int64_t s13_numel = 0, s2_numel = 0;
  std::function<void(void* dst, const void* src, std::size_t bytes)> copy;  // to host memory
};
/// One measured call, on the host: hidden [M, K] bf16, ids / weights [M, k], out [M, K] bf16.
struct HostCall {
  std::int64_t M = 0;
  const std::uint16_t* hidden = nullptr;
  const std::int32_t* ids = nullptr;
  const float* weights = nullptr;
  const std::uint16_t* out = nullptr;
};
struct CheckResult {
  double max_rel_err = 0.0;
  std::int64_t tokens = 0;
  double tol = 0.0;
  bool passed = false;
};
/// The CPU reference on the sampled tokens with the experts they touch (renumbered), compared
/// row by row with call.out.
CheckResult check_rows(const ExpertSource& src, const HostCall& call, const std::vector<std::int64_t>& sample,
                       int threads);
/// Record a check's result in the row.
void record_check(Row& row, const CheckResult& c);
/// A check that threw: counted as failed, with the reason in the row's note.
void record_check_error(Row& row, const std::string& what);

// ---- random inputs: a counter-based hash, the same on host and device ----

#if defined(__CUDACC__)
#define MOEKIT_BENCH_HD __host__ __device__ __forceinline__
#else
#define MOEKIT_BENCH_HD inline
#endif

/// splitmix64 of (seed, index): independent of thread order, so fills are reproducible.
MOEKIT_BENCH_HD std::uint64_t hash64(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// Uniform in [-1, 1) (never exactly zero-heavy: 24 random bits).
MOEKIT_BENCH_HD float uniform_pm1(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(static_cast<std::int64_t>(hash64(seed, i) >> 40) - (1 << 23)) *
         (1.0f / static_cast<float>(1 << 23));
}

// Seeds of the separate input streams, so changing M does not change the weights.
enum : std::uint64_t {
  kSeedW13 = 11, kSeedW2 = 12, kSeedB13 = 13, kSeedB2 = 14, kSeedHidden = 21, kSeedLogits = 22,
  kSeedCorrection = 23, kSeedScale13 = 31, kSeedScale2 = 32, kSeedBaseline = 41, kSeedDense = 51,
};
inline std::uint64_t mix_seed(std::uint64_t user_seed, std::uint64_t stream, std::uint64_t extra = 0) {
  return hash64(user_seed * 1315423911ull + stream, extra);
}

// Value ranges: hidden ~ U(-sqrt3, sqrt3) (std 1); weights ~ U(-a, a) with a = sqrt(3 / fan_in)
// (std 1/sqrt(fan_in)) so every GEMM output stays O(1); biases small; logits spread enough that
// routing is not uniform.
inline constexpr float kHiddenAmp = 1.7320508f;
inline constexpr float kBiasAmp = 0.1f;
inline constexpr float kLogitAmp = 3.0f;
inline constexpr float kCorrectionAmp = 0.05f;
inline float weight_amp(std::int64_t fan_in) { return 1.7320508f / static_cast<float>(std::sqrt(static_cast<double>(fan_in))); }

// ---- runners ----

/// A backend that measures points. prepare() makes the weights of (shape, tp, scheme) once;
/// run() measures one M with them.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual const char* name() const = 0;                 // "cpu" / "cuda"
  virtual std::string gpu_name() const = 0;             // "NVIDIA H200" / "none (cpu)"
  virtual Ceilings measure_ceilings() = 0;
  /// Throws Error with a clear message when the point cannot run here (e.g. host memory).
  virtual void prepare(const Shape& shape, int tp, Scheme scheme) = 0;
  virtual Row run(const Point& point, const Ceilings& ceilings) = 0;
  virtual void release() = 0;                           // free prepare()'s weights
};

std::unique_ptr<Runner> make_cpu_runner(const Config& config);
#if defined(MOEKIT_BENCH_WITH_CUDA)
std::unique_ptr<Runner> make_cuda_runner(const Config& config);
#endif

/// The path name a row reports for Options::path = `forced` ("" = none).
std::string effective_path(const std::string& forced);

/// The command that re-measures one row.
std::string reproduce_command(const Config& config, const Point& point, const char* backend);

}  // namespace moekit::bench
