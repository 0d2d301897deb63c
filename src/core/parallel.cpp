// Tensor and expert parallelism, host side: the sharding helpers, the EP bookkeeping (argument
// checks, the CPU reference, dispatch to the CUDA kernels) and the orchestration of tp_fused_moe /
// ep_fused_moe over the Communicator. CUDA and NCCL are reached through parallel_backend.hpp.
#include "moekit/parallel.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "moekit/error.hpp"
#include "moekit/faults.hpp"
#include "moekit/quant.hpp"
#include "parallel_backend.hpp"

// Defined by moekit::cuda (src/cuda/parallel.cu); null in a binary without it.
extern "C" const moekit::detail::CudaParallelV1* moekit_cuda_parallel_v1() __attribute__((weak));

namespace moekit {
namespace detail {

const CudaParallelV1* cuda_parallel() noexcept {
  return moekit_cuda_parallel_v1 != nullptr ? moekit_cuda_parallel_v1() : nullptr;
}

}  // namespace detail

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(Status::kInvalidArgument, message); }
[[noreturn]] void unsupported(const std::string& message) { throw Error(Status::kNotSupported, message); }

std::string str(std::int64_t v) { return std::to_string(v); }

const detail::CudaParallelV1& require_cuda_parallel(const char* what) {
  const detail::CudaParallelV1* p = detail::cuda_parallel();
  if (p == nullptr)
    unsupported(std::string(what) +
                " needs moekit's CUDA backend, but this binary has none (configure with -DMOEKIT_ENABLE_CUDA=ON "
                "and link moekit::cuda)");
  return *p;
}

const detail::CudaParallelV1& require_nccl(const char* what) {
  const detail::CudaParallelV1& p = require_cuda_parallel(what);
  if (p.nccl_missing != nullptr) unsupported(std::string(what) + " needs NCCL: " + p.nccl_missing);
  return p;
}

// ---- sharding ----------------------------------------------------------------------------

// A host tensor viewed as [E, R, C] (1-D: R = C = 1; 2-D: C = 1).
struct Erc {
  std::int64_t E = 0, R = 1, C = 1;
};

Erc erc_of(const TensorView& t) {
  Erc d;
  d.E = t.shape[0];
  if (t.ndim >= 2) d.R = t.shape[1];
  if (t.ndim >= 3) d.C = t.shape[2];
  return d;
}

void check_host(const char* name, const TensorView& t) {
  if (!t.present()) return;
  if (t.device.type != DeviceType::kCpu)
    invalid(std::string(name) + " is on " + device_name(t.device) + ", but the sharding helpers cut host memory");
  if (!t.is_contiguous()) invalid(std::string(name) + " " + t.shape_string() + " is not contiguous");
  if (t.ndim < 1 || t.ndim > 3) invalid(std::string(name) + " has shape " + t.shape_string() + ", expected 1 to 3 dims");
  if (t.numel() > 0 && t.data == nullptr) invalid(std::string(name) + " has no data");
}

// Copy experts [e0, e0+ec), the dim-1 row ranges `rows` (in order; empty = all rows) and dim-2
// columns [c0, c0+cn) (cn < 0 = all) of `t` into a new host tensor of the same ndim.
HostTensor slice(const TensorView& t, std::int64_t e0, std::int64_t ec,
                 const std::vector<std::pair<std::int64_t, std::int64_t>>& rows_in, std::int64_t c0 = 0,
                 std::int64_t cn = -1) {
  HostTensor out;
  if (!t.present()) return out;
  const Erc d = erc_of(t);
  std::vector<std::pair<std::int64_t, std::int64_t>> rows = rows_in;
  if (rows.empty()) rows.push_back({0, d.R});
  if (cn < 0) {
    c0 = 0;
    cn = d.C;
  }
  std::int64_t rn = 0;
  for (const auto& r : rows) rn += r.second;
  const std::size_t es = dtype_size(t.dtype);
  out.dtype = t.dtype;
  out.shape.assign(t.shape, t.shape + t.ndim);
  out.shape[0] = ec;
  if (t.ndim >= 2) out.shape[1] = rn;
  if (t.ndim >= 3) out.shape[2] = cn;
  out.data.resize(static_cast<std::size_t>(ec * rn * cn) * es);
  const auto* src = static_cast<const std::uint8_t*>(t.data);
  std::uint8_t* dst = out.data.data();
  for (std::int64_t e = e0; e < e0 + ec; ++e)
    for (const auto& r : rows)
      for (std::int64_t row = r.first; row < r.first + r.second; ++row) {
        const std::size_t off = static_cast<std::size_t>((e * d.R + row) * d.C + c0) * es;
        std::memcpy(dst, src + off, static_cast<std::size_t>(cn) * es);
        dst += static_cast<std::size_t>(cn) * es;
      }
  return out;
}

HostTensor copy_all(const TensorView& t) { return slice(t, 0, t.present() ? t.shape[0] : 0, {}); }

TensorView view_of(const HostTensor& t) {
  if (t.shape.empty()) return TensorView{};  // absent
  return t.view();
}

// Validate `full` as fused_experts would (describe() with M = 0), so shape and dtype errors read
// the same as everywhere else.
MoeProblem check_weights(const ExpertWeights& w, Scheme scheme) {
  for (const auto& t : {std::make_pair("w13", &w.w13), std::make_pair("w2", &w.w2),
                        std::make_pair("w13_scale", &w.w13_scale), std::make_pair("w2_scale", &w.w2_scale),
                        std::make_pair("b13", &w.b13), std::make_pair("b2", &w.b2)})
    check_host(t.first, *t.second);
  if (!w.w13.present() || w.w13.ndim != 3) invalid("w13 must be a present [E, 2N, K] host tensor");
  DType act = DType::kBf16;
  if (scheme == Scheme::kBf16) act = w.w13.dtype;
  else if (w.b13.present() && (w.b13.dtype == DType::kBf16 || w.b13.dtype == DType::kFp16)) act = w.b13.dtype;
  else if (w.b2.present() && (w.b2.dtype == DType::kBf16 || w.b2.dtype == DType::kFp16)) act = w.b2.dtype;
  const std::int64_t K = w.w13.shape[2];
  FusedExpertsArgs a;
  a.hidden = TensorView::contiguous(nullptr, act, {0, K});
  a.out = TensorView::contiguous(nullptr, act, {0, K});
  a.topk_ids = TensorView::contiguous(nullptr, DType::kInt32, {0, 1});
  a.topk_weights = TensorView::contiguous(nullptr, DType::kFp32, {0, 1});
  a.weights = w;
  a.scheme = scheme;
  return describe(a);
}

}  // namespace

ExpertWeights ShardedExperts::weights() const {
  ExpertWeights w;
  w.w13 = view_of(w13);
  w.w2 = view_of(w2);
  w.w13_scale = view_of(w13_scale);
  w.w2_scale = view_of(w2_scale);
  w.b13 = view_of(b13);
  w.b2 = view_of(b2);
  return w;
}

ShardedExperts shard_experts_tp(const ExpertWeights& full, Scheme scheme, int tp_size, int tp_rank) {
  if (tp_size < 1) invalid("tp_size=" + str(tp_size) + " must be >= 1");
  if (tp_rank < 0 || tp_rank >= tp_size)
    invalid("tp_rank=" + str(tp_rank) + " is outside [0, tp_size=" + str(tp_size) + ")");
  const MoeProblem p = check_weights(full, scheme);
  const std::int64_t E = p.num_experts, N = p.intermediate_size, K = p.hidden_size;
  if (N % tp_size != 0)
    invalid("w13 has shape " + full.w13.shape_string() + ": N=" + str(N) + " is not divisible by tp_size=" +
            str(tp_size));
  const std::int64_t n = N / tp_size, r0 = tp_rank * n;
  const std::int64_t bq = kBlockQuant;
  if (scheme == Scheme::kFp8Block128 && n % bq != 0)
    unsupported("fp8_block128 tensor parallelism needs N/tp_size to be a multiple of 128 (whole 128x128 scale "
                "blocks per rank), but N=" + str(N) + " / tp_size=" + str(tp_size) + " = " + str(n));
  ShardedExperts s;
  s.scheme = scheme;
  s.w13 = slice(full.w13, 0, E, {{r0, n}, {N + r0, n}});
  s.w2 = slice(full.w2, 0, E, {}, r0, n);
  switch (scheme) {
    case Scheme::kBf16: break;
    case Scheme::kFp8PerTensor:
      s.w13_scale = copy_all(full.w13_scale);
      s.w2_scale = copy_all(full.w2_scale);
      break;
    case Scheme::kFp8PerChannel:
      s.w13_scale = slice(full.w13_scale, 0, E, {{r0, n}, {N + r0, n}});
      s.w2_scale = copy_all(full.w2_scale);  // one scale per output row c of K: every rank needs all
      break;
    case Scheme::kFp8Block128:
      // w13_scale [E, 2N/128, ceil(K/128)]: block rows of the gate slice, then of the up slice.
      s.w13_scale = slice(full.w13_scale, 0, E, {{r0 / bq, n / bq}, {(N + r0) / bq, n / bq}});
      // w2_scale [E, ceil(K/128), N/128]: the block columns of the slice.
      s.w2_scale = slice(full.w2_scale, 0, E, {}, r0 / bq, n / bq);
      break;
  }
  s.b13 = slice(full.b13, 0, E, {{r0, n}, {N + r0, n}});
  // b2 is added after GEMM2, once per output: keep it on rank 0 so the sum over ranks adds it once.
  if (tp_rank == 0) s.b2 = copy_all(full.b2);
  (void)K;
  return s;
}

ExpertRange expert_range_for_rank(std::int64_t num_experts_global, int ep_size, int rank) {
  if (num_experts_global < 1) invalid("num_experts_global=" + str(num_experts_global) + " must be >= 1");
  if (ep_size < 1) invalid("ep_size=" + str(ep_size) + " must be >= 1");
  if (rank < 0 || rank >= ep_size) invalid("rank=" + str(rank) + " is outside [0, ep_size=" + str(ep_size) + ")");
  const std::int64_t base = num_experts_global / ep_size, rem = num_experts_global % ep_size;
  ExpertRange r;
  r.count = base + (rank < rem ? 1 : 0);
  r.first = rank * base + std::min<std::int64_t>(rank, rem);
  return r;
}

std::vector<std::int32_t> expert_map_for_rank(std::int64_t num_experts_global, int ep_size, int rank) {
  const ExpertRange r = expert_range_for_rank(num_experts_global, ep_size, rank);
  if (num_experts_global > INT32_MAX) invalid("num_experts_global=" + str(num_experts_global) + " exceeds int32");
  std::vector<std::int32_t> map(static_cast<std::size_t>(num_experts_global), -1);
  for (std::int64_t i = 0; i < r.count; ++i) map[static_cast<std::size_t>(r.first + i)] = static_cast<std::int32_t>(i);
  return map;
}

int expert_owner(std::int64_t num_experts_global, int ep_size, std::int64_t expert_id) noexcept {
  if (ep_size < 1 || expert_id < 0 || expert_id >= num_experts_global) return -1;
  const std::int64_t base = num_experts_global / ep_size, rem = num_experts_global % ep_size;
  const std::int64_t big = rem * (base + 1);  // experts held by the ranks one larger
  if (expert_id < big) return static_cast<int>(expert_id / (base + 1));
  return static_cast<int>(rem + (expert_id - big) / base);
}

ShardedExperts slice_experts(const ExpertWeights& full, Scheme scheme, std::int64_t first, std::int64_t count) {
  const MoeProblem p = check_weights(full, scheme);
  if (first < 0 || count < 1 || first + count > p.num_experts)
    invalid("experts [" + str(first) + ", " + str(first + count) + ") are not a non-empty range of the E=" +
            str(p.num_experts) + " experts of w13 " + full.w13.shape_string());
  ShardedExperts s;
  s.scheme = scheme;
  s.first_expert = first;
  s.w13 = slice(full.w13, first, count, {});
  s.w2 = slice(full.w2, first, count, {});
  s.w13_scale = slice(full.w13_scale, first, count, {});
  s.w2_scale = slice(full.w2_scale, first, count, {});
  s.b13 = slice(full.b13, first, count, {});
  s.b2 = slice(full.b2, first, count, {});
  return s;
}

ShardedExperts shard_experts_ep(const ExpertWeights& full, Scheme scheme, int ep_size, int ep_rank) {
  check_host("w13", full.w13);
  if (!full.w13.present() || full.w13.ndim != 3) invalid("w13 must be a present [E, 2N, K] host tensor");
  const ExpertRange r = expert_range_for_rank(full.w13.shape[0], ep_size, ep_rank);
  if (r.count == 0)
    invalid("ep_rank=" + str(ep_rank) + " of ep_size=" + str(ep_size) + " owns no expert (E=" +
            str(full.w13.shape[0]) + " < ep_size)");
  return slice_experts(full, scheme, r.first, r.count);
}

// ---- EP bookkeeping --------------------------------------------------------------------------

namespace {

struct Dim {
  const char* name;
  std::int64_t value;  // -1: any
};

void expect(const char* name, const TensorView& t, std::initializer_list<DType> dtypes, std::initializer_list<Dim> dims,
            Device device) {
  if (!t.present()) invalid(std::string(name) + " is required");
  bool ok = false;
  std::string names;
  for (DType d : dtypes) {
    ok = ok || t.dtype == d;
    names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  if (!ok) invalid(std::string(name) + " has dtype " + dtype_name(t.dtype) + ", expected " + names);
  std::string want = "[";
  bool match = t.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (const Dim& d : dims) {
    want += (i ? ", " : "") + std::string(d.name) + (d.value >= 0 ? "=" + str(d.value) : "");
    if (match && d.value >= 0 && t.shape[i] != d.value) match = false;
    ++i;
  }
  if (!match) invalid(std::string(name) + " has shape " + t.shape_string() + ", expected " + want + "]");
  if (!t.is_contiguous()) invalid(std::string(name) + " " + t.shape_string() + " is not contiguous");
  if (t.numel() > 0 && t.data == nullptr) invalid(std::string(name) + " has no data");
  if (t.device.type != device.type || (device.type == DeviceType::kCuda && t.device.index != device.index))
    invalid(std::string(name) + " is on " + device_name(t.device) + ", the other tensors on " + device_name(device));
}

void check_ep_size(int ep_size) {
  if (ep_size < 1) invalid("ep_size=" + str(ep_size) + " must be >= 1");
}

}  // namespace

void ep_dispatch(const EpDispatchArgs& a, const Options& options) {
  check_ep_size(a.ep_size);
  if (!a.hidden.present() || a.hidden.ndim != 2) invalid("hidden must be a present [M, K] tensor");
  const Device dev = a.hidden.device;
  expect("hidden", a.hidden, {DType::kBf16, DType::kFp16}, {{"M", -1}, {"K", -1}}, dev);
  const std::int64_t M = a.hidden.shape[0], K = a.hidden.shape[1];
  expect("topk_ids", a.topk_ids, {DType::kInt32}, {{"M", M}, {"k", -1}}, dev);
  const std::int64_t k = a.topk_ids.shape[1];
  if (k < 1) invalid("topk_ids has shape " + a.topk_ids.shape_string() + ": k must be >= 1");
  if (a.num_experts_global < 1) invalid("num_experts_global=" + str(a.num_experts_global) + " must be >= 1");
  expect("topk_weights", a.topk_weights, {DType::kFp32}, {{"M", M}, {"k", k}}, dev);
  expect("slot_route", a.slot_route, {DType::kInt32}, {{"M*k", M * k}}, dev);
  expect("send_counts", a.send_counts, {DType::kInt32}, {{"ep_size", a.ep_size}}, dev);
  expect("send_hidden", a.send_hidden, {a.hidden.dtype}, {{"ep_size", a.ep_size}, {"C", -1}, {"K", K}}, dev);
  const std::int64_t C = a.send_hidden.shape[1];
  if (C < M * k)
    invalid("send_hidden has shape " + a.send_hidden.shape_string() + ": the capacity C=" + str(C) +
            " per peer must be >= M*k=" + str(M * k));
  if (static_cast<std::int64_t>(a.ep_size) * C > INT32_MAX)
    invalid("ep_size*C=" + str(a.ep_size * C) + " exceeds the int32 range of slot_route");
  expect("send_meta", a.send_meta, {DType::kInt32}, {{"ep_size", a.ep_size}, {"C", C}, {"2", 2}}, dev);

  if (dev.type == DeviceType::kCuda) {
    detail::EpDispatchCall c;
    c.hidden = a.hidden.data;
    c.topk_ids = static_cast<const std::int32_t*>(a.topk_ids.data);
    c.topk_weights = static_cast<const float*>(a.topk_weights.data);
    c.num_tokens = M;
    c.top_k = k;
    c.hidden_size = K;
    c.num_experts_global = a.num_experts_global;
    c.capacity = C;
    c.ep_size = a.ep_size;
    c.slot_route = static_cast<std::int32_t*>(a.slot_route.data);
    c.send_counts = static_cast<std::int32_t*>(a.send_counts.data);
    c.send_hidden = a.send_hidden.data;
    c.send_meta = static_cast<std::int32_t*>(a.send_meta.data);
    c.stream = options.stream;
    require_cuda_parallel("ep_dispatch on CUDA tensors").ep_dispatch(c);
    // The plan kernel records an id outside [0, E_global) (moekit/faults.hpp); debug mode: raise it.
    if (debug_faults_enabled(options) && M * k > 0) {
      const detail::CudaBackendV1* cuda = detail::cuda_backend();
      Fault f;
      bool capturing = false;
      if (cuda != nullptr && cuda->take_fault(options.stream, &f, &capturing))
        detail::throw_fault(f, "ep_dispatch: MOEKIT_DEBUG_FAULTS: a bad expert id");
    }
    return;
  }
  // The reference: slots in ascending order, a running count per destination.
  const auto* ids = static_cast<const std::int32_t*>(a.topk_ids.data);
  const auto* weights = static_cast<const float*>(a.topk_weights.data);
  auto* route = static_cast<std::int32_t*>(a.slot_route.data);
  auto* counts = static_cast<std::int32_t*>(a.send_counts.data);
  auto* meta = static_cast<std::int32_t*>(a.send_meta.data);
  const auto* hidden = static_cast<const std::uint8_t*>(a.hidden.data);
  auto* send = static_cast<std::uint8_t*>(a.send_hidden.data);
  const std::size_t row_bytes = static_cast<std::size_t>(K) * dtype_size(a.hidden.dtype);
  std::fill(counts, counts + a.ep_size, 0);
  const bool debug = debug_faults_enabled(options);
  for (std::int64_t i = 0; i < M * k; ++i) {
    const int d = expert_owner(a.num_experts_global, a.ep_size, ids[i]);
    if (d < 0) {
      // An id outside [0, E_global) and not -1 is a fault (moekit/faults.hpp), as on CUDA.
      const Fault f = detail::id_fault(i / k, static_cast<std::int32_t>(i % k), ids[i], a.num_experts_global,
                                       nullptr, 0);
      if (f.tensor != FaultTensor::kNone) {
        if (debug) detail::throw_fault(f, "ep_dispatch: MOEKIT_DEBUG_FAULTS: a bad expert id");
        detail::record_cpu_fault(f);
      }
      route[i] = -1;
      continue;
    }
    const std::int64_t row = d * C + counts[d]++;
    route[i] = static_cast<std::int32_t>(row);
    std::memcpy(send + static_cast<std::size_t>(row) * row_bytes, hidden + static_cast<std::size_t>(i / k) * row_bytes,
                row_bytes);
    meta[2 * row] = ids[i];
    std::memcpy(&meta[2 * row + 1], &weights[i], sizeof(float));
  }
}

void ep_unpack(const EpUnpackArgs& a, const Options& options) {
  if (!a.recv_counts.present() || a.recv_counts.ndim != 1) invalid("recv_counts must be a present [ep_size] tensor");
  const Device dev = a.recv_counts.device;
  const int ep = static_cast<int>(a.recv_counts.shape[0]);
  check_ep_size(ep);
  expect("recv_counts", a.recv_counts, {DType::kInt32}, {{"ep_size", ep}}, dev);
  expect("recv_meta", a.recv_meta, {DType::kInt32}, {{"ep_size", ep}, {"C", -1}, {"2", 2}}, dev);
  const std::int64_t C = a.recv_meta.shape[1];
  expect("recv_hidden", a.recv_hidden, {DType::kBf16, DType::kFp16}, {{"ep_size", ep}, {"C", C}, {"K", -1}}, dev);
  const std::int64_t K = a.recv_hidden.shape[2];
  expect("local_ids", a.local_ids, {DType::kInt32}, {{"ep_size*C", ep * C}}, dev);
  expect("local_weights", a.local_weights, {DType::kFp32}, {{"ep_size*C", ep * C}}, dev);
  if (a.first_expert < 0 || a.num_local_experts < 0)
    invalid("first_expert=" + str(a.first_expert) + " and num_local_experts=" + str(a.num_local_experts) +
            " must be >= 0");
  if (dev.type == DeviceType::kCuda) {
    detail::EpUnpackCall c;
    c.recv_counts = static_cast<const std::int32_t*>(a.recv_counts.data);
    c.recv_meta = static_cast<const std::int32_t*>(a.recv_meta.data);
    c.recv_hidden = a.recv_hidden.data;
    c.capacity = C;
    c.hidden_size = K;
    c.first_expert = a.first_expert;
    c.num_local_experts = a.num_local_experts;
    c.ep_size = ep;
    c.zero_unused_rows = a.zero_unused_rows;
    c.local_ids = static_cast<std::int32_t*>(a.local_ids.data);
    c.local_weights = static_cast<float*>(a.local_weights.data);
    c.stream = options.stream;
    require_cuda_parallel("ep_unpack on CUDA tensors").ep_unpack(c);
    return;
  }
  const auto* counts = static_cast<const std::int32_t*>(a.recv_counts.data);
  const auto* meta = static_cast<const std::int32_t*>(a.recv_meta.data);
  auto* ids = static_cast<std::int32_t*>(a.local_ids.data);
  auto* weights = static_cast<float*>(a.local_weights.data);
  auto* hidden = static_cast<std::uint8_t*>(a.recv_hidden.data);
  const std::size_t row_bytes = static_cast<std::size_t>(K) * dtype_size(a.recv_hidden.dtype);
  for (int s = 0; s < ep; ++s)
    for (std::int64_t p = 0; p < C; ++p) {
      const std::int64_t row = s * C + p;
      if (p < counts[s]) {
        const std::int64_t local = static_cast<std::int64_t>(meta[2 * row]) - a.first_expert;
        ids[row] = local >= 0 && local < a.num_local_experts ? static_cast<std::int32_t>(local) : -1;
        std::memcpy(&weights[row], &meta[2 * row + 1], sizeof(float));
      } else {
        ids[row] = -1;
        weights[row] = 0.0f;
        if (a.zero_unused_rows) std::memset(hidden + static_cast<std::size_t>(row) * row_bytes, 0, row_bytes);
      }
    }
}

void ep_combine(const EpCombineArgs& a, const Options& options) {
  if (!a.out.present() || a.out.ndim != 2) invalid("out must be a present [M, K] tensor");
  const Device dev = a.out.device;
  expect("out", a.out, {DType::kBf16, DType::kFp16}, {{"M", -1}, {"K", -1}}, dev);
  const std::int64_t M = a.out.shape[0], K = a.out.shape[1], k = a.top_k;
  if (k < 1) invalid("top_k=" + str(k) + " must be >= 1");
  expect("slot_route", a.slot_route, {DType::kInt32}, {{"M*k", M * k}}, dev);
  expect("returned", a.returned, {a.out.dtype}, {{"ep_size", -1}, {"C", -1}, {"K", K}}, dev);
  if (dev.type == DeviceType::kCuda) {
    detail::EpCombineCall c;
    c.slot_route = static_cast<const std::int32_t*>(a.slot_route.data);
    c.returned = a.returned.data;
    c.out = a.out.data;
    c.act_dtype = a.out.dtype;
    c.num_tokens = M;
    c.top_k = k;
    c.hidden_size = K;
    c.returned_rows = a.returned.shape[0] * a.returned.shape[1];
    c.stream = options.stream;
    require_cuda_parallel("ep_combine on CUDA tensors").ep_combine(c);
    return;
  }
  const auto* route = static_cast<const std::int32_t*>(a.slot_route.data);
  const std::int64_t rows = a.returned.shape[0] * a.returned.shape[1];
  const bool fp16 = a.out.dtype == DType::kFp16;
  auto* out = static_cast<std::uint16_t*>(a.out.data);
  std::vector<float> acc(static_cast<std::size_t>(K));
  for (std::int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t r = route[m * k + j];
      if (r < 0 || r >= rows) continue;  // not routed (or a corrupt route: never index with it)
      for (std::int64_t c = 0; c < K; ++c) acc[c] += load_as_float(a.returned.data, a.out.dtype, r * K + c);
    }
    for (std::int64_t c = 0; c < K; ++c)
      out[m * K + c] = fp16 ? float_to_fp16(acc[c]) : float_to_bf16(acc[c]);
  }
}

// ---- Communicator ------------------------------------------------------------------------------

bool nccl_available(std::string* why) {
  const detail::CudaParallelV1* p = detail::cuda_parallel();
  if (p == nullptr) {
    if (why) *why = "this binary has no moekit CUDA backend (moekit::cuda)";
    return false;
  }
  if (p->nccl_missing != nullptr) {
    if (why) *why = p->nccl_missing;
    return false;
  }
  return true;
}

struct Communicator::Impl {
  void* comm = nullptr;
  bool owned = false;
  int rank = 0, size = 1, device = 0;
  ~Impl() {
    if (owned && comm != nullptr) {
      const detail::CudaParallelV1* p = detail::cuda_parallel();
      try {
        if (p != nullptr && p->nccl_destroy != nullptr) p->nccl_destroy(comm);
      } catch (...) {
        // A destructor must not throw; a failing ncclCommDestroy leaves nothing to recover.
      }
    }
  }
};

namespace {
Communicator::Impl* checked(const std::shared_ptr<Communicator::Impl>& impl) {
  if (!impl) invalid("the Communicator is empty (make it with Communicator::wrap, init_rank or init_all)");
  return impl.get();
}
}  // namespace

Communicator Communicator::wrap(void* nccl_comm) {
  const detail::CudaParallelV1& p = require_nccl("Communicator::wrap");
  if (nccl_comm == nullptr) invalid("Communicator::wrap: nccl_comm is null");
  Communicator c;
  c.impl_ = std::make_shared<Impl>();
  c.impl_->comm = nccl_comm;
  p.nccl_query(nccl_comm, &c.impl_->rank, &c.impl_->size, &c.impl_->device);
  return c;
}

Communicator::UniqueId Communicator::unique_id() {
  const detail::CudaParallelV1& p = require_nccl("Communicator::unique_id");
  UniqueId id{};
  p.nccl_unique_id(id.data());
  return id;
}

Communicator Communicator::init_rank(const UniqueId& id, int world_size, int rank, int device) {
  const detail::CudaParallelV1& p = require_nccl("Communicator::init_rank");
  if (world_size < 1) invalid("world_size=" + str(world_size) + " must be >= 1");
  if (rank < 0 || rank >= world_size) invalid("rank=" + str(rank) + " is outside [0, world_size=" + str(world_size) + ")");
  if (device < 0) invalid("device=" + str(device) + " must be >= 0");
  Communicator c;
  c.impl_ = std::make_shared<Impl>();
  c.impl_->comm = p.nccl_init_rank(id.data(), world_size, rank, device);
  c.impl_->owned = true;
  p.nccl_query(c.impl_->comm, &c.impl_->rank, &c.impl_->size, &c.impl_->device);
  return c;
}

std::vector<Communicator> Communicator::init_all(const std::vector<int>& devices) {
  const detail::CudaParallelV1& p = require_nccl("Communicator::init_all");
  if (devices.empty()) invalid("Communicator::init_all: devices is empty");
  std::vector<void*> comms(devices.size(), nullptr);
  p.nccl_init_all(comms.data(), static_cast<int>(devices.size()), devices.data());
  std::vector<Communicator> out(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    out[i].impl_ = std::make_shared<Impl>();
    out[i].impl_->comm = comms[i];
    out[i].impl_->owned = true;
    p.nccl_query(comms[i], &out[i].impl_->rank, &out[i].impl_->size, &out[i].impl_->device);
  }
  return out;
}

int Communicator::rank() const { return checked(impl_)->rank; }
int Communicator::size() const { return checked(impl_)->size; }
int Communicator::device() const { return checked(impl_)->device; }
void* Communicator::nccl_comm() const { return checked(impl_)->comm; }

void Communicator::all_reduce_sum(const TensorView& buffer, void* stream) const {
  const Impl* impl = checked(impl_);
  const detail::CudaParallelV1& p = require_nccl("Communicator::all_reduce_sum");
  if (!buffer.present()) invalid("all_reduce_sum: buffer is absent");
  if (buffer.device.type != DeviceType::kCuda)
    invalid("all_reduce_sum: buffer is on " + device_name(buffer.device) + ", expected a CUDA tensor");
  if (buffer.device.index != impl->device)
    invalid("all_reduce_sum: buffer is on " + device_name(buffer.device) + " but this rank's communicator is on cuda:" +
            str(impl->device));
  if (!buffer.is_contiguous()) invalid("all_reduce_sum: buffer " + buffer.shape_string() + " is not contiguous");
  if (buffer.dtype == DType::kFp8E4m3) invalid("all_reduce_sum: fp8 buffers cannot be summed");
  if (buffer.numel() == 0) return;
  p.nccl_all_reduce_sum(impl->comm, buffer.data, buffer.numel(), buffer.dtype, stream);
}

// ---- tensor parallel ---------------------------------------------------------------------------

void tp_fused_experts(const FusedExpertsArgs& args, const Communicator& comm, const Options& options) {
  require_nccl("tp_fused_experts");
  if (args.out.present() && args.out.device.type != DeviceType::kCuda)
    invalid("tp_fused_experts runs on CUDA tensors; out is on " + device_name(args.out.device));
  fused_experts(args, options);
  comm.all_reduce_sum(args.out, options.stream);
}

void tp_fused_moe(const FusedMoeArgs& args, const Communicator& comm, const Options& options) {
  require_nccl("tp_fused_moe");
  if (args.experts.out.present() && args.experts.out.device.type != DeviceType::kCuda)
    invalid("tp_fused_moe runs on CUDA tensors; out is on " + device_name(args.experts.out.device));
  fused_moe(args, options);
  comm.all_reduce_sum(args.experts.out, options.stream);
}

// ---- expert parallel ---------------------------------------------------------------------------

namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The workspace of ep_fused_*: every buffer 256-byte aligned, in this order.
struct EpLayout {
  std::int64_t M = 0, k = 0, K = 0, C = 0;
  int ep = 1;
  std::size_t topk_ids = 0, topk_weights = 0, slot_route = 0, send_counts = 0, recv_counts = 0, send_meta = 0,
              recv_meta = 0, local_ids = 0, local_weights = 0, send_hidden = 0, recv_hidden = 0, inner = 0;
  std::size_t inner_bytes = 0, total = 0;
  MoeProblem inner_problem;
};

EpLayout ep_layout(const MoeProblem& p, int ep, std::int64_t max_tokens) {
  EpLayout l;
  l.M = p.num_tokens;
  l.k = p.top_k;
  l.K = p.hidden_size;
  l.C = ep_capacity(std::max(l.M, max_tokens), l.k);
  l.ep = ep;
  const std::size_t rows = static_cast<std::size_t>(ep) * static_cast<std::size_t>(l.C);
  const std::size_t slots = static_cast<std::size_t>(l.M * l.k);
  std::size_t at = 0;
  auto take = [&](std::size_t& field, std::size_t bytes) {
    field = at;
    at += align_up(bytes);
  };
  take(l.topk_ids, slots * 4);
  take(l.topk_weights, slots * 4);
  take(l.slot_route, slots * 4);
  take(l.send_counts, static_cast<std::size_t>(ep) * 4);
  take(l.recv_counts, static_cast<std::size_t>(ep) * 4);
  take(l.send_meta, rows * 8);
  take(l.recv_meta, rows * 8);
  take(l.local_ids, rows * 4);
  take(l.local_weights, rows * 4);
  const std::size_t hidden_bytes = rows * static_cast<std::size_t>(l.K) * dtype_size(p.act_dtype);
  take(l.send_hidden, hidden_bytes);  // later the local expert outputs (the dispatch send is done by then)
  take(l.recv_hidden, hidden_bytes);  // later the returned outputs (the local call is done by then)
  l.inner_problem = p;
  l.inner_problem.num_tokens = static_cast<std::int64_t>(rows);
  l.inner_problem.top_k = 1;
  l.inner_problem.num_experts_global = p.num_experts;
  l.inner_problem.has_expert_map = false;
  l.inner_problem.with_routing = false;
  l.inner_problem.has_correction_bias = false;
  l.inner_bytes = rows > 0 ? workspace_size(l.inner_problem, Backend::kCuda) : 0;
  take(l.inner, l.inner_bytes);
  l.total = at;
  return l;
}

template <class T>
T* at(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<std::uint8_t*>(base) + offset);
}

void ep_run(const FusedExpertsArgs& ex, const FusedMoeArgs* moe, const Communicator& comm, const Options& options,
            std::int64_t max_tokens, const char* what) {
  const detail::CudaParallelV1& p = require_nccl(what);
  const MoeProblem prob = moe != nullptr ? describe(*moe) : describe(ex);
  if (ex.hidden.device.type != DeviceType::kCuda)
    invalid(std::string(what) + " runs on CUDA tensors; hidden is on " + device_name(ex.hidden.device));
  if (ex.hidden.device.index != comm.device())
    invalid(std::string(what) + ": the tensors are on " + device_name(ex.hidden.device) +
            " but the communicator's rank is on cuda:" + str(comm.device()));
  if (!prob.has_expert_map)
    invalid(std::string(what) + " needs experts.expert_map = expert_map_for_rank(E_global, ep_size, rank)");
  if (options.backend == Backend::kCpu) invalid(std::string(what) + " runs on the CUDA backend only");
  const int ep = comm.size(), rank = comm.rank();
  const ExpertRange range = expert_range_for_rank(prob.num_experts_global, ep, rank);
  if (range.count != prob.num_experts)
    invalid(std::string(what) + ": rank " + str(rank) + " of " + str(ep) + " owns experts [" + str(range.first) + ", " +
            str(range.first + range.count) + ") of E_global=" + str(prob.num_experts_global) + ", but w13 has E=" +
            str(prob.num_experts) + " (cut the weights with shard_experts_ep)");
  if (max_tokens < 0 || (max_tokens > 0 && max_tokens < prob.num_tokens))
    invalid(std::string(what) + ": max_tokens_per_rank=" + str(max_tokens) + " must be 0 or >= this rank's M=" +
            str(prob.num_tokens));
  const EpLayout l = ep_layout(prob, ep, max_tokens);
  if (options.workspace == nullptr || options.workspace_bytes < l.total)
    invalid(std::string(what) + " needs options.workspace of " + str(static_cast<std::int64_t>(l.total)) +
            " bytes (ep_workspace_size), got " + str(static_cast<std::int64_t>(options.workspace_bytes)));
  if (reinterpret_cast<std::uintptr_t>(options.workspace) % kAlign != 0)
    invalid(std::string(what) + ": options.workspace must be 256-byte aligned");

  void* ws = options.workspace;
  const Device dev = ex.hidden.device;
  const std::int64_t M = l.M, k = l.k, K = l.K, C = l.C;
  const DType act = prob.act_dtype;
  Options local = options;
  local.backend = Backend::kCuda;

  // 1. Routing (fused_moe): into the caller's topk buffers when given, else the workspace.
  TensorView ids = ex.topk_ids, weights = ex.topk_weights;
  if (!ids.present()) ids = TensorView::contiguous(at<std::int32_t>(ws, l.topk_ids), DType::kInt32, {M, k}, dev);
  if (!weights.present())
    weights = TensorView::contiguous(at<float>(ws, l.topk_weights), DType::kFp32, {M, k}, dev);
  if (moe != nullptr && M > 0) {
    RouteArgs ra;
    ra.router_logits = moe->router_logits;
    ra.routing = moe->routing;
    ra.e_score_correction_bias = moe->e_score_correction_bias;
    ra.topk_ids = ids;
    ra.topk_weights = weights;
    route(ra, local);
  }

  // 2. Pack this rank's slots by destination.
  const auto slot_route = TensorView::contiguous(at<std::int32_t>(ws, l.slot_route), DType::kInt32, {M * k}, dev);
  const auto send_counts = TensorView::contiguous(at<std::int32_t>(ws, l.send_counts), DType::kInt32, {ep}, dev);
  const auto recv_counts = TensorView::contiguous(at<std::int32_t>(ws, l.recv_counts), DType::kInt32, {ep}, dev);
  const auto send_meta = TensorView::contiguous(at<std::int32_t>(ws, l.send_meta), DType::kInt32, {ep, C, 2}, dev);
  const auto recv_meta = TensorView::contiguous(at<std::int32_t>(ws, l.recv_meta), DType::kInt32, {ep, C, 2}, dev);
  const auto send_hidden = TensorView::contiguous(at<std::uint8_t>(ws, l.send_hidden), act, {ep, C, K}, dev);
  const auto recv_hidden = TensorView::contiguous(at<std::uint8_t>(ws, l.recv_hidden), act, {ep, C, K}, dev);
  EpDispatchArgs da;
  da.hidden = ex.hidden;
  da.topk_ids = ids;
  da.topk_weights = weights;
  da.num_experts_global = prob.num_experts_global;
  da.ep_size = ep;
  da.slot_route = slot_route;
  da.send_counts = send_counts;
  da.send_hidden = send_hidden;
  da.send_meta = send_meta;
  ep_dispatch(da, local);

  // 3. Counts first, as their own small message, then the fixed-capacity rows. Sizes are known
  // on the host (C rows per peer), so nothing waits for the device.
  void* nc = comm.nccl_comm();
  void* stream = options.stream;
  const std::size_t meta_bytes = static_cast<std::size_t>(C) * 8;
  const std::size_t row_bytes = static_cast<std::size_t>(K) * dtype_size(act);
  const std::size_t region_bytes = static_cast<std::size_t>(C) * row_bytes;
  p.nccl_group_start();
  for (int peer = 0; peer < ep; ++peer) {
    p.nccl_send(nc, at<std::int32_t>(ws, l.send_counts) + peer, 4, peer, stream);
    p.nccl_recv(nc, at<std::int32_t>(ws, l.recv_counts) + peer, 4, peer, stream);
  }
  p.nccl_group_end();
  if (C > 0) {
    p.nccl_group_start();
    for (int peer = 0; peer < ep; ++peer) {
      p.nccl_send(nc, at<std::uint8_t>(ws, l.send_meta) + peer * meta_bytes, meta_bytes, peer, stream);
      p.nccl_recv(nc, at<std::uint8_t>(ws, l.recv_meta) + peer * meta_bytes, meta_bytes, peer, stream);
      p.nccl_send(nc, at<std::uint8_t>(ws, l.send_hidden) + peer * region_bytes, region_bytes, peer, stream);
      p.nccl_recv(nc, at<std::uint8_t>(ws, l.recv_hidden) + peer * region_bytes, region_bytes, peer, stream);
    }
    p.nccl_group_end();
  }

  // 4. Received rows -> local expert ids and weights; 5. the local experts, one slot per row.
  const std::int64_t rows = static_cast<std::int64_t>(ep) * C;
  const auto expert_out = TensorView::contiguous(at<std::uint8_t>(ws, l.send_hidden), act, {rows, K}, dev);
  if (rows > 0) {
    EpUnpackArgs ua;
    ua.recv_counts = recv_counts;
    ua.recv_meta = recv_meta;
    ua.recv_hidden = recv_hidden;
    ua.first_expert = range.first;
    ua.num_local_experts = range.count;
    // A dynamic per-tensor scale is the absmax over all rows: unused rows must not count.
    ua.zero_unused_rows = prob.scheme == Scheme::kFp8PerTensor && !prob.static_a13_scale;
    ua.local_ids = TensorView::contiguous(at<std::int32_t>(ws, l.local_ids), DType::kInt32, {rows}, dev);
    ua.local_weights = TensorView::contiguous(at<float>(ws, l.local_weights), DType::kFp32, {rows}, dev);
    ep_unpack(ua, local);

    FusedExpertsArgs in = ex;
    in.hidden = TensorView::contiguous(at<std::uint8_t>(ws, l.recv_hidden), act, {rows, K}, dev);
    in.topk_ids = TensorView::contiguous(at<std::int32_t>(ws, l.local_ids), DType::kInt32, {rows, 1}, dev);
    in.topk_weights = TensorView::contiguous(at<float>(ws, l.local_weights), DType::kFp32, {rows, 1}, dev);
    in.out = expert_out;
    in.expert_map = TensorView{};
    Options inner = local;
    inner.workspace = at<std::uint8_t>(ws, l.inner);
    inner.workspace_bytes = l.inner_bytes;
    fused_experts(in, inner);

    // 6. Each peer's rows back to it.
    p.nccl_group_start();
    for (int peer = 0; peer < ep; ++peer) {
      p.nccl_send(nc, at<std::uint8_t>(ws, l.send_hidden) + peer * region_bytes, region_bytes, peer, stream);
      p.nccl_recv(nc, at<std::uint8_t>(ws, l.recv_hidden) + peer * region_bytes, region_bytes, peer, stream);
    }
    p.nccl_group_end();
  }

  // 7. Sum the returned rows of each token in slot order.
  if (M > 0) {
    EpCombineArgs ca;
    ca.slot_route = slot_route;
    ca.returned = recv_hidden;
    ca.out = ex.out;
    ca.top_k = k;
    ep_combine(ca, local);
  }
}

}  // namespace

std::size_t ep_workspace_size(const MoeProblem& problem, int ep_size, std::int64_t max_tokens_per_rank) {
  check_ep_size(ep_size);
  if (max_tokens_per_rank < 0) invalid("max_tokens_per_rank=" + str(max_tokens_per_rank) + " must be >= 0");
  return ep_layout(problem, ep_size, max_tokens_per_rank).total;
}

void ep_fused_experts(const FusedExpertsArgs& args, const Communicator& comm, const Options& options,
                      std::int64_t max_tokens_per_rank) {
  ep_run(args, nullptr, comm, options, max_tokens_per_rank, "ep_fused_experts");
}

void ep_fused_moe(const FusedMoeArgs& args, const Communicator& comm, const Options& options,
                  std::int64_t max_tokens_per_rank) {
  ep_run(args.experts, &args, comm, options, max_tokens_per_rank, "ep_fused_moe");
}

}  // namespace moekit
