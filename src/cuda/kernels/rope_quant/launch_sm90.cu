// Host launcher of the inv_rope_fp8_quant kernel (launch_sm90.hpp) and its two instantiations
// (config.hpp: head_dim 512, 2 or 4 rows a warp), registered for preloading so no call loads one
// lazily.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/preload.cuh"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/kernel_sm90.cuh"
#include "cuda/kernels/rope_quant/launch_sm90.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {

namespace {

template <class Cfg>
void launch(const InvRopeQuantParams& p, cudaStream_t stream) {
  constexpr std::int64_t kTokensPerBlock = Cfg::kWarps * Cfg::kRowsPerWarp;
  const std::int64_t blocks_x = (p.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock;
  if (blocks_x > 0x7fffffff)
    throw Error(Status::kNotSupported, "inv_rope_fp8_quant (CUDA): T=" + std::to_string(p.num_tokens) + " is beyond the grid");
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(p.num_heads));
  inv_rope_quant_sm90_kernel<Cfg><<<grid, Cfg::kWarps * 32, 0, stream>>>(p);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

int inv_rope_quant_rows_per_warp() {
  const char* v = std::getenv("MOEKIT_ROPE_QUANT_ROWS");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "2") == 0) return 2;
  if (std::strcmp(v, "4") == 0) return 4;
  throw Error(Status::kInvalidArgument, std::string("MOEKIT_ROPE_QUANT_ROWS is '") + v + "', expected 2 or 4");
}

using InvRopeQuantCfg = InvRopeQuantR2;  // what can_implement checks: both configs share its limits

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
  const int rows = inv_rope_quant_rows_per_warp();  // checked before anything is enqueued
  if (p.num_tokens == 0) return;
  if (rows == 4)
    launch<InvRopeQuantR4>(p, static_cast<cudaStream_t>(stream));
  else
    launch<InvRopeQuantR2>(p, static_cast<cudaStream_t>(stream));
}

MOEKIT_REGISTER_KERNEL(inv_rope_quant_sm90_kernel<InvRopeQuantR2>);
MOEKIT_REGISTER_KERNEL(inv_rope_quant_sm90_kernel<InvRopeQuantR4>);

}  // namespace moekit::cuda
