// The decode paths' phase timers: where one launch spends its time at preset shapes, printed per
// phase, and a check that the timer changes no result (bitwise equal to a run without it).
// decode (kernels/decode/params.hpp, PhaseWord): time per phase summed over a CTA's items, median
// and max over the CTAs that ran items. gemv (kernels/gemv/params.hpp, PhaseWord): each CTA's
// stamps; per phase the median and max over the CTAs of its duration, and when the last CTA
// reached each point, from the first CTA's entry. Label gpu; skipped without a Hopper GPU.
// docs/decode.md and docs/gemv.md quote its output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/kernel_api.hpp"
#include "cuda/kernels/expert_mlp/launch_sm90.hpp"
#include "cuda/kernels/expert_mlp/params.hpp"
#include "cuda/kernels/tokmajor/params.hpp"
#include "../../tools/bench/l2_flush.cuh"  // the benches' L2 flush
#include "moekit/moekit.hpp"

namespace moekit {
namespace {

// A hash of element i's index and the fill's seed: the fills' random bits.
__device__ __forceinline__ std::uint32_t fill_hash(std::int64_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__global__ void fill_bf16(__nv_bfloat16* x, std::int64_t n, std::uint32_t seed, float amp) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(fill_hash(i, seed) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
    x[i] = __float2bfloat16_rn(amp * (u == 0.0f ? 0.5f : u));
  }
}

// Random finite e4m3 bytes: the exponent field's lowest bit cleared, so it is at most 14 (no NaN).
__global__ void fill_e4m3(std::uint8_t* x, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<std::uint8_t>(fill_hash(i, seed) & 0xf7u);
}

struct Shape {
  const char* name;
  std::int64_t E, k, K, N, M;
  bool fp8 = false;  // fp8_per_tensor (random e4m3 weights, per-expert scales, dynamic activation scales)
};

void gemv_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::vector<std::uint16_t>& timed);
void expert_mlp_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::vector<std::uint16_t>& timed);
void tokmajor_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::int64_t touched,
                     std::vector<std::uint16_t>& timed, bool flush);

// One call of `s` on `path` (decode or gemv; bf16, or fp8_per_tensor where s.fp8; random weights
// and routing) with the phase timer on; prints the per-phase table and checks that the output
// equals, bit for bit, a call without the timer.
void phase_table(const Shape& s, const char* path = "decode", bool flush = true) {
  const std::int64_t E = s.E, k = s.k, K = s.K, N = s.N, M = s.M;
  const std::int64_t wes = s.fp8 ? 1 : 2;  // bytes of a weight
  __nv_bfloat16 *w13 = nullptr, *w2 = nullptr, *hidden = nullptr, *out = nullptr;
  std::int32_t* ids = nullptr;
  float *wts = nullptr, *scales = nullptr;  // fp8: w13_scale [E], then w2_scale [E]
  void* ws = nullptr;
  std::uint64_t* phases = nullptr;
  CUDA_OK(cudaMalloc(&w13, E * 2 * N * K * wes));
  CUDA_OK(cudaMalloc(&w2, E * K * N * wes));
  CUDA_OK(cudaMalloc(&hidden, M * K * 2));
  CUDA_OK(cudaMalloc(&out, M * K * 2));
  CUDA_OK(cudaMalloc(&ids, M * k * 4));
  CUDA_OK(cudaMalloc(&wts, M * k * 4));
  if (s.fp8) {
    fill_e4m3<<<1024, 256>>>(reinterpret_cast<std::uint8_t*>(w13), E * 2 * N * K, 1u);
    fill_e4m3<<<1024, 256>>>(reinterpret_cast<std::uint8_t*>(w2), E * K * N, 2u);
    const std::vector<float> h_scales(2 * E, 0.01f);
    CUDA_OK(cudaMalloc(&scales, 2 * E * 4));
    CUDA_OK(cudaMemcpy(scales, h_scales.data(), 2 * E * 4, cudaMemcpyHostToDevice));
  } else {
    fill_bf16<<<1024, 256>>>(w13, E * 2 * N * K, 1u, 0.05f);
    fill_bf16<<<1024, 256>>>(w2, E * K * N, 2u, 0.05f);
  }
  fill_bf16<<<256, 256>>>(hidden, M * K, 3u, 1.0f);
  CUDA_OK(cudaGetLastError());
  std::mt19937 rng(7);
  std::vector<std::int32_t> h_ids(M * k);
  std::vector<float> h_wts(M * k, 1.0f / static_cast<float>(k));
  for (std::int64_t m = 0; m < M; ++m) {
    std::vector<std::int32_t> perm(E);
    for (std::int64_t e = 0; e < E; ++e) perm[e] = static_cast<std::int32_t>(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::int64_t j = 0; j < k; ++j) h_ids[m * k + j] = perm[j];
  }
  CUDA_OK(cudaMemcpy(ids, h_ids.data(), M * k * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(wts, h_wts.data(), M * k * 4, cudaMemcpyHostToDevice));

  FusedExpertsArgs a;
  a.hidden = TensorView::contiguous(hidden, DType::kBf16, {M, K}, Device::cuda());
  const DType wdt = s.fp8 ? DType::kFp8E4m3 : DType::kBf16;
  a.weights.w13 = TensorView::contiguous(w13, wdt, {E, 2 * N, K}, Device::cuda());
  a.weights.w2 = TensorView::contiguous(w2, wdt, {E, K, N}, Device::cuda());
  if (s.fp8) {
    a.scheme = Scheme::kFp8PerTensor;
    a.weights.w13_scale = TensorView::contiguous(scales, DType::kFp32, {E}, Device::cuda());
    a.weights.w2_scale = TensorView::contiguous(scales + E, DType::kFp32, {E}, Device::cuda());
  }
  a.topk_ids = TensorView::contiguous(ids, DType::kInt32, {M, k}, Device::cuda());
  a.topk_weights = TensorView::contiguous(wts, DType::kFp32, {M, k}, Device::cuda());
  a.out = TensorView::contiguous(out, DType::kBf16, {M, K}, Device::cuda());
  Options o;
  o.path = path;
  o.workspace_bytes = workspace_size(describe(a));
  CUDA_OK(cudaMalloc(&ws, o.workspace_bytes));
  o.workspace = ws;

  fused_experts(a, o);  // warm-up, and the reference output without the timer
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> plain(M * K), timed(M * K);
  CUDA_OK(cudaMemcpy(plain.data(), out, M * K * 2, cudaMemcpyDeviceToHost));
  if (std::string(path) == "gemv" || std::string(path) == "tokmajor" || std::string(path) == "expert_mlp") {
    if (std::string(path) == "gemv") {
      gemv_phases(s, a, o, timed);
    } else if (std::string(path) == "expert_mlp") {
      expert_mlp_phases(s, a, o, timed);
    } else {
      std::vector<bool> hit(E, false);
      for (std::int32_t id : h_ids) hit[id] = true;
      tokmajor_phases(s, a, o, std::count(hit.begin(), hit.end(), true), timed, flush);
    }
    EXPECT_TRUE(plain == timed) << s.name << ": the phase timer changed the output";
    for (void* p : {static_cast<void*>(w13), static_cast<void*>(w2), static_cast<void*>(hidden), static_cast<void*>(out),
                    static_cast<void*>(ids), static_cast<void*>(wts), static_cast<void*>(scales), ws})
      cudaFree(p);
    return;
  }

  constexpr int kMaxCtas = 1024;
  const std::size_t words = static_cast<std::size_t>(kMaxCtas) * cuda::decode::kPhaseWords;
  CUDA_OK(cudaMalloc(&phases, words * 8));
  CUDA_OK(cudaMemset(phases, 0, words * 8));
  CUDA_OK(cudaMemset(out, 0xff, M * K * 2));  // NaN-poisoned: every element must be written again
  cuda::set_decode_phase_buffer(phases, kMaxCtas);
  fused_experts(a, o);
  CUDA_OK(cudaDeviceSynchronize());
  cuda::set_decode_phase_buffer(nullptr, 0);
  CUDA_OK(cudaMemcpy(timed.data(), out, M * K * 2, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(plain == timed) << s.name << ": the phase timer changed the output";

  std::vector<std::uint64_t> rec(words);
  CUDA_OK(cudaMemcpy(rec.data(), phases, words * 8, cudaMemcpyDeviceToHost));
  const char* names[] = {"prologue", "tokens", "gemm1", "exchange1", "activation", "convert", "gemm2"};
  constexpr int kNames = sizeof(names) / sizeof(names[0]);
  std::uint64_t t0 = ~std::uint64_t{0}, t1 = 0;
  int ctas = 0;
  std::vector<std::vector<double>> per(kNames);
  for (int c = 0; c < kMaxCtas; ++c) {
    const std::uint64_t* r = rec.data() + static_cast<std::size_t>(c) * cuda::decode::kPhaseWords;
    if (r[cuda::decode::kPhaseStart] == 0) continue;
    t0 = std::min(t0, r[cuda::decode::kPhaseStart]);
    t1 = std::max(t1, r[cuda::decode::kPhaseEnd]);
    if (r[cuda::decode::kPhaseItems] == 0) continue;
    ++ctas;
    for (int w = 0; w < kNames; ++w) per[w].push_back(static_cast<double>(r[w]) / 1000.0);
  }
  ASSERT_GT(ctas, 0) << s.name << ": no CTA recorded an item";
  std::printf("[ phases ] %s M=%lld: %d CTAs with items, first entry to last exit %.2f us\n", s.name,
              static_cast<long long>(M), ctas, static_cast<double>(t1 - t0) / 1000.0);
  for (int w = 0; w < kNames; ++w) {
    std::vector<double>& v = per[w];
    std::sort(v.begin(), v.end());
    std::printf("[ phases ]   %-10s median %7.2f us  max %7.2f us\n", names[w], v[v.size() / 2], v.back());
  }
  for (void* p : {static_cast<void*>(w13), static_cast<void*>(w2), static_cast<void*>(hidden), static_cast<void*>(out),
                  static_cast<void*>(ids), static_cast<void*>(wts), static_cast<void*>(scales), ws,
                  static_cast<void*>(phases)})
    cudaFree(p);
}

// How a timed call finds L2: flushed by reading (the benches' flush, tools/bench/l2_flush.cuh: the
// weights then come from HBM only), warmed by one untimed call of the same arguments (the weights
// and the code in L2, for a shape whose weights fit it), or as the work before left it.
enum class L2State { kFlushed, kWarmed, kAsLeft };

// One timed call of `a`: a zeroed phase buffer of `words` words handed to the kernels by
// `set(buffer)` (and `set(nullptr)` after), the output NaN-poisoned before and copied into
// `timed`; the stamps into `rec`. A CUDA failure is fatal (the caller checks HasFatalFailure).
template <class SetBuffer>
void timed_call(const Shape& s, const FusedExpertsArgs& a, Options o, std::size_t words, L2State l2, SetBuffer set,
                std::vector<std::uint16_t>& timed, std::vector<std::uint64_t>& rec) {
  std::uint64_t* phases = nullptr;
  void* flush_buf = nullptr;
  const std::size_t flush_bytes = std::size_t{128} << 20;  // over twice the H200's L2
  CUDA_OK(cudaMalloc(&phases, words * 8));
  CUDA_OK(cudaMemset(phases, 0, words * 8));
  // The output NaN-poisoned before the timed call (before the flush, so the flush leaves L2 cold;
  // again after a warming call), so an output row the timed kernel does not write shows.
  CUDA_OK(cudaMemset(a.out.data, 0xff, s.M * s.K * 2));
  if (l2 == L2State::kFlushed) {
    int sms = 0, value = 0;
    CUDA_OK(cudaMalloc(&flush_buf, flush_bytes));
    CUDA_OK(cudaMemset(flush_buf, 1, flush_bytes));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CUDA_OK(::flush_l2(nullptr, flush_buf, flush_bytes, /*write=*/false, &value, sms));
  } else if (l2 == L2State::kWarmed) {
    fused_experts(a, o);
    CUDA_OK(cudaMemset(a.out.data, 0xff, s.M * s.K * 2));
  }
  set(phases);
  fused_experts(a, o);
  const cudaError_t done = cudaDeviceSynchronize();
  set(nullptr);  // the timer off again before any check can return early
  CUDA_OK(done);
  CUDA_OK(cudaMemcpy(timed.data(), a.out.data, s.M * s.K * 2, cudaMemcpyDeviceToHost));
  rec.assign(words, 0);
  CUDA_OK(cudaMemcpy(rec.data(), phases, words * 8, cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(phases), flush_buf}) cudaFree(p);
}

// gemv: one timed call of `a`, output (NaN-poisoned before) into `timed`; prints the table.
void gemv_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::vector<std::uint16_t>& timed) {
  namespace gv = cuda::gemv;
  constexpr int kMaxCtas = 1024;
  const std::size_t words = static_cast<std::size_t>(kMaxCtas) * gv::kPhaseWords;
  std::vector<std::uint64_t> rec;
  timed_call(s, a, o, words, L2State::kAsLeft,
             [](std::uint64_t* b) { cuda::set_gemv_phase_buffer(b, b != nullptr ? kMaxCtas : 0); }, timed, rec);
  if (::testing::Test::HasFatalFailure()) return;
  const char* names[] = {"routed", "gemm1", "barrier", "staged", "gemm2"};
  constexpr int kPhases = sizeof(names) / sizeof(names[0]);
  std::uint64_t t0 = ~std::uint64_t{0};
  std::vector<const std::uint64_t*> stamped;  // the CTAs that stamped
  for (int c = 0; c < kMaxCtas; ++c) {
    const std::uint64_t* r = rec.data() + static_cast<std::size_t>(c) * gv::kPhaseWords;
    if (r[gv::kPhaseEntry] == 0) continue;
    stamped.push_back(r);
    t0 = std::min(t0, r[gv::kPhaseEntry]);
  }
  ASSERT_FALSE(stamped.empty()) << s.name << ": no CTA stamped";
  std::vector<std::vector<double>> dur(kPhases), reached(kPhases);
  std::vector<double> entry;
  for (const std::uint64_t* r : stamped) {
    entry.push_back(static_cast<double>(r[gv::kPhaseEntry] - t0) / 1000.0);
    for (int w = 0; w < kPhases; ++w) {
      EXPECT_GE(r[w + 1], r[w]) << s.name << " phase " << names[w];
      dur[w].push_back(static_cast<double>(r[w + 1] - r[w]) / 1000.0);
      reached[w].push_back(static_cast<double>(r[w + 1] - t0) / 1000.0);
    }
  }
  std::sort(entry.begin(), entry.end());
  std::printf("[ phases ] gemv (%s kernel) %s M=%lld: %zu CTAs, last entry %.2f us after the first\n",
              cuda::gemv_last_kernel(), s.name, static_cast<long long>(s.M), stamped.size(), entry.back());
  for (int w = 0; w < kPhases; ++w) {
    std::sort(dur[w].begin(), dur[w].end());
    std::sort(reached[w].begin(), reached[w].end());
    std::printf("[ phases ]   %-8s median %7.2f us  max %7.2f us   done by the last CTA at %7.2f us\n", names[w],
                dur[w][dur[w].size() / 2], dur[w].back(), reached[w].back());
  }
}

// expert_mlp: one timed call of `a` after an L2 read flush, output (NaN-poisoned before) into
// `timed`; each CTA's stamps (kernels/expert_mlp/params.hpp, PhaseWord): when the last CTA reached
// each point from the first entry, and per CTA the phases' sums over its units (median, max).
void expert_mlp_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::vector<std::uint16_t>& timed) {
  namespace em = cuda::expert_mlp;
  constexpr int kMaxCtas = 1024;
  const std::size_t words = static_cast<std::size_t>(kMaxCtas) * em::kPhaseWords;
  int clock_khz = 0;
  CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::vector<std::uint64_t> rec;
  timed_call(s, a, o, words, L2State::kFlushed,
             [](std::uint64_t* b) { cuda::set_expert_mlp_phase_buffer(b, b != nullptr ? kMaxCtas : 0); }, timed, rec);
  if (::testing::Test::HasFatalFailure()) return;
  std::uint64_t t0 = ~std::uint64_t{0};
  std::vector<const std::uint64_t*> ran;
  for (int c = 0; c < kMaxCtas; ++c) {
    const std::uint64_t* r = rec.data() + static_cast<std::size_t>(c) * em::kPhaseWords;
    if (r[em::kPhaseEntry] == 0) continue;
    t0 = std::min(t0, r[em::kPhaseEntry]);
    if (r[em::kPhaseUnits] > 0) ran.push_back(r);
  }
  ASSERT_FALSE(ran.empty()) << s.name << ": no CTA ran a unit";
  const auto stat = [](std::vector<double> v, const char* what) {
    std::sort(v.begin(), v.end());
    std::printf("[ phases ]   %-34s median %7.2f us  max %7.2f us\n", what, v[v.size() / 2], v.back());
  };
  const auto last = [&](int w, const char* what) {
    double m = 0;
    for (const std::uint64_t* r : ran) m = std::max(m, static_cast<double>(r[w] - t0) / 1000.0);
    std::printf("[ phases ]   %-34s reached by the last CTA at %7.2f us\n", what, m);
  };
  std::uint64_t units = 0;
  for (const std::uint64_t* r : ran) units = std::max(units, r[em::kPhaseUnits]);
  std::printf("[ phases ] expert_mlp %s M=%lld: %zu CTAs with units (at most %llu a CTA)\n", s.name,
              static_cast<long long>(s.M), ran.size(), static_cast<unsigned long long>(units));
  last(em::kPhaseRouted, "routed (tables built)");
  last(em::kPhaseFirstIssue, "first weights asked for");
  last(em::kPhaseFirstLanded, "first GEMM1 stage landed");
  last(em::kPhaseLastIssue, "producer's last stage issued");
  last(em::kPhaseExit, "consumers done");
  {  // when the CTAs with units finished: the rounds' tail (the stream's SMs falling idle)
    std::vector<double> done;
    for (const std::uint64_t* r : ran) done.push_back(static_cast<double>(r[em::kPhaseExit] - t0) / 1000.0);
    std::sort(done.begin(), done.end());
    const auto at = [&](double q) { return done[static_cast<std::size_t>(q * static_cast<double>(done.size() - 1))]; };
    std::printf("[ phases ]   %-34s 10 %% %7.2f  50 %% %7.2f  90 %% %7.2f us\n", "CTAs done by (from the first entry)",
                at(0.1), at(0.5), at(0.9));
  }
  {  // what a CTA streams: its units' share of the weights (3 N K elements an expert, over the S
     // ranks of a cluster) from its first GEMM1 stage landed to its end, and the whole call's
     // weight bytes from the first entry to the last CTA done (docs/perf.md "Session 73")
    const double S = em::slice_shape(static_cast<int>(s.N), s.fp8).slices;
    const double unit_bytes = 3.0 * static_cast<double>(s.N * s.K * (s.fp8 ? 1 : 2)) / S;
    std::vector<double> rate;
    double bytes = 0.0, end = 0.0;
    for (const std::uint64_t* r : ran) {
      const double b = static_cast<double>(r[em::kPhaseUnits]) * unit_bytes;
      rate.push_back(b / static_cast<double>(r[em::kPhaseExit] - r[em::kPhaseFirstLanded]));  // bytes / ns = GB/s
      bytes += b;
      end = std::max(end, static_cast<double>(r[em::kPhaseExit] - t0));
    }
    std::sort(rate.begin(), rate.end());
    std::printf("[ phases ]   %-34s median %7.1f GB/s  min %7.1f  max %7.1f; the call %.2f TB/s\n",
                "a CTA's weights (landed -> done)", rate[rate.size() / 2], rate.front(), rate.back(), bytes / end / 1000.0);
  }
  std::vector<double> v[10];
  for (const std::uint64_t* r : ran) {
    v[0].push_back(static_cast<double>(r[em::kPhaseRouted] - r[em::kPhaseEntry]) / 1000.0);
    v[1].push_back(static_cast<double>(r[em::kPhaseSumPlace]) / 1000.0);
    v[2].push_back(static_cast<double>(r[em::kPhaseSumGemm1]) / 1000.0);
    v[3].push_back(static_cast<double>(r[em::kPhaseSumAct]) / 1000.0);
    v[4].push_back(static_cast<double>(r[em::kPhaseSumGemm2]) / 1000.0);
    v[5].push_back(static_cast<double>(r[em::kPhaseProdSlotWait]) / 1000.0);
    v[6].push_back(static_cast<double>(r[em::kPhaseProdEmptyWait]) / static_cast<double>(clock_khz));  // cycles -> ms
    v[7].push_back(static_cast<double>(r[em::kPhaseG2Wait]) / static_cast<double>(clock_khz));
    v[8].push_back(static_cast<double>(r[em::kPhaseG2Mma]) / static_cast<double>(clock_khz));
    v[9].push_back(static_cast<double>(r[em::kPhaseG2Store]) / static_cast<double>(clock_khz));
  }
  stat(v[0], "routing (entry -> tables)");
  stat(v[1], "slot placement (sum)");
  stat(v[2], "GEMM1 incl. data waits (sum)");
  stat(v[3], "activation, h stored (sum)");
  stat(v[4], "GEMM2 tiles: waits, MMAs, stores (sum)");
  stat(v[5], "producer waiting for slots (sum)");
  for (double& x : v[6]) x *= 1000.0;  // ms -> us
  stat(v[6], "producer waiting for free stages (sum)");
  for (int i = 7; i < 10; ++i)
    for (double& x : v[i]) x *= 1000.0;
  stat(v[7], "GEMM2: waits for w2 (sum, thread 0)");
  stat(v[8], "GEMM2: MMAs, issue to wait (sum)");
  stat(v[9], "GEMM2: stores of y (sum)");
  // The per-tensor activation's steps (fp8_per_channel's activation leaves them 0).
  const char* act_steps[] = {"act: values + absmax (sum)", "act: unit absmax, ranks' exchange", "act: waiting for h_empty (sum)",
                             "act: h stores and pushes (sum)", "act: waiting for h_full (sum)"};
  for (int i = 0; i < 5; ++i) {
    std::vector<double> a;
    for (const std::uint64_t* r : ran) a.push_back(static_cast<double>(r[em::kPhaseActMath + i]) / 1000.0);
    stat(a, act_steps[i]);
  }
}

// tokmajor: one timed call of `a` (both GEMMs on the token-major kernel) after an L2 read flush,
// output (NaN-poisoned before) into `timed`; per launch, each CTA's stamps (kernels/tokmajor/
// params.hpp, PhaseWord): how long each CTA took from one point to the next (median, max over the
// CTAs that ran units) and when the last CTA reached each point, from the launch's first entry.
void tokmajor_phases(const Shape& s, const FusedExpertsArgs& a, Options o, std::int64_t touched,
                     std::vector<std::uint16_t>& timed, bool flush) {
  namespace tm = cuda::tokmajor;
  constexpr int kMaxCtas = 1024, kLaunches = 2;
  const std::size_t words = static_cast<std::size_t>(kMaxCtas) * kLaunches * tm::kPhaseWords;
  std::vector<std::uint64_t> rec;
  timed_call(s, a, o, words, flush ? L2State::kFlushed : L2State::kWarmed,
             [](std::uint64_t* b) {
               cuda::set_tokmajor_phase_buffer(b, b != nullptr ? kMaxCtas : 0, b != nullptr ? kLaunches : 0);
             },
             timed, rec);
  if (::testing::Test::HasFatalFailure()) return;

  // Points in the order a CTA reaches them (GEMM2's consumers stamp only their exit: a stamp in
  // its unit loop made them spill); the producer's last issue is printed on its own. With early
  // weights (MOEKIT_TOKMAJOR_EARLY) a CTA issues its first weights at the entry, before the table:
  // the early order, for the CTAs whose first issue came before their table.
  const std::vector<int> points[kLaunches] = {
      {tm::kPhaseEntry, tm::kPhaseTable, tm::kPhaseProducerStart, tm::kPhaseUnitFound, tm::kPhaseFirstIssue,
       tm::kPhaseFirstLanded, tm::kPhaseMmaDone, tm::kPhaseFirstStore, tm::kPhaseEpilogueDone, tm::kPhaseExit},
      {tm::kPhaseEntry, tm::kPhaseTable, tm::kPhaseProducerStart, tm::kPhaseUnitFound, tm::kPhaseFirstIssue,
       tm::kPhaseExit}};
  const std::vector<const char*> names[kLaunches] = {
      {"table", "setmaxnreg", "unit found", "first issue", "first landed", "MMAs done", "first pair", "epilogue",
       "next unit"},
      {"table", "setmaxnreg", "unit found", "first issue", "stream + exit"}};
  // The early order: the first issue moved to right after the entry (the step that ends at a
  // point carries its name).
  std::vector<int> early_points[kLaunches];
  std::vector<const char*> early_names[kLaunches];
  for (int l = 0; l < kLaunches; ++l) {
    early_points[l] = points[l];
    early_names[l] = names[l];
    const auto at = std::find(early_points[l].begin(), early_points[l].end(), tm::kPhaseFirstIssue);
    early_names[l].erase(early_names[l].begin() + (at - early_points[l].begin() - 1));
    early_points[l].erase(at);
    early_points[l].insert(early_points[l].begin() + 1, tm::kPhaseFirstIssue);
    early_names[l].insert(early_names[l].begin(), "early issue");
  }
  const char* gemm[] = {"GEMM1", "GEMM2"};
  const double wes = s.fp8 ? 1.0 : 2.0;  // bytes of a weight
  const double bytes[] = {static_cast<double>(touched * 2 * s.N * s.K) * wes, static_cast<double>(touched * s.K * s.N) * wes};
  for (int l = 0; l < kLaunches; ++l) {
    const std::uint64_t* base = rec.data() + static_cast<std::size_t>(l) * kMaxCtas * tm::kPhaseWords;
    std::uint64_t t0 = ~std::uint64_t{0}, t_end = 0;
    int ctas = 0, idle = 0;
    std::vector<const std::uint64_t*> busy;
    for (int c = 0; c < kMaxCtas; ++c) {
      const std::uint64_t* r = base + static_cast<std::size_t>(c) * tm::kPhaseWords;
      if (r[tm::kPhaseEntry] == 0) continue;
      ++ctas;
      t0 = std::min(t0, r[tm::kPhaseEntry]);
      t_end = std::max(t_end, r[tm::kPhaseExit]);
      if (r[tm::kPhaseUnits] == 0) ++idle;
      else busy.push_back(r);
    }
    ASSERT_FALSE(busy.empty()) << s.name << " " << gemm[l] << ": no CTA ran a unit";
    // The order of the first busy CTA; CTAs in the other one (with early weights, those whose
    // first unit is not a head unit) are left out of the table and counted.
    const auto is_early = [](const std::uint64_t* r) { return r[tm::kPhaseFirstIssue] < r[tm::kPhaseTable]; };
    const bool early = is_early(busy.front());
    const std::size_t all_busy = busy.size();
    busy.erase(std::remove_if(busy.begin(), busy.end(), [&](const std::uint64_t* r) { return is_early(r) != early; }),
               busy.end());
    const std::vector<int>& point = early ? early_points[l] : points[l];
    const std::vector<const char*>& name = early ? early_names[l] : names[l];
    const int steps = static_cast<int>(point.size()) - 1;
    std::vector<std::vector<double>> dur(steps), reached(steps);
    std::vector<double> entry, last_issue, units, consumer_start;
    for (const std::uint64_t* r : busy) {
      consumer_start.push_back(static_cast<double>(r[tm::kPhaseConsumerStart] - r[tm::kPhaseTable]) / 1000.0);
      entry.push_back(static_cast<double>(r[tm::kPhaseEntry] - t0) / 1000.0);
      last_issue.push_back(static_cast<double>(r[tm::kPhaseLastIssue] - t0) / 1000.0);
      units.push_back(static_cast<double>(r[tm::kPhaseUnits]));
      for (int w = 0; w < steps; ++w) {
        EXPECT_GE(r[point[w + 1]], r[point[w]]) << s.name << " " << gemm[l] << " " << name[w];
        dur[w].push_back(static_cast<double>(r[point[w + 1]] - r[point[w]]) / 1000.0);
        reached[w].push_back(static_cast<double>(r[point[w + 1]] - t0) / 1000.0);
      }
    }
    for (auto* v : {&entry, &last_issue, &units, &consumer_start}) std::sort(v->begin(), v->end());
    const double span = static_cast<double>(t_end - t0) / 1000.0;
    std::printf("[ phases ] tokmajor %s %s M=%lld: %d CTAs (%d without a unit), units a CTA %.0f-%.0f, "
                "first entry to last exit %.2f us (%.0f MB: %.2f TB/s); last entry %.2f us, last producer "
                "issue %.2f us; consumers past setmaxnreg %.2f us after the table (median)%s\n",
                gemm[l], s.name, static_cast<long long>(s.M), ctas, idle, units.front(), units.back(), span,
                bytes[l] / 1e6, bytes[l] / 1e6 / span, entry.back(), last_issue.back(),
                consumer_start[consumer_start.size() / 2], flush ? "" : "; L2 not flushed");
    if (busy.size() != all_busy)
      std::printf("[ phases ]   (%zu CTAs %s their table left out below)\n", all_busy - busy.size(),
                  early ? "with their first issue after" : "with early weights issued before");
    for (int w = 0; w < steps; ++w) {
      std::sort(dur[w].begin(), dur[w].end());
      std::sort(reached[w].begin(), reached[w].end());
      std::printf("[ phases ]   %-13s median %7.2f us  max %7.2f us   reached by the last CTA at %7.2f us\n",
                  name[w], dur[w][dur[w].size() / 2], dur[w].back(), reached[w].back());
    }
    // The static K-short GEMM2 (kshort/kernel_sm90.cuh) also sums where consumer warpgroup 0's
    // units went (its thread 0: warp 0, the epilogue's warp at <= 16 rows a unit) and the producer's
    // waits for a free stage: per unit of the warpgroup, median over the CTAs.
    if (l == 1 && busy.front()[tm::kPhaseKsData] != 0) {
      const int ks_words[] = {tm::kPhaseKsTop, tm::kPhaseKsData, tm::kPhaseKsMma, tm::kPhaseKsEpilogue};
      const char* ks_names[] = {"lookup + order barrier", "data waits", "MMAs + release", "epilogue"};
      std::vector<std::vector<double>> per(4);
      std::vector<double> free_wait;
      for (const std::uint64_t* r : busy) {
        const double wg0_units = static_cast<double>((r[tm::kPhaseUnits] + 1) / 2);
        for (int i = 0; i < 4; ++i) per[i].push_back(static_cast<double>(r[ks_words[i]]) / 1000.0 / wg0_units);
        free_wait.push_back(static_cast<double>(r[tm::kPhaseKsFree]) / 1000.0);
      }
      for (int i = 0; i < 4; ++i) {
        std::sort(per[i].begin(), per[i].end());
        std::printf("[ phases ]   kshort warpgroup 0, a unit: %-22s median %6.2f us  max %6.2f us\n", ks_names[i],
                    per[i][per[i].size() / 2], per[i].back());
      }
      std::sort(free_wait.begin(), free_wait.end());
      std::printf("[ phases ]   kshort producer waiting for free stages: median %6.2f us  max %6.2f us (whole launch)\n",
                  free_wait[free_wait.size() / 2], free_wait.back());
    }
  }
}

TEST(Sm90Decode, PhaseBreakdown) {
  SKIP_WITHOUT_SM90();
  // The resident clusters of each size the persistent grid is sized by (GPCs hold them).
  for (int c = 1; c <= 8; c *= 2)
    std::printf("[ phases ] clusters of %d resident at once: %d\n", c,
                cuda::decode::decode_max_active_clusters<cuda::decode::Operand::kBf16>(c));
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 1});
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 2});
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 4});
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 16});
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 64});
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 256});
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 1});
  phase_table({"deepseek-v3 TP8", 256, 8, 7168, 256, 1});
  phase_table({"qwen3-30b-a3b TP1", 128, 8, 2048, 768, 1});
  // A large item: 4 experts x 23 chunks of 128 columns of K = 2880 (the decode path at TP1 is
  // 1.3-2x slower than the chain there, 2026-12-02).
  phase_table({"gpt-oss-120b TP1 (no bias)", 128, 4, 2880, 2880, 1});
}

TEST(Sm90Gemv, PhaseBreakdown) {
  SKIP_WITHOUT_SM90();
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 1}, "gemv");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 8}, "gemv");
  phase_table({"qwen3-235b-a22b TP8", 128, 8, 4096, 192, 1}, "gemv");
  phase_table({"deepseek-v3 TP8", 256, 8, 7168, 256, 1}, "gemv");
  phase_table({"mixtral-8x7b TP8", 8, 2, 4096, 1792, 4}, "gemv");
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 1}, "gemv");
  phase_table({"qwen3-30b-a3b TP1", 128, 8, 2048, 768, 1}, "gemv");
  // fp8_per_tensor with dynamic scales (session 34: the one-launch skeleton's shapes,
  // docs/perf.md): the CUDA-core kernel at qwen3-30b, the tensor-core one at the larger shards.
  phase_table({"qwen3-30b-a3b TP8 fp8", 128, 8, 2048, 96, 1, true}, "gemv");
  phase_table({"qwen3-235b-a22b TP8 fp8", 128, 8, 4096, 192, 1, true}, "gemv");
  phase_table({"deepseek-v3 TP8 fp8", 256, 8, 7168, 256, 1, true}, "gemv");
}

// The token-major kernel at the TP8 shapes where it runs the call (docs/perf.md "Session 17").
TEST(Sm90Tokmajor, PhaseBreakdown) {
  SKIP_WITHOUT_SM90();
  phase_table({"mixtral-8x7b TP8", 8, 2, 4096, 1792, 64}, "tokmajor");
  phase_table({"qwen3-235b-a22b TP8", 128, 8, 4096, 192, 64}, "tokmajor");
  phase_table({"deepseek-v3 TP8", 256, 8, 7168, 256, 16}, "tokmajor");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 256}, "tokmajor");
  // fp8_per_tensor: GEMM2 on the static K-short kernel with 1 (qwen3-30b) and 2 (deepseek-v3) K
  // stages a unit, and its per-unit sums.
  phase_table({"qwen3-30b-a3b TP8 fp8", 128, 8, 2048, 96, 256, true}, "tokmajor");
  phase_table({"deepseek-v3 TP8 fp8", 256, 8, 7168, 256, 256, true}, "tokmajor");
  // 25 MB of weights: L2 holds them and the kernels' code across calls. Flushed, then not: what
  // the cold start of each phase costs.
  phase_table({"E=4 N=256 K=4096", 4, 2, 4096, 256, 64}, "tokmajor");
  phase_table({"E=4 N=256 K=4096", 4, 2, 4096, 256, 64}, "tokmajor", false);
}

// The tensor-core kernel (MOEKIT_GEMV_KERNEL=mma) at the sizes it was built for.
TEST(Sm90Gemv, MmaPhaseBreakdown) {
  SKIP_WITHOUT_SM90();
  setenv("MOEKIT_GEMV_KERNEL", "mma", 1);
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 1}, "gemv");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 8}, "gemv");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 32}, "gemv");
  phase_table({"qwen3-235b-a22b TP8", 128, 8, 4096, 192, 16}, "gemv");
  phase_table({"deepseek-v3 TP8", 256, 8, 7168, 256, 8}, "gemv");
  phase_table({"mixtral-8x7b TP8", 8, 2, 4096, 1792, 16}, "gemv");
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 1}, "gemv");
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 8}, "gemv");
  unsetenv("MOEKIT_GEMV_KERNEL");
}

// The per-expert MLP kernel (kernels/expert_mlp/) at qwen3-30b TP8, bf16 and fp8_per_tensor:
// where its ~60 µs go at M = 16..256 (docs/perf.md "Session 54": its time does not follow its
// bytes).
TEST(Sm90ExpertMlp, PhaseBreakdown) {
  SKIP_WITHOUT_SM90();
  // Few CTAs busy (M = 4 / 8: ~31 / ~52 units, one a CTA): what one CTA streams when most SMs
  // idle, against M = 64's 126 CTAs (docs/perf.md "Session 73": whether work items sized to the
  // resident CTAs would pay).
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 4}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 8}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 16}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 64}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8", 128, 8, 2048, 96, 256}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8 fp8", 128, 8, 2048, 96, 64, true}, "expert_mlp");
  phase_table({"qwen3-30b-a3b TP8 fp8", 128, 8, 2048, 96, 256, true}, "expert_mlp");
  // The cluster form (N = 192 on clusters of 2, N = 256 on clusters of 3; docs/design.md): each
  // rank's share, the h exchange inside the activation's time.
  phase_table({"qwen3-235b-a22b TP8", 128, 8, 4096, 192, 64}, "expert_mlp");
  phase_table({"qwen3-235b-a22b TP8 fp8", 128, 8, 4096, 192, 16, true}, "expert_mlp");  // ~88 units on 66 clusters: two rounds
  phase_table({"qwen3-235b-a22b TP8 fp8", 128, 8, 4096, 192, 64, true}, "expert_mlp");
  phase_table({"deepseek-v3 TP8 fp8", 256, 8, 7168, 256, 64, true}, "expert_mlp");
  // gpt-oss TP8 (N = 360 on clusters of 4; e4m3 with w2 as row pairs): bf16 reaches 1.01-1.13x of
  // BRIEF §4's target on this form, e4m3 1.30-1.52x (docs/perf.md "Session 70").
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 16}, "expert_mlp");
  phase_table({"gpt-oss-120b TP8 (no bias)", 128, 4, 2880, 360, 64}, "expert_mlp");
  phase_table({"gpt-oss-120b TP8 fp8 (no bias)", 128, 4, 2880, 360, 16, true}, "expert_mlp");
  phase_table({"gpt-oss-120b TP8 fp8 (no bias)", 128, 4, 2880, 360, 64, true}, "expert_mlp");
}

}  // namespace
}  // namespace moekit
