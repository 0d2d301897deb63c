// Host launcher of the sm_90 grouped expert GEMMs: checks the params (moekit::Error naming the
// field and the values), derives the kernel arguments and the grid, and calls the instantiation
// of the scheme (inst/*.cu). No kernel template is included here; nothing synchronizes the host.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include <cuda_runtime.h>

#include "cuda/common/check.cuh"
#include "cuda/common/device_attr.cuh"
#include "cuda/kernels/mma/config.hpp"
#include "cuda/kernels/mma/launch_sm90.hpp"
#include "cuda/kernels/mma/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

[[noreturn]] void fail(Status status, const std::string& message) {
  throw Error(status, "grouped_gemm (sm90): " + message);
}

std::string num(std::int64_t v) { return std::to_string(v); }

bool aligned(const void* ptr, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}

const char* epilogue_name(GemmEpilogue ep) {
  return ep == GemmEpilogue::kGateUpActivation ? "gate_up_activation" : "bias_weight_scatter";
}

void check_params(const GroupedGemmParams& p) {
  const bool gemm1 = p.epilogue == GemmEpilogue::kGateUpActivation;
  if (!gemm1 && p.epilogue != GemmEpilogue::kBiasWeightScatter)
    fail(Status::kInvalidArgument, "unknown epilogue " + num(static_cast<int>(p.epilogue)));
  if (p.num_experts < 1) fail(Status::kInvalidArgument, "num_experts = " + num(p.num_experts) + ", expected >= 1");
  if (p.max_rows < 0 || p.max_rows > std::numeric_limits<std::int32_t>::max())
    fail(Status::kInvalidArgument, "max_rows = " + num(p.max_rows) + ", expected in [0, 2^31) (int32 row offsets)");
  if (p.n_out < 0 || p.k_dim < 0)
    fail(Status::kInvalidArgument, "n_out = " + num(p.n_out) + ", k_dim = " + num(p.k_dim) + ", expected >= 0");

  switch (p.scheme) {
    case Scheme::kBf16:
      if (p.act_dtype != DType::kBf16 && p.act_dtype != DType::kFp16)
        fail(Status::kInvalidArgument, std::string("act_dtype = ") + dtype_name(p.act_dtype) +
                                           " for scheme bf16, expected bf16 or fp16");
      break;
    case Scheme::kFp8PerTensor:
    case Scheme::kFp8PerChannel:
    case Scheme::kFp8Block128:
      if (p.a_scale == nullptr || p.b_scale == nullptr)
        fail(Status::kInvalidArgument, std::string("scheme ") + scheme_name(p.scheme) +
                                           " needs a_scale and b_scale (got " + (p.a_scale ? "a_scale" : "null") +
                                           ", " + (p.b_scale ? "b_scale" : "null") + ")");
      break;
    default: fail(Status::kInvalidArgument, "unknown scheme " + num(static_cast<int>(p.scheme)));
  }
  switch (p.activation.kind) {
    case Activation::kSilu:
    case Activation::kGelu:
    case Activation::kSwigluOai: break;
    default: fail(Status::kInvalidArgument, "unknown activation " + num(static_cast<int>(p.activation.kind)));
  }
  if (p.max_rows == 0 || p.n_out == 0) return;  // nothing to launch

  if (p.row_offsets == nullptr) fail(Status::kInvalidArgument, "row_offsets is null");
  if (p.out == nullptr) fail(Status::kInvalidArgument, "out is null");
  if (p.k_dim > 0 && (p.a == nullptr || p.b == nullptr))
    fail(Status::kInvalidArgument, std::string("A or B is null (a ") + (p.a ? "set" : "null") + ", b " +
                                       (p.b ? "set" : "null") + ")");
  if (p.gather_a_by_token && (p.sorted_slots == nullptr || p.top_k < 1))
    fail(Status::kInvalidArgument, "gather_a_by_token needs sorted_slots and top_k >= 1 (top_k = " + num(p.top_k) + ")");
  if (!gemm1 && p.sorted_slots == nullptr)
    fail(Status::kInvalidArgument, "epilogue bias_weight_scatter needs sorted_slots");
  const bool use_weight = gemm1 ? p.weight_on_input : !p.weight_on_input;
  if (use_weight && (p.topk_weights == nullptr || p.sorted_slots == nullptr))
    fail(Status::kInvalidArgument, std::string("epilogue ") + epilogue_name(p.epilogue) +
                                       (p.weight_on_input ? " with" : " without") +
                                       " weight_on_input needs topk_weights and sorted_slots");
  if (p.bias != nullptr && p.bias_dtype != DType::kFp32 && p.bias_dtype != DType::kBf16 &&
      p.bias_dtype != DType::kFp16)
    fail(Status::kInvalidArgument, std::string("bias_dtype = ") + dtype_name(p.bias_dtype) +
                                       ", expected fp32, bf16 or fp16");
  if (gemm1) {
    if (p.out_dtype != DType::kBf16 && p.out_dtype != DType::kFp16 && p.out_dtype != DType::kFp32)
      fail(Status::kInvalidArgument, std::string("out_dtype = ") + dtype_name(p.out_dtype) +
                                         " for gate_up_activation, expected bf16, fp16 or fp32");
  } else if (p.out_dtype != DType::kFp32) {
    fail(Status::kInvalidArgument, std::string("out_dtype = ") + dtype_name(p.out_dtype) +
                                       " for bias_weight_scatter, expected fp32");
  }
  const std::string absmax_why = out_absmax_unsupported_reason(p);
  if (!absmax_why.empty()) fail(Status::kInvalidArgument, absmax_why);

  // Layout limits of this kernel (valid input it cannot run).
  if (p.n_out % 2 != 0)
    fail(Status::kNotSupported, "n_out = " + num(p.n_out) + " must be even (columns are stored in pairs)");
  const std::int64_t elem = p.scheme == Scheme::kBf16 ? 2 : 1;
  const std::int64_t k_bytes = p.k_dim * elem;
  if (k_bytes % 4 != 0)
    fail(Status::kNotSupported, "k_dim = " + num(p.k_dim) + " gives rows of " + num(k_bytes) +
                                    " bytes, expected a multiple of 4 bytes");
  if (!aligned(p.a, 4) || !aligned(p.b, 4))
    fail(Status::kNotSupported, "A and B must be 4-byte aligned");
  const std::uintptr_t out_align = p.out_dtype == DType::kFp32 ? 8 : 4;
  if (!aligned(p.out, out_align))
    fail(Status::kNotSupported, "out must be " + num(static_cast<std::int64_t>(out_align)) + "-byte aligned");
  const std::int64_t cols = mma_sm90::TileConfig::out_cols(p.epilogue);
  if ((p.n_out + cols - 1) / cols > 65535)
    fail(Status::kNotSupported, "n_out = " + num(p.n_out) + " needs more than 65535 column tiles");
}

}  // namespace

void launch_grouped_gemm(const GroupedGemmParams& params, void* stream, bool pdl) {
  using namespace mma_sm90;
  check_params(params);
  if (params.max_rows == 0 || params.n_out == 0) return;

  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  // The compute capability, asked once per device (two of the chain's launches are this one's).
  const int major = device_attribute<cudaDevAttrComputeCapabilityMajor>(device);
  const int minor = device_attribute<cudaDevAttrComputeCapabilityMinor>(device);
  if (major != 9 || minor != 0)
    fail(Status::kNotSupported, "built for sm_90a; device " + num(device) + " is sm_" + num(major) + num(minor));

  const bool gemm1 = params.epilogue == GemmEpilogue::kGateUpActivation;
  KernelArgs args;
  args.p = params;
  args.k_bytes = params.k_dim * (params.scheme == Scheme::kBf16 ? 2 : 1);
  args.rows_b = gemm1 ? 2 * params.n_out : params.n_out;
  args.half_row_step = gemm1 ? params.n_out : TileConfig::kHalfRowsB;
  args.half_col_step = gemm1 ? 0 : TileConfig::kHalfRowsB;
  const std::int64_t k_tiles = (args.k_bytes + TileConfig::kBlockKBytes - 1) / TileConfig::kBlockKBytes;
  const std::int64_t k_groups = (params.k_dim + kBlockQuant - 1) / kBlockQuant;
  const std::int64_t b_blocks = (args.rows_b + kBlockQuant - 1) / kBlockQuant;
  if (k_tiles > std::numeric_limits<int>::max() ||
      b_blocks * k_groups > std::numeric_limits<int>::max())
    fail(Status::kNotSupported, "k_dim = " + num(params.k_dim) + " is too large");
  args.num_k_tiles = static_cast<int>(k_tiles);
  args.num_k_groups = static_cast<int>(k_groups);
  args.num_b_blocks = static_cast<int>(b_blocks);
  // Widest cp.async that divides the row pitch and both bases (e.g. fp8 w2 with N = 360: 8 bytes).
  args.vec_bytes = 4;
  for (int v : {16, 8}) {
    if (args.k_bytes % v == 0 && aligned(params.a, v) && aligned(params.b, v)) {
      args.vec_bytes = v;
      break;
    }
  }

  // Row tiles: sum_e ceil(rows_e / BM) <= sum_e floor(rows_e / BM) + (experts with rows)
  // <= floor(max_rows / BM) + min(E, max_rows); the surplus CTAs exit at once. The min() keeps
  // decode grids small (qwen3 TP8 M = 1: 8 row CTAs, not 129), so few CTAs scan the offsets and exit.
  const std::int64_t grid_x = params.max_rows / TileConfig::kBlockM +
                              std::min<std::int64_t>(params.num_experts, params.max_rows);
  const std::int64_t cols = TileConfig::out_cols(params.epilogue);
  const std::int64_t grid_y = (params.n_out + cols - 1) / cols;
  if (grid_x > std::numeric_limits<int>::max())
    fail(Status::kNotSupported, "max_rows = " + num(params.max_rows) + " with E = " + num(params.num_experts) +
                                    " needs too many row tiles");
  const auto gx = static_cast<unsigned>(grid_x), gy = static_cast<unsigned>(grid_y);
  switch (params.scheme) {
    case Scheme::kBf16:
      if (params.act_dtype == DType::kFp16)
        run_sm90_fp16(args, gx, gy, stream, pdl);
      else
        run_sm90_bf16(args, gx, gy, stream, pdl);
      break;
    case Scheme::kFp8Block128: run_sm90_e4m3_block128(args, gx, gy, stream, pdl); break;
    default: run_sm90_e4m3(args, gx, gy, stream, pdl); break;
  }
}

}  // namespace moekit::cuda
