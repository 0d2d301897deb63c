// moekit's MOEKIT_* switches, read with one pass over the environment per call instead of one
// getenv per switch. Host only, no CUDA types (the CUDA backend's launchers read it too).
//
// Why: every switch is read at every call (tests and A/B tools setenv / unsetenv between calls),
// ~10 reads a call, and glibc's getenv scans the whole environment each time. On the H200 host
// (docs/perf.md "Session 29") a miss costs 0.07-0.09 us with 86 variables but 0.28 us with 236 (a
// serving container's size): ~2 us of an ~8 us eager decode call (issue 13 bounds the host side
// at 10 us). One scan that keeps the values of every MOEKIT_* switch costs little more than one
// getenv miss: on an x86-64 build host with 187 variables, a scope and ten reads 0.10 us against
// 0.72 us for ten getenv (0.075 us a miss).
//
// How: each public entry that reads switches (fused_experts, fused_moe, describe,
// describe_dispatch, inv_rope_fp8_quant) opens an EnvScope, which scans `environ` once and makes
// that snapshot current for the thread; env_value() returns from it. Outside any scope env_value()
// calls std::getenv, so a reader reached some other way (a test, a tool calling a launcher
// directly) never sees a stale value.
#pragma once

namespace moekit::detail {

/// The switches moekit reads at every call. kEnvVarNames in env.cpp spells each one.
enum class EnvVar : int {
  kPath,               // MOEKIT_PATH (validate.cpp, ops.cpp)
  kDebugFaults,        // MOEKIT_DEBUG_FAULTS (faults.cpp)
  kLogDispatch,        // MOEKIT_LOG_DISPATCH (path_router.cpp, the rest of this block too)
  kDecode,             // MOEKIT_DECODE
  kGemv,               // MOEKIT_GEMV
  kGemvMma,            // MOEKIT_GEMV_MMA
  kGemvKernel,         // MOEKIT_GEMV_KERNEL
  kGemm2Path,          // MOEKIT_GEMM2_PATH
  kSwapabSplit,        // MOEKIT_SWAPAB_SPLIT
  kRoutingAbsmax,      // MOEKIT_ROUTING_ABSMAX (cuda/backend.cu, the rest of this block too)
  kRoutingQuant,       // MOEKIT_ROUTING_QUANT
  kFusedHAbsmax,       // MOEKIT_FUSED_H_ABSMAX
  kYFp32,              // MOEKIT_Y_FP32
  kPdl,                // MOEKIT_PDL (cuda/common/pdl.cuh)
  kDecodeCluster,      // MOEKIT_DECODE_CLUSTER (cuda/kernels/decode/launch_sm90.cu)
  kDecodeWide,         // MOEKIT_DECODE_WIDE
  kGemvOneRound,       // MOEKIT_GEMV_ONE_ROUND (cuda/kernels/gemv/launch_sm90.cu)
  kGemvWide,           // MOEKIT_GEMV_WIDE
  kGemvFp8Decoupled,   // MOEKIT_GEMV_FP8_DECOUPLED
  kGemvQgmma,          // MOEKIT_GEMV_QGMMA
  kGemvHiddenEarly,    // MOEKIT_GEMV_HIDDEN_EARLY
  kGemvWarpRoute,      // MOEKIT_GEMV_WARP_ROUTE
  kSwapabKblocks,      // MOEKIT_SWAPAB_KBLOCKS (cuda/kernels/swapab/launch_sm90.cu)
  kSwapabGemm2Ctas,    // MOEKIT_SWAPAB_GEMM2_CTAS
  kSwapabDirect,       // MOEKIT_SWAPAB_DIRECT
  kSwapabPlain,        // MOEKIT_SWAPAB_PLAIN (cuda/kernels/swapab/launch_sm90.cu)
  kRoutingPlain,       // MOEKIT_ROUTING_PLAIN (cuda/kernels/routing/launch_sm90.cu)
  kTokmajorPingpong,   // MOEKIT_TOKMAJOR_PINGPONG (cuda/kernels/tokmajor/launch_sm90.cu)
  kTokmajorCluster,    // MOEKIT_TOKMAJOR_CLUSTER
  kTokmajorSchedule,   // MOEKIT_TOKMAJOR_SCHEDULE
  kTokmajorTake,       // MOEKIT_TOKMAJOR_TAKE
  kTokmajorEarly,      // MOEKIT_TOKMAJOR_EARLY
  kTokmajorRoute,      // MOEKIT_TOKMAJOR_ROUTE (cuda/backend.cu)
  kTokmajorTmaA,       // MOEKIT_TOKMAJOR_TMA_A (cuda/kernels/tokmajor/launch_sm90.cu)
  kKshortGemm2,        // MOEKIT_KSHORT_GEMM2 (cuda/kernels/kshort/launch_sm90.cu)
  kExpertMlp,          // MOEKIT_EXPERT_MLP (cuda/backend.cu)
  kExpertMlpEvictFirst, // MOEKIT_EXPERT_MLP_EVICT_FIRST (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpLeanGather, // MOEKIT_EXPERT_MLP_LEAN_GATHER
  kExpertMlpQuantOneCta, // MOEKIT_EXPERT_MLP_QUANT_ONE_CTA (cuda/backend.cu)
  kExpertMlpAheadNext, // MOEKIT_EXPERT_MLP_AHEAD_NEXT (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpTwoBoxes,  // MOEKIT_EXPERT_MLP_TWO_BOXES (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpWarmAct,   // MOEKIT_EXPERT_MLP_WARM_ACT (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpG2Swap,    // MOEKIT_EXPERT_MLP_G2_SWAP (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpPlain,     // MOEKIT_EXPERT_MLP_PLAIN (cuda/kernels/expert_mlp/launch_sm90.cu)
  kExpertMlpPlainChannel, // MOEKIT_EXPERT_MLP_PLAIN_CHANNEL (cuda/kernels/expert_mlp/launch_sm90.cu)
  kRopeKernel,         // MOEKIT_ROPE_KERNEL (cuda/kernels/rope_quant/launch_sm90.cu)
  kRopeQuantRows,      // MOEKIT_ROPE_QUANT_ROWS
  kCount
};

inline constexpr int kNumEnvVars = static_cast<int>(EnvVar::kCount);

/// "MOEKIT_PATH" etc.
const char* env_name(EnvVar var) noexcept;

/// What std::getenv(env_name(var)) returns: from the thread's snapshot inside an EnvScope, from
/// std::getenv outside one. The pointer is the environment's own string, as getenv's is.
const char* env_value(EnvVar var) noexcept;

/// A 0 / 1 switch: `unset` when the variable is unset or empty, false for "0", true for "1"; any
/// other value throws Error(kInvalidArgument) "NAME = 'value', expected 0 or 1".
bool env_switch(EnvVar var, bool unset);

/// Scans the environment once (the outermost scope of a thread only) and makes the snapshot
/// current for env_value() on this thread until it ends. A scope opened inside another keeps the
/// outer one's snapshot: a call's switches are read once, at its outermost entry. Setting a
/// variable while a scope is open is not seen until the next outermost scope.
class EnvScope {
 public:
  EnvScope() noexcept;
  ~EnvScope();
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;
};

}  // namespace moekit::detail
