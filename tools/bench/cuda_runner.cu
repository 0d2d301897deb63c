// The CUDA runner of moekit-bench (BRIEF §4): random inputs made on the device by a hash fill,
// routing by moekit::route, the fused_experts call captured in a CUDA graph and timed by
// cudaEvents around each replay with L2 flushed before it (median), and in the same run the
// baselines: cuBLAS grouped bf16 GEMMs over the same experts and token counts (every scheme),
// cuBLASLt e4m3 GEMMs per expert (fp8 schemes), and the dense 8192^3 bf16 / fp8 GEMM rates that
// define the roofline. Only moekit's call is in the timed
// region; inputs, routing and copies are not.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "l2_flush.cuh"
#include "graph_timing.cuh"

namespace moekit::bench {
namespace {

void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw Error(Status::kCudaError, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ") in " + expr +
                                      " at " + file + ":" + std::to_string(line));
}
void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(Status::kCudaError, std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ") in " +
                                      expr + " at " + file + ":" + std::to_string(line));
}
#define BENCH_CUDA(expr) check_cuda((expr), #expr, __FILE__, __LINE__)
#define BENCH_CUBLAS(expr) check_cublas((expr), #expr, __FILE__, __LINE__)

// ---- device fills: every element a function of (seed, index), so runs are reproducible ----

constexpr int kFillThreads = 256;
constexpr int kFillMaxBlocks = 132 * 16;  // 132 SMs on an H200; grid-stride beyond that

int fill_blocks(std::int64_t n) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>((n + kFillThreads - 1) / kFillThreads,
                                                                           kFillMaxBlocks)));
}

// The HBM read ceiling: every CTA streams its share of a buffer far larger than L2 with 16-byte
// loads (evict-first), folds it into one word and writes that word, so nothing is optimized away.
__global__ void read_stream_kernel(const uint4* in, std::int64_t n16, unsigned* out) {
  unsigned acc = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {  // four loads in flight per thread
    const uint4 a = __ldcs(in + i), b = __ldcs(in + i + stride), c = __ldcs(in + i + 2 * stride),
                d = __ldcs(in + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldcs(in + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;  // practically never: keeps the loads live
}

__global__ void fill_bf16_kernel(__nv_bfloat16* out, std::int64_t n, std::uint64_t seed, float amp) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(amp * uniform_pm1(seed, static_cast<std::uint64_t>(i)));
}

__global__ void fill_f32_kernel(float* out, std::int64_t n, std::uint64_t seed, float offset, float amp) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = offset + amp * uniform_pm1(seed, static_cast<std::uint64_t>(i));
}

// e4m3 bytes spread over the whole range (|q| up to 448), the way absmax-scaled weights look.
__global__ void fill_e4m3_kernel(std::uint8_t* out, std::int64_t n, std::uint64_t seed, float amp) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(amp * uniform_pm1(seed, static_cast<std::uint64_t>(i)), __NV_SATFINITE, __NV_E4M3);
}

void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float amp, cudaStream_t s) {
  if (n <= 0) return;
  fill_bf16_kernel<<<fill_blocks(n), kFillThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, amp);
  BENCH_CUDA(cudaGetLastError());
}
void fill_f32(void* p, std::int64_t n, std::uint64_t seed, float offset, float amp, cudaStream_t s) {
  if (n <= 0) return;
  fill_f32_kernel<<<fill_blocks(n), kFillThreads, 0, s>>>(static_cast<float*>(p), n, seed, offset, amp);
  BENCH_CUDA(cudaGetLastError());
}
void fill_e4m3(void* p, std::int64_t n, std::uint64_t seed, float amp, cudaStream_t s) {
  if (n <= 0) return;
  fill_e4m3_kernel<<<fill_blocks(n), kFillThreads, 0, s>>>(static_cast<std::uint8_t*>(p), n, seed, amp);
  BENCH_CUDA(cudaGetLastError());
}

// ---- small RAII helpers ----

struct DevBuf {
  void* p = nullptr;
  std::size_t bytes = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { reset(); }
  void reset() {
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
  void alloc(std::size_t n) {
    reset();
    if (n == 0) return;
    BENCH_CUDA(cudaMalloc(&p, n));
    bytes = n;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile (0..1) by the nearest rank of the sorted values.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t i = static_cast<std::size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Scale tensor shapes of ops.hpp for [E, R, C] weights.
std::vector<std::int64_t> scale_shape(Scheme s, std::int64_t E, std::int64_t R, std::int64_t C) {
  switch (s) {
    case Scheme::kFp8PerTensor: return {E};
    case Scheme::kFp8PerChannel: return {E, R};
    case Scheme::kFp8Block128: return {E, ceil_div(R, kBlockQuant), ceil_div(C, kBlockQuant)};
    default: return {};
  }
}
std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

TensorView dev_view(const void* p, DType t, std::vector<std::int64_t> shape, int device) {
  return TensorView::contiguous(p, t, shape.data(), static_cast<int>(shape.size()), Device::cuda(device));
}

class CudaRunner final : public Runner {
 public:
  explicit CudaRunner(const Config& config) : config_(config) {
    BENCH_CUDA(cudaGetDevice(&device_));
    BENCH_CUDA(cudaGetDeviceProperties(&prop_, device_));
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CUBLAS(cublasCreate(&blas_));
    BENCH_CUBLAS(cublasLtCreate(&lt_));
    BENCH_CUBLAS(cublasSetStream(blas_, stream_));
    // A caller-owned cuBLAS workspace keeps its calls allocation-free, so they can be captured.
    blas_ws_.alloc(kBlasWorkspace);
    BENCH_CUBLAS(cublasSetWorkspace(blas_, blas_ws_.p, blas_ws_.bytes));
    // Writing twice the L2 evicts what the previous replay left there.
    const std::size_t l2 = prop_.l2CacheSize > 0 ? static_cast<std::size_t>(prop_.l2CacheSize) : (64u << 20);
    flush_.alloc(std::max<std::size_t>(2 * l2, 128u << 20));
    BENCH_CUDA(cudaMemset(flush_.p, 0, flush_.bytes));
  }
  ~CudaRunner() override {
    release_all();
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  std::string gpu_name() const override { return prop_.name; }

  Ceilings measure_ceilings() override {
    Ceilings c;
    try {
      c.hbm_read_gbps = hbm_read_gbps();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moekit-bench: HBM read stream failed: %s\n", e.what());
    }
    try {
      c.dense_tflops_bf16 = dense_bf16_tflops();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moekit-bench: dense bf16 GEMM failed: %s\n", e.what());
    }
    try {
      c.dense_tflops_fp8 = dense_fp8_tflops();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moekit-bench: dense fp8 GEMM failed: %s\n", e.what());
    }
    return c;
  }

  void prepare(const Shape& shape, int tp, Scheme scheme) override {
    const MoeProblem p = preset_problem(shape.preset, 0, tp, scheme);
    const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    const bool same_layer = shape_ == &shape && tp_ == tp;
    if (!same_layer) release_all();
    release();
    // Device memory: the bf16 weights (moekit's bf16 scheme and the cuBLAS baseline) and, for
    // fp8 schemes, the e4m3 weights and their scales.
    MoeProblem pb = p;
    pb.scheme = Scheme::kBf16;
    double need = same_layer ? 0.0 : static_cast<double>(E) * expert_bytes(pb);
    if (scheme != Scheme::kBf16) need += static_cast<double>(E) * expert_bytes(p);
    std::size_t free_b = 0, total_b = 0;
    BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need > 0.95 * static_cast<double>(free_b))
      throw Error(Status::kNotSupported, shape.name + " tp" + std::to_string(tp) + " " + scheme_name(scheme) +
                                             ": the weights need " + gb(need) + " of device memory, " +
                                             gb(static_cast<double>(free_b)) + " is free");
    shape_ = &shape;
    tp_ = tp;
    problem_ = p;
    if (!same_layer) {
      w13_bf16_.alloc(static_cast<std::size_t>(E * 2 * N * K) * 2);
      w2_bf16_.alloc(static_cast<std::size_t>(E * K * N) * 2);
      fill_bf16(w13_bf16_.p, E * 2 * N * K, mix_seed(config_.seed, kSeedW13), weight_amp(K), stream_);
      fill_bf16(w2_bf16_.p, E * K * N, mix_seed(config_.seed, kSeedW2), weight_amp(N), stream_);
      if (shape.preset.has_bias) {
        b13_.alloc(static_cast<std::size_t>(E * 2 * N) * 2);
        b2_.alloc(static_cast<std::size_t>(E * K) * 2);
        fill_bf16(b13_.p, E * 2 * N, mix_seed(config_.seed, kSeedB13), kBiasAmp, stream_);
        fill_bf16(b2_.p, E * K, mix_seed(config_.seed, kSeedB2), kBiasAmp, stream_);
      }
      if (shape.preset.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
        correction_.alloc(static_cast<std::size_t>(E) * 4);
        fill_f32(correction_.p, E, mix_seed(config_.seed, kSeedCorrection), 0.0f, kCorrectionAmp, stream_);
      }
    }
    if (scheme != Scheme::kBf16) {
      // e4m3 weights over the full range with scales amp/448 (jittered +-25%), so the
      // dequantized weights have the same spread as the bf16 ones.
      s13_shape_ = scale_shape(scheme, E, 2 * N, K);
      s2_shape_ = scale_shape(scheme, E, K, N);
      w13_q_.alloc(static_cast<std::size_t>(E * 2 * N * K));
      w2_q_.alloc(static_cast<std::size_t>(E * K * N));
      s13_.alloc(static_cast<std::size_t>(numel(s13_shape_)) * 4);
      s2_.alloc(static_cast<std::size_t>(numel(s2_shape_)) * 4);
      fill_e4m3(w13_q_.p, E * 2 * N * K, mix_seed(config_.seed, kSeedW13, 8), kFp8Max, stream_);
      fill_e4m3(w2_q_.p, E * K * N, mix_seed(config_.seed, kSeedW2, 8), kFp8Max, stream_);
      fill_f32(s13_.p, numel(s13_shape_), mix_seed(config_.seed, kSeedScale13), weight_amp(K) / kFp8Max,
               0.25f * weight_amp(K) / kFp8Max, stream_);
      fill_f32(s2_.p, numel(s2_shape_), mix_seed(config_.seed, kSeedScale2), weight_amp(N) / kFp8Max,
               0.25f * weight_amp(N) / kFp8Max, stream_);
    }
    BENCH_CUDA(cudaStreamSynchronize(stream_));
  }

  void release() override {
    w13_q_.reset();
    w2_q_.reset();
    s13_.reset();
    s2_.reset();
  }

  Row run(const Point& pt, const Ceilings& ceilings) override {
    const MoeProblem& p = pt.problem;
    const std::int64_t M = p.num_tokens, E = p.num_experts, k = p.top_k, K = p.hidden_size, N = p.intermediate_size;
    Row row;
    row.preset = pt.shape->name;
    row.tp = pt.tp;
    row.scheme = scheme_name(pt.scheme);
    row.tokens = M;
    row.backend = "cuda";
    row.path = effective_path(pt.path);
    row.op = config_.op_fused_moe ? "fused_moe" : "fused_experts";
    row.reproduce = reproduce_command(config_, pt, "cuda");
    std::vector<std::string> notes;

    // ---- inputs of this M ----
    DevBuf hidden, logits, ids, weights, out, ws;
    hidden.alloc(static_cast<std::size_t>(M * K) * 2);
    logits.alloc(static_cast<std::size_t>(M * E) * 4);
    ids.alloc(static_cast<std::size_t>(M * k) * 4);
    weights.alloc(static_cast<std::size_t>(M * k) * 4);
    out.alloc(static_cast<std::size_t>(M * K) * 2);
    fill_bf16(hidden.p, M * K, mix_seed(config_.seed, kSeedHidden, static_cast<std::uint64_t>(M)), kHiddenAmp, stream_);
    fill_f32(logits.p, M * E, mix_seed(config_.seed, kSeedLogits, static_cast<std::uint64_t>(M)), 0.0f, kLogitAmp,
             stream_);

    // ---- routing by moekit (so expert loads are realistic), not timed ----
    RouteArgs ra;
    ra.router_logits = dev_view(logits.p, DType::kFp32, {M, E}, device_);
    ra.routing = pt.shape->preset.routing;
    ra.routing.top_k = static_cast<int>(k);
    if (correction_.p) ra.e_score_correction_bias = dev_view(correction_.p, DType::kFp32, {E}, device_);
    ra.topk_ids = dev_view(ids.p, DType::kInt32, {M, k}, device_);
    ra.topk_weights = dev_view(weights.p, DType::kFp32, {M, k}, device_);
    std::vector<std::int32_t> h_ids(static_cast<std::size_t>(M * k));
    try {
      Options ro;
      ro.backend = Backend::kCuda;
      ro.stream = stream_;
      route(ra, ro);
      BENCH_CUDA(cudaStreamSynchronize(stream_));
    } catch (const Error& e) {
      // Keep measuring the experts when the device routing is missing: route on the CPU.
      cudaGetLastError();
      BENCH_CUDA(cudaStreamSynchronize(stream_));  // the logits' fill on stream_ is done before the host reads them
      route_on_host(ra, M, E, k, logits, ids, weights);
      notes.push_back(std::string("routed on the CPU: ") + e.what());
    }
    // The routing the check takes as the call's: route()'s ids and weights, on the host. With
    // --op fused_moe the call writes its own routing into the same buffers, which are NaN /
    // -1-poisoned before the timed calls and compared with these after them.
    std::vector<float> h_w(static_cast<std::size_t>(M * k));
    if (M > 0) {
      BENCH_CUDA(cudaMemcpy(h_ids.data(), ids.p, h_ids.size() * 4, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(h_w.data(), weights.p, h_w.size() * 4, cudaMemcpyDeviceToHost));
    }
    row.touched_experts = count_unique(h_ids.data(), M * k, E);

    // ---- the call ----
    FusedExpertsArgs args = expert_args();
    args.hidden = dev_view(hidden.p, DType::kBf16, {M, K}, device_);
    args.topk_ids = ra.topk_ids;
    args.topk_weights = ra.topk_weights;
    args.out = dev_view(out.p, DType::kBf16, {M, K}, device_);
    // --op fused_moe: routing from the same logits inside the timed call (topk_ids/weights are
    // written to the same buffers route() filled).
    FusedMoeArgs margs;
    margs.router_logits = ra.router_logits;
    margs.routing = ra.routing;
    margs.e_score_correction_bias = ra.e_score_correction_bias;
    margs.experts = args;
    const bool whole = config_.op_fused_moe;
    const MoeProblem described = whole ? describe(margs) : describe(args);
    const std::size_t ws_bytes = workspace_size(described, Backend::kCuda);
    ws.alloc(ws_bytes);
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream_;
    o.workspace = ws.p;
    o.workspace_bytes = ws_bytes;
    o.path = pt.path.empty() ? nullptr : pt.path.c_str();
    // The router's choice for this call (throws, as the call would, for a path that cannot run it).
    row.dispatch = describe_dispatch(described, o);
    auto call = [&] {
      if (whole) {
        fused_moe(margs, o);
      } else {
        fused_experts(args, o);
      }
    };

    // First call at this never-seen M: host wall clock to completion, L2 flushed before.
    if (config_.first_call) row.first_call_us = wall_us(call);
    for (int i = 0; i < kWarmup; ++i) call();
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    settle(call);
    // Default iterations: 50, fewer (not under kMinIters) when a call is slow enough that 50
    // would take more than kTimeBudgetUs, so a sweep stays bounded whatever the kernels cost.
    int iters = config_.iters;
    if (iters <= 0) {
      const double once = wall_us(call);
      iters = static_cast<int>(std::clamp(kTimeBudgetUs / std::max(once, 1.0), double{kMinIters}, 50.0));
    }
    if (config_.first_call) {
      // The steady state measured the same way as the first call (eager, host wall clock).
      std::vector<double> t;
      for (int i = 0; i < std::min(iters, 20); ++i) t.push_back(wall_us(call));
      row.eager_us = median(t);
    }
    // The host side of one eager call (Row::host_us): before the graph capture, on the warm state.
    if (config_.host_time > 0 || (config_.host_time < 0 && M <= kHostTimeAutoMaxTokens)) {
      try {
        measure_host(row, call, [&] { (void)(whole ? describe(margs) : describe(args)); },
                     [&] { (void)describe_dispatch(described, o); });
      } catch (const std::exception& e) {
        cudaGetLastError();
        notes.push_back(std::string("host timing failed: ") + e.what());
      }
    }
    // The outputs NaN-poisoned (0xffff bf16; ids -1, weights NaN) right before the timed replays:
    // the check reads them after the last replay, so replays that write nothing must fail it.
    // cudaMalloc hands back the block the previous path or point freed, and the warm-up calls above
    // wrote it too: until session 20 a fused call that ran no GEMM2 passed the check at
    // mixtral-8x7b TP1 bf16 M = 1..64 on the previous path's output.
    if (out.bytes > 0) BENCH_CUDA(cudaMemsetAsync(out.p, 0xff, out.bytes, stream_));
    if (whole && M > 0) {
      BENCH_CUDA(cudaMemsetAsync(ids.p, 0xff, ids.bytes, stream_));
      BENCH_CUDA(cudaMemsetAsync(weights.p, 0xff, weights.bytes, stream_));
    }
    std::string graph_error;
    row.us = time_graph_or_eager(call, iters, &row.timing, &graph_error);
    if (!graph_error.empty()) notes.push_back("graph capture failed (" + graph_error + "), timed eager");
    if (graph_error.empty()) {
      try {
        row.us_in_graph = moekit_bench::in_graph_us(stream_, [&] { flush_l2(); }, call, iters);
      } catch (const std::exception& e) {
        cudaGetLastError();
        notes.push_back(std::string("in-graph timing failed: ") + e.what());
      }
    }

    // ---- baselines over the same experts and counts: cuBLAS bf16 (every scheme), cuBLASLt e4m3 (fp8) ----
    if (M > 0 && config_.baseline) {
      try {
        baseline(row, h_ids, M, E, k, K, N, iters);
      } catch (const std::exception& e) {
        cudaGetLastError();
        notes.push_back(std::string("baseline failed: ") + e.what());
      }
      if (p.scheme != Scheme::kBf16) {
        try {
          baseline_fp8(row, h_ids, M, E, k, K, N, iters);
        } catch (const std::exception& e) {
          cudaGetLastError();
          notes.push_back(std::string("fp8 baseline failed: ") + e.what());
        }
      }
    }
    // ---- correctness against the CPU reference (all tokens, or a sample: check_sample) ----
    // After the baselines: the GPU idles while the reference runs, and a baseline timed right
    // after an idle spell would start on lowered clocks. `out` still holds the last replay's output.
    if (config_.check) {
      try {
        if (whole) check_routing(h_ids, h_w, ids, weights);  // throws on a difference
        record_check(row, check_against_cpu(args, h_ids, h_w, M, hidden, out));
      } catch (const std::exception& e) {
        cudaGetLastError();
        record_check_error(row, e.what());
      }
    }
    fill_metrics(row, p, ceilings);
    for (const std::string& n : notes) row.note += (row.note.empty() ? "" : "; ") + n;
    return row;
  }

 private:
  static constexpr std::size_t kBlasWorkspace = 64u << 20;
  static constexpr int kWarmup = 3;
  // Before a point is timed, it runs on its own for at least this long. A point measured right
  // after a heavy one (the 8192^3 ceiling GEMMs, or M = 8192 of the previous configuration) read
  // 5-22 % slower than the same kernels mid-sequence (the M = 512 column of the 386e02c grid),
  // likely (not proven) the GPU's clocks and power state lagging the load; settling on the
  // point's own load is meant to remove that dependence on what ran before.
  static constexpr double kSettleUs = 50000.0;

  template <class F>
  void settle(F&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    do {
      for (int i = 0; i < 4; ++i) call();
      BENCH_CUDA(cudaStreamSynchronize(stream_));
    } while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < kSettleUs);
  }
  static constexpr int kMinIters = 5;
  static constexpr double kTimeBudgetUs = 1e6;

  void release_all() {
    release();
    w13_bf16_.reset();
    w2_bf16_.reset();
    b13_.reset();
    b2_.reset();
    correction_.reset();
    shape_ = nullptr;
    tp_ = 0;
  }

  FusedExpertsArgs expert_args() const {
    const MoeProblem& p = problem_;
    const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    FusedExpertsArgs a;
    a.scheme = p.scheme;
    a.activation = p.activation;
    if (p.scheme == Scheme::kBf16) {
      a.weights.w13 = dev_view(w13_bf16_.p, DType::kBf16, {E, 2 * N, K}, device_);
      a.weights.w2 = dev_view(w2_bf16_.p, DType::kBf16, {E, K, N}, device_);
    } else {
      a.weights.w13 = dev_view(w13_q_.p, DType::kFp8E4m3, {E, 2 * N, K}, device_);
      a.weights.w2 = dev_view(w2_q_.p, DType::kFp8E4m3, {E, K, N}, device_);
      a.weights.w13_scale = dev_view(s13_.p, DType::kFp32, s13_shape_, device_);
      a.weights.w2_scale = dev_view(s2_.p, DType::kFp32, s2_shape_, device_);
    }
    if (b13_.p) {
      a.weights.b13 = dev_view(b13_.p, DType::kBf16, {E, 2 * N}, device_);
      a.weights.b2 = dev_view(b2_.p, DType::kBf16, {E, K}, device_);
    }
    return a;
  }

  void route_on_host(const RouteArgs& dev, std::int64_t M, std::int64_t E, std::int64_t k, const DevBuf& logits,
                     const DevBuf& ids, const DevBuf& weights) {
    std::vector<float> h_logits(static_cast<std::size_t>(M * E)), h_corr;
    std::vector<std::int32_t> h_ids(static_cast<std::size_t>(M * k));
    std::vector<float> h_w(static_cast<std::size_t>(M * k));
    if (M > 0) BENCH_CUDA(cudaMemcpy(h_logits.data(), logits.p, logits.bytes, cudaMemcpyDeviceToHost));
    RouteArgs ra;
    ra.router_logits = TensorView::contiguous(h_logits.data(), DType::kFp32, {M, E});
    ra.routing = dev.routing;
    if (correction_.p) {
      h_corr.resize(static_cast<std::size_t>(E));
      BENCH_CUDA(cudaMemcpy(h_corr.data(), correction_.p, correction_.bytes, cudaMemcpyDeviceToHost));
      ra.e_score_correction_bias = TensorView::contiguous(h_corr.data(), DType::kFp32, {E});
    }
    ra.topk_ids = TensorView::contiguous(h_ids.data(), DType::kInt32, {M, k});
    ra.topk_weights = TensorView::contiguous(h_w.data(), DType::kFp32, {M, k});
    Options o;
    o.backend = Backend::kCpu;
    route(ra, o);
    if (M > 0) {
      BENCH_CUDA(cudaMemcpy(ids.p, h_ids.data(), ids.bytes, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(weights.p, h_w.data(), weights.bytes, cudaMemcpyHostToDevice));
    }
  }

  // Evicts what the previous replay left in L2 by reading twice its size (MOEKIT_BENCH_FLUSH=write:
  // by writing it, as before 2026-12-01's commit that made reading the default). A written flush
  // leaves L2 full of dirty lines, so the timed call pays their write-back to HBM on top of its
  // own reads (moekit-launch-floor measured the same 9.4 MB stream at both); a read flush leaves
  // clean lines, as a decode step's attention and router kernels mostly do.
  void flush_l2() {
    BENCH_CUDA(::flush_l2(stream_, flush_.p, flush_.bytes, flush_write_, &flush_value_, prop_.multiProcessorCount));
  }

  // The host side of an eager call: host wall clock from the call to its return, nothing
  // synchronized inside (the GPU work is only enqueued). Each call is timed alone; the stream is
  // drained every kHostSyncEvery calls, outside the timed regions, so the queue never backs up
  // (a full launch queue would block the host inside the call and time the GPU instead). The
  // validation (`validate`: moekit::describe) and the router (`plan`: moekit::describe_dispatch)
  // are timed alone the same way: the public calls that run those steps and nothing else, so
  // the library's hot path carries no timing hook.
  static constexpr int kHostWarmup = 20;
  static constexpr int kHostSyncEvery = 8;

  template <class F>
  std::vector<double> host_times(F&& f, int iters, bool drain) {
    std::vector<double> t;
    t.reserve(static_cast<std::size_t>(iters));
    for (int i = 0; i < kHostWarmup + iters; ++i) {
      if (drain && i % kHostSyncEvery == 0) BENCH_CUDA(cudaStreamSynchronize(stream_));
      const auto t0 = std::chrono::steady_clock::now();
      f();
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= kHostWarmup) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (drain) BENCH_CUDA(cudaStreamSynchronize(stream_));
    return t;
  }

  template <class Call, class Validate, class Plan>
  void measure_host(Row& row, Call&& call, Validate&& validate, Plan&& plan) {
    const int iters = std::max(1, config_.host_iters);
    const std::vector<double> t = host_times(call, iters, /*drain=*/true);
    row.host_us = median(t);
    row.host_p90_us = quantile(t, 0.9);
    row.host_validate_us = median(host_times(validate, iters, /*drain=*/false));
    row.host_plan_us = median(host_times(plan, iters, /*drain=*/false));
    row.host_launch_us = std::max(0.0, *row.host_us - *row.host_validate_us - *row.host_plan_us);
  }

  // Host wall clock of one call to completion, L2 flushed (and waited for) before it.
  template <class F>
  double wall_us(F&& call) {
    flush_l2();
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    const auto t0 = std::chrono::steady_clock::now();
    call();
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  }

  // Median over `iters` of cudaEvent time around `launch`, each preceded (outside the events)
  // by an L2 flush.
  template <class F>
  double time_events(F&& launch, int iters) {
    std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * iters), nullptr);
    for (cudaEvent_t& e : ev) BENCH_CUDA(cudaEventCreate(&e));
    std::vector<double> t;
    try {
      for (int i = 0; i < iters; ++i) {
        flush_l2();
        BENCH_CUDA(cudaEventRecord(ev[2 * i], stream_));
        launch();
        BENCH_CUDA(cudaEventRecord(ev[2 * i + 1], stream_));
      }
      BENCH_CUDA(cudaStreamSynchronize(stream_));
      for (int i = 0; i < iters; ++i) {
        float ms = 0.f;
        BENCH_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t.push_back(1e3 * ms);
      }
    } catch (...) {
      for (cudaEvent_t e : ev) cudaEventDestroy(e);
      throw;
    }
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    return median(t);
  }

  // Capture `enqueue` into a CUDA graph and time its replays; if capture fails, time it eager.
  template <class F>
  double time_graph_or_eager(F&& enqueue, int iters, std::string* timing, std::string* error) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    try {
      BENCH_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue();
      } catch (...) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(stream_, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      BENCH_CUDA(cudaStreamEndCapture(stream_, &graph));
      BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      BENCH_CUDA(cudaGraphLaunch(exec, stream_));  // one warm replay
      BENCH_CUDA(cudaStreamSynchronize(stream_));
    } catch (const std::exception& e) {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      *error = e.what();
      *timing = flush_write_ ? "eager, L2 write-flushed" : "eager";
      return time_events(enqueue, iters);
    }
    double us = 0;
    try {
      us = time_events([&] { BENCH_CUDA(cudaGraphLaunch(exec, stream_)); }, iters);
    } catch (...) {
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      throw;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    *timing = flush_write_ ? "graph, L2 write-flushed" : "graph";
    return us;
  }

  // The cuBLAS baseline: GEMM1 [cnt x K]·[K x 2N] and GEMM2 [cnt x N]·[N x K] for each touched
  // expert with its token count, bf16 in and out, fp32 compute, on pre-gathered activations
  // (no gather, activation or combine). cuBLAS is column-major, so each row-major product
  // Y = X·Wᵀ is computed as Yᵀ = W·Xᵀ (transa = T on the [rows, cols] row-major weights).
  void baseline(Row& row, const std::vector<std::int32_t>& h_ids, std::int64_t M, std::int64_t E, std::int64_t k,
                std::int64_t K, std::int64_t N, int iters) {
    std::vector<std::int64_t> count(static_cast<std::size_t>(E), 0);
    for (std::int32_t e : h_ids)
      if (e >= 0 && e < E) ++count[static_cast<std::size_t>(e)];
    std::vector<int> experts;
    for (std::int64_t e = 0; e < E; ++e)
      if (count[e] > 0) experts.push_back(static_cast<int>(e));
    const int G = static_cast<int>(experts.size());
    if (G == 0) return;
    const std::int64_t P = M * k;
    DevBuf x1, c1, h2, y2, ptrs;
    x1.alloc(static_cast<std::size_t>(P * K) * 2);
    c1.alloc(static_cast<std::size_t>(P * 2 * N) * 2);
    h2.alloc(static_cast<std::size_t>(P * N) * 2);
    y2.alloc(static_cast<std::size_t>(P * K) * 2);
    fill_bf16(x1.p, P * K, mix_seed(config_.seed, kSeedBaseline, 1), kHiddenAmp, stream_);
    fill_bf16(h2.p, P * N, mix_seed(config_.seed, kSeedBaseline, 2), 1.0f, stream_);

    // Device arrays of device pointers: [A1 | B1 | C1 | A2 | B2 | C2], G each.
    std::vector<const void*> hp(static_cast<std::size_t>(6 * G));
    const auto* w13 = w13_bf16_.as<const __nv_bfloat16>();
    const auto* w2 = w2_bf16_.as<const __nv_bfloat16>();
    std::int64_t off = 0;
    std::vector<int> m1(G), n1(G), k1(G), lda1(G), ldb1(G), ldc1(G), m2(G), n2(G), k2(G), lda2(G), ldb2(G), ldc2(G);
    for (int g = 0; g < G; ++g) {
      const int e = experts[g];
      const std::int64_t cnt = count[e];
      hp[0 * G + g] = w13 + e * 2 * N * K;
      hp[1 * G + g] = x1.as<const __nv_bfloat16>() + off * K;
      hp[2 * G + g] = c1.as<const __nv_bfloat16>() + off * 2 * N;
      hp[3 * G + g] = w2 + e * K * N;
      hp[4 * G + g] = h2.as<const __nv_bfloat16>() + off * N;
      hp[5 * G + g] = y2.as<const __nv_bfloat16>() + off * K;
      m1[g] = static_cast<int>(2 * N), n1[g] = static_cast<int>(cnt), k1[g] = static_cast<int>(K);
      lda1[g] = static_cast<int>(K), ldb1[g] = static_cast<int>(K), ldc1[g] = static_cast<int>(2 * N);
      m2[g] = static_cast<int>(K), n2[g] = static_cast<int>(cnt), k2[g] = static_cast<int>(N);
      lda2[g] = static_cast<int>(N), ldb2[g] = static_cast<int>(N), ldc2[g] = static_cast<int>(K);
      off += cnt;
    }
    ptrs.alloc(hp.size() * sizeof(void*));
    BENCH_CUDA(cudaMemcpy(ptrs.p, hp.data(), hp.size() * sizeof(void*), cudaMemcpyHostToDevice));
    const void* const* dp = ptrs.as<const void* const>();
    std::vector<cublasOperation_t> ta(G, CUBLAS_OP_T), tb(G, CUBLAS_OP_N);
    std::vector<int> group_size(G, 1);
    std::vector<float> alpha(G, 1.0f), beta(G, 0.0f);

    auto grouped = [&] {
      BENCH_CUBLAS(cublasGemmGroupedBatchedEx(blas_, ta.data(), tb.data(), m1.data(), n1.data(), k1.data(),
                                              alpha.data(), dp + 0 * G, CUDA_R_16BF, lda1.data(), dp + 1 * G,
                                              CUDA_R_16BF, ldb1.data(), beta.data(),
                                              const_cast<void* const*>(dp + 2 * G), CUDA_R_16BF, ldc1.data(), G,
                                              group_size.data(), CUBLAS_COMPUTE_32F));
      BENCH_CUBLAS(cublasGemmGroupedBatchedEx(blas_, ta.data(), tb.data(), m2.data(), n2.data(), k2.data(),
                                              alpha.data(), dp + 3 * G, CUDA_R_16BF, lda2.data(), dp + 4 * G,
                                              CUDA_R_16BF, ldb2.data(), beta.data(),
                                              const_cast<void* const*>(dp + 5 * G), CUDA_R_16BF, ldc2.data(), G,
                                              group_size.data(), CUBLAS_COMPUTE_32F));
    };
    auto per_expert = [&] {
      const float one = 1.0f, zero = 0.0f;
      for (int g = 0; g < G; ++g) {
        BENCH_CUBLAS(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m1[g], n1[g], k1[g], &one, hp[0 * G + g],
                                  CUDA_R_16BF, lda1[g], hp[1 * G + g], CUDA_R_16BF, ldb1[g], &zero,
                                  const_cast<void*>(hp[2 * G + g]), CUDA_R_16BF, ldc1[g], CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
      }
      for (int g = 0; g < G; ++g) {
        BENCH_CUBLAS(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m2[g], n2[g], k2[g], &one, hp[3 * G + g],
                                  CUDA_R_16BF, lda2[g], hp[4 * G + g], CUDA_R_16BF, ldb2[g], &zero,
                                  const_cast<void*>(hp[5 * G + g]), CUDA_R_16BF, ldc2[g], CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
      }
    };

    BENCH_CUDA(cudaStreamSynchronize(stream_));
    bool use_grouped = true;
    try {
      grouped();
      BENCH_CUDA(cudaStreamSynchronize(stream_));
    } catch (const Error& e) {
      // Grouped GEMM not supported for these types/shapes here: one cublasGemmEx per expert.
      cudaGetLastError();
      std::fprintf(stderr, "moekit-bench: cublasGemmGroupedBatchedEx failed (%s); using cublasGemmEx per expert\n",
                   e.what());
      use_grouped = false;
    }
    std::string timing, graph_error;
    if (use_grouped) {
      for (int i = 0; i < kWarmup; ++i) grouped();
      row.baseline = "cublas_grouped_bf16";
      row.baseline_us = time_graph_or_eager(grouped, iters, &timing, &graph_error);
    } else {
      for (int i = 0; i < kWarmup; ++i) per_expert();
      row.baseline = "cublas_per_expert_bf16";
      row.baseline_us = time_graph_or_eager(per_expert, iters, &timing, &graph_error);
    }
    if (!graph_error.empty()) row.baseline += "_eager";
  }

  // The fp8 baseline (like for like with the fp8 schemes): cuBLASLt e4m3 x e4m3 -> bf16 matmuls,
  // fp32 compute with fast accumulation (as moekit's per-tensor/per-channel wgmma: no promotion),
  // per-tensor scales (A_SCALE_POINTER = the expert's weight scale, B_SCALE_POINTER = one
  // activation scale), one matmul per touched expert with its token count: GEMM1
  // [cnt x K]·[K x 2N] then GEMM2 [cnt x N]·[N x K], on pre-gathered, pre-quantized e4m3 rows
  // (no quantization, gather, activation or combine: a lower bound, like the bf16 one). cuBLASLt
  // in CUDA 13.0 has no grouped fp8 matmul (cublasLt.h: none; cublasGemmGroupedBatchedEx takes
  // no fp8), hence one call per expert, all captured in one CUDA graph. fp8 needs leading
  // dimensions that are multiples of 16 bytes: a K or N that is not (gpt-oss TP8: N = 360) runs
  // on a zero-padded copy of the weights, named in the baseline ("_padded").
  void baseline_fp8(Row& row, const std::vector<std::int32_t>& h_ids, std::int64_t M, std::int64_t E,
                    std::int64_t k, std::int64_t K, std::int64_t N, int iters) {
    std::vector<std::int64_t> count(static_cast<std::size_t>(E), 0);
    for (std::int32_t e : h_ids)
      if (e >= 0 && e < E) ++count[static_cast<std::size_t>(e)];
    std::vector<int> experts;
    for (std::int64_t e = 0; e < E; ++e)
      if (count[e] > 0) experts.push_back(static_cast<int>(e));
    const int G = static_cast<int>(experts.size());
    if (G == 0) return;
    auto up16 = [](std::int64_t x) { return (x + 15) / 16 * 16; };
    const std::int64_t Kp = up16(K), Np = up16(N), ldc1 = (2 * N + 7) / 8 * 8, ldc2 = (K + 7) / 8 * 8;
    const bool padded = Kp != K || Np != N;
    // The weights: moekit's own e4m3 tensors, or zero-padded copies with 16-byte rows.
    DevBuf w13p, w2p;
    const std::uint8_t* w13 = w13_q_.as<const std::uint8_t>();
    const std::uint8_t* w2 = w2_q_.as<const std::uint8_t>();
    if (Kp != K) {
      w13p.alloc(static_cast<std::size_t>(E * 2 * N * Kp));
      BENCH_CUDA(cudaMemsetAsync(w13p.p, 0, w13p.bytes, stream_));
      BENCH_CUDA(cudaMemcpy2DAsync(w13p.p, Kp, w13, K, K, E * 2 * N, cudaMemcpyDeviceToDevice, stream_));
      w13 = w13p.as<const std::uint8_t>();
    }
    if (Np != N) {
      w2p.alloc(static_cast<std::size_t>(E * K * Np));
      BENCH_CUDA(cudaMemsetAsync(w2p.p, 0, w2p.bytes, stream_));
      BENCH_CUDA(cudaMemcpy2DAsync(w2p.p, Np, w2, N, N, E * K, cudaMemcpyDeviceToDevice, stream_));
      w2 = w2p.as<const std::uint8_t>();
    }
    // Each expert's rows start at a multiple of 16, so a token count cuBLASLt will not take (see
    // add) can run rounded up to 16 inside its own segment.
    std::int64_t P = 0;
    for (int e : experts) P += up16(count[e]);
    bool padded_n = false;
    DevBuf x1, c1, h2, y2, scales;
    x1.alloc(static_cast<std::size_t>(P * Kp));
    h2.alloc(static_cast<std::size_t>(P * Np));
    c1.alloc(static_cast<std::size_t>(P * ldc1) * 2);
    y2.alloc(static_cast<std::size_t>(P * ldc2) * 2);
    fill_e4m3(x1.p, P * Kp, mix_seed(config_.seed, kSeedBaseline, 3), kFp8Max, stream_);
    fill_e4m3(h2.p, P * Np, mix_seed(config_.seed, kSeedBaseline, 4), kFp8Max, stream_);
    // Per-tensor scales, each in its own 16-byte slot (cuBLASLt's scale pointers are not taken at
    // 4-byte alignment): slot e w13's, E + e w2's, 2E the activations' (values do not change the time).
    constexpr std::int64_t kSlot = 4;  // floats per slot
    scales.alloc(static_cast<std::size_t>((2 * E + 1) * kSlot) * 4);
    fill_f32(scales.p, E * kSlot, mix_seed(config_.seed, kSeedScale13, 9), weight_amp(K) / kFp8Max, 0.0f, stream_);
    fill_f32(scales.as<float>() + E * kSlot, E * kSlot, mix_seed(config_.seed, kSeedScale2, 9),
             weight_amp(N) / kFp8Max, 0.0f, stream_);
    fill_f32(scales.as<float>() + 2 * E * kSlot, kSlot, mix_seed(config_.seed, kSeedBaseline, 5), kHiddenAmp / kFp8Max,
             0.0f, stream_);

    // One descriptor per matmul (each names its expert's scale), one layout per distinct shape.
    struct Lt {
      std::vector<cublasLtMatmulDesc_t> descs;
      std::vector<cublasLtMatrixLayout_t> layouts;
      cublasLtMatmulPreference_t pref = nullptr;
      ~Lt() {
        for (auto d : descs) cublasLtMatmulDescDestroy(d);
        for (auto l : layouts) cublasLtMatrixLayoutDestroy(l);
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
      }
      cublasLtMatrixLayout_t layout(cudaDataType t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
        cublasLtMatrixLayout_t l = nullptr;
        BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&l, t, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld));
        layouts.push_back(l);
        return l;
      }
    } lt;
    BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&lt.pref));
    const std::size_t wsb = blas_ws_.bytes;
    BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                      sizeof wsb));
    struct Call {
      cublasLtMatmulDesc_t desc;
      const void *a, *b;
      void* d;
      cublasLtMatrixLayout_t la, lb, ld;
      cublasLtMatmulAlgo_t algo;
    };
    std::vector<Call> calls;
    const float* act_scale = scales.as<const float>() + 2 * E * kSlot;
    // Column-major, as the bf16 baseline: Y^T = W · X^T with W row-major [rows, cols] read as
    // its transpose (TN, the layout cuBLASLt's fp8 kernels require).
    auto add = [&](const std::uint8_t* w, std::int64_t rows, std::int64_t inner, std::int64_t ld_inner,
                   const std::uint8_t* x, std::uint16_t* y, std::int64_t ldy, std::int64_t cnt, const float* w_scale) {
      cublasLtMatmulDesc_t desc = nullptr;
      BENCH_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      lt.descs.push_back(desc);
      const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
      const std::int8_t fast = 1;
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale));
      BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &act_scale,
                                                  sizeof act_scale));
      // The heuristic assumes 256-byte aligned buffers unless told: per-expert slices are only
      // 16-byte aligned, so say what each pointer has (an algorithm needing more is excluded).
      auto align = [](const void* ptr) {
        const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(ptr);
        return static_cast<std::uint32_t>(std::min<std::uintptr_t>(256, a & (~a + 1)));
      };
      const std::uint32_t al_a = align(w), al_b = align(x), al_d = align(y);
      BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                        sizeof al_a));
      BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                        sizeof al_b));
      BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                        sizeof al_d));
      BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                        sizeof al_d));
      // The token count as it is; if cuBLASLt has no fp8 kernel for it, rounded up to 16 (the
      // baseline then does a little more work than moekit, named "_npad16").
      for (const std::int64_t n : {cnt, up16(cnt)}) {
        Call c{desc, w, x, y, lt.layout(CUDA_R_8F_E4M3, inner, rows, ld_inner),
               lt.layout(CUDA_R_8F_E4M3, inner, n, ld_inner), lt.layout(CUDA_R_16BF, rows, n, ldy), {}};
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        const cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(lt_, desc, c.la, c.lb, c.ld, c.ld, lt.pref, 1, &heur, &found);
        if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
          c.algo = heur.algo;
          calls.push_back(c);
          padded_n = padded_n || n != cnt;
          return;
        }
      }
      throw Error(Status::kNotSupported, "cublasLt found no e4m3 TN algorithm for m=" + std::to_string(rows) +
                                             " n=" + std::to_string(cnt) + " k=" + std::to_string(inner));
    };
    std::int64_t off = 0;
    for (int g = 0; g < G; ++g) {  // GEMM1 of every expert, then GEMM2 of every expert
      const int e = experts[g];
      add(w13 + e * 2 * N * Kp, 2 * N, K, Kp, x1.as<const std::uint8_t>() + off * Kp,
          c1.as<std::uint16_t>() + off * ldc1, ldc1, count[e], scales.as<const float>() + e * kSlot);
      off += up16(count[e]);
    }
    off = 0;
    for (int g = 0; g < G; ++g) {
      const int e = experts[g];
      add(w2 + e * K * Np, K, N, Np, h2.as<const std::uint8_t>() + off * Np, y2.as<std::uint16_t>() + off * ldc2,
          ldc2, count[e], scales.as<const float>() + (E + e) * kSlot);
      off += up16(count[e]);
    }
    const float one = 1.0f, zero = 0.0f;
    auto run = [&] {
      for (const Call& c : calls)
        BENCH_CUBLAS(cublasLtMatmul(lt_, c.desc, &one, c.a, c.la, c.b, c.lb, &zero, c.d, c.ld, c.d, c.ld, &c.algo,
                                    blas_ws_.p, blas_ws_.bytes, stream_));
    };
    run();
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    for (int i = 0; i < kWarmup; ++i) run();
    std::string timing, graph_error;
    row.baseline_fp8 = std::string("cublaslt_fp8_e4m3_per_expert") + (padded ? "_padded" : "") +
                       (padded_n ? "_npad16" : "");
    row.baseline_fp8_us = time_graph_or_eager(run, iters, &timing, &graph_error);
    if (!graph_error.empty()) row.baseline_fp8 += "_eager";
  }

  // --check: the output, inputs and routing back on the host, then the shared check
  // (check.cpp: the CPU reference on the sampled tokens and the experts they touch).
  // --op fused_moe: the call's own routing (written into `ids` / `weights`) against route()'s, the
  // ids exactly and the weights within 1e-3, relative above 1 (a path may sum in another order); throws
  // naming the first difference.
  void check_routing(const std::vector<std::int32_t>& want_ids, const std::vector<float>& want_w, const DevBuf& ids,
                     const DevBuf& weights) {
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    if (want_ids.empty()) return;
    std::vector<std::int32_t> got_ids(want_ids.size());
    std::vector<float> got_w(want_w.size());
    BENCH_CUDA(cudaMemcpy(got_ids.data(), ids.p, got_ids.size() * 4, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(got_w.data(), weights.p, got_w.size() * 4, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < want_ids.size(); ++i) {
      const double tol = 1e-3 * std::max(1.0, std::fabs(static_cast<double>(want_w[i])));
      if (got_ids[i] != want_ids[i] || !(std::fabs(static_cast<double>(got_w[i]) - want_w[i]) <= tol))
        throw std::runtime_error("fused_moe's routing differs from route() at slot " + std::to_string(i) + ": id " +
                                 std::to_string(got_ids[i]) + " (want " + std::to_string(want_ids[i]) + "), weight " +
                                 std::to_string(got_w[i]) + " (want " + std::to_string(want_w[i]) + ")");
    }
  }

  CheckResult check_against_cpu(const FusedExpertsArgs& dev, const std::vector<std::int32_t>& h_ids,
                                const std::vector<float>& h_w, std::int64_t M, const DevBuf& hidden, const DevBuf& out) {
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    const MoeProblem& p = problem_;
    std::vector<std::uint16_t> h_hidden(static_cast<std::size_t>(M * p.hidden_size)),
        got(static_cast<std::size_t>(M * p.hidden_size));
    if (M > 0) {
      BENCH_CUDA(cudaMemcpy(h_hidden.data(), hidden.p, hidden.bytes, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(got.data(), out.p, out.bytes, cudaMemcpyDeviceToHost));
    }
    ExpertSource src;
    src.problem = p;
    src.w13 = dev.weights.w13.data;
    src.w2 = dev.weights.w2.data;
    if (p.scheme != Scheme::kBf16) {
      src.s13 = s13_.p;
      src.s2 = s2_.p;
      src.s13_shape = s13_shape_;
      src.s2_shape = s2_shape_;
      src.s13_numel = numel(s13_shape_);
      src.s2_numel = numel(s2_shape_);
    }
    src.b13 = b13_.p;
    src.b2 = b2_.p;
    src.copy = [](void* dst, const void* from, std::size_t n) {
      BENCH_CUDA(cudaMemcpy(dst, from, n, cudaMemcpyDeviceToHost));
    };
    HostCall call{M, h_hidden.data(), h_ids.data(), h_w.data(), got.data()};
    return check_rows(src, call, check_sample(M, p.top_k, p.hidden_size, p.intermediate_size, config_.check_budget),
                      config_.threads);
  }

  // HBM read rate: 4 GiB streamed once per launch by 132 x 8 CTAs of 512 threads (median of
  // kDenseIters launches, no flush needed: 4 GiB is ~70x L2). Context for the roofline, which
  // stays at the datasheet's 4.8 TB/s (BRIEF §4).
  double hbm_read_gbps() {
    const std::size_t bytes = std::size_t{4} << 30;
    DevBuf buf, sink;
    buf.alloc(bytes);
    sink.alloc(4096 * sizeof(unsigned));
    fill_bf16(buf.p, static_cast<std::int64_t>(bytes / 2), mix_seed(config_.seed, kSeedDense, 5), 1.0f, stream_);
    const int blocks = prop_.multiProcessorCount * 8;
    auto run = [&] {
      read_stream_kernel<<<blocks, 512, 0, stream_>>>(static_cast<const uint4*>(buf.p),
                                                      static_cast<std::int64_t>(bytes / 16),
                                                      static_cast<unsigned*>(sink.p));
      BENCH_CUDA(cudaGetLastError());
    };
    for (int i = 0; i < 3; ++i) run();
    const double us = time_events(run, kDenseIters);
    return static_cast<double>(bytes) / (us * 1e3);
  }

  // Dense bf16 GEMM rate: cublasGemmEx 8192^3, TN, bf16 in/out, fp32 compute, random data.
  double dense_bf16_tflops() {
    constexpr int n = 8192;
    DevBuf a, b, c;
    a.alloc(std::size_t{n} * n * 2);
    b.alloc(std::size_t{n} * n * 2);
    c.alloc(std::size_t{n} * n * 2);
    fill_bf16(a.p, std::int64_t{n} * n, mix_seed(config_.seed, kSeedDense, 1), 1.0f, stream_);
    fill_bf16(b.p, std::int64_t{n} * n, mix_seed(config_.seed, kSeedDense, 2), 1.0f, stream_);
    const float one = 1.0f, zero = 0.0f;
    auto gemm = [&] {
      BENCH_CUBLAS(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p,
                                CUDA_R_16BF, n, &zero, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    for (int i = 0; i < 3; ++i) gemm();
    const double us = time_events(gemm, kDenseIters);
    return 2.0 * n * n * static_cast<double>(n) / (us * 1e6);
  }

  // Dense fp8 GEMM rate: cublasLt e4m3 x e4m3 -> bf16, TN, fp32 compute, 8192^3; the faster of
  // fast accumulation off and on (the stricter ceiling).
  double dense_fp8_tflops() {
    constexpr int n = 8192;
    DevBuf a, b, d, ws;
    a.alloc(std::size_t{n} * n);
    b.alloc(std::size_t{n} * n);
    d.alloc(std::size_t{n} * n * 2);
    ws.alloc(kBlasWorkspace);
    fill_e4m3(a.p, std::int64_t{n} * n, mix_seed(config_.seed, kSeedDense, 3), 4.0f, stream_);
    fill_e4m3(b.p, std::int64_t{n} * n, mix_seed(config_.seed, kSeedDense, 4), 4.0f, stream_);
    double best = 0.0;
    std::string error;
    for (int fast : {0, 1}) {
      cublasLtMatmulDesc_t desc = nullptr;
      cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
      cublasLtMatmulPreference_t pref = nullptr;
      try {
        BENCH_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
        const std::int8_t fast_accum = static_cast<std::int8_t>(fast);
        BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
        BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                                    sizeof fast_accum));
        BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n));
        BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n));
        BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n));
        BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
        const std::size_t wsb = ws.bytes;
        BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                          sizeof wsb));
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt_, desc, la, lb, ld, ld, pref, 1, &heur, &found));
        if (found == 0) throw Error(Status::kNotSupported, "cublasLt found no fp8 e4m3 TN algorithm");
        const float one = 1.0f, zero = 0.0f;
        auto gemm = [&] {
          BENCH_CUBLAS(cublasLtMatmul(lt_, desc, &one, a.p, la, b.p, lb, &zero, d.p, ld, d.p, ld, &heur.algo, ws.p,
                                      ws.bytes, stream_));
        };
        for (int i = 0; i < 3; ++i) gemm();
        const double us = time_events(gemm, kDenseIters);
        best = std::max(best, 2.0 * n * n * static_cast<double>(n) / (us * 1e6));
      } catch (const std::exception& e) {
        cudaGetLastError();
        error = e.what();
      }
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      if (ld) cublasLtMatrixLayoutDestroy(ld);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
    if (best <= 0) throw Error(Status::kCudaError, error);
    return best;
  }

  static constexpr int kDenseIters = 10;

  Config config_;
  int device_ = 0;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DevBuf blas_ws_, flush_;
  int flush_value_ = 0;
  bool flush_write_ = bench_flush_writes();

  const Shape* shape_ = nullptr;
  int tp_ = 0;
  MoeProblem problem_;
  DevBuf w13_bf16_, w2_bf16_, b13_, b2_, correction_;
  DevBuf w13_q_, w2_q_, s13_, s2_;
  std::vector<std::int64_t> s13_shape_, s2_shape_;
};

}  // namespace

std::unique_ptr<Runner> make_cuda_runner(const Config& config) { return std::make_unique<CudaRunner>(config); }

}  // namespace moekit::bench
