// The CPU runner of moekit-bench: random host inputs (hash PRNG + moekit::quantize_weights),
// routing by moekit::route, and wall-clock timing of the reference backend (median of a few
// calls). It refuses, naming the gigabytes, a preset whose weights do not fit in host memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bench.hpp"

namespace moekit::bench {

namespace {

// Bytes the kernel says a new allocation can get without swapping.
double available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

// Run body(begin, end) over [0, n) on `threads` threads.
template <class F>
void parallel_for(std::int64_t n, int threads, F body) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::int64_t>(n, 1))));
  if (threads == 1) {
    body(std::int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const std::int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const std::int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    pool.emplace_back([=] { body(b, e); });
  }
  for (std::thread& th : pool) th.join();
}

// An uninitialized byte buffer (std::vector would zero gigabytes first).
struct Bytes {
  std::unique_ptr<std::uint8_t[]> ptr;
  std::size_t size = 0;
  void resize(std::size_t n) {
    ptr.reset(n ? new std::uint8_t[n] : nullptr);
    size = n;
  }
  void* data() const { return ptr.get(); }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class CpuRunner final : public Runner {
 public:
  explicit CpuRunner(const Config& config) : config_(config) {
    threads_ = config.threads > 0 ? config.threads
                                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  const char* name() const override { return "cpu"; }
  std::string gpu_name() const override { return "none (cpu)"; }
  Ceilings measure_ceilings() override { return Ceilings{}; }  // no GPU: no dense rate, no roof

  void prepare(const Shape& shape, int tp, Scheme scheme) override {
    release();
    const MoeProblem p = preset_problem(shape.preset, 0, tp, scheme);
    const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    const double weights = static_cast<double>(E) * expert_bytes(p);
    // fp8 schemes quantize one expert at a time from fp32 (plus quantize_weights' copy).
    const double scratch = scheme == Scheme::kBf16 ? 0.0 : static_cast<double>(threads_) * 2.0 * N * K * 6.0;
    const double need = weights + scratch;
    const double avail = available_host_bytes();
    if (avail > 0 && need > 0.9 * avail) {
      throw Error(Status::kNotSupported,
                  "the CPU backend needs " + gb(need) + " of host memory for the expert weights, more than 90% of the " +
                      gb(avail) + " available here; run it with --backend cuda on a GPU machine, or pick a larger "
                      "--tp or an fp8 --scheme");
    }
    problem_ = p;
    generate_weights(shape, scheme);
    prepared_ = true;
  }

  Row run(const Point& pt, const Ceilings& ceilings) override {
    const MoeProblem& p = pt.problem;
    const std::int64_t M = p.num_tokens, E = p.num_experts, k = p.top_k, K = p.hidden_size;
    Row row;
    row.preset = pt.shape->name;
    row.tp = pt.tp;
    row.scheme = scheme_name(pt.scheme);
    row.tokens = M;
    row.backend = "cpu";
    row.path = effective_path(pt.path);
    row.dispatch = "cpu";
    row.op = config_.op_fused_moe ? "fused_moe" : "fused_experts";
    row.timing = "wall";
    row.reproduce = reproduce_command(config_, pt, "cpu");

    // Inputs of this M: hidden, router logits, then routing by moekit::route (CPU).
    std::vector<std::uint16_t> hidden(static_cast<std::size_t>(M * K));
    const std::uint64_t hs = mix_seed(config_.seed, kSeedHidden, static_cast<std::uint64_t>(M));
    parallel_for(M * K, threads_, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hidden[i] = float_to_bf16(kHiddenAmp * uniform_pm1(hs, i));
    });
    std::vector<float> logits(static_cast<std::size_t>(M * E));
    const std::uint64_t ls = mix_seed(config_.seed, kSeedLogits, static_cast<std::uint64_t>(M));
    for (std::int64_t i = 0; i < M * E; ++i) logits[i] = kLogitAmp * uniform_pm1(ls, i);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(M * k));
    std::vector<float> weights(static_cast<std::size_t>(M * k));
    RouteArgs ra;
    ra.router_logits = TensorView::contiguous(logits.data(), DType::kFp32, {M, E});
    ra.routing = pt.shape->preset.routing;
    ra.routing.top_k = static_cast<int>(k);
    if (!correction_.empty()) ra.e_score_correction_bias = TensorView::contiguous(correction_.data(), DType::kFp32, {E});
    ra.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {M, k});
    ra.topk_weights = TensorView::contiguous(weights.data(), DType::kFp32, {M, k});
    Options ro;
    ro.backend = Backend::kCpu;
    ro.num_threads = config_.threads;
    route(ra, ro);
    row.touched_experts = count_unique(ids.data(), M * k, E);

    std::vector<std::uint16_t> out(static_cast<std::size_t>(M * K));
    FusedExpertsArgs args = expert_args();
    args.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {M, K});
    args.topk_ids = ra.topk_ids;
    args.topk_weights = ra.topk_weights;
    args.out = TensorView::contiguous(out.data(), DType::kBf16, {M, K});
    Options o;
    o.backend = Backend::kCpu;
    o.path = pt.path.empty() ? nullptr : pt.path.c_str();
    o.num_threads = config_.threads;

    FusedMoeArgs margs;
    margs.router_logits = ra.router_logits;
    margs.routing = ra.routing;
    margs.e_score_correction_bias = ra.e_score_correction_bias;
    margs.experts = args;
    const int iters = config_.iters > 0 ? config_.iters : 3;
    std::vector<double> times;
    for (int it = 0; it < iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      if (config_.op_fused_moe) {
        fused_moe(margs, o);
      } else {
        fused_experts(args, o);
      }
      const auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    row.us = median(times);
    fill_metrics(row, p, ceilings);
    if (config_.check) {
      // The reference again, on the sampled tokens with their experts renumbered: on this backend
      // it tests the check itself and the reference's row independence, not a second implementation.
      ExpertSource src;
      src.problem = p;
      src.w13 = w13_.data();
      src.w2 = w2_.data();
      src.s13 = s13_.data();
      src.s2 = s2_.data();
      src.s13_shape = s13_shape_;
      src.s2_shape = s2_shape_;
      src.s13_numel = static_cast<std::int64_t>(s13_.size());
      src.s2_numel = static_cast<std::int64_t>(s2_.size());
      if (!b13_.empty()) {
        src.b13 = b13_.data();
        src.b2 = b2_.data();
      }
      src.copy = [](void* dst, const void* from, std::size_t n) { std::memcpy(dst, from, n); };
      HostCall call{M, hidden.data(), ids.data(), weights.data(), out.data()};
      try {
        record_check(row, check_rows(src, call, check_sample(M, k, K, p.intermediate_size, config_.check_budget),
                                     config_.threads));
      } catch (const std::exception& e) {
        record_check_error(row, e.what());
      }
    }
    if (config_.first_call) {
      // The first call of the reference at a new M is the first timed one; nothing is cached.
      row.first_call_us = times.front();
    }
    return row;
  }

  void release() override {
    w13_.resize(0);
    w2_.resize(0);
    s13_.clear();
    s2_.clear();
    b13_.clear();
    b2_.clear();
    correction_.clear();
    prepared_ = false;
  }

 private:
  void generate_weights(const Shape& shape, Scheme scheme) {
    const MoeProblem& p = problem_;
    const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    const std::int64_t n13 = 2 * N * K, n2 = K * N;  // elements per expert
    const float a13 = weight_amp(K), a2 = weight_amp(N);
    const std::uint64_t sw13 = mix_seed(config_.seed, kSeedW13), sw2 = mix_seed(config_.seed, kSeedW2);
    if (scheme == Scheme::kBf16) {
      wdtype_ = DType::kBf16;
      w13_.resize(static_cast<std::size_t>(E * n13) * 2);
      w2_.resize(static_cast<std::size_t>(E * n2) * 2);
      auto* w13 = static_cast<std::uint16_t*>(w13_.data());
      auto* w2 = static_cast<std::uint16_t*>(w2_.data());
      parallel_for(E * n13, threads_, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) w13[i] = float_to_bf16(a13 * uniform_pm1(sw13, i));
      });
      parallel_for(E * n2, threads_, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) w2[i] = float_to_bf16(a2 * uniform_pm1(sw2, i));
      });
    } else {
      // fp8: quantize each expert's fp32 weights with moekit::quantize_weights and stack them
      // (every scale layout of ops.hpp has the expert as its leading dimension).
      wdtype_ = DType::kFp8E4m3;
      w13_.resize(static_cast<std::size_t>(E * n13));
      w2_.resize(static_cast<std::size_t>(E * n2));
      quantize_stacked(E, 2 * N, K, a13, sw13, scheme, w13_, s13_, s13_shape_);
      quantize_stacked(E, K, N, a2, sw2, scheme, w2_, s2_, s2_shape_);
    }
    if (shape.preset.has_bias) {
      b13_.resize(static_cast<std::size_t>(E * 2 * N));
      b2_.resize(static_cast<std::size_t>(E * K));
      const std::uint64_t s1 = mix_seed(config_.seed, kSeedB13), s2 = mix_seed(config_.seed, kSeedB2);
      for (std::size_t i = 0; i < b13_.size(); ++i) b13_[i] = float_to_bf16(kBiasAmp * uniform_pm1(s1, i));
      for (std::size_t i = 0; i < b2_.size(); ++i) b2_[i] = float_to_bf16(kBiasAmp * uniform_pm1(s2, i));
    }
    if (shape.preset.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
      correction_.resize(static_cast<std::size_t>(E));
      const std::uint64_t cs = mix_seed(config_.seed, kSeedCorrection);
      for (std::int64_t i = 0; i < E; ++i) correction_[i] = kCorrectionAmp * uniform_pm1(cs, i);
    }
  }

  void quantize_stacked(std::int64_t E, std::int64_t R, std::int64_t C, float amp, std::uint64_t seed, Scheme scheme,
                        Bytes& data, std::vector<float>& scale, std::vector<std::int64_t>& scale_shape) {
    const std::int64_t per = R * C;
    std::int64_t scale_per = -1;
    std::vector<std::int64_t> inner;
    // Experts are split over threads; each quantizes its own experts into its slice.
    std::vector<std::string> errors(static_cast<std::size_t>(threads_));
    std::vector<std::vector<float>> scales(static_cast<std::size_t>(E));
    std::vector<std::vector<std::int64_t>> shapes(static_cast<std::size_t>(E));
    std::vector<std::thread> pool;
    const int T = static_cast<int>(std::min<std::int64_t>(threads_, std::max<std::int64_t>(E, 1)));
    for (int t = 0; t < T; ++t) {
      pool.emplace_back([&, t] {
        try {
          std::vector<float> w(static_cast<std::size_t>(per));
          for (std::int64_t e = t; e < E; e += T) {
            for (std::int64_t i = 0; i < per; ++i) w[i] = amp * uniform_pm1(seed, static_cast<std::uint64_t>(e * per + i));
            QuantizedWeights q =
                quantize_weights(TensorView::contiguous(w.data(), DType::kFp32, {1, R, C}), scheme);
            std::memcpy(data.ptr.get() + e * per, q.data.data(), static_cast<std::size_t>(per));
            scales[e] = std::move(q.scale);
            shapes[e] = q.scale_shape;
          }
        } catch (const std::exception& ex) {
          errors[t] = ex.what();
        }
      });
    }
    for (std::thread& th : pool) th.join();
    for (const std::string& err : errors)
      if (!err.empty()) throw Error(Status::kInternal, "quantize_weights failed: " + err);
    scale.clear();
    for (std::int64_t e = 0; e < E; ++e) {
      if (scale_per < 0) scale_per = static_cast<std::int64_t>(scales[e].size());
      scale.insert(scale.end(), scales[e].begin(), scales[e].end());
    }
    scale_shape = shapes.empty() ? std::vector<std::int64_t>{} : shapes[0];
    if (!scale_shape.empty()) scale_shape[0] = E;
  }

  FusedExpertsArgs expert_args() const {
    const MoeProblem& p = problem_;
    const std::int64_t E = p.num_experts, K = p.hidden_size, N = p.intermediate_size;
    FusedExpertsArgs a;
    a.scheme = p.scheme;
    a.activation = p.activation;
    a.weights.w13 = TensorView::contiguous(w13_.data(), wdtype_, {E, 2 * N, K});
    a.weights.w2 = TensorView::contiguous(w2_.data(), wdtype_, {E, K, N});
    if (p.scheme != Scheme::kBf16) {
      a.weights.w13_scale = TensorView::contiguous(s13_.data(), DType::kFp32, s13_shape_.data(),
                                                   static_cast<int>(s13_shape_.size()));
      a.weights.w2_scale = TensorView::contiguous(s2_.data(), DType::kFp32, s2_shape_.data(),
                                                  static_cast<int>(s2_shape_.size()));
    }
    if (!b13_.empty()) {
      a.weights.b13 = TensorView::contiguous(b13_.data(), DType::kBf16, {E, 2 * N});
      a.weights.b2 = TensorView::contiguous(b2_.data(), DType::kBf16, {E, K});
    }
    return a;
  }

  Config config_;
  int threads_ = 1;
  bool prepared_ = false;
  MoeProblem problem_;
  DType wdtype_ = DType::kBf16;
  Bytes w13_, w2_;
  std::vector<float> s13_, s2_;
  std::vector<std::int64_t> s13_shape_, s2_shape_;
  std::vector<std::uint16_t> b13_, b2_;
  std::vector<float> correction_;
};

}  // namespace

std::unique_ptr<Runner> make_cpu_runner(const Config& config) { return std::make_unique<CpuRunner>(config); }

}  // namespace moekit::bench
