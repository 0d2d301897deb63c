// Host side of the inv_rope_fp8_quant kernel: can_implement (a status, never throws) and the
// launcher (one launch on the caller's stream; no allocation, no sync, graph-capturable).
#pragma once

#include <string>

#include "cuda/kernels/rope_quant/params.hpp"

namespace moekit::cuda {

/// Whether the compiled kernel runs `p` with head_dim `head_dim`; the reason in *why when not.
bool can_implement_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, std::string* why);

/// Enqueue the kernel on `stream` (cudaStream_t); nothing for T = 0. Throws moekit::Error
/// (kNotSupported) when can_implement fails, (kCudaError) when the launch fails. Which kernel runs
/// is inv_rope_quant_kernel_choice()'s (read at every call, for A/Bs in one process): by default
/// (auto) by rows T x H: the latency-first kernel up to kRopeQuantSmallMaxRows, the bulk kernel up
/// to kRopeQuantBulkMaxRows, the half-warp kernel above (config.hpp, measured); a
/// kernel that cannot run the problem hands it on: bulk -> half -> reg, pipe4 / pipe8 / half -> reg
/// (small and reg run every problem can_implement accepts).
void launch_inv_rope_quant_sm90(const InvRopeQuantParams& p, int head_dim, void* stream);

/// The kernels of config.hpp: auto (by T), small (InvRopeQuantSmall), bulk (InvRopeQuantBulk),
/// pipe4 / pipe8 (InvRopeQuantPipe4 / 8), half (the half-warp kernel InvRopeQuantHalf), reg (the register kernel InvRopeQuantR2).
enum class RopeQuantKernel { kAuto, kSmall, kBulk, kPipe4, kPipe8, kHalf, kReg };

/// MOEKIT_ROPE_KERNEL (auto, small, bulk, pipe4, pipe8, half, reg); when it is unset or empty, the older
/// MOEKIT_ROPE_QUANT_ROWS (4 = pipe4, 8 = pipe8, 2 = reg); both unset: auto. Throws
/// kInvalidArgument on any other value.
RopeQuantKernel inv_rope_quant_kernel_choice();

/// MOEKIT_ROPE_QUANT_ROWS: 4 (default), 8 or 2; throws kInvalidArgument otherwise.
int inv_rope_quant_rows_per_warp();

/// The name of the kernel that this thread's last launch_inv_rope_quant_sm90 enqueued ("small",
/// "bulk", "pipe4", "pipe8", "half", "reg"; "" before any launch or after a T = 0 call): tests check that
/// a forced kernel really ran.
const char* inv_rope_quant_last_kernel();

}  // namespace moekit::cuda
