// The one test harness of the grouped expert GEMM kernels (mma.sync grouped_gemm, Swap-AB,
// token-major: the same GroupedGemmParams contract): a random grouped problem (experts with the
// given row counts, slots drawn without repetition and ascending per expert, operands quantized
// per scheme with known scales) and a double-precision loop of docs/design.md's formula, both from
// tests/common/gemm_case.hpp (drawn once for runs of the same case in a row), the launch
// through a kernel-specific callback on NaN-poisoned output, and the check: every owned row
// against the reference with the shared comparator (tests/common/compare.hpp), every other
// element still holding its poison bytes, optionally a CUDA-graph replay equal to the eager run
// and the epilogue's absmax word (out_absmax) equal to the absmax of what it stored.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/compare.hpp"
#include "common/gemm_case.hpp"
#include "common/cuda_test.hpp"
#include "common/kernel_api.hpp"
#include "common/tolerance.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {

using cuda::GemmEpilogue;
using cuda::GroupedGemmParams;

/// The current device's fault record (for a launcher's params), and moekit::take_fault of it.
inline cuda::FaultRecord* kernel_fault_record() {
  int dev = 0;
  EXPECT_EQ(cudaSuccess, cudaGetDevice(&dev));
  return cuda::device_fault_record(dev);
}
inline bool take_kernel_fault(Fault* f) {
  Options o;
  o.backend = Backend::kCuda;
  return take_fault(f, o);
}
inline void clear_kernel_faults() { (void)take_kernel_fault(nullptr); }

/// What a run gave: the output as floats and bytes, and the tile counter after the launch.
struct GemmRun {
  std::vector<float> out;
  std::vector<std::uint8_t> raw;
  std::uint32_t counter = 0;
  std::uint32_t absmax = 0;  // the out_absmax word after the launch (0 without out_absmax)
};

/// Builds `c`, launches it with `launch(params, stream)` (which may ASSERT; a fatal failure
/// stops the run), checks the output and returns it (in *result when given).
template <class Launch>
void run_gemm_case(const GemmCase& c, Launch&& launch, GemmRun* result = nullptr) {
  using gemm_detail::act_value;
  SCOPED_TRACE(c.describe());
  const bool gate_up = c.gate_up();
  const bool fp8 = c.scheme != Scheme::kBf16;
  const int E = static_cast<int>(c.rows.size());
  const std::int64_t n_out = gate_up ? c.N : c.K;
  const std::int64_t k_dim = gate_up ? c.K : c.N;
  const int k = c.top_k;
  // The inputs and the reference (tests/common/gemm_case.hpp): drawn once for a case that the
  // previous run already drew.
  const std::shared_ptr<const GemmHostData> host = cached_gemm_host_data(c);
  const GemmHostData& h = *host;
  const std::vector<std::int32_t>& offsets = h.offsets;
  const std::vector<std::int32_t>& sorted_slots = h.sorted_slots;
  const std::vector<float>& topk_weights = h.topk_weights;
  const std::vector<float>& sorted_weights = h.sorted_weights;
  const std::int64_t P = h.P, S = h.S, max_rows = h.max_rows, out_rows = h.out_rows;
  const std::vector<double>& ref = h.ref;
  const std::vector<char>& owned = h.owned;

  // Device buffers; the output poisoned with 0xff bytes (NaN in fp32, bf16 and fp16).
  DeviceArena arena;
  const DType out_dtype = c.out_dtype;
  const std::size_t out_es = dtype_size(out_dtype);
  const std::size_t out_bytes = static_cast<std::size_t>(out_rows * n_out) * out_es;
  void* d_out = arena.alloc(out_bytes);
  CUDA_OK(cudaMemset(d_out, 0xff, out_bytes));
  std::uint32_t* d_counter = arena.upload(std::vector<std::uint32_t>(1, 0u));
  std::uint32_t* d_absmax = arena.upload(std::vector<std::uint32_t>(1, 0u));

  GroupedGemmParams p;
  p.scheme = c.scheme;
  p.epilogue = c.epilogue;
  p.num_experts = E;
  p.n_out = n_out;
  p.k_dim = k_dim;
  p.max_rows = max_rows;
  p.row_offsets = arena.upload(offsets);
  p.sorted_slots = arena.upload(sorted_slots);
  p.top_k = k;
  p.a = arena.upload(h.a_bytes);
  p.gather_a_by_token = gate_up;
  p.act_dtype = c.act_dtype;
  p.a_scale = fp8 ? arena.upload(h.a_scale) : nullptr;
  p.b = arena.upload(h.b_bytes);
  p.b_scale = fp8 ? arena.upload(h.b_scale) : nullptr;
  p.bias = c.bias ? static_cast<const void*>(arena.upload(h.bias_bytes)) : nullptr;
  p.bias_dtype = c.bias_dtype;
  p.topk_weights = c.weights == 2 ? nullptr : arena.upload(topk_weights);
  p.sorted_weights = c.weights == 0 ? nullptr : arena.upload(sorted_weights);
  p.weight_on_input = c.weight_on_input;
  p.activation.kind = c.act;
  p.out = d_out;
  p.out_dtype = out_dtype;
  if (c.tile_counter) p.tile_counter = d_counter;
  if (c.out_absmax) p.out_absmax = d_absmax;
  // The routing in the kernel (c.route): its tables poisoned (0xff) before the launch.
  std::int32_t* d_off_out = nullptr;
  std::int32_t* d_slots_out = nullptr;
  float* d_wts_out = nullptr;
  std::int64_t bad_slot = -1;
  if (c.route) {
    EXPECT_GE(max_rows, S) << "a routed case needs extra_rows >= its unrouted slots";
    if (max_rows < S) return;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(S), -1);
    for (int e = 0; e < E; ++e)
      for (int r = offsets[e]; r < offsets[e + 1]; ++r) ids[static_cast<std::size_t>(sorted_slots[r])] = e;
    std::vector<std::int32_t> map;  // route_map: global id g -> g below E, -1 for E and E + 1
    if (c.route_map) {
      map.assign(static_cast<std::size_t>(E + 2), -1);
      for (int e = 0; e < E; ++e) map[static_cast<std::size_t>(e)] = e;
      for (auto& id : ids)
        if (id < 0) id = E;  // remote
    }
    for (std::int64_t sl = 0; sl < S && bad_slot < 0; ++sl)
      if (ids[static_cast<std::size_t>(sl)] < 0 || ids[static_cast<std::size_t>(sl)] >= E) bad_slot = sl;
    if (bad_slot >= 0 && c.route_bad == 1) ids[static_cast<std::size_t>(bad_slot)] = E + 3;
    if (bad_slot >= 0 && c.route_bad == 2) {
      EXPECT_TRUE(c.route_map) << "route_bad = 2 needs route_map";
      ids[static_cast<std::size_t>(bad_slot)] = E + 1;
      map[static_cast<std::size_t>(E + 1)] = E + 7;
    }
    if (c.route_bad == 0) bad_slot = -1;
    d_off_out = static_cast<std::int32_t*>(arena.alloc((E + 1) * 4));
    d_slots_out = static_cast<std::int32_t*>(arena.alloc(static_cast<std::size_t>(S) * 4));
    d_wts_out = static_cast<float*>(arena.alloc(static_cast<std::size_t>(S) * 4));
    CUDA_OK(cudaMemset(d_off_out, 0xff, (E + 1) * 4));
    CUDA_OK(cudaMemset(d_slots_out, 0xff, static_cast<std::size_t>(S) * 4));
    CUDA_OK(cudaMemset(d_wts_out, 0xff, static_cast<std::size_t>(S) * 4));
    // Unread in route mode: poisoned, so that a read of them shows.
    std::int32_t* poisoned_off = static_cast<std::int32_t*>(arena.alloc((E + 1) * 4));
    std::int32_t* poisoned_slots = static_cast<std::int32_t*>(arena.alloc(sorted_slots.size() * 4));
    CUDA_OK(cudaMemset(poisoned_off, 0xff, (E + 1) * 4));
    CUDA_OK(cudaMemset(poisoned_slots, 0xff, sorted_slots.size() * 4));
    p.row_offsets = poisoned_off;
    p.sorted_slots = poisoned_slots;
    p.sorted_weights = nullptr;
    p.route.ids = arena.upload(ids);
    p.route.expert_map = c.route_map ? arena.upload(map) : nullptr;
    p.route.experts_global = c.route_map ? E + 2 : E;
    p.route.slots = S;
    p.route.offsets_out = d_off_out;
    p.route.sorted_slots_out = d_slots_out;
    p.route.sorted_weights_out = p.topk_weights != nullptr ? d_wts_out : nullptr;
    p.route.faults = kernel_fault_record();
    clear_kernel_faults();
  }

  cudaStream_t stream = nullptr;
  if (c.graph_replay) CUDA_OK(cudaStreamCreate(&stream));
  launch(p, stream);
  if (::testing::Test::HasFatalFailure()) return;
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaGetLastError());
  GemmRun run;
  run.raw = download<std::uint8_t>(d_out, out_bytes);
  run.counter = download<std::uint32_t>(d_counter, 1)[0];
  run.absmax = download<std::uint32_t>(d_absmax, 1)[0];
  if (c.route) {
    // The tables GEMM2 would read: exactly the host's (the routing launch's stable order).
    EXPECT_TRUE(download<std::int32_t>(d_off_out, E + 1) == offsets) << "route: the expert offsets differ";
    const std::vector<std::int32_t> slots_got = download<std::int32_t>(d_slots_out, static_cast<std::size_t>(S));
    const std::vector<float> wts_got = download<float>(d_wts_out, static_cast<std::size_t>(S));
    // Rows past the routed ones keep the poison (slot -1, weight bytes 0xff), as do all the
    // weights when the kernel is given no weights to copy.
    const float poison_wt = [] {
      float f;
      std::uint32_t b = 0xffffffffu;
      std::memcpy(&f, &b, 4);
      return f;
    }();
    std::int64_t wrong = 0;
    for (std::int64_t r = 0; r < S; ++r) {
      const std::size_t i = static_cast<std::size_t>(r);
      const bool routed = r < P;
      const std::int32_t want_slot = routed ? sorted_slots[i] : -1;
      const float want_wt = routed && p.topk_weights != nullptr ? sorted_weights[i] : poison_wt;
      const bool slot_ok = slots_got[i] == want_slot;
      const bool wt_ok = std::memcmp(&wts_got[i], &want_wt, 4) == 0;
      if ((!slot_ok || !wt_ok) && wrong++ < 5)
        ADD_FAILURE() << "route: sorted row " << r << " slot " << slots_got[i] << " (want " << want_slot << ")"
                      << (wt_ok ? "" : ", its router weight differs");
    }
    EXPECT_EQ(wrong, 0) << "route: sorted rows differ";
    Fault f;
    const bool faulted = take_kernel_fault(&f);
    if (bad_slot >= 0) {
      EXPECT_TRUE(faulted) << "route: the bad entry at slot " << bad_slot << " was not recorded";
      if (faulted) {
        EXPECT_EQ(f.tensor, c.route_bad == 1 ? FaultTensor::kTopkIds : FaultTensor::kExpertMap);
        EXPECT_EQ(f.row, bad_slot / k);
        EXPECT_EQ(f.slot, bad_slot % k);
        EXPECT_EQ(f.value, c.route_bad == 1 ? E + 3 : E + 7);
        if (c.route_bad == 2) EXPECT_EQ(f.expert, E + 1);
        EXPECT_EQ(f.bound, c.route_bad == 1 && c.route_map ? E + 2 : E);
      }
    } else {
      EXPECT_FALSE(faulted) << "route: a fault without a bad id: " << f.to_string();
    }
  }
  if (c.tile_counter && !c.counter_unused) {
    // The dynamic schedule ran: every CTA took at least one unit (its last, past the end), so the
    // counter moved (it would stay 0 if the launcher had dropped it).
    EXPECT_GT(run.counter, 0u) << "the dynamic schedule did not run";
  }

  if (c.graph_replay) {
    // Replay through a CUDA graph into a re-poisoned buffer, twice: bitwise equal to the eager run.
    CUDA_OK(cudaMemsetAsync(d_out, 0xff, out_bytes, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    // A dynamic schedule's counter is zeroed before every launch, as moekit's chain does (its
    // routing kernel or a memset), so each replay hands out every unit again.
    if (c.tile_counter) CUDA_OK(cudaMemsetAsync(d_counter, 0, sizeof(std::uint32_t), stream));
    launch(p, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(download<std::uint8_t>(d_out, out_bytes) == run.raw) << "CUDA-graph replay differs from the eager run";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }

  run.out.resize(static_cast<std::size_t>(out_rows * n_out));
  for (std::size_t i = 0; i < run.out.size(); ++i) {
    if (out_dtype == DType::kFp32) {
      std::memcpy(&run.out[i], &run.raw[i * 4], 4);
    } else {
      std::uint16_t b;
      std::memcpy(&b, &run.raw[i * 2], 2);
      run.out[i] = act_value(out_dtype, b);
    }
  }

  // Owned rows: row by row against the reference (NaN exactly where the reference is NaN);
  // every other element still holds the poison bytes.
  const Comparison cmp = compare_rows(run.out, ref, n_out, gemm_tolerance(c.scheme), owned);
  EXPECT_TRUE(cmp.ok) << cmp.message;
  std::int64_t stray = 0;
  for (std::int64_t r = 0; r < out_rows; ++r) {
    if (owned[r]) continue;
    for (std::int64_t n = 0; n < n_out; ++n) {
      const std::size_t i = static_cast<std::size_t>(r * n_out + n);
      const bool poisoned = std::all_of(run.raw.begin() + i * out_es, run.raw.begin() + (i + 1) * out_es,
                                        [](std::uint8_t b) { return b == 0xff; });
      if (!poisoned && stray++ < 5) ADD_FAILURE() << "element [" << r << ", " << n << "] is not owned but was written";
    }
  }
  EXPECT_EQ(stray, 0) << "elements written outside the routed rows";
  if (c.out_absmax) {
    // The absmax of the eager run's owned rows as stored (std::fmax skips NaN, as the kernels'
    // fmaxf does): the word must hold exactly its bits, a value the kernel computed but did not
    // store (a tail row or column) folded in would show as a larger word. A graph replay folds
    // the same values again, which leaves a max unchanged.
    float want = 0.0f;
    for (std::int64_t r = 0; r < out_rows; ++r)
      if (owned[r])
        for (std::int64_t n = 0; n < n_out; ++n) want = std::fmax(want, std::fabs(run.out[static_cast<std::size_t>(r * n_out + n)]));
    std::uint32_t want_bits = 0;
    std::memcpy(&want_bits, &want, 4);
    float got = 0.0f;
    std::memcpy(&got, &run.absmax, 4);
    EXPECT_EQ(run.absmax, want_bits) << "out_absmax word " << got << " (0x" << std::hex << run.absmax
                                     << "), absmax of the stored rows " << want << " (0x" << want_bits << ")";
  }
  if (result != nullptr) *result = std::move(run);
}

}  // namespace moekit::testing
