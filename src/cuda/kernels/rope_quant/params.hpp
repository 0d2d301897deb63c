// inv_rope_fp8_quant's kernel parameters: one plain struct shared by host and device (no CUDA
// types), and the launch entries of each instantiation (inst/*.cu). Element strides, int64 throughout: T * H * D passes 2^31 at T = 70,000 x 16 heads.
#pragma once

#include <cstdint>

namespace moekit::cuda {

struct InvRopeQuantParams {
  std::int64_t num_tokens = 0;       // T
  int num_heads = 0;                 // H (gridDim.y: <= 65535)
  int heads_per_group = 1;           // hpg; group g = h / hpg
  int rope_dim = 0;                  // even; rotated channels [D - rope_dim, D)
  std::int64_t max_pos = 0;          // rows of cos_sin; a position outside [0, max_pos) -> NaN row
  std::int64_t scale_rows = 0;       // Tp = T rounded up to 4; rows [T, Tp) of the scales get 0
  bool packed_ue8m0 = false;         // scale is int32 [G, nb/4, Tp] (UE8M0 bytes) instead of fp32

  const std::uint16_t* o = nullptr;  // bf16 [T, H, D]: o[t*o_stride_t + h*o_stride_h + c]
  std::int64_t o_stride_t = 0, o_stride_h = 0;  // multiples of 8 (16-byte rows)
  const std::int64_t* positions = nullptr;      // positions[t*pos_stride]
  std::int64_t pos_stride = 1;
  const float* cos_sin = nullptr;    // cos_sin[p*cache_stride + i]: cos i < rope/2, then sin
  std::int64_t cache_stride = 0;
  std::uint8_t* q = nullptr;         // e4m3 [G, T, hpg*D]: q[g*q_stride_g + t*q_stride_t + hh*D + c]
  std::int64_t q_stride_g = 0, q_stride_t = 0;  // multiples of 16
  void* scale = nullptr;             // scale[g*s_stride_g + b*s_stride_b + t], b in [0, hpg*D/128)
  std::int64_t s_stride_g = 0, s_stride_b = 0;  // (packed: b indexes words of 4 blocks)
};

// The launch entries of config.hpp's instantiations on `stream` (cudaStream_t), checked; defined
// next to each kernel (kernel_*_sm90.cuh), instantiated in inst/.
// The register kernel (InvRopeQuantConfig): grid [blocks_x, H] of Cfg::kWarps warps.
template <class Cfg>
void run_inv_rope_quant_sm90(const InvRopeQuantParams& p, unsigned blocks_x, void* stream);
// The pipelined kernel (InvRopeQuantPipeConfig): `blocks` persistent CTAs.
template <class Cfg>
void run_inv_rope_quant_pipe_sm90(const InvRopeQuantParams& p, int blocks, void* stream);
// The latency-first kernel (InvRopeQuantSmallConfig): one warp a row.
template <class Cfg>
void run_inv_rope_quant_small_sm90(const InvRopeQuantParams& p, unsigned blocks, void* stream);
// The half-warp kernel (config.hpp InvRopeQuantHalf): `blocks` persistent CTAs.
template <class Cfg>
void run_inv_rope_quant_half_sm90(const InvRopeQuantParams& p, int blocks, void* stream);
// The bulk kernel (InvRopeQuantBulkConfig): `blocks` persistent CTAs with its dynamic shared memory.
template <class Cfg>
void run_inv_rope_quant_bulk_sm90(const InvRopeQuantParams& p, int blocks, void* stream);
// CTAs of the pipelined / bulk / half-warp kernel resident on one SM of the current device (after giving it
// the largest shared-memory carveout, and the bulk kernel its dynamic shared memory).
template <class Cfg>
int inv_rope_quant_pipe_ctas_per_sm();
template <class Cfg>
int inv_rope_quant_bulk_ctas_per_sm();
template <class Cfg>
int inv_rope_quant_half_ctas_per_sm();

}  // namespace moekit::cuda
