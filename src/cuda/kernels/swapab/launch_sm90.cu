// Host side of the Swap-AB decode GEMM: checks what the kernel supports (can_implement), builds the
// TMA descriptor of the expert weights, sizes the persistent grid and launches one of the
// explicit instantiations of inst/ (this file includes no kernel body).
#include "cuda/kernels/swapab/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "core/env.hpp"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/kernels/swapab/config.hpp"
#include "cuda/kernels/swapab/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using swapab::KernelParams;
using gemm_common::ceil_div;
using gemm_common::element_bytes;

// Upper bound of the work items (expert, group of T tiles, chunk of 64 rows) from host-known
// sizes: sum_e ceil(rows_e / 64) <= (experts with rows) + rows / 64.
// The router (core/path_router.cpp, swapab_max_items) predicts the same count to choose split_k.
std::int64_t max_items(const GroupedGemmParams& p, int tiles_per_item = 1) {
  const std::int64_t groups = ceil_div(ceil_div(p.n_out, swapab::kTileRows), std::max(1, tiles_per_item));
  return groups * (std::min<std::int64_t>(p.num_experts, p.max_rows) + p.max_rows / swapab::kMaxTokens);
}

// MOEKIT_SWAPAB_KBLOCKS=1 keeps every launch on stages of one 128-byte K block (A/Bs, the test
// that compares the two bit for bit); read at every launch.
bool wide_stages_enabled() {
  const char* v = detail::env_value(detail::EnvVar::kSwapabKblocks);
  return v == nullptr || std::strcmp(v, "1") != 0;
}

// GEMM2 at split 1 runs two CTAs an SM (half the pipeline each: layouts within
// kSmemLimitTwoCtas, a grid of two CTAs an SM; so that one CTA's epilogue overlaps the other's
// main loop: the stall sampler had GEMM2's producer waiting on its consumer) where an item's K
// is short: at most kTwoCtasMaxKStages 128-byte stages (H200, same-run A/B at 2736aad: gpt-oss fp8 TP8 M = 32, 64 1.15x / 1.18x, TP1 fp8 up
// to 1.055x; mixtral TP1, 112-224 stages, 0.955-1.004: one CTA there).
// MOEKIT_SWAPAB_GEMM2_CTAS=1 or 2 forces one or two (A/Bs, tests); read at every launch.
constexpr int kTwoCtasMaxKStages = 64;
bool gemm2_two_ctas(int num_k_stages) {
  const char* v = detail::env_value(detail::EnvVar::kSwapabGemm2Ctas);
  if (v != nullptr && std::strcmp(v, "1") == 0) return false;
  if (v != nullptr && std::strcmp(v, "2") == 0) return true;
  return num_k_stages <= kTwoCtasMaxKStages;
}

// GEMM2's direct epilogue (params.hpp direct_epilogue) at split 1; MOEKIT_SWAPAB_DIRECT=0 keeps the
// staged one (A/Bs, the test that compares the two bit for bit); read at every launch, GEMM1's and
// split-K's too, where a value other than 0 or 1 is an error as well (detail::env_switch).
bool direct_epilogue_enabled() { return detail::env_switch(detail::EnvVar::kSwapabDirect, true); }

// The common small call on the kPlain instantiation (kernel_sm90.cuh: the wide stage loop only,
// its features compile-time constants, ~20 % of the general kernel's code) where the host can
// prove the kernel's wide-stage rule holds and the call has those features: at most
// kWideMaxTokens rows in all (so no expert has more: M * k <= 16, e.g. gpt-oss M <= 4, mixtral
// M <= 8, qwen3 / deepseek-v3 M <= 2), wide stages allowed (not fp8_block128 nor
// MOEKIT_SWAPAB_KBLOCKS=1), split 1, the scheme's own scale mode (bf16 / fp16 none, fp8_per_tensor
// per tensor; not fp8_per_channel), the router weight not on the input, TMA rows (not the 8-byte
// producer), and for GEMM2 the direct epilogue. The same bits as the general kernel, which takes
// wide stages for those calls too. MOEKIT_SWAPAB_PLAIN=0 keeps every call on the general kernels
// (A/Bs, the test comparing the two); read at every launch, any value but 0 or 1 an error.
bool swapab_plain(const GroupedGemmParams& p, const KernelParams& kp, bool gate_up, bool on) {
  return on && kp.allow_wide && p.max_rows <= swapab::kWideMaxTokens && kp.split_k == 1 &&
         (p.scheme == Scheme::kBf16 || p.scheme == Scheme::kFp8PerTensor) && kp.weight_on_input == 0 &&
         kp.b_rows8 == nullptr && (gate_up || kp.direct_epilogue);
}

thread_local int launches = 0;
thread_local int plain_launches = 0;

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = "swapab_sm90: " + msg;
  return false;
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
  const std::int64_t es = element_bytes(p);
  // GEMM2 takes rows of 8 bytes (the 8-byte-row producer); GEMM1 and fp8_block128 need 16 (TMA).
  const std::string common_why = gemm_common::tma_gemm_unsupported_reason(
      p, swapab::kMaxExperts, swapab::row_align(gate_up, p.scheme == Scheme::kFp8Block128));
  if (!common_why.empty()) return fail(why, common_why);
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
  // Checked on every launch, where it applies or not (a bad value is an error everywhere).
  const bool direct_on = direct_epilogue_enabled();
  const bool plain_on = detail::env_switch(detail::EnvVar::kSwapabPlain, true);
  if (p.max_rows == 0) return;
  std::string why;
  if (!can_implement_swapab_sm90(p, &why)) throw Error(Status::kNotSupported, why);

  const bool gate_up = p.epilogue == GemmEpilogue::kGateUpActivation;
  const std::int64_t es = element_bytes(p);
  const std::int64_t rows_b = gate_up ? 2 * p.n_out : p.n_out;

  KernelParams kp{};
  if (swapab::rows8_applies(gate_up, p.scheme == Scheme::kFp8Block128, p.k_dim * es)) {
    // Rows of 8 but not 16 bytes: no TMA map describes them; the producer copies them itself.
    kp.b_rows8 = static_cast<const std::uint8_t*>(p.b);
    kp.b_row_bytes = p.k_dim * es;
  } else {
    // Weights [E, rows_b, k_dim], a box of 128 bytes of K by one 64-row tile.
    gemm_common::encode_weight_tmap(&kp.tmap_b, p, rows_b, swapab::kTileRows, "swapab_sm90");
  }
  gemm_common::fill_common_fields(kp, p, rows_b, es);
  kp.num_col_tiles = static_cast<int>(ceil_div(p.n_out, swapab::kTileRows));
  kp.num_k_stages = static_cast<int>(ceil_div(p.k_dim * es, swapab::kStageKBytes));

  // Persistent grid: one CTA per SM (the pipeline takes ~200 KB of shared memory), or two with
  // half the pipeline each (gemm2_two_ctas), clusters of S CTAs per work item, never more clusters than
  // work items can exist.
  if (max_items(p) == 0) return;
  const int split = split_k;
  kp.split_k = split;
  const bool two_ctas = !gate_up && split == 1 && gemm2_two_ctas(kp.num_k_stages);
  const int sms = gemm_common::sm_count_of_current_device() * (two_ctas ? 2 : 1);  // CTA slots
  kp.tiles_per_item =
      tiles_per_item != 0
          ? std::min(tiles_per_item, kp.num_col_tiles)
          : choose_tiles_per_item(p, kp.num_col_tiles, static_cast<int>(ceil_div(kp.num_k_stages, split)),
                                  std::max(1, sms / split));
  const int smem_limit = two_ctas ? swapab::kSmemLimitTwoCtas : swapab::kSmemLimit;
  kp.smem = swapab::smem_layout(gate_up, p.num_experts, split, 1, smem_limit);
  // Wide stages (config.hpp wide_kblocks: 128-byte K blocks a stage) where every expert has at
  // most 16 rows, which the kernel checks on the device (the host knows only M*k); not
  // fp8_block128 (a stage is one scale group).
  kp.allow_wide = p.scheme != Scheme::kFp8Block128 && wide_stages_enabled();
  kp.smem_wide = swapab::smem_layout(gate_up, p.num_experts, split, swapab::wide_kblocks(gate_up), smem_limit);
  kp.out_absmax = p.out_absmax;  // checked by can_implement (GEMM1, fp8_per_tensor, fp32 out)
  kp.direct_epilogue = !gate_up && split == 1 && direct_on;
  kp.plain = swapab_plain(p, kp, gate_up, plain_on);
  const int grid = gemm_common::persistent_grid(max_items(p, kp.tiles_per_item), split, sms);

  // The inst/ instantiation of this operand, epilogue and scale layout (template arguments).
  gemm_common::run_instantiation(p, gate_up, [&](auto op, auto gate_up_c, auto block128_c) {
    swapab::run_swapab_sm90<decltype(op)::value, decltype(gate_up_c)::value, decltype(block128_c)::value>(
        kp, grid, stream, pdl);
  });
  ++launches;
  if (kp.plain) ++plain_launches;
}

int swapab_launches() { return launches; }
int swapab_plain_launches() { return plain_launches; }

}  // namespace moekit::cuda
