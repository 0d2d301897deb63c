// Host side of the static K-short GEMM2: what the kernel supports, the TMA descriptors of A and
// the weights, the ring depth, the persistent grid, and the instantiation of inst/kshort_sm90.cu.
// No kernel template is included here.
#include "cuda/kernels/kshort/launch_sm90.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "core/env.hpp"
#include "cuda/kernels/gemm_common/tma_host.cuh"
#include "cuda/kernels/kshort/config.hpp"
#include "cuda/kernels/kshort/params.hpp"
#include "moekit/error.hpp"

namespace moekit::cuda {
namespace {

using gemm_common::ceil_div;
using gemm_common::element_bytes;

thread_local int launches = 0;

std::int64_t k_blocks_of(const GroupedGemmParams& p) {
  return ceil_div(p.k_dim * element_bytes(p), kshort::kKBlockBytes);
}

// Units from host-known sizes: sum_e ceil(rows_e / 64) <= (experts with rows) + rows / 64.
std::int64_t max_units(const GroupedGemmParams& p) {
  const std::int64_t experts_with_rows = std::min<std::int64_t>(p.num_experts, p.max_rows);
  return (ceil_div(p.max_rows, kshort::kBlockM) + experts_with_rows) * ceil_div(p.n_out, kshort::kBlockN);
}

// Whether this kernel can run `p`; where not, the reason goes to `why` when given. A call it
// takes, or one it declines with why == null (token-major's launcher, at every GEMM2), builds no
// string.
bool supported(const GroupedGemmParams& p, std::string* why) {
  const auto fail = [why](const std::string& msg) {
    if (why != nullptr) *why = "kshort: " + msg;
    return false;
  };
  if (p.epilogue != GemmEpilogue::kBiasWeightScatter) return fail("GEMM2 (bias_weight_scatter) only");
  if (p.scheme != Scheme::kBf16 && p.scheme != Scheme::kFp8PerTensor)
    return fail("scheme bf16 or fp8_per_tensor only (token-major runs the per-channel and block128 scales)");
  if (p.bias != nullptr) return fail("no bias (token-major runs the biased GEMM2s)");
  if (p.gather_a_by_token) return fail("A must be the sorted intermediate (no token gather)");
  if (p.route.ids != nullptr) return fail("GEMM2 does not route (the routing in the kernel is GEMM1's)");
  const std::int64_t kb = k_blocks_of(p);
  if (kb > kshort::kMaxKBlocks) {
    if (why == nullptr) return false;
    std::ostringstream os;
    os << "k_dim = " << p.k_dim << " is " << p.k_dim * element_bytes(p) << " bytes a row, more than "
       << kshort::kMaxKBlocks * kshort::kKBlockBytes << " (not K-short)";
    return fail(os.str());
  }
  const std::string common = gemm_common::tma_gemm_unsupported_reason(p, kshort::kMaxExperts);
  if (!common.empty()) return fail(common);
  if (p.n_out % 2 != 0) return fail("n_out must be even (the epilogue stores pairs of columns)");
  if (p.n_out >= (std::int64_t{1} << 31) || p.n_out * p.k_dim * element_bytes(p) >= (std::int64_t{1} << 40))
    return fail("weight tensor too large for a TMA descriptor");
  if (p.max_rows >= (std::int64_t{1} << 31) || max_units(p) >= (std::int64_t{1} << 30))
    return fail("max_rows too large for this kernel");
  const bool y16 = (p.out_dtype == DType::kBf16 || p.out_dtype == DType::kFp16) && p.out_dtype == p.act_dtype;
  if (p.out_dtype != DType::kFp32 && !y16)
    return fail(std::string("out_dtype must be fp32 or the activation dtype (") + dtype_name(p.act_dtype) +
                ", bf16 or fp16), got " + dtype_name(p.out_dtype));
  // The epilogue stores pairs of columns: 4 bytes of 16-bit y, 8 of fp32.
  const std::uintptr_t out_align = p.out_dtype == DType::kFp32 ? 8 : 4;
  if (p.max_rows > 0 && reinterpret_cast<std::uintptr_t>(p.out) % out_align != 0)
    return fail(out_align == 8 ? "out must be 8-byte aligned (fp32 pairs)" : "out must be 4-byte aligned");
  const std::string device = gemm_common::sm90_tma_unsupported_reason();
  return device.empty() || fail(device);
}

}  // namespace

std::string kshort_gemm2_unsupported_reason(const GroupedGemmParams& p) {
  std::string why;
  return supported(p, &why) ? std::string() : why;
}

int kshort_gemm2_launches() { return launches; }

bool launch_kshort_gemm2_if_wanted(const GroupedGemmParams& p, void* stream, bool pdl, std::uint64_t* phases,
                                   int phase_ctas) {
  if (!detail::env_switch(detail::EnvVar::kKshortGemm2, true)) return false;
  if (!supported(p, nullptr)) return false;  // token-major runs it
  if (p.max_rows == 0) return true;
  const std::int64_t es = element_bytes(p);
  const bool fp8 = p.scheme != Scheme::kBf16;

  kshort::KernelParams kp{};
  gemm_common::encode_weight_tmap(&kp.tmap_b, p, /*rows_b=*/p.n_out, kshort::kBoxRows, "kshort_sm90");
  gemm_common::encode_weight_tmap(&kp.tmap_a, p.a, fp8, p.act_dtype, p.k_dim, p.max_rows, /*experts=*/1,
                                  kshort::kBlockM, "kshort_sm90 (A rows)");
  gemm_common::fill_common_fields(kp, p, /*rows_b=*/p.n_out, es);
  kp.out_type = out_type_of(p.out_dtype);
  kp.num_col_tiles = static_cast<int>(ceil_div(p.n_out, kshort::kBlockN));
  kp.num_k_stages = static_cast<int>(k_blocks_of(p));
  kp.smem = kshort::smem_layout(p.num_experts, kshort::stages_for(p.num_experts, kp.num_k_stages));
  kp.phases = phases;
  kp.phase_ctas = phases != nullptr ? phase_ctas : 0;

  // One CTA per SM (~202 KB of shared memory each), never more than units can exist; each takes a
  // contiguous share of the units the table gives.
  const int grid = gemm_common::persistent_grid(max_units(p), 1, gemm_common::sm_count_of_current_device());
  gemm_common::run_instantiation(p, /*gate_up=*/false, [&](auto op, auto, auto) {
    kshort::run_kshort_sm90<decltype(op)::value>(kp, grid, stream, pdl);
  });
  ++launches;
  return true;
}

}  // namespace moekit::cuda
