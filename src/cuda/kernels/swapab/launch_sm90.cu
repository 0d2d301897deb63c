// Host side of the Swap-AB decode GEMM: checks what the kernel supports (can_implement), builds the
// TMA descriptor of the expert weights, sizes the persistent grid and launches one of the
// explicit instantiations of inst/ (this file includes no kernel body).
#include "cuda/kernels/swapab/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/kernels/swapab/config.hpp"
#include "cuda/kernels/swapab/params.hpp"
#include "cuda/numerics/bias.cuh"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using swapab::KernelParams;

bool is_fp8(Scheme s) { return s != Scheme::kBf16; }

std::int64_t element_bytes(const GroupedGemmParams& p) { return is_fp8(p.scheme) ? 1 : 2; }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Upper bound of the work items (expert, group of T tiles, chunk of 64 rows) from host-known
// sizes: sum_e ceil(rows_e / 64) <= (experts with rows) + rows / 64.
// The router (core/path_router.cpp, swapab_max_items) predicts the same count to choose split_k.
std::int64_t max_items(const GroupedGemmParams& p, int tiles_per_item = 1) {
  const std::int64_t groups = ceil_div(ceil_div(p.n_out, swapab::kTileRows), std::max(1, tiles_per_item));
  return groups * (std::min<std::int64_t>(p.num_experts, p.max_rows) + p.max_rows / swapab::kMaxTokens);
}

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = "swapab_sm90: " + msg;
  return false;
}

int sm_count_of_current_device() {
  int dev = 0, sms = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}


// Tiles per item: T consecutive tiles share one item's tokens when a rank's K stages are few,
// up to kTargetItemStages stages per item, as long as the items stay >= 2 per cluster.
int choose_tiles_per_item(const GroupedGemmParams& p, int num_tiles, int stages_per_rank, int clusters) {
  int tiles = 1;
  while (tiles < std::min(num_tiles, swapab::kMaxTilesPerItem) && stages_per_rank * tiles < swapab::kTargetItemStages &&
         max_items(p, tiles + 1) >= 2 * static_cast<std::int64_t>(clusters))
    ++tiles;
  return tiles;
}

}  // namespace

bool can_implement_swapab_sm90(const GroupedGemmParams& p, std::string* why) {
  const bool gate_up = p.epilogue == GemmEpilogue::kGateUpActivation;
  const std::string common_why = gemm_common::tma_gemm_unsupported_reason(p, swapab::kMaxExperts);
  if (!common_why.empty()) return fail(why, common_why);
  const std::int64_t es = element_bytes(p);
  const std::int64_t rows_b = gate_up ? 2 * p.n_out : p.n_out;
  if (p.k_dim >= (std::int64_t{1} << 32) || rows_b >= (std::int64_t{1} << 31) ||
      rows_b * p.k_dim * es >= (std::int64_t{1} << 40))
    return fail(why, "weight tensor too large for a TMA descriptor");
  if (max_items(p) >= INT32_MAX) return fail(why, "too many work items (max_rows too large for this path)");
  if (!gate_up && p.out_dtype != DType::kFp32)
    return fail(why, std::string("GEMM2 out_dtype must be fp32, got ") + dtype_name(p.out_dtype));
  const std::string device_why = gemm_common::sm90_tma_unsupported_reason();
  if (!device_why.empty()) return fail(why, device_why);
  return true;
}

void launch_grouped_gemm_swapab_sm90(const GroupedGemmParams& p, void* stream) {
  launch_grouped_gemm_swapab_sm90(p, stream, 1);
}

void launch_grouped_gemm_swapab_sm90(const GroupedGemmParams& p, void* stream, int split_k, int tiles_per_item,
                                     bool pdl) {
  if (split_k != 1 && split_k != 2 && split_k != 4 && split_k != 8) {
    std::ostringstream os;
    os << "swapab_sm90: split_k = " << split_k << ", expected 1, 2, 4 or 8 (the router's choice)";
    throw Error(Status::kInvalidArgument, os.str());
  }
  if (tiles_per_item < 0 || tiles_per_item > swapab::kMaxTilesPerItem) {
    std::ostringstream os;
    os << "swapab_sm90: tiles_per_item = " << tiles_per_item << ", expected 0 (auto) or 1.."
       << swapab::kMaxTilesPerItem;
    throw Error(Status::kInvalidArgument, os.str());
  }
  if (p.max_rows == 0) return;
  std::string why;
  if (!can_implement_swapab_sm90(p, &why)) throw Error(Status::kNotSupported, why);

  const bool gate_up = p.epilogue == GemmEpilogue::kGateUpActivation;
  const bool fp8 = is_fp8(p.scheme);
  const std::int64_t es = element_bytes(p);
  const std::int64_t rows_b = gate_up ? 2 * p.n_out : p.n_out;

  KernelParams kp{};
  // Weights [E, rows_b, k_dim], a box of 128 bytes of K by one 64-row tile.
  gemm_common::encode_weight_tmap(&kp.tmap_b, p, rows_b, swapab::kTileRows, "swapab_sm90");
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
  kp.num_tiles = static_cast<int>(ceil_div(p.n_out, swapab::kTileRows));
  kp.num_k_stages = static_cast<int>(ceil_div(p.k_dim * es, swapab::kStageKBytes));
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

  // Persistent grid: one CTA per SM (the pipeline takes ~200 KB of shared memory), clusters of
  // S CTAs per work item, never more clusters than work items can exist.
  if (max_items(p) == 0) return;
  const int sms = sm_count_of_current_device();
  const int split = split_k;
  kp.split_k = split;
  kp.tiles_per_item = tiles_per_item != 0
                          ? std::min(tiles_per_item, kp.num_tiles)
                          : choose_tiles_per_item(p, kp.num_tiles, static_cast<int>(ceil_div(kp.num_k_stages, split)),
                                                  std::max(1, sms / split));
  kp.smem = swapab::smem_layout(gate_up, p.num_experts, split);
  const std::int64_t items = max_items(p, kp.tiles_per_item);
  const std::int64_t clusters = std::min<std::int64_t>(items, std::max(1, sms / split));
  const int grid = static_cast<int>(clusters * split);

  if (fp8) {
    const bool block = p.scheme == Scheme::kFp8Block128;
    if (gate_up) {
      if (block) swapab::run_swapab_sm90<Operand::kE4m3, true, true>(kp, grid, stream, pdl);
      else swapab::run_swapab_sm90<Operand::kE4m3, true, false>(kp, grid, stream, pdl);
    } else {
      if (block) swapab::run_swapab_sm90<Operand::kE4m3, false, true>(kp, grid, stream, pdl);
      else swapab::run_swapab_sm90<Operand::kE4m3, false, false>(kp, grid, stream, pdl);
    }
  } else if (p.act_dtype == DType::kFp16) {
    if (gate_up) swapab::run_swapab_sm90<Operand::kF16, true, false>(kp, grid, stream, pdl);
    else swapab::run_swapab_sm90<Operand::kF16, false, false>(kp, grid, stream, pdl);
  } else {
    if (gate_up) swapab::run_swapab_sm90<Operand::kBf16, true, false>(kp, grid, stream, pdl);
    else swapab::run_swapab_sm90<Operand::kBf16, false, false>(kp, grid, stream, pdl);
  }
}

}  // namespace moekit::cuda
