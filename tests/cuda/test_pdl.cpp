// Programmatic dependent launch (src/cuda/common/pdl.cuh) changes when the kernels of a call start,
// never what they compute: the whole op with PDL on (MOEKIT_PDL unset or 1) and off (MOEKIT_PDL=0)
// gives bitwise identical outputs, eager and under CUDA-graph replay, on every GEMM path forced
// by name, bf16 and fp8_per_tensor, decode and prefill token counts (label gpu; skipped without
// a Hopper GPU). Two input sets alternate between calls on one workspace, so a kernel that read
// memory before the kernel it depends on wrote it (a missing or misplaced griddepcontrol.wait)
// would see the other set's intermediates and differ.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/moe_case.hpp"
#include "cuda/common/pdl.cuh"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

enum class Mode { kFusedExperts, kFusedMoe };

constexpr std::uint16_t kPoison = 0xffff;  // out is memset to 0xff bytes: a bf16 NaN

// One case on the GPU. Weights are uploaded once; the per-call inputs (hidden, router logits,
// topk ids and weights) come in three sets: 0 and 1 from two seeds, 2 the buffers a captured
// graph reads, which load() fills from set 0 or 1 before a replay. Two outputs, one workspace
// sized for the case's M (calls run on prefixes of M tokens).
class PdlCase {
 public:
  PdlCase(const MoeCase& a, const MoeCase& b) : spec_(a.spec) {
    const FusedExpertsArgs h = a.host_args(nullptr);
    base_ = h;
    upload_shared_operands(base_, [this](const TensorView& v) { return arena_.upload(v); });
    if (!a.correction_bias.empty())
      bias_ = arena_.upload(TensorView::contiguous(a.correction_bias.data(), DType::kFp32, {a.E_global}));
    const MoeCase* src[3] = {&a, &b, &a};
    for (int s = 0; s < 3; ++s) {
      const FusedExpertsArgs hs = src[s]->host_args(nullptr);
      in_[s].hidden = arena_.upload(hs.hidden);
      in_[s].ids = arena_.upload(hs.topk_ids);
      in_[s].wts = arena_.upload(hs.topk_weights);
      in_[s].logits = arena_.upload(TensorView::contiguous(src[s]->router_logits.data(), DType::kFp32,
                                                    {spec_.M, a.E_global}));
    }
    for (TensorView& o : out_) o = arena_.alloc_like(h.out);
    for (Mode mode : {Mode::kFusedExperts, Mode::kFusedMoe}) {
      const MoeProblem p = mode == Mode::kFusedMoe ? describe(moe_args(spec_.M, 0, 0)) : describe(experts_args(spec_.M, 0, 0));
      ws_bytes_ = std::max(ws_bytes_, workspace_size(p, Backend::kCuda));
    }
    ws_ = dev_alloc(ws_bytes_);
  }

  // The router's plan for that call ("fused", "gemv", "decode", "gemm1=... gemm2=...").
  std::string plan(std::int64_t M, Mode mode, const char* path) {
    Options o;
    o.backend = Backend::kCuda;
    o.path = path;
    return describe_dispatch(mode == Mode::kFusedMoe ? describe(moe_args(M, 0, 0)) : describe(experts_args(M, 0, 0)), o);
  }

  // Enqueues one call of the first M tokens of input set `set`, writing output `out`.
  void enqueue(std::int64_t M, Mode mode, int set, int out, const char* path, cudaStream_t stream) {
    Options o;
    o.backend = Backend::kCuda;
    o.stream = stream;
    o.path = path;
    o.workspace = ws_.get();
    o.workspace_bytes = ws_bytes_;
    if (mode == Mode::kFusedMoe)
      fused_moe(moe_args(M, set, out), o);
    else
      fused_experts(experts_args(M, set, out), o);
  }

  void poison(int out, cudaStream_t stream) {
    EXPECT_EQ(cudaSuccess, cudaMemsetAsync(out_[out].data, 0xff, view_bytes(out_[out]), stream));
  }

  // Copies input set `set` into set 2 (what the captured graph reads), on `stream`.
  void load(int set, cudaStream_t stream) {
    for (TensorView Inputs::*t : {&Inputs::hidden, &Inputs::ids, &Inputs::wts, &Inputs::logits})
      EXPECT_EQ(cudaSuccess, cudaMemcpyAsync((in_[2].*t).data, (in_[set].*t).data, view_bytes(in_[set].*t),
                                             cudaMemcpyDeviceToDevice, stream));
  }

  // Waits for `stream` and returns the first M rows of output `out` as bits.
  std::vector<std::uint16_t> fetch(std::int64_t M, int out, cudaStream_t stream) {
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(M * spec_.K));
    EXPECT_EQ(cudaSuccess, cudaMemcpy(bits.data(), out_[out].data, bits.size() * 2, cudaMemcpyDeviceToHost));
    return bits;
  }

 private:
  struct Inputs {
    TensorView hidden, ids, wts, logits;
  };

  FusedExpertsArgs experts_args(std::int64_t M, int set, int out) const {
    FusedExpertsArgs a = base_;
    a.hidden = in_[set].hidden;
    a.topk_ids = in_[set].ids;
    a.topk_weights = in_[set].wts;
    a.out = out_[out];
    for (TensorView* v : {&a.hidden, &a.topk_ids, &a.topk_weights, &a.out}) v->shape[0] = M;
    return a;
  }
  // Routing on the GPU from the logits; its topk outputs stay in the workspace.
  FusedMoeArgs moe_args(std::int64_t M, int set, int out) const {
    FusedMoeArgs m;
    m.router_logits = in_[set].logits;
    m.router_logits.shape[0] = M;
    m.routing = spec_.routing;
    m.routing.top_k = static_cast<int>(spec_.k);
    m.e_score_correction_bias = bias_;
    m.experts = experts_args(M, set, out);
    m.experts.topk_ids = TensorView();
    m.experts.topk_weights = TensorView();
    return m;
  }

  CaseSpec spec_;
  DeviceArena arena_;
  FusedExpertsArgs base_;
  TensorView bias_;
  Inputs in_[3];
  TensorView out_[2];
  DevPtr ws_;
  std::size_t ws_bytes_ = 0;
};

// Edges of `graph` that are programmatic (what a PDL launch becomes under stream capture), and
// its kernel nodes.
void count_graph(cudaGraph_t graph, std::size_t* programmatic, std::size_t* kernels) {
  *programmatic = *kernels = 0;
  std::size_t num_edges = 0, num_nodes = 0;
  ASSERT_EQ(cudaSuccess, cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &num_edges));
  std::vector<cudaGraphNode_t> from(num_edges), to(num_edges);
  std::vector<cudaGraphEdgeData> data(num_edges);
  if (num_edges > 0)
    ASSERT_EQ(cudaSuccess, cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &num_edges));
  for (const cudaGraphEdgeData& d : data)
    if (d.type == cudaGraphDependencyTypeProgrammatic) ++*programmatic;
  ASSERT_EQ(cudaSuccess, cudaGraphGetNodes(graph, nullptr, &num_nodes));
  std::vector<cudaGraphNode_t> nodes(num_nodes);
  if (num_nodes > 0) ASSERT_EQ(cudaSuccess, cudaGraphGetNodes(graph, nodes.data(), &num_nodes));
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type{};
    ASSERT_EQ(cudaSuccess, cudaGraphNodeGetType(n, &type));
    if (type == cudaGraphNodeTypeKernel) ++*kernels;
  }
}

// For one (mode, path, M): both input sets with PDL off, one call at a time (the expected bits);
// then with PDL on, eager back to back on one workspace and stream, and a graph captured with PDL
// on replayed on alternating input sets, its output poisoned before each replay.
void check_on_off(PdlCase& d, Mode mode, const char* path, std::int64_t M, cudaStream_t stream) {
  std::vector<std::uint16_t> want[2];
  {
    ScopedEnv off("MOEKIT_PDL", "0");
    for (int s = 0; s < 2; ++s) {
      d.poison(s, stream);
      d.enqueue(M, mode, s, s, path, stream);
      want[s] = d.fetch(M, s, stream);
      ASSERT_EQ(0, std::count(want[s].begin(), want[s].end(), kPoison)) << "PDL off, set " << s << ": out not written";
    }
    ASSERT_NE(want[0], want[1]) << "the two input sets give the same output: the test would not see stale reads";
  }
  ScopedEnv on("MOEKIT_PDL", "1");

  // Eager: set 0 then set 1, each into its own output, enqueued back to back on one workspace:
  // the second call's routing rewrites the offsets and slots the first call's kernels read.
  d.poison(0, stream);
  d.poison(1, stream);
  d.enqueue(M, mode, 0, 0, path, stream);
  d.enqueue(M, mode, 1, 1, path, stream);
  EXPECT_TRUE(d.fetch(M, 0, stream) == want[0]) << "eager PDL on, set 0 differs from PDL off";
  EXPECT_TRUE(d.fetch(M, 1, stream) == want[1]) << "eager PDL on, set 1 differs from PDL off";

  // Graph: one call on set 2 into output 0, captured with PDL on.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    d.enqueue(M, mode, 2, 0, path, stream);
  } catch (const Error& e) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    FAIL() << "call under capture threw: " << e.what();
  }
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  std::size_t programmatic = 0, kernels = 0;
  count_graph(graph, &programmatic, &kernels);
  // Every launch after routing's first is a programmatic dependent of the one before it. The
  // single-launch paths have nothing to chain: fused (its own routing) one kernel, gemv (either
  // kernel) one cooperative kernel (after the routing launch in fused_moe mode), whichever way they were
  // chosen (auto at few slots, docs/router.md, or forced).
  const std::string plan = d.plan(M, mode, path);
  const bool gemv = plan == "gemv" || plan == "gemv(mma)";
  if (plan == "fused" || gemv) {
    EXPECT_EQ(kernels, gemv && mode == Mode::kFusedMoe ? 2u : 1u) << plan;
    EXPECT_EQ(programmatic, 0u) << plan;
  } else if (M > cuda::kPdlMaxTokens || std::string(path) == "tokmajor") {
    // Larger calls and token-major GEMMs launch without PDL (measured to lose: cuda/common/pdl.cuh).
    EXPECT_GT(kernels, 2u);
    EXPECT_EQ(programmatic, 0u);
  } else {
    EXPECT_GT(kernels, 2u);
    EXPECT_EQ(programmatic, kernels - 1) << "programmatic edges in the captured graph: " << programmatic << " of "
                                         << kernels << " kernel nodes";
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 4; ++replay) {
    const int set = replay % 2 == 0 ? 1 : 0;  // set 2 holds set 0's inputs from the construction
    d.load(set, stream);
    d.poison(0, stream);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    EXPECT_TRUE(d.fetch(M, 0, stream) == want[set]) << "graph replay " << replay << " (set " << set
                                                    << ") differs from PDL off";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The GEMM paths forced by name (Options::path), and auto.
const char* const kPaths[] = {"auto", "mma", "swapab", "tokmajor"};

// A model preset shrunk to test size: its routing, k, activation and bias; E capped; K and N
// small enough for a quick case, multiples of 16 bytes so that every path runs it. Decode M = 1
// and 5 (Swap-AB splits K over a cluster there), prefill M = 600 (fused_moe routes on a grid
// and permutes in a second launch above 512 tokens; with k = 8, 4800 slots, the permutation runs
// on a count grid that routes and a scatter grid instead; dynamic fp8 quantization takes two
// launches above 32 K elements).
void check_preset(const char* name, std::int64_t E, std::int64_t K, std::int64_t N, Scheme scheme) {
  // PDL chains the multi-launch path's kernels: auto must not take the single-launch decode path,
  // nor the per-expert MLP path (one kernel and the combine; auto's from 32 slots in bf16 since
  // 97905be, so qwen3-30b's M = 5).
  ScopedEnv no_decode("MOEKIT_DECODE", "0");
  ScopedEnv no_expert_mlp("MOEKIT_EXPERT_MLP", "0");
  const ModelPreset& pr = find_preset(name);
  CaseSpec s;
  s.M = 600;
  s.E = E;
  s.k = pr.top_k;
  s.K = K;
  s.N = N;
  s.routing = pr.routing;
  if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk && s.E < pr.num_experts) s.routing.num_groups = 4;
  s.activation = pr.activation;
  s.bias = pr.has_bias;
  s.scheme = scheme;
  s.seed = 21;
  const MoeCase a = make_case(s);
  s.seed = 22;
  const MoeCase b = make_case(s);
  PdlCase d(a, b);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const char* path : kPaths)
    for (Mode mode : {Mode::kFusedMoe, Mode::kFusedExperts})
      for (std::int64_t M : {1, 5, 600}) {
        SCOPED_TRACE(std::string(name) + " " + scheme_name(scheme) + " path=" + path + " M=" + std::to_string(M) +
                     (mode == Mode::kFusedMoe ? " fused_moe" : " fused_experts"));
        try {
          check_on_off(d, mode, path, M, stream);
        } catch (const Error& e) {
          ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
        }
      }
  cudaStreamDestroy(stream);
}

TEST(Sm90Pdl, OnOffBitwiseEqualQwen3Bf16) {
  SKIP_WITHOUT_SM90();
  check_preset("qwen3-30b-a3b", 32, 1024, 96, Scheme::kBf16);
}

TEST(Sm90Pdl, OnOffBitwiseEqualQwen3Fp8PerTensor) {
  SKIP_WITHOUT_SM90();
  check_preset("qwen3-30b-a3b", 32, 1024, 96, Scheme::kFp8PerTensor);
}

TEST(Sm90Pdl, OnOffBitwiseEqualMixtralBf16) {
  SKIP_WITHOUT_SM90();
  check_preset("mixtral-8x7b", 8, 512, 256, Scheme::kBf16);
}

TEST(Sm90Pdl, OnOffBitwiseEqualMixtralFp8PerTensor) {
  SKIP_WITHOUT_SM90();
  check_preset("mixtral-8x7b", 8, 512, 256, Scheme::kFp8PerTensor);
}

// The decode path's fp8 split call chains three launches with PDL (kUp, kDown, the combine;
// docs/decode.md): on and off give the same bits, K large enough for clusters of 2..8 at M = 1
// (qwen3-30b at TP8: K = 2048, N = 96).
TEST(Sm90Pdl, OnOffBitwiseEqualDecodeFp8SplitCall) {
  SKIP_WITHOUT_SM90();
  const ModelPreset& pr = find_preset("qwen3-30b-a3b");
  CaseSpec s;
  s.M = 8;
  s.E = 32;
  s.k = pr.top_k;
  s.K = 2048;
  s.N = 96;
  s.routing = pr.routing;
  s.activation = pr.activation;
  s.scheme = Scheme::kFp8PerTensor;
  s.seed = 23;
  const MoeCase a = make_case(s);
  s.seed = 24;
  const MoeCase b = make_case(s);
  PdlCase d(a, b);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (std::int64_t M : {1, 2, 8}) {
    SCOPED_TRACE("decode fp8 split call M=" + std::to_string(M));
    try {
      check_on_off(d, Mode::kFusedExperts, "decode", M, stream);
    } catch (const Error& e) {
      ADD_FAILURE() << status_name(e.status()) << ": " << e.what();
    }
  }
  cudaStreamDestroy(stream);
}

// MOEKIT_PDL=0 captures no programmatic edge: the switch reaches every launch.
TEST(Sm90Pdl, SwitchOffCapturesNoProgrammaticEdge) {
  SKIP_WITHOUT_SM90();
  CaseSpec s;
  s.M = 4;
  s.E = 8;
  s.k = 2;
  s.K = 256;
  s.N = 128;
  s.scheme = Scheme::kFp8PerTensor;
  const MoeCase a = make_case(s);
  PdlCase d(a, a);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const char* path : kPaths) {
    SCOPED_TRACE(path);
    ScopedEnv off("MOEKIT_PDL", "0");
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      d.enqueue(s.M, Mode::kFusedMoe, 2, 0, path, stream);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    std::size_t programmatic = 0, kernels = 0;
    count_graph(graph, &programmatic, &kernels);
    // auto runs this small shard (N = 128, 8 slots) as the single fused launch.
    if (std::string(path) != "auto") EXPECT_GT(kernels, 2u);
    EXPECT_EQ(0u, programmatic);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace moekit::testing
