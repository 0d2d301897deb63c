// Host steps shared by the TMA + wgmma GEMM families (swapab/, tokmajor/): the checks both make
// on GroupedGemmParams, whether the current device can run them, the weights' TMA descriptor,
// the common kernel parameters and the persistent grid's size. Host code; nvcc-compiled
// launchers only.
#pragma once

#include <cuda.h>  // CUtensorMap (header only: the encode entry point comes from the runtime)
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/common/operand.hpp"
#include "cuda/common/tma.cuh"  // encode_tiled_fn
#include "cuda/kernels/gemm_common/kernel_params.hpp"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/numerics/bias.cuh"  // bias_type_of
#include "moekit/error.hpp"

namespace moekit::cuda::gemm_common {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
inline bool is_fp8(Scheme s) { return s != Scheme::kBf16; }
// Bytes of one A / B element: e4m3 for the fp8 schemes, else the 16-bit activation dtype.
inline std::int64_t element_bytes(const GroupedGemmParams& p) { return is_fp8(p.scheme) ? 1 : 2; }

// The fields every TMA + wgmma family's KernelParams (swapab/, tokmajor/ params.hpp) takes from
// GroupedGemmParams as they are: pointers, sizes, the epilogue's encodings (TmaGemmParams and the
// family's out_type, act, alpha, limit). `rows_b` is B's rows (2N or K), `es` the element bytes
// of A and B. The family sets the weight map, the tile and stage counts and its own fields itself.
template <class KP>
void fill_common_fields(KP& kp, const GroupedGemmParams& p, std::int64_t rows_b, std::int64_t es) {
  static_assert(std::is_base_of_v<TmaGemmParams, KP>, "a TMA + wgmma family's KernelParams");
  kp.row_offsets = p.row_offsets;
  kp.sorted_slots = p.sorted_slots;
  kp.a = static_cast<const std::uint8_t*>(p.a);
  kp.a_scale = p.a_scale;
  kp.b_scale = p.b_scale;
  kp.bias = p.bias;
  kp.topk_weights = p.topk_weights;
  kp.sorted_weights = p.sorted_weights;
  kp.out = p.out;
  kp.a_row_bytes = p.k_dim * es;
  kp.n_out = p.n_out;
  kp.rows_b = rows_b;
  kp.num_experts = p.num_experts;
  kp.top_k = std::max(1, p.top_k);
  kp.k_groups = static_cast<int>(ceil_div(p.k_dim, 128));
  kp.row_blocks = static_cast<int>(ceil_div(rows_b, 128));
  kp.gather_a = p.gather_a_by_token ? 1 : 0;
  kp.weight_on_input = p.weight_on_input ? 1 : 0;
  kp.scale_mode = scale_mode_of(p.scheme);
  kp.bias_type = numerics::bias_type_of(p.bias != nullptr, p.bias_dtype);
  kp.out_type = out_type_of(p.out_dtype);
  kp.act = p.activation.kind;
  kp.alpha = p.activation.alpha;
  kp.limit = p.activation.limit;
}

// The SMs of the current device (the persistent grids' size), asked once per device.
inline int sm_count_of_current_device() {
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  return device_sm_count(dev);
}

// CTAs of a persistent grid in clusters of `cluster` CTAs: one CTA per SM (each takes most of an
// SM's shared memory), never more clusters than `units` (a host-known bound on the work units:
// the real count is known on the device only, from row_offsets, with no host sync).
inline int persistent_grid(std::int64_t units, int cluster, int sms) {
  const std::int64_t clusters = std::min<std::int64_t>(units, std::max(1, sms / cluster));
  return static_cast<int>(clusters * cluster);
}

// Calls f(op, gate_up, block128) with the compile-time values (std::integral_constant) of the
// inst/ instantiation that runs `p`: e4m3 for the fp8 schemes (block128 for kFp8Block128), else
// the activation dtype's operand; the launcher's f forwards them as template arguments.
template <class F>
void run_instantiation(const GroupedGemmParams& p, bool gate_up, F&& f) {
  using Yes = std::true_type;
  using No = std::false_type;
  if (is_fp8(p.scheme)) {
    using Op = std::integral_constant<Operand, Operand::kE4m3>;
    const bool block = p.scheme == Scheme::kFp8Block128;
    if (gate_up) {
      if (block) f(Op{}, Yes{}, Yes{});
      else f(Op{}, Yes{}, No{});
    } else {
      if (block) f(Op{}, No{}, Yes{});
      else f(Op{}, No{}, No{});
    }
  } else if (p.act_dtype == DType::kFp16) {
    using Op = std::integral_constant<Operand, Operand::kF16>;
    if (gate_up) f(Op{}, Yes{}, No{});
    else f(Op{}, No{}, No{});
  } else {
    using Op = std::integral_constant<Operand, Operand::kBf16>;
    if (gate_up) f(Op{}, Yes{}, No{});
    else f(Op{}, No{}, No{});
  }
}

// "" when `p` passes the checks every TMA + wgmma family makes (scheme, sizes, row pitch,
// pointers and their alignment, scales, weights, epilogue dtypes common to both); otherwise the
// first that fails. The row pitch (k_dim x element bytes) must be a multiple of `row_align`
// bytes: 16 for TMA and 16-byte cp.async; Swap-AB's GEMM2 takes 8 (its 8-byte-row producer,
// swapab/kernel_sm90.cuh). Each family adds its own (tile limits, output dtypes, TMA size) and
// the device check below.
inline std::string tma_gemm_unsupported_reason(const GroupedGemmParams& p, int max_experts, std::int64_t row_align = 16) {
  const bool gate_up = p.epilogue == GemmEpilogue::kGateUpActivation;
  const bool fp8 = p.scheme != Scheme::kBf16;
  switch (p.scheme) {
    case Scheme::kBf16:
      if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16)
        return std::string("bf16 scheme needs act_dtype bf16 or fp16, got ") + dtype_name(p.act_dtype);
      break;
    case Scheme::kFp8PerTensor:
    case Scheme::kFp8PerChannel:
    case Scheme::kFp8Block128: break;
    default: return "unknown scheme";
  }
  // Each message builds its own stream: a call that passes (every call on the hot path) makes none.
  if (p.num_experts < 1 || p.num_experts > max_experts) {
    std::ostringstream os;
    os << "num_experts = " << p.num_experts << ", supported 1.." << max_experts
       << " (the expert table lives in shared memory)";
    return os.str();
  }
  if (p.n_out < 1 || p.k_dim < 1) {
    std::ostringstream os;
    os << "n_out = " << p.n_out << ", k_dim = " << p.k_dim << ": both must be positive";
    return os.str();
  }
  if (p.max_rows < 0 || p.max_rows > INT32_MAX) return "max_rows outside [0, 2^31)";
  const std::int64_t es = fp8 ? 1 : 2;
  if ((p.k_dim * es) % row_align != 0) {
    std::ostringstream os;
    os << "k_dim = " << p.k_dim << " gives a " << p.k_dim * es << "-byte row pitch; ";
    if (row_align == 16) os << "TMA and 16-byte cp.async need a multiple of 16 bytes";
    else os << "this kernel needs a multiple of " << row_align << " bytes";
    return os.str();
  }
  if (p.max_rows > 0) {
    if (!p.a || !p.b || !p.out || !p.row_offsets || !p.sorted_slots)
      return "a, b, out, row_offsets and sorted_slots must be non-null";
    if ((reinterpret_cast<std::uintptr_t>(p.a) | reinterpret_cast<std::uintptr_t>(p.b)) % 16 != 0)
      return "a and b must be 16-byte aligned (TMA and cp.async)";
    if (fp8 && (!p.a_scale || !p.b_scale)) return "fp8 schemes need a_scale and b_scale";
  }
  if (p.gather_a_by_token && p.top_k < 1) return "gather_a_by_token needs top_k >= 1";
  if (gate_up) {
    if (p.out_dtype != DType::kFp32 && p.out_dtype != DType::kBf16 && p.out_dtype != DType::kFp16)
      return std::string("GEMM1 out_dtype must be fp32, bf16 or fp16, got ") + dtype_name(p.out_dtype);
    if (p.weight_on_input && !p.topk_weights && !p.sorted_weights && p.max_rows > 0)
      return "weight_on_input needs topk_weights or sorted_weights";
  } else if (!p.weight_on_input && !p.topk_weights && !p.sorted_weights && p.max_rows > 0) {
    return "GEMM2 needs topk_weights or sorted_weights unless weight_on_input";
  }
  if (p.bias && p.bias_dtype != DType::kFp32 && p.bias_dtype != DType::kBf16 && p.bias_dtype != DType::kFp16)
    return std::string("bias_dtype must be fp32, bf16 or fp16, got ") + dtype_name(p.bias_dtype);
  if (const char* absmax_why = out_absmax_unsupported_reason(p); absmax_why[0] != '\0') return absmax_why;
  if (p.scheme == Scheme::kFp8Block128 && gate_up && p.n_out % 64 != 0) {
    std::ostringstream os;
    os << "fp8_block128 GEMM1 needs N % 64 == 0 (the 64 up rows of a tile must sit in one 128-row scale "
          "block), got N = " << p.n_out;
    return os.str();
  }
  return {};
}

// "" when the current device is an sm_90 GPU and the driver encodes TMA descriptors; otherwise
// why not. Never throws (a failed query is cleared).
// The devices (0..63) that passed are remembered (their compute capability and the driver's
// entry point cannot change within a process): the router asks this four times per call.
inline std::string sm90_tma_unsupported_reason() {
  static std::atomic<std::uint64_t> passed{0};
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return "no usable CUDA device";
  }
  const std::uint64_t bit = dev >= 0 && dev < 64 ? std::uint64_t{1} << dev : 0;
  if (bit != 0 && (passed.load(std::memory_order_acquire) & bit) != 0) return {};
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return "no usable CUDA device";
  }
  if (major != 9 || minor != 0) {
    std::ostringstream os;
    os << "needs an sm_90 GPU (wgmma, built for sm_90a), device " << dev << " is sm_" << major << minor;
    return os.str();
  }
  if (!sm90::encode_tiled_fn()) return "cuTensorMapEncodeTiled not available from the driver";
  passed.fetch_or(bit, std::memory_order_acq_rel);
  return {};
}

// The element type of a weight map: e4m3 bytes, or the activation's 16-bit type.
inline CUtensorMapDataType weight_tmap_dtype(bool fp8, DType act) {
  return fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
             : act == DType::kFp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// Expert weights [experts, rows, inner] at `base` (bf16 / fp16 by `act`, or e4m3 when fp8) as a 3D
// map (dims innermost first; strides in bytes of dims 1 and 2), box [128 bytes of the inner dim,
// box_rows rows, box_planes experts (consecutive planes, one after the other in shared memory)],
// 128-byte swizzle, zeros outside the tensor. Throws Error(kCudaError)
// naming `who` when the driver refuses it.
inline void encode_weight_tmap(CUtensorMap* map, const void* base, bool fp8, DType act, std::int64_t inner,
                               std::int64_t rows, std::int64_t experts, int box_rows, const char* who,
                               int box_planes = 1) {
  // A serving engine calls with the same weight tensors every step: the maps encoded on this
  // thread are kept (the key is everything the map encodes; the map holds no data, so a freed and
  // reused address with the same shape gives the same map). A whole model's layers need one or two
  // maps each per kernel family, more than the 32 the first cache kept, which an eager caller then
  // encoded again every call (~1 us each): 128 sets of two, the key hashed to its set, the way
  // written longer ago replaced.
  struct Cached {
    const void* base;
    std::int64_t inner, rows, experts;
    int box_rows, box_planes, fp8, act;
    CUtensorMap map;
  };
  constexpr int kSets = 128;
  struct Cache {
    Cached way[kSets][2];
    std::uint8_t next_way[kSets];
  };
  // On the heap at a thread's first encode (~50 KB): the library's thread-local storage stays a
  // pointer (a dlopen'ed module, Python's, has little static TLS to spare).
  thread_local std::unique_ptr<Cache> cache;
  if (!cache) cache = std::make_unique<Cache>();  // value-initialized: every entry's base null
  std::uint64_t h = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(base)) >> 4;
  for (const std::uint64_t v : {static_cast<std::uint64_t>(inner), static_cast<std::uint64_t>(rows),
                                static_cast<std::uint64_t>(experts),
                                static_cast<std::uint64_t>(box_rows) * 4 + (fp8 ? 2 : 0) + (act == DType::kFp16 ? 1 : 0),
                                static_cast<std::uint64_t>(box_planes)})
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  const int set = static_cast<int>((h >> 32) % kSets);
  for (const Cached& c : cache->way[set]) {
    if (c.base == base && c.base != nullptr && c.inner == inner && c.rows == rows && c.experts == experts &&
        c.box_rows == box_rows && c.box_planes == box_planes && c.fp8 == static_cast<int>(fp8) &&
        c.act == static_cast<int>(act)) {
      *map = c.map;
      return;
    }
  }
  const std::int64_t es = fp8 ? 1 : 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(experts)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(inner * es), static_cast<cuuint64_t>(rows * inner * es)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / es), static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(box_planes)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType dtype = weight_tmap_dtype(fp8, act);
  const CUresult res = sm90::encode_tiled_fn()(map, dtype, 3, const_cast<void*>(base), dims, strides, box,
                                               elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    std::ostringstream os;
    os << who << ": cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(res) << ") for weights ["
       << experts << ", " << rows << ", " << inner << "]";
    throw Error(Status::kCudaError, os.str());
  }
  Cached& c = cache->way[set][cache->next_way[set]];
  cache->next_way[set] ^= 1u;
  c = Cached{base, inner, rows, experts, box_rows, box_planes, static_cast<int>(fp8), static_cast<int>(act), *map};
}

// The weights B [E, rows_b, k_dim] of a grouped GEMM `p`.
inline void encode_weight_tmap(CUtensorMap* map, const GroupedGemmParams& p, std::int64_t rows_b, int box_rows,
                               const char* who) {
  encode_weight_tmap(map, p.b, p.scheme != Scheme::kBf16, p.act_dtype, p.k_dim, rows_b, p.num_experts, box_rows, who);
}

}  // namespace moekit::cuda::gemm_common
