// Host launcher of the inv_rope_fp8_quant kernels (launch_sm90.hpp): checks, chooses the kernel
// (config.hpp: the latency-first kernel, the bulk-copy kernel, the pipelined kernel at 4 and 8
// stages, the half-warp kernel, the register kernel at 2 rows a warp), sizes its grid and launches one of the explicit
// instantiations of inst/ (this file includes no kernel body).
#include "cuda/kernels/rope_quant/launch_sm90.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <cstring>
#include <string>

#include "core/env.hpp"
#include "cuda/common/check.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {

namespace {

template <class Cfg>
void launch(const InvRopeQuantParams& p, void* stream) {
  constexpr std::int64_t kTokensPerBlock = Cfg::kWarps * Cfg::kRowsPerWarp;
  const std::int64_t blocks_x = (p.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock;
  if (blocks_x > 0x7fffffff)
    throw Error(Status::kNotSupported, "inv_rope_fp8_quant (CUDA): T=" + std::to_string(p.num_tokens) + " is beyond the grid");
  run_inv_rope_quant_sm90<Cfg>(p, static_cast<unsigned>(blocks_x), stream);
}

// CTAs of a persistent kernel (the pipelined or the bulk one) resident on the whole device (SMs x
// occupancy, `per_sm()` on the current device): its grid, since each warp walks a list of rows.
// Queried once per device and kernel and kept (the first call in the process; later calls, at
// any T, read an atomic): a second wave of CTAs would start its rows only when a first-wave CTA
// exits, doubling the time. Tag: one cache per kernel.
template <class Tag, class PerSm>
int resident_ctas(int device, PerSm per_sm) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  const int n = per_sm();
  int sms = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int v = std::max(1, sms) * std::max(1, n);
  if (device >= 0 && device < kMaxDevices) cache[device].store(v, std::memory_order_relaxed);
  return v;
}

template <class Cfg>
int pipe_resident_ctas(int device) {
  return resident_ctas<Cfg>(device, [] { return inv_rope_quant_pipe_ctas_per_sm<Cfg>(); });
}

// A ring kernel's grid (the pipelined kernel: a row a warp; the half-warp kernel: a row a half):
// one row a row-walker at small T, the resident CTAs at large T, and a walker count that is a
// multiple of H (each walker keeps one head: kernel_pipe_sm90.cuh, kernel_half_sm90.cuh); 0 when
// no such grid fits on the device (then the register kernel runs).
int ring_grid(const InvRopeQuantParams& p, std::int64_t walkers_per_cta, int resident_ctas) {
  const std::int64_t H = p.num_heads;
  const std::int64_t multiple = H / std::gcd<std::int64_t>(H, walkers_per_cta);  // CTAs per H walkers' worth
  const std::int64_t needed = (p.num_tokens * H + walkers_per_cta - 1) / walkers_per_cta;
  std::int64_t blocks = (needed + multiple - 1) / multiple * multiple;
  if (blocks > resident_ctas) blocks = resident_ctas / multiple * multiple;
  return static_cast<int>(blocks);
}

// The half-warp kernel's resident CTAs, cached apart from the pipelined kernel's (its config type
// is an InvRopeQuantPipeConfig too).
template <class Cfg>
struct HalfTag {};
template <class Cfg>
int half_resident_ctas(int device) {
  return resident_ctas<HalfTag<Cfg>>(device, [] { return inv_rope_quant_half_ctas_per_sm<Cfg>(); });
}

// The latency-first kernel: one warp a row, rows past T * H exit.
void launch_small(const InvRopeQuantParams& p, void* stream) {
  using Cfg = InvRopeQuantSmall;
  const std::int64_t blocks = (p.num_tokens * p.num_heads + Cfg::kWarps - 1) / Cfg::kWarps;  // T * H < 2^31
  run_inv_rope_quant_small_sm90<Cfg>(p, static_cast<unsigned>(blocks), stream);
}

// The bulk kernel: its dynamic shared memory (set once per device with its occupancy, in
// inv_rope_quant_bulk_ctas_per_sm: the persistent grid is the resident CTAs) and whether it runs
// a problem.
template <class Cfg>
int bulk_resident_ctas(int device) {
  return resident_ctas<Cfg>(device, [] { return inv_rope_quant_bulk_ctas_per_sm<Cfg>(); });
}

// rope_dim <= 64 in whole 16-byte cos/sin copies (rope_dim % 4 == 0) from a 16-byte aligned
// cache, and int row indices (T * H plus a tile below 2^31).
template <class Cfg>
bool bulk_fits(const InvRopeQuantParams& p) {
  return p.rope_dim <= Cfg::kMaxRopeDim && p.rope_dim % 4 == 0 && p.cache_stride % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(p.cos_sin) % 16 == 0 &&
         p.num_tokens * p.num_heads < (std::int64_t{1} << 31) - Cfg::kRows;
}

template <class Cfg>
void launch_bulk(const InvRopeQuantParams& p, int resident_ctas, void* stream) {
  const std::int64_t tiles = (p.num_tokens * p.num_heads + Cfg::kRows - 1) / Cfg::kRows;
  const int blocks = static_cast<int>(std::min<std::int64_t>(tiles, resident_ctas));
  run_inv_rope_quant_bulk_sm90<Cfg>(p, blocks, stream);
}

thread_local const char* g_last_kernel = "";

}  // namespace

const char* inv_rope_quant_last_kernel() { return g_last_kernel; }

RopeQuantKernel inv_rope_quant_kernel_choice() {
  const char* v = detail::env_value(detail::EnvVar::kRopeKernel);
  if (v == nullptr || v[0] == '\0') {
    const char* rows = detail::env_value(detail::EnvVar::kRopeQuantRows);
    if (rows == nullptr || rows[0] == '\0') return RopeQuantKernel::kAuto;
    const int n = inv_rope_quant_rows_per_warp();
    return n == 2 ? RopeQuantKernel::kReg : n == 8 ? RopeQuantKernel::kPipe8 : RopeQuantKernel::kPipe4;
  }
  const std::string s = v;
  if (s == "auto") return RopeQuantKernel::kAuto;
  if (s == "small") return RopeQuantKernel::kSmall;
  if (s == "bulk") return RopeQuantKernel::kBulk;
  if (s == "pipe4") return RopeQuantKernel::kPipe4;
  if (s == "pipe8") return RopeQuantKernel::kPipe8;
  if (s == "half") return RopeQuantKernel::kHalf;
  if (s == "reg") return RopeQuantKernel::kReg;
  throw Error(Status::kInvalidArgument,
              "MOEKIT_ROPE_KERNEL is '" + s + "', expected auto, small, bulk, pipe4, pipe8, half or reg");
}

int inv_rope_quant_rows_per_warp() {
  const char* v = detail::env_value(detail::EnvVar::kRopeQuantRows);
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "4") == 0) return 4;
  if (std::strcmp(v, "2") == 0) return 2;
  if (std::strcmp(v, "8") == 0) return 8;
  throw Error(Status::kInvalidArgument, std::string("MOEKIT_ROPE_QUANT_ROWS is '") + v + "', expected 2, 4 or 8");
}

using InvRopeQuantCfg = InvRopeQuantR2;  // what can_implement checks: the register kernel's limits

bool can_implement_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, std::string* why) {
  auto no = [why](const std::string& r) {
    if (why != nullptr) *why = "inv_rope_fp8_quant (CUDA): " + r;
    return false;
  };
  constexpr int kD = InvRopeQuantCfg::kHeadDim;
  if (head_dim != kD) return no("head_dim " + std::to_string(head_dim) + " is not compiled (only " + std::to_string(kD) + ")");
  // The rotated channels must lie in each lane's last 8-channel chunk (kernel_sm90.cuh).
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > 256)
    return no("rope_dim " + std::to_string(p.rope_dim) + " must be even and at most 256");
  if (p.num_heads < 1 || p.num_heads > 65535) return no("H=" + std::to_string(p.num_heads) + " heads: gridDim.y holds 1..65535");
  if (p.heads_per_group < 1 || p.num_heads % p.heads_per_group != 0)
    return no("heads_per_group " + std::to_string(p.heads_per_group) + " does not divide H=" + std::to_string(p.num_heads));
  if (p.num_tokens < 0 || p.scale_rows != (p.num_tokens + 3) / 4 * 4)
    return no("scale_rows " + std::to_string(p.scale_rows) + " is not T=" + std::to_string(p.num_tokens) + " rounded up to 4");
  if (reinterpret_cast<std::uintptr_t>(p.o) % 16 != 0 || p.o_stride_t % 8 != 0 || p.o_stride_h % 8 != 0)
    return no("o rows must be 16-byte aligned (pointer and token / head strides multiples of 8 elements)");
  if (reinterpret_cast<std::uintptr_t>(p.q) % 16 != 0 || p.q_stride_t % 16 != 0 || p.q_stride_g % 16 != 0)
    return no("o_fp8 rows must be 16-byte aligned (pointer and strides multiples of 16)");
  return true;
}

void launch_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, void* stream) {
  std::string why;
  if (!can_implement_inv_rope_quant_sm90(p, head_dim, &why)) throw Error(Status::kNotSupported, why);
  RopeQuantKernel k = inv_rope_quant_kernel_choice();  // checked before anything is enqueued
  g_last_kernel = "";
  if (p.num_tokens == 0) return;
  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  // Every persistent kernel's grid (and the bulk kernel's shared-memory attribute) at the first
  // call on a device, so an A/B switching kernels later queries and sets nothing; afterwards
  // four atomic loads.
  const int resident4 = pipe_resident_ctas<InvRopeQuantPipe4>(device);
  const int resident8 = pipe_resident_ctas<InvRopeQuantPipe8>(device);
  const int resident_bulk = bulk_resident_ctas<InvRopeQuantBulk>(device);
  const int resident_half = half_resident_ctas<InvRopeQuantHalf>(device);
  if (k == RopeQuantKernel::kAuto) {
    const std::int64_t rows = p.num_tokens * p.num_heads;
    k = rows <= kRopeQuantSmallMaxRows ? RopeQuantKernel::kSmall
        : rows <= kRopeQuantBulkMaxRows ? RopeQuantKernel::kBulk
                                        : RopeQuantKernel::kHalf;
  }
  if (k == RopeQuantKernel::kSmall && p.num_tokens * p.num_heads < (std::int64_t{1} << 31)) {  // 32-bit rows
    g_last_kernel = "small";
    return launch_small(p, stream);
  }
  if (k == RopeQuantKernel::kBulk) {
    if (bulk_fits<InvRopeQuantBulk>(p)) {
      g_last_kernel = "bulk";
      return launch_bulk<InvRopeQuantBulk>(p, resident_bulk, stream);
    }
    k = RopeQuantKernel::kHalf;
  }
  // The pipelined kernel keeps cos/sin slots for rope_dim <= 64 (DeepSeek-V4) and int token
  // indices; other problems, or a head count whose multiple of warps does not fit on the device,
  // take the register kernel.
  const bool pipe_fits = p.rope_dim <= InvRopeQuantPipe4::kMaxRopeDim && p.num_tokens <= (std::int64_t{1} << 30);
  if (k == RopeQuantKernel::kPipe8 && pipe_fits) {
    const int blocks = ring_grid(p, InvRopeQuantPipe8::kWarps, resident8);
    if (blocks > 0) {
      g_last_kernel = "pipe8";
      return run_inv_rope_quant_pipe_sm90<InvRopeQuantPipe8>(p, blocks, stream);
    }
  } else if (k == RopeQuantKernel::kHalf && pipe_fits) {
    const int blocks = ring_grid(p, 2 * InvRopeQuantHalf::kWarps, resident_half);
    if (blocks > 0) {
      g_last_kernel = "half";
      return run_inv_rope_quant_half_sm90<InvRopeQuantHalf>(p, blocks, stream);
    }
  } else if (k == RopeQuantKernel::kPipe4 && pipe_fits) {
    const int blocks = ring_grid(p, InvRopeQuantPipe4::kWarps, resident4);
    if (blocks > 0) {
      g_last_kernel = "pipe4";
      return run_inv_rope_quant_pipe_sm90<InvRopeQuantPipe4>(p, blocks, stream);
    }
  }
  g_last_kernel = "reg";
  launch<InvRopeQuantR2>(p, stream);
}


}  // namespace moekit::cuda
