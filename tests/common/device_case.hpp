// A MoeCase on the GPU for the end-to-end suites (Sm90FusedMoe, Sm90Fuzz, ...): its tensors
// uploaded once, calls on the first M tokens through the public API with a forced path, outputs
// NaN-poisoned before every call, and the CPU reference of a prefix of the tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/moe_case.hpp"

namespace moekit::testing {

enum class CallMode { kFusedExperts, kFusedMoe };
inline const char* call_mode_name(CallMode m) { return m == CallMode::kFusedMoe ? "fused_moe" : "fused_experts"; }

// One case's tensors on the GPU (uploaded once); calls view the first M rows.
class DeviceCase {
 public:
  explicit DeviceCase(const MoeCase& c) : spec_(c.spec) {
    host_out_.resize(static_cast<std::size_t>(c.spec.M * c.spec.K));
    const FusedExpertsArgs h = c.host_args(host_out_.data());
    args_ = h;
    upload_shared_operands(args_, [this](const TensorView& v) { return arena_.upload(v); });
    args_.hidden = arena_.upload(h.hidden);
    args_.topk_ids = arena_.upload(h.topk_ids);
    args_.topk_weights = arena_.upload(h.topk_weights);
    args_.out = arena_.alloc_like(h.out);
    logits_ = arena_.upload(TensorView::contiguous(c.router_logits.data(), DType::kFp32, {c.spec.M, c.E_global}));
    if (!c.correction_bias.empty())
      bias_ = arena_.upload(TensorView::contiguous(c.correction_bias.data(), DType::kFp32, {c.E_global}));
    ids_out_ = arena_.alloc_like(h.topk_ids);
    wts_out_ = arena_.alloc_like(h.topk_weights);
    // Pageable uploads on the legacy stream may still be in flight when cudaMemcpy returns; a
    // cudaStreamNonBlocking stream would not wait for them.
    EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
  }

  const CaseSpec& spec() const { return spec_; }

  // The call's arguments for the first M tokens.
  FusedExpertsArgs experts(std::int64_t M) const {
    FusedExpertsArgs a = args_;
    for (TensorView* v : {&a.hidden, &a.topk_ids, &a.topk_weights, &a.out}) v->shape[0] = M;
    return a;
  }
  // fused_moe for the first M tokens: routed from the logits in the call; the routing goes to
  // the ids / weights output buffers (read back by fetch).
  FusedMoeArgs moe(std::int64_t M) const {
    FusedMoeArgs a;
    a.router_logits = logits_;
    a.router_logits.shape[0] = M;
    a.routing = spec_.routing;
    a.routing.top_k = static_cast<int>(spec_.k);
    a.e_score_correction_bias = bias_;
    a.experts = experts(M);
    a.experts.topk_ids = ids_out_;
    a.experts.topk_weights = wts_out_;
    a.experts.topk_ids.shape[0] = M;
    a.experts.topk_weights.shape[0] = M;
    return a;
  }

  // Run one call on `stream` with Options::path = `path` (out NaN-poisoned first) and return
  // out's bits; ids / weights of the GPU routing too in kFusedMoe mode. Throws what the call throws.
  std::vector<std::uint16_t> run(std::int64_t M, CallMode mode, const std::string& path, cudaStream_t stream = nullptr,
                                 std::vector<std::int32_t>* ids = nullptr, std::vector<float>* wts = nullptr) {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    o.path = path.c_str();
    prepare(M, mode, o);
    if (mode == CallMode::kFusedMoe)
      fused_moe(moe(M), o);
    else
      fused_experts(experts(M), o);
    return fetch(M, stream, ids, wts);
  }

  // One call captured in a CUDA graph on `stream` (Options::path = `path`) and replayed `replays`
  // times, out NaN-poisoned before each replay: each replay's out bits. A call that throws under
  // capture fails the test and gives no replay.
  // With poison_ws the whole workspace is filled with 0xff before each replay.
  std::vector<std::vector<std::uint16_t>> replay_in_graph(std::int64_t M, CallMode mode, const std::string& path,
                                                          cudaStream_t stream, int replays, bool poison_ws = false) {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    o.path = path.c_str();
    prepare(M, mode, o);  // poisons out (before the capture) and sizes the workspace
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaSuccess, cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      if (mode == CallMode::kFusedMoe)
        fused_moe(moe(M), o);
      else
        fused_experts(experts(M), o);
    } catch (const Error& e) {
      cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      ADD_FAILURE() << call_mode_name(mode) << " under capture threw: " << e.what();
      return {};
    }
    EXPECT_EQ(cudaSuccess, cudaStreamEndCapture(stream, &graph));
    EXPECT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));
    std::vector<std::vector<std::uint16_t>> outs;
    for (int r = 0; r < replays; ++r) {
      EXPECT_EQ(cudaSuccess, cudaMemsetAsync(args_.out.data, 0xff, static_cast<std::size_t>(M * spec_.K) * 2, stream));
      if (poison_ws) EXPECT_EQ(cudaSuccess, cudaMemsetAsync(ws_.get(), 0xff, ws_bytes_, stream));
      EXPECT_EQ(cudaSuccess, cudaGraphLaunch(exec, stream));
      outs.push_back(fetch(M, stream));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return outs;
  }

  // Size the workspace for a call of M tokens (as run() does) and fill all of it with 0xff bytes:
  // what the next call reads there must be what it wrote, not a previous call's leftovers.
  void poison_workspace(std::int64_t M, CallMode mode, cudaStream_t stream = nullptr) {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    prepare(M, mode, o);  // sizes the workspace (and poisons out, which the call poisons again)
    EXPECT_EQ(cudaSuccess, cudaMemsetAsync(ws_.get(), 0xff, ws_bytes_, stream));
  }

  // Poison out (and the routing outputs) and make sure the workspace is big enough.
  void prepare(std::int64_t M, CallMode mode, Options& o) {
    const MoeProblem p = mode == CallMode::kFusedMoe ? describe(moe(M)) : describe(experts(M));
    const std::size_t need = workspace_size(p, Backend::kCuda);
    if (need > ws_bytes_) {
      ws_ = dev_alloc(need);
      ws_bytes_ = need;
    }
    o.workspace = ws_.get();
    o.workspace_bytes = ws_bytes_;
    const cudaStream_t s = static_cast<cudaStream_t>(o.stream);
    EXPECT_EQ(cudaSuccess, cudaMemsetAsync(args_.out.data, 0xff, static_cast<std::size_t>(M * spec_.K) * 2, s));
    if (mode == CallMode::kFusedMoe) {
      EXPECT_EQ(cudaSuccess, cudaMemsetAsync(ids_out_.data, 0xff, static_cast<std::size_t>(M * spec_.k) * 4, s));
      EXPECT_EQ(cudaSuccess, cudaMemsetAsync(wts_out_.data, 0xff, static_cast<std::size_t>(M * spec_.k) * 4, s));
    }
  }

  std::vector<std::uint16_t> fetch(std::int64_t M, cudaStream_t stream, std::vector<std::int32_t>* ids = nullptr,
                                   std::vector<float>* wts = nullptr) {
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
    std::vector<std::uint16_t> bits = download<std::uint16_t>(args_.out.data, static_cast<std::size_t>(M * spec_.K));
    if (ids != nullptr) *ids = download<std::int32_t>(ids_out_.data, static_cast<std::size_t>(M * spec_.k));
    if (wts != nullptr) *wts = download<float>(wts_out_.data, static_cast<std::size_t>(M * spec_.k));
    return bits;
  }

 private:
  CaseSpec spec_;
  std::vector<std::uint16_t> host_out_;
  DeviceArena arena_;
  FusedExpertsArgs args_;
  TensorView logits_, bias_, ids_out_, wts_out_;
  DevPtr ws_;
  std::size_t ws_bytes_ = 0;
};

// The CPU reference of rows [m0, m1) of `c` alone (a case of its own; equal to those rows of the
// full case when tokens are independent, or always when m0 == 0 and the scales are per token).
inline std::vector<float> reference_rows(MoeCase& c, std::int64_t m0, std::int64_t m1) {
  const CaseSpec saved_spec = c.spec;
  std::vector<std::uint16_t> hidden;
  std::vector<float> logits, wts;
  std::vector<std::int32_t> ids;
  hidden.swap(c.hidden);
  logits.swap(c.router_logits);
  ids.swap(c.topk_ids);
  wts.swap(c.topk_weights);
  const std::int64_t K = c.spec.K, k = c.spec.k, Eg = c.E_global;
  c.spec.M = m1 - m0;
  c.hidden.assign(hidden.begin() + m0 * K, hidden.begin() + m1 * K);
  c.router_logits.assign(logits.begin() + m0 * Eg, logits.begin() + m1 * Eg);
  c.topk_ids.assign(ids.begin() + m0 * k, ids.begin() + m1 * k);
  c.topk_weights.assign(wts.begin() + m0 * k, wts.begin() + m1 * k);
  std::vector<float> ref = reference_output(c);
  c.spec = saved_spec;
  c.hidden.swap(hidden);
  c.router_logits.swap(logits);
  c.topk_ids.swap(ids);
  c.topk_weights.swap(wts);
  return ref;
}

}  // namespace moekit::testing
