// moekit-bench --op inv_rope_fp8_quant: the inverse-RoPE + FP8 quantization kernel at the
// DeepSeek-V4 TP8 head shapes over T, timed the way moekit-bench times the MoE layer (one call
// captured in a CUDA graph, cudaEvents around each replay, L2 flushed before each, median), against
// the HBM roof (bytes read + written / 4.8 TB/s, BRIEF §4's target roof/0.85 + 4 us) and the
// launch floor (an empty kernel's graph replay, timed the same way), with the first eager call at
// a never-seen T against the steady eager call, and (--check) the bytes against the CPU
// reference. The plain-torch comparison is tools/scripts/rope_quant_bench.py.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "graph_timing.cuh"
#include "l2_flush.cuh"
#include "moekit/moekit.hpp"
#include "rope_quant_bench.hpp"

namespace moekit::bench {
namespace {

#define RQ_CUDA(expr)                                                                                   \
  do {                                                                                                  \
    const cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess)                                                                              \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorName(e_) + " " + cudaGetErrorString(e_)); \
  } while (0)

constexpr std::int64_t kHeadDim = 512, kRopeDim = 64, kMaxPos = 65536;

struct HeadShape {
  const char* name;
  std::int64_t heads, groups;
};
// DeepSeek-V4 at TP8: Flash 8 local heads in 1 group; Pro 16 heads in 2 groups.
constexpr HeadShape kShapes[] = {{"v4-flash-tp8", 8, 1}, {"v4-pro-tp8", 16, 2}};

struct Buf {
  void* p = nullptr;
  std::size_t bytes = 0;
  void alloc(std::size_t n) {
    free();
    bytes = n;
    RQ_CUDA(cudaMalloc(&p, std::max<std::size_t>(n, 16)));
  }
  void free() {
    if (p) cudaFree(p);
    p = nullptr;
  }
  ~Buf() { free(); }
};

__global__ void fill_o_kernel(std::uint16_t* o, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = uniform_pm1(seed, static_cast<std::uint64_t>(i)) * kHiddenAmp;
    const std::uint32_t u = __float_as_uint(v);
    o[i] = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // RNE to bf16
  }
}

// The launch floor: a graph replay of a kernel that does nothing.
__global__ void empty_kernel() {}

__global__ void fill_pos_kernel(std::int64_t* pos, std::int64_t n, std::uint64_t seed, std::int64_t max_pos) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    pos[i] = static_cast<std::int64_t>(hash64(seed, static_cast<std::uint64_t>(i)) % static_cast<std::uint64_t>(max_pos));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  std::vector<std::int64_t> tokens;
  std::string json;
  int iters = 50;
  bool packed = false;
  bool check = false;
  // Kernels (MOEKIT_ROPE_KERNEL: auto, small, bulk, pipe4, pipe8, half, reg), each timed at every point.
  std::vector<std::string> kernels{"auto"};
  // --first-calls N: after the sweep, the first eager call at N more never-seen T a shape
  // (kFirstCallTokens, default kernel choice), each against 10 steady calls at its T.
  int first_calls = 0;
  HbmRate hbm;  // the roofline's HBM rate: the GPU's datasheet figure (datasheet_hbm), set once the GPU is known
};

// The never-seen T of --first-calls: none a power of two (the default sweep) nor 3 (the process's
// first call), spread over the range.
constexpr std::int64_t kFirstCallTokens[] = {5, 7, 13, 29, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 12289, 16381};

struct FirstCall {
  std::string shape;
  std::int64_t tokens = 0;
  double first_us = 0, steady_us = 0;
};

struct Result {
  std::string shape;
  std::int64_t heads = 0, groups = 0, tokens = 0;
  double us = 0, bytes = 0, roof_us = 0, target_us = 0, first_call_us = 0, steady_us = 0;
  double in_graph_us = 0;  // the call timed inside its graph (graph_timing.cuh)
  double fresh_outputs_us = 0;  // a steady-T call into never-written cudaMalloc outputs
  std::string kernel = "auto";  // the MOEKIT_ROPE_KERNEL value timed
  bool has_first_call = false;  // measured for the first config of a point only (T is new once)
  std::string timing = "graph";
  int check = -1;  // -1 not checked, 0 mismatch, 1 bit-exact
};

class Bench {
 public:
  explicit Bench(const Options& o) : opt_(o) {
    RQ_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int l2 = 0;
    RQ_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    flush_.alloc(std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 128u << 20));
    RQ_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0));
    // The RoPE cache of real angles (DeepSeek's base 10000), uploaded once.
    cache_host_.resize(static_cast<std::size_t>(kMaxPos * kRopeDim));
    for (std::int64_t p = 0; p < kMaxPos; ++p)
      for (std::int64_t i = 0; i < kRopeDim / 2; ++i) {
        const double th = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / kRopeDim);
        cache_host_[p * kRopeDim + i] = static_cast<float>(std::cos(th));
        cache_host_[p * kRopeDim + kRopeDim / 2 + i] = static_cast<float>(std::sin(th));
      }
    cache_.alloc(cache_host_.size() * 4);
    RQ_CUDA(cudaMemcpy(cache_.p, cache_host_.data(), cache_.bytes, cudaMemcpyHostToDevice));
  }
  ~Bench() {
    if (stream_) cudaStreamDestroy(stream_);
  }

  // An empty kernel's graph replay, timed like the op (L2 flushed before each, median): the part
  // of every small-T time that no kernel can remove.
  double launch_floor_us() {
    return time_graph([&] { empty_kernel<<<1, 32, 0, stream_>>>(); });
  }
  // The same empty kernel timed inside its graph (graph_timing.cuh).
  double launch_floor_in_graph_us() {
    return moekit_bench::in_graph_us(stream_, [&] { flush_l2(); }, [&] { empty_kernel<<<1, 32, 0, stream_>>>(); },
                                     opt_.iters);
  }
  bool write_flush() const { return flush_write_; }

  // The first call of the process, at a T outside the sweep (cuda_available() has preloaded the
  // kernels by then, as it does for any client that probes the device first).
  double process_first_call_us() {
    prepare(kShapes[0], 3);
    return wall_us([&] { call(); });
  }

  // The first eager call at a never-seen T (default kernel choice) and the median of 10 steady
  // eager calls at it (the sweep's first_us / steady_us, without the timed kernels).
  FirstCall first_call(const HeadShape& s, std::int64_t T) {
    prepare(s, T);
    return first_and_steady(s, T);
  }

  // Every kernel of --kernels at one point; the first call at this never-seen T is the first
  // kernel's.
  std::vector<Result> run(const HeadShape& s, std::int64_t T) {
    prepare(s, T);
    std::vector<Result> out;
    for (std::size_t k = 0; k < opt_.kernels.size(); ++k) {
      setenv("MOEKIT_ROPE_KERNEL", opt_.kernels[k].c_str(), 1);
      Result r;
      r.shape = s.name;
      r.heads = s.heads;
      r.groups = s.groups;
      r.tokens = T;
      r.kernel = opt_.kernels[k];
      if (k == 0) {
        const FirstCall fc = first_and_steady(s, T);
        r.has_first_call = true;
        r.first_call_us = fc.first_us;
        r.steady_us = fc.steady_us;
        r.fresh_outputs_us = fresh_outputs_call_us();
      }
      if (opt_.check) {
        RQ_CUDA(cudaMemsetAsync(q_.p, 0xAA, q_.bytes, stream_));  // poison, then one call
        RQ_CUDA(cudaMemsetAsync(scale_.p, 0xFF, scale_.bytes, stream_));
        call();
        RQ_CUDA(cudaStreamSynchronize(stream_));
        r.check = check(s, T) ? 1 : 0;
      }
      r.us = time_graph([&] { call(); });
      r.in_graph_us = moekit_bench::in_graph_us(stream_, [&] { flush_l2(); }, [&] { call(); }, opt_.iters);
      const std::int64_t nb = s.heads * kHeadDim / 128, Tp = (T + 3) / 4 * 4;
      r.bytes = static_cast<double>(T * s.heads * kHeadDim * 3 + nb * Tp * 4 + T * 8 + T * kRopeDim * 4);
      r.roof_us = r.bytes / (opt_.hbm.gbps * 1e3);
      r.target_us = r.roof_us / 0.85 + 4.0;
      out.push_back(r);
    }
    unsetenv("MOEKIT_ROPE_KERNEL");
    return out;
  }

 private:
  // The first eager call at the prepared, never-seen T, then the median of 10 steady calls at it.
  FirstCall first_and_steady(const HeadShape& s, std::int64_t T) {
    FirstCall r;
    r.shape = s.name;
    r.tokens = T;
    r.first_us = wall_us([&] { call(); });
    std::vector<double> steady;
    for (int i = 0; i < 10; ++i) steady.push_back(wall_us([&] { call(); }));
    r.steady_us = median(steady);
    return r;
  }

  // One call at this (already seen) T whose outputs are fresh cudaMalloc buffers that nothing has
  // written: the cost of a first touch of new device pages, apart from the first call at a new T
  // (whose outputs prepare() has written once, as a caching allocator's reused blocks are).
  double fresh_outputs_call_us() {
    Buf q2, s2;
    q2.alloc(q_.bytes);
    s2.alloc(scale_.bytes);
    const InvRopeFp8QuantArgs keep = args_;
    args_.o_fp8.data = q2.p;
    args_.o_scale.data = s2.p;
    const double us = wall_us([&] { call(); });
    args_ = keep;
    return us;
  }

  void prepare(const HeadShape& s, std::int64_t T) {
    shape_ = s;
    T_ = T;
    const std::int64_t n = T * s.heads * kHeadDim;
    o_.alloc(static_cast<std::size_t>(n) * 2);
    pos_.alloc(static_cast<std::size_t>(T) * 8);
    q_.alloc(static_cast<std::size_t>(n));
    const std::int64_t cols = s.heads * kHeadDim / (opt_.packed ? 512 : 128);
    scale_.alloc(static_cast<std::size_t>(cols * ((T + 3) / 4 * 4)) * 4);
    if (n > 0) fill_o_kernel<<<1024, 256, 0, stream_>>>(static_cast<std::uint16_t*>(o_.p), n, mix_seed(1, kSeedHidden, static_cast<std::uint64_t>(T)));
    if (T > 0) fill_pos_kernel<<<64, 256, 0, stream_>>>(static_cast<std::int64_t*>(pos_.p), T, mix_seed(1, kSeedLogits, static_cast<std::uint64_t>(T)), kMaxPos);
    RQ_CUDA(cudaGetLastError());
    // The outputs written once before the first call, as the blocks a caching allocator (torch's)
    // hands out have been: the first call at this T then differs from the steady one by T alone.
    // The never-written-pages case is measured apart (fresh_outputs_call_us).
    RQ_CUDA(cudaMemsetAsync(q_.p, 0, q_.bytes, stream_));
    RQ_CUDA(cudaMemsetAsync(scale_.p, 0, scale_.bytes, stream_));
    RQ_CUDA(cudaStreamSynchronize(stream_));
    const Device dev = Device::cuda(0);
    const std::int64_t hpg = s.heads / s.groups;
    args_ = InvRopeFp8QuantArgs{};
    args_.o = TensorView::contiguous(o_.p, DType::kBf16, {T, s.heads, kHeadDim}, dev);
    args_.positions = TensorView::contiguous(pos_.p, DType::kInt64, {T}, dev);
    args_.cos_sin_cache = TensorView::contiguous(cache_.p, DType::kFp32, {kMaxPos, kRopeDim}, dev);
    args_.num_groups = s.groups;
    args_.o_fp8 = TensorView::contiguous(q_.p, DType::kFp8E4m3, {s.groups, T, hpg * kHeadDim}, dev);
    args_.o_scale = TensorView::contiguous(scale_.p, opt_.packed ? DType::kInt32 : DType::kFp32,
                                           {s.groups, cols / s.groups, (T + 3) / 4 * 4}, dev);
    args_.packed_ue8m0 = opt_.packed;
  }

  void call() {
    moekit::Options o;
    o.backend = Backend::kCuda;
    o.stream = stream_;
    inv_rope_fp8_quant(args_, o);
  }

  // The device outputs against the CPU reference on copies of the same inputs, bit for bit.
  bool check(const HeadShape& s, std::int64_t T) {
    std::vector<std::uint16_t> o(o_.bytes / 2);
    std::vector<std::int64_t> pos(static_cast<std::size_t>(T));
    std::vector<std::uint8_t> q(q_.bytes), q_ref(q_.bytes);
    std::vector<std::uint32_t> sc(scale_.bytes / 4), sc_ref(scale_.bytes / 4);
    RQ_CUDA(cudaMemcpy(o.data(), o_.p, o_.bytes, cudaMemcpyDeviceToHost));
    RQ_CUDA(cudaMemcpy(pos.data(), pos_.p, pos_.bytes, cudaMemcpyDeviceToHost));
    RQ_CUDA(cudaMemcpy(q.data(), q_.p, q_.bytes, cudaMemcpyDeviceToHost));
    RQ_CUDA(cudaMemcpy(sc.data(), scale_.p, scale_.bytes, cudaMemcpyDeviceToHost));
    InvRopeFp8QuantArgs a = args_;
    const Device host = Device::cpu();
    for (TensorView* v : {&a.o, &a.positions, &a.cos_sin_cache, &a.o_fp8, &a.o_scale}) v->device = host;
    a.o.data = o.data();
    a.positions.data = pos.data();
    a.cos_sin_cache.data = cache_host_.data();
    a.o_fp8.data = q_ref.data();
    a.o_scale.data = sc_ref.data();
    moekit::Options opt;
    opt.backend = Backend::kCpu;
    inv_rope_fp8_quant(a, opt);
    (void)s;
    return q == q_ref && sc == sc_ref;
  }

  // The L2 flush before each timed replay, as moekit-bench's: reading a 2x-L2 buffer (clean lines;
  // MOEKIT_BENCH_FLUSH=write: writing it, dirty lines whose write-back the timed call pays, this
  // bench's method until session 15).
  void flush_l2() { RQ_CUDA(::flush_l2(stream_, flush_.p, flush_.bytes, flush_write_, &flush_value_, sms_)); }

  // Host wall clock of one call to completion, L2 flushed (and waited for) before it.
  template <class F>
  double wall_us(F&& f) {
    flush_l2();
    RQ_CUDA(cudaStreamSynchronize(stream_));
    const auto t0 = std::chrono::steady_clock::now();
    f();
    RQ_CUDA(cudaStreamSynchronize(stream_));
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }

  // One call captured in a graph; median of cudaEvent times around each replay, each preceded
  // (outside the events) by an L2 flush.
  template <class F>
  double time_graph(F&& enqueue) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    RQ_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    enqueue();
    RQ_CUDA(cudaStreamEndCapture(stream_, &graph));
    RQ_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    RQ_CUDA(cudaGraphLaunch(exec, stream_));  // one warm replay
    std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * opt_.iters));
    for (cudaEvent_t& e : ev) RQ_CUDA(cudaEventCreate(&e));
    for (int i = 0; i < opt_.iters; ++i) {
      flush_l2();
      RQ_CUDA(cudaEventRecord(ev[2 * i], stream_));
      RQ_CUDA(cudaGraphLaunch(exec, stream_));
      RQ_CUDA(cudaEventRecord(ev[2 * i + 1], stream_));
    }
    RQ_CUDA(cudaStreamSynchronize(stream_));
    std::vector<double> t;
    for (int i = 0; i < opt_.iters; ++i) {
      float ms = 0.f;
      RQ_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      t.push_back(1e3 * ms);
    }
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(t);
  }

  Options opt_;
  cudaStream_t stream_ = nullptr;
  Buf flush_, cache_, o_, pos_, q_, scale_;
  std::vector<float> cache_host_;
  int flush_value_ = 0;
  bool flush_write_ = bench_flush_writes();
  int sms_ = 0;  // the read flush's grid: 2 CTAs a SM
  HeadShape shape_{};
  std::int64_t T_ = 0;
  InvRopeFp8QuantArgs args_;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "moekit-bench --op inv_rope_fp8_quant: %s\n"
               "usage: moekit-bench --op inv_rope_fp8_quant [--tokens LIST] [--iters N] [--packed] [--check] "
               "[--kernels auto,small,bulk,pipe4,pipe8,half,reg] [--rows 4,8,2] [--first-calls N] [--json PATH]\n"
               "  --tokens: comma-separated T values (default 1,2,4,...,16384)\n"
               "  --kernels: the kernels to time at every point (MOEKIT_ROPE_KERNEL; default auto: small at\n"
               "          T <= 64, bulk above; small = latency-first, bulk = bulk-copy pipeline, pipe4 / pipe8 =\n"
               "          the cp.async pipelined kernel, half = the same with a row a half-warp, reg = the\n"
               "          register kernel)\n"
               "  --rows: the older spelling (4 = pipe4, 8 = pipe8, 2 = reg)\n"
               "  --first-calls N: after the sweep, the first eager call at N more never-seen T a shape (0..14)\n",
               msg.c_str());
  std::exit(2);
}

std::string num(bool present, double v) {
  if (!present) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string shell_command(const Options& o) {
  std::string c = "moekit-bench --op inv_rope_fp8_quant --tokens ";
  for (std::size_t i = 0; i < o.tokens.size(); ++i) c += (i ? "," : "") + std::to_string(o.tokens[i]);
  if (o.packed) c += " --packed";
  if (o.first_calls > 0) c += " --first-calls " + std::to_string(o.first_calls);
  c += " --kernels ";
  for (std::size_t i = 0; i < o.kernels.size(); ++i) c += (i ? "," : "") + o.kernels[i];
  return c;
}

}  // namespace

int run_rope_quant_bench(int argc, char** argv, const std::string& commit, const std::string& date) {
  Options opt;
  for (std::int64_t t = 1; t <= 16384; t *= 2) opt.tokens.push_back(t);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    const std::size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (!v.empty()) return v;
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--op") {
      value();
    } else if (a == "--tokens") {
      opt.tokens.clear();
      std::string list = value();
      std::size_t p = 0;
      while (p <= list.size()) {
        const std::size_t c = list.find(',', p);
        const std::string item = list.substr(p, c == std::string::npos ? std::string::npos : c - p);
        if (!item.empty()) {
          char* end = nullptr;
          const long long t = std::strtoll(item.c_str(), &end, 10);
          if (*end != '\0' || t < 0) usage("bad --tokens value '" + item + "'");
          opt.tokens.push_back(t);
        }
        if (c == std::string::npos) break;
        p = c + 1;
      }
    } else if (a == "--iters") {
      opt.iters = std::atoi(value().c_str());
      if (opt.iters < 1) usage("--iters must be >= 1");
    } else if (a == "--json") {
      opt.json = value();
    } else if (a == "--rows" || a == "--kernels") {
      opt.kernels.clear();
      const bool rows = a == "--rows";
      std::string list = value();
      for (std::size_t p = 0; p <= list.size();) {
        const std::size_t c = list.find(',', p);
        const std::string item = list.substr(p, c == std::string::npos ? std::string::npos : c - p);
        if (rows) {
          if (item == "2") opt.kernels.push_back("reg");
          else if (item == "4") opt.kernels.push_back("pipe4");
          else if (item == "8") opt.kernels.push_back("pipe8");
          else if (!item.empty()) usage("bad --rows value '" + item + "': expected 2, 4 or 8");
        } else if (item == "auto" || item == "small" || item == "bulk" || item == "pipe4" || item == "pipe8" || item == "half" || item == "reg") {
          opt.kernels.push_back(item);
        } else if (!item.empty()) {
          usage("bad --kernels value '" + item + "': expected auto, small, bulk, pipe4, pipe8, half or reg");
        }
        if (c == std::string::npos) break;
        p = c + 1;
      }
      if (opt.kernels.empty()) usage(a + " needs at least one kernel");
    } else if (a == "--first-calls") {
      opt.first_calls = std::atoi(value().c_str());
      constexpr int kMax = static_cast<int>(sizeof(kFirstCallTokens) / sizeof(kFirstCallTokens[0]));
      if (opt.first_calls < 0 || opt.first_calls > kMax) usage("--first-calls must be 0.." + std::to_string(kMax));
    } else if (a == "--packed") {
      opt.packed = true;
    } else if (a == "--check") {
      opt.check = true;
    } else {
      usage("unknown option '" + a + "'");
    }
  }
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "moekit-bench --op inv_rope_fp8_quant needs a Hopper GPU: %s\n", why.c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  RQ_CUDA(cudaGetDeviceProperties(&prop, 0));
  opt.hbm = datasheet_hbm(prop.name);
  if (!opt.hbm.in_table) warn_unlisted_gpu(prop.name, opt.hbm);
  Bench bench(opt);
  const double process_first = bench.process_first_call_us();
  const double launch_floor = bench.launch_floor_us();
  const double launch_floor_in_graph = bench.launch_floor_in_graph_us();
  const char* flush = bench.write_flush() ? "write" : "read";
  std::printf("moekit-bench --op inv_rope_fp8_quant  commit %s  %s  gpu: %s  (%s scales)\n", commit.c_str(),
              date.c_str(), prop.name, opt.packed ? "packed UE8M0" : "fp32");
  std::printf("first call of the process: %.1f us (moekit::cuda_available() before it preloaded the kernels)\n",
              process_first);
  std::printf("L2 flush: %s; launch floor: %.2f us (an empty kernel's graph replay, timed like the op), "
              "%.2f us in graph (timed inside its graph, as in_graph below)\n",
              flush, launch_floor, launch_floor_in_graph);
  std::printf("%-13s %6s %5s %9s %9s %7s %9s %6s %9s %5s %9s %9s %6s %9s %s\n", "shape", "T", "kernel", "us", "roof_us", "%roof",
              "target_us", "ok", "in_graph", "ok_g", "first_us", "steady_us", "1st/st", "fresh_us", "check");
  std::vector<Result> rows;
  int misses = 0, misses_in_graph = 0, mismatches = 0;
  for (const HeadShape& s : kShapes)
    for (std::int64_t T : opt.tokens) {
      if (T == 0) continue;  // nothing is launched at T = 0 (tested in the GPU suite)
      for (const Result& r : bench.run(s, T)) {
        misses += r.us > r.target_us;
        misses_in_graph += r.in_graph_us > r.target_us;
        mismatches += r.check == 0;
        char first[64] = "-", steady[64] = "-", ratio[64] = "-", fresh[64] = "-";
        if (r.has_first_call) {
          std::snprintf(first, sizeof first, "%.1f", r.first_call_us);
          std::snprintf(steady, sizeof steady, "%.1f", r.steady_us);
          std::snprintf(ratio, sizeof ratio, "%.2f", r.first_call_us / r.steady_us);
          std::snprintf(fresh, sizeof fresh, "%.1f", r.fresh_outputs_us);
        }
        std::printf("%-13s %6lld %5s %9.2f %9.2f %6.1f%% %9.2f %6s %9.2f %5s %9s %9s %6s %9s %s\n", r.shape.c_str(),
                    static_cast<long long>(T), r.kernel.c_str(), r.us, r.roof_us, 100.0 * r.roof_us / r.us, r.target_us,
                    r.us <= r.target_us ? "ok" : "MISS", r.in_graph_us, r.in_graph_us <= r.target_us ? "ok" : "MISS",
                    first, steady, ratio, fresh,
                    r.check < 0 ? "-" : (r.check ? "bit-exact" : "MISMATCH"));
        rows.push_back(r);
      }
    }
  std::printf("%%roof = roof_us / us (roof: bytes / 4.8 TB/s); target = roof / 0.85 + 4 us (BRIEF §4); "
              "us: events around the graph replay; in_graph: events inside the graph, after the flush node "
              "(no graph launch in the interval); "
              "first_us / steady_us: eager host wall clock, L2 flushed; fresh_us: one steady-T call into "
              "never-written cudaMalloc outputs\n");
  // The first call at more never-seen T (one sample each is one host wall-clock reading: the
  // median and the largest ratio over many T say more than one point's).
  std::vector<FirstCall> firsts;
  if (opt.first_calls > 0) {
    std::printf("first eager call at never-seen T (default kernel choice) against 10 steady calls at the same T:\n");
    std::printf("%-13s %6s %9s %9s %6s\n", "shape", "T", "first_us", "steady_us", "1st/st");
    for (const HeadShape& s : kShapes) {
      std::vector<double> ratios;
      for (int i = 0; i < opt.first_calls; ++i) {
        const std::int64_t T = kFirstCallTokens[i];
        if (std::find(opt.tokens.begin(), opt.tokens.end(), T) != opt.tokens.end()) continue;  // seen
        const FirstCall fc = bench.first_call(s, T);
        std::printf("%-13s %6lld %9.1f %9.1f %6.2f\n", fc.shape.c_str(), static_cast<long long>(T), fc.first_us,
                    fc.steady_us, fc.first_us / fc.steady_us);
        ratios.push_back(fc.first_us / fc.steady_us);
        firsts.push_back(fc);
      }
      if (!ratios.empty()) {
        std::sort(ratios.begin(), ratios.end());
        std::printf("%-13s first / steady over %zu never-seen T: median %.2f, max %.2f\n", s.name, ratios.size(),
                    ratios[ratios.size() / 2], ratios.back());
      }
    }
  }
  if (!opt.json.empty()) {
    FILE* f = std::fopen(opt.json.c_str(), "w");
    if (!f) throw std::runtime_error("--json: cannot write " + opt.json);
    std::fprintf(f, "{\n \"tool\": \"moekit-bench --op inv_rope_fp8_quant\",\n \"commit\": \"%s\",\n \"date\": \"%s\",\n"
                    " \"gpu\": \"%s\",\n \"hbm_gbps\": %.1f,\n \"hbm_source\": \"%s\",\n \"scales\": \"%s\",\n \"iters\": %d,\n"
                    " \"timing\": \"graph replay, L2 flushed, median\",\n \"flush\": \"%s\",\n"
                    " \"in_graph_timing\": \"[flush, event, call, event] in one graph, replayed back to back, median\",\n"
                    " \"process_first_call_us\": %.3f,\n"
                    " \"launch_floor_us\": %.3f,\n \"launch_floor_in_graph_us\": %.3f,\n"
                    " \"reproduce\": \"%s\",\n \"rows\": [\n",
                 commit.c_str(), date.c_str(), prop.name, opt.hbm.gbps, opt.hbm.source.c_str(), opt.packed ? "ue8m0_packed" : "fp32", opt.iters, flush,
                 process_first, launch_floor, launch_floor_in_graph, shell_command(opt).c_str());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Result& r = rows[i];
      std::fprintf(f,
                   "  {\"shape\": \"%s\", \"heads\": %lld, \"groups\": %lld, \"head_dim\": %lld, \"rope_dim\": %lld, "
                   "\"tokens\": %lld, \"kernel\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, \"gbps\": %.1f, \"roof_us\": %.3f, "
                   "\"roof_fraction\": %.4f, \"target_us\": %.3f, \"meets_target\": %s, \"in_graph_us\": %.3f, "
                   "\"meets_target_in_graph\": %s, \"first_call_us\": %s, "
                   "\"steady_eager_us\": %s, \"first_over_steady\": %s, \"fresh_outputs_us\": %s, \"check\": %s}%s\n",
                   r.shape.c_str(), static_cast<long long>(r.heads), static_cast<long long>(r.groups),
                   static_cast<long long>(kHeadDim), static_cast<long long>(kRopeDim), static_cast<long long>(r.tokens),
                   r.kernel.c_str(), r.us, r.bytes, r.bytes / (r.us * 1e3), r.roof_us, r.roof_us / r.us, r.target_us,
                   r.us <= r.target_us ? "true" : "false", r.in_graph_us, r.in_graph_us <= r.target_us ? "true" : "false",
                   num(r.has_first_call, r.first_call_us).c_str(),
                   num(r.has_first_call, r.steady_us).c_str(), num(r.has_first_call, r.first_call_us / r.steady_us).c_str(),
                   num(r.has_first_call, r.fresh_outputs_us).c_str(),
                   r.check < 0 ? "null" : (r.check ? "\"bit-exact\"" : "\"mismatch\""), i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, " ],\n \"first_call_sweep\": [\n");
    for (std::size_t i = 0; i < firsts.size(); ++i)
      std::fprintf(f, "  {\"shape\": \"%s\", \"tokens\": %lld, \"first_call_us\": %.3f, \"steady_eager_us\": %.3f, "
                      "\"first_over_steady\": %.4f}%s\n",
                   firsts[i].shape.c_str(), static_cast<long long>(firsts[i].tokens), firsts[i].first_us,
                   firsts[i].steady_us, firsts[i].first_us / firsts[i].steady_us, i + 1 < firsts.size() ? "," : "");
    std::fprintf(f, " ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s (%zu rows)\n", opt.json.c_str(), rows.size());
  }
  std::printf("%d point(s) above the target, %d timed in graph\n", misses, misses_in_graph);
  return mismatches ? 1 : 0;
}

}  // namespace moekit::bench
