// inv_rope_fp8_quant's entry: validate every argument once (names the argument and the values),
// resolve the call (sizes, pointers, element strides) and run it on the CPU reference or the CUDA
// backend. Kept apart from validate.cpp / ops.cpp: this op shares no state with the MoE calls.
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <cstdio>
#include <string>

#include "backend.hpp"
#include "env.hpp"
#include "moekit/error.hpp"
#include "moekit/rope_quant.hpp"

namespace moekit {
namespace detail {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(Status::kInvalidArgument, "inv_rope_fp8_quant: " + message);
}

std::string str(std::int64_t v) { return std::to_string(v); }

std::string strides_string(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.strides[i]);
  return s + "]";
}

// "o_fp8 has shape [2, 5, 4096], expected [G=2, T=5, hpg*D=2048]"
void expect(const char* name, const TensorView& v, DType dtype, std::initializer_list<std::pair<const char*, std::int64_t>> dims) {
  if (!v.present()) fail(std::string(name) + " is required");
  bool ok = v.ndim == static_cast<int>(dims.size());
  std::string want = "[";
  int i = 0;
  for (const auto& d : dims) {
    if (ok && d.second >= 0 && v.shape[i] != d.second) ok = false;
    want += (i ? ", " : "") + std::string(d.first);
    if (d.second >= 0) want += "=" + str(d.second);
    ++i;
  }
  want += "]";
  if (!ok) fail(std::string(name) + " has shape " + v.shape_string() + ", expected " + want);
  if (v.dtype != dtype)
    fail(std::string(name) + " has dtype " + dtype_name(v.dtype) + ", expected " + dtype_name(dtype));
  for (int k = 0; k < v.ndim; ++k)
    if (v.shape[k] < 0) fail(std::string(name) + " has a negative dimension: " + v.shape_string());
  for (int k = 0; k < v.ndim; ++k)
    if (v.strides[k] < 0)
      fail(std::string(name) + " has negative strides " + strides_string(v) + " (shape " + v.shape_string() + ")");
  if (v.numel() > 0 && v.data == nullptr) fail(std::string(name) + " " + v.shape_string() + " has a null data pointer");
}

// The innermost dimension must be dense (16-byte vector accesses on the GPU read it).
void expect_unit_last_stride(const char* name, const TensorView& v) {
  const int last = v.ndim - 1;
  if (v.numel() > 0 && v.shape[last] > 1 && v.strides[last] != 1)  // an empty view's strides are free
    fail(std::string(name) + " has strides " + strides_string(v) + " (shape " + v.shape_string() +
         "): its last dimension must have stride 1");
}

void expect_disjoint(const char* a, const TensorView& va, const char* b, const TensorView& vb) {
  if (views_overlap(va, vb)) fail(std::string(a) + " overlaps " + b + " in memory");
}

void expect_aligned(const char* name, const TensorView& v, std::size_t bytes, const char* why) {
  if (v.numel() > 0 && reinterpret_cast<std::uintptr_t>(v.data) % bytes != 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", v.data);
    fail(std::string(name) + " at " + buf + " is not " + std::to_string(bytes) + "-byte aligned (" + why + ")");
  }
}

void expect_stride_multiple(const char* name, const TensorView& v, int dim, std::int64_t m, const char* why) {
  if (v.numel() > 0 && v.shape[dim] > 1 && v.strides[dim] % m != 0)
    fail(std::string(name) + " has strides " + strides_string(v) + ": stride " + str(v.strides[dim]) + " of dimension " +
         str(dim) + " must be a multiple of " + str(m) + " elements (" + why + ")");
}

InvRopeQuantCall resolve_inv_rope(const InvRopeFp8QuantArgs& a, const Options& options, Backend* backend) {
  if (options.num_threads < 0) fail("options.num_threads is " + str(options.num_threads) + ", expected >= 0");
  expect("o", a.o, DType::kBf16, {{"T", -1}, {"H", -1}, {"D", -1}});
  const std::int64_t T = a.o.shape[0], H = a.o.shape[1], D = a.o.shape[2];
  if (D <= 0 || D % kRopeQuantBlock != 0)
    fail("o has shape " + a.o.shape_string() + ": head_dim D=" + str(D) + " must be a positive multiple of 128 (one scale per 128 channels)");
  if (H <= 0) fail("o has shape " + a.o.shape_string() + ": it needs at least one head");
  expect_unit_last_stride("o", a.o);
  if (a.num_groups < 1 || H % a.num_groups != 0)
    fail("num_groups is " + str(a.num_groups) + ", expected a divisor of the H=" + str(H) + " heads of o " + a.o.shape_string());
  const std::int64_t G = a.num_groups, hpg = H / G;
  expect("positions", a.positions, DType::kInt64, {{"T", T}});
  expect("cos_sin_cache", a.cos_sin_cache, DType::kFp32, {{"max_pos", -1}, {"rope_dim", -1}});
  const std::int64_t max_pos = a.cos_sin_cache.shape[0], rope = a.cos_sin_cache.shape[1];
  if (rope % 2 != 0 || rope > D)
    fail("cos_sin_cache has shape " + a.cos_sin_cache.shape_string() + ": rope_dim=" + str(rope) +
         " must be even and at most head_dim D=" + str(D) + " (cos then sin, rope_dim/2 each)");
  if (max_pos < 1 && T > 0) fail("cos_sin_cache has shape " + a.cos_sin_cache.shape_string() + ": it has no rows");
  expect_unit_last_stride("cos_sin_cache", a.cos_sin_cache);
  const std::int64_t Tp = inv_rope_scale_rows(T);
  const std::int64_t nb = hpg * D / kRopeQuantBlock;
  expect("o_fp8", a.o_fp8, DType::kFp8E4m3, {{"G", G}, {"T", T}, {"hpg*D", hpg * D}});
  expect_unit_last_stride("o_fp8", a.o_fp8);
  if (a.packed_ue8m0 && D % (4 * kRopeQuantBlock) != 0)
    fail("packed_ue8m0 packs the four scales of 512 channels of one head into an int32: head_dim D=" + str(D) +
         " must be a multiple of 512");
  if (a.packed_ue8m0)
    expect("o_scale", a.o_scale, DType::kInt32, {{"G", G}, {"nb/4", nb / 4}, {"Tp", Tp}});
  else
    expect("o_scale", a.o_scale, DType::kFp32, {{"G", G}, {"nb", nb}, {"Tp", Tp}});
  expect_unit_last_stride("o_scale", a.o_scale);

  // One device for all; the backend follows it unless forced.
  const TensorView* all[] = {&a.o, &a.positions, &a.cos_sin_cache, &a.o_fp8, &a.o_scale};
  const char* names[] = {"o", "positions", "cos_sin_cache", "o_fp8", "o_scale"};
  for (int i = 1; i < 5; ++i)
    if (all[i]->device.type != a.o.device.type ||
        (a.o.device.type == DeviceType::kCuda && all[i]->device.index != a.o.device.index))
      fail(std::string(names[i]) + " is on " + device_name(all[i]->device) + " but o is on " + device_name(a.o.device));
  Backend b = options.backend;
  if (b == Backend::kAuto) b = a.o.device.type == DeviceType::kCuda ? Backend::kCuda : Backend::kCpu;
  if (b == Backend::kCpu && a.o.device.type != DeviceType::kCpu)
    fail("backend cpu needs host tensors, but the tensors are on " + device_name(a.o.device));
  if (b == Backend::kCuda && a.o.device.type != DeviceType::kCuda)
    fail("backend cuda needs CUDA tensors, but the tensors are on " + device_name(a.o.device));
  if (b == Backend::kCuda) {
    // The kernel reads o and writes o_fp8 with 16-byte vectors, one aligned chunk of 8 channels.
    expect_aligned("o", a.o, 16, "the kernel reads it in 16-byte vectors");
    expect_stride_multiple("o", a.o, 0, 8, "16-byte rows");
    expect_stride_multiple("o", a.o, 1, 8, "16-byte rows");
    expect_aligned("o_fp8", a.o_fp8, 16, "the kernel writes it in 8-byte vectors, 16-byte rows");
    expect_stride_multiple("o_fp8", a.o_fp8, 0, 16, "16-byte rows");
    expect_stride_multiple("o_fp8", a.o_fp8, 1, 16, "16-byte rows");
  }
  expect_aligned("positions", a.positions, 8, "int64");
  expect_aligned("cos_sin_cache", a.cos_sin_cache, 4, "fp32");
  expect_aligned("o_scale", a.o_scale, 4, "fp32 / int32");
  for (int out = 3; out < 5; ++out)
    for (int in = 0; in < 3; ++in) expect_disjoint(names[out], *all[out], names[in], *all[in]);
  expect_disjoint("o_fp8", a.o_fp8, "o_scale", a.o_scale);

  InvRopeQuantCall c;
  c.num_tokens = T;
  c.num_heads = H;
  c.num_groups = G;
  c.heads_per_group = hpg;
  c.head_dim = D;
  c.rope_dim = rope;
  c.max_pos = max_pos;
  c.scale_rows = Tp;
  c.packed_ue8m0 = a.packed_ue8m0;
  c.o = static_cast<const std::uint16_t*>(a.o.data);
  c.o_stride_t = a.o.strides[0];
  c.o_stride_h = a.o.strides[1];
  c.positions = static_cast<const std::int64_t*>(a.positions.data);
  c.pos_stride = a.positions.strides[0];
  c.cos_sin = static_cast<const float*>(a.cos_sin_cache.data);
  c.cache_stride = a.cos_sin_cache.strides[0];
  c.q = static_cast<std::uint8_t*>(a.o_fp8.data);
  c.q_stride_g = a.o_fp8.strides[0];
  c.q_stride_t = a.o_fp8.strides[1];
  c.scale = a.o_scale.data;
  c.s_stride_g = a.o_scale.strides[0];
  c.s_stride_b = a.o_scale.strides[1];
  c.stream = options.stream;
  c.device = a.o.device.type == DeviceType::kCuda ? a.o.device.index : 0;
  c.num_threads = options.num_threads;
  *backend = b;
  return c;
}

}  // namespace
}  // namespace detail

void inv_rope_fp8_quant(const InvRopeFp8QuantArgs& args, const Options& options) {
  const detail::EnvScope env;  // MOEKIT_ROPE_KERNEL, MOEKIT_ROPE_QUANT_ROWS: one scan (env.hpp)
  Backend b = Backend::kAuto;
  const detail::InvRopeQuantCall call = detail::resolve_inv_rope(args, options, &b);
  if (b == Backend::kCpu) {
    cpu::run_inv_rope_fp8_quant(call);
    return;
  }
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  if (cuda == nullptr || cuda->run_inv_rope_fp8_quant == nullptr)
    throw Error(Status::kNotSupported,
                "this build of moekit has no CUDA backend (configure with -DMOEKIT_ENABLE_CUDA=ON and link moekit::cuda)");
  std::string why;
  if (!cuda->device_ok(call.device, &why)) throw Error(Status::kNotSupported, why);
  if (call.num_tokens == 0) return;  // nothing to write: Tp = 0
  cuda->run_inv_rope_fp8_quant(call);
}

}  // namespace moekit
