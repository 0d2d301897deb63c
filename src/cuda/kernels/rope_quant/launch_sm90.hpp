// Host side of the inv_rope_fp8_quant kernel: can_implement (a status, never throws) and the
// launcher (one launch on the caller's stream; no allocation, no sync, graph-capturable).
#pragma once

#include <string>

#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {

/// Whether the compiled kernel runs `p` with head_dim `head_dim`; the reason in *why when not.
bool can_implement_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, std::string* why);

/// Enqueue the kernel on `stream` (cudaStream_t); nothing for T = 0. Throws moekit::Error
/// (kNotSupported) when can_implement fails, (kCudaError) when the launch fails. The kernel is
/// config.hpp's pipelined InvRopeQuantPipe4 unless MOEKIT_ROPE_QUANT_ROWS says 8 (InvRopeQuantPipe8)
/// or 2 (the register kernel InvRopeQuantR2, which also takes every rope_dim > 64); read at every
/// call, for A/Bs in one process.
void launch_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, void* stream);

/// MOEKIT_ROPE_QUANT_ROWS: 4 (default), 8 or 2; throws kInvalidArgument otherwise.
int inv_rope_quant_rows_per_warp();

}  // namespace moekit::cuda
