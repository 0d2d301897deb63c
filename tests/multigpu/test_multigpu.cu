// The real collectives (label multigpu): tensor-parallel all-reduce and expert-parallel
// all-to-all across every visible GPU, one thread per GPU over communicators from
// ncclCommInitAll, outputs compared with the single-GPU op. Skipped with fewer than 2 Hopper GPUs
// or without NCCL. Run with NCCL_NVLS_ENABLE=0 (ctest sets it): NVLink multicast stays off.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/compare.hpp"
#include "common/moe_case.hpp"
#include "common/tolerance.hpp"
#include "moekit/moekit.hpp"
#include "moekit/parallel.hpp"

namespace moekit::testing {
namespace {

using i64 = std::int64_t;

int visible_hopper_gpus(std::string* why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  int hopper = 0;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess && prop.major == 9) ++hopper;
  }
  if (hopper < 2) *why = "needs >= 2 Hopper GPUs, " + std::to_string(hopper) + " visible";
  return hopper;
}

#define SKIP_WITHOUT_MULTIGPU(gpus)                                                   \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!::moekit::cuda_available(&why_)) GTEST_SKIP() << why_;                       \
    if (!::moekit::nccl_available(&why_)) GTEST_SKIP() << why_;                       \
    gpus = visible_hopper_gpus(&why_);                                                \
    if (gpus < 2) GTEST_SKIP() << why_;                                               \
  } while (0)

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

// Per-device allocations (the current device at the call).
class DevArena {
 public:
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<std::size_t>(bytes, 256)) != cudaSuccess)
      throw Error(Status::kCudaError, "cudaMalloc(" + std::to_string(bytes) + ") failed");
    bufs_.emplace_back(p);
    return p;
  }
  TensorView upload(const TensorView& h, int device) {
    if (!h.present()) return h;
    const std::size_t bytes = static_cast<std::size_t>(h.numel()) * dtype_size(h.dtype);
    void* p = alloc(bytes);
    if (bytes > 0 && cudaMemcpy(p, h.data, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      throw Error(Status::kCudaError, "upload failed");
    return TensorView::contiguous(p, h.dtype, h.shape, h.ndim, Device::cuda(device));
  }
  TensorView make(DType dtype, std::initializer_list<i64> shape, int device) {
    TensorView d = TensorView::contiguous(nullptr, dtype, shape, Device::cuda(device));
    const std::size_t bytes = static_cast<std::size_t>(d.numel()) * dtype_size(dtype);
    d.data = alloc(bytes);
    cudaMemset(d.data, 0xff, std::max<std::size_t>(bytes, 1));  // poisoned: every element must be written
    return d;
  }
  ExpertWeights upload(const ExpertWeights& w, int device) {
    ExpertWeights d;
    d.w13 = upload(w.w13, device);
    d.w2 = upload(w.w2, device);
    d.w13_scale = upload(w.w13_scale, device);
    d.w2_scale = upload(w.w2_scale, device);
    d.b13 = upload(w.b13, device);
    d.b2 = upload(w.b2, device);
    return d;
  }

 private:
  std::vector<std::unique_ptr<void, CudaFree>> bufs_;
};

std::vector<std::uint16_t> download(const TensorView& d) {
  std::vector<std::uint16_t> h(static_cast<std::size_t>(d.numel()));
  if (!h.empty() && cudaMemcpy(h.data(), d.data, h.size() * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw Error(Status::kCudaError, "download failed");
  return h;
}

// Runs fn(rank) on one thread per rank; rethrows the first failure.
template <class Fn>
void on_every_rank(int ranks, Fn fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        if (cudaSetDevice(r) != cudaSuccess) throw Error(Status::kCudaError, "cudaSetDevice failed");
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The single-GPU op on device 0: fused_moe of the whole case.
std::vector<float> single_gpu_fused_moe(const MoeCase& c) {
  cudaSetDevice(0);
  DevArena arena;
  FusedMoeArgs a;
  const FusedExpertsArgs h = c.host_args(nullptr);
  a.experts = h;
  a.experts.hidden = arena.upload(h.hidden, 0);
  a.experts.weights = arena.upload(h.weights, 0);
  a.experts.a13_scale = arena.upload(h.a13_scale, 0);
  a.experts.a2_scale = arena.upload(h.a2_scale, 0);
  a.experts.expert_map = TensorView{};
  a.experts.topk_ids = TensorView{};
  a.experts.topk_weights = TensorView{};
  a.experts.out = arena.make(c.spec.act_dtype, {c.spec.M, c.spec.K}, 0);
  a.router_logits = arena.upload(TensorView::contiguous(c.router_logits.data(), DType::kFp32, {c.spec.M, c.E_global}), 0);
  a.routing = c.spec.routing;
  Options o;
  const std::size_t ws = workspace_size(describe(a), Backend::kCuda);
  o.workspace = ws ? arena.alloc(ws) : nullptr;
  o.workspace_bytes = ws;
  fused_moe(a, o);
  cudaDeviceSynchronize();
  return to_float(download(a.experts.out), c.spec.act_dtype);
}

CaseSpec multigpu_spec(Scheme scheme, int gpus) {
  CaseSpec s;
  s.M = 64;
  s.E = 16;
  s.k = 4;
  s.K = 512;
  s.N = 128 * gpus;  // legal for fp8_block128 at tp = gpus
  s.scheme = scheme;
  s.static_scales = scheme == Scheme::kFp8PerTensor;  // per-rank dynamic scales would differ
  s.seed = 3;
  return s;
}

class MultiGpuTp : public ::testing::TestWithParam<Scheme> {};

TEST_P(MultiGpuTp, AllReduceOfShardsEqualsSingleGpuOp) {
  int gpus = 0;
  SKIP_WITHOUT_MULTIGPU(gpus);
  const MoeCase c = make_case(multigpu_spec(GetParam(), gpus));
  const std::vector<float> ref = single_gpu_fused_moe(c);
  std::vector<int> devices(static_cast<std::size_t>(gpus));
  for (int d = 0; d < gpus; ++d) devices[static_cast<std::size_t>(d)] = d;
  const std::vector<Communicator> comms = Communicator::init_all(devices);
  std::vector<std::vector<float>> outs(static_cast<std::size_t>(gpus));
  const FusedExpertsArgs h = c.host_args(nullptr);
  on_every_rank(gpus, [&](int r) {
    DevArena arena;
    const ShardedExperts shard = shard_experts_tp(h.weights, c.spec.scheme, gpus, r);
    FusedMoeArgs a;
    a.experts = h;
    a.experts.hidden = arena.upload(h.hidden, r);
    a.experts.weights = arena.upload(shard.weights(), r);
    a.experts.a13_scale = arena.upload(h.a13_scale, r);
    a.experts.a2_scale = arena.upload(h.a2_scale, r);
    a.experts.topk_ids = TensorView{};
    a.experts.topk_weights = TensorView{};
    a.experts.out = arena.make(c.spec.act_dtype, {c.spec.M, c.spec.K}, r);
    a.router_logits =
        arena.upload(TensorView::contiguous(c.router_logits.data(), DType::kFp32, {c.spec.M, c.E_global}), r);
    a.routing = c.spec.routing;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    Options o;
    o.stream = stream;
    const std::size_t ws = workspace_size(describe(a), Backend::kCuda);
    o.workspace = ws ? arena.alloc(ws) : nullptr;
    o.workspace_bytes = ws;
    tp_fused_moe(a, comms[static_cast<std::size_t>(r)], o);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    outs[static_cast<std::size_t>(r)] = to_float(download(a.experts.out), c.spec.act_dtype);
  });
  for (int r = 0; r < gpus; ++r) {
    // The whole-output bound, not the row comparator: a rank's shard has its own numerics by design
    // (per-channel GEMM2 scales over N/tp channels; the bf16 all-reduce rounds after every add).
    EXPECT_LE(relative_error(outs[r], ref), tolerance(c.spec.scheme)) << c.spec.name() << " rank " << r << " of " << gpus;
    // An all-reduce gives every rank the same sum.
    EXPECT_EQ(outs[r], outs[0]) << "rank " << r;
  }
}

std::string scheme_param_name(const ::testing::TestParamInfo<Scheme>& info) { return scheme_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Schemes, MultiGpuTp,
                         ::testing::Values(Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8Block128),
                         scheme_param_name);

class MultiGpuEp : public ::testing::TestWithParam<Scheme> {};

TEST_P(MultiGpuEp, AllToAllRoundTripEqualsSingleGpuOp) {
  int gpus = 0;
  SKIP_WITHOUT_MULTIGPU(gpus);
  CaseSpec spec = multigpu_spec(GetParam(), gpus);
  spec.E = 8 * gpus + 3;  // uneven expert ranges
  spec.M = 61;            // uneven token counts
  const MoeCase c = make_case(spec);
  const std::vector<float> ref = single_gpu_fused_moe(c);
  std::vector<int> devices(static_cast<std::size_t>(gpus));
  for (int d = 0; d < gpus; ++d) devices[static_cast<std::size_t>(d)] = d;
  const std::vector<Communicator> comms = Communicator::init_all(devices);
  const i64 Mt = spec.M, K = spec.K, Eg = spec.E;
  const i64 max_tokens = (Mt + gpus - 1) / gpus;
  std::vector<float> got(static_cast<std::size_t>(Mt * K), 0.0f);
  const FusedExpertsArgs h = c.host_args(nullptr);
  on_every_rank(gpus, [&](int r) {
    DevArena arena;
    const i64 m0 = std::min(Mt, r * max_tokens), m1 = std::min(Mt, (r + 1) * max_tokens), M = m1 - m0;
    const ShardedExperts shard = shard_experts_ep(h.weights, spec.scheme, gpus, r);
    const std::vector<std::int32_t> map = expert_map_for_rank(Eg, gpus, r);
    const std::size_t row_bytes = static_cast<std::size_t>(K) * 2;
    FusedMoeArgs a;
    a.experts = h;
    a.experts.hidden = arena.upload(
        TensorView::contiguous(reinterpret_cast<const std::uint8_t*>(c.hidden.data()) + m0 * row_bytes,
                               spec.act_dtype, {M, K}),
        r);
    a.experts.weights = arena.upload(shard.weights(), r);
    a.experts.a13_scale = arena.upload(h.a13_scale, r);
    a.experts.a2_scale = arena.upload(h.a2_scale, r);
    a.experts.expert_map = arena.upload(TensorView::contiguous(map.data(), DType::kInt32, {Eg}), r);
    a.experts.topk_ids = TensorView{};
    a.experts.topk_weights = TensorView{};
    a.experts.out = arena.make(spec.act_dtype, {M, K}, r);
    a.router_logits = arena.upload(TensorView::contiguous(c.router_logits.data() + m0 * Eg, DType::kFp32, {M, Eg}), r);
    // c.spec, not spec: make_case sets routing.top_k = k on its copy only (the local spec keeps
    // RoutingConfig's default top_k = 1, which routed every token to one expert: rel. error ~1.32).
    a.routing = c.spec.routing;
    if (describe(a).top_k != c.spec.k)
      throw Error(Status::kInvalidArgument, "EP test routes top_k=" + std::to_string(describe(a).top_k) +
                                                ", the reference " + std::to_string(c.spec.k));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    Options o;
    o.stream = stream;
    const std::size_t ws = ep_workspace_size(describe(a), gpus, max_tokens);
    o.workspace = arena.alloc(ws);
    o.workspace_bytes = ws;
    ep_fused_moe(a, comms[static_cast<std::size_t>(r)], o, max_tokens);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    const std::vector<float> part = to_float(download(a.experts.out), spec.act_dtype);
    std::copy(part.begin(), part.end(), got.begin() + m0 * K);  // disjoint rows per thread
  });
  // Row by row (tests/common/compare.hpp): each token's experts run with the single-GPU op's own
  // scales (static per tensor, per token otherwise); only the per-slot rounding of the returned rows differs.
  EXPECT_TRUE(rows_match(got, ref, K, spec.scheme, spec.name() + " ep=" + std::to_string(gpus)));
}

INSTANTIATE_TEST_SUITE_P(Schemes, MultiGpuEp,
                         ::testing::Values(Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8Block128),
                         scheme_param_name);

}  // namespace
}  // namespace moekit::testing
