// Host side of the expert-parallel bookkeeping: fills each kernel's parameters from core's call,
// chooses the row vector width by alignment, sizes the grids and launches the explicit
// instantiations of inst/ (this file includes no kernel body).
#include "cuda/kernels/ep/launch.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/faults.cuh"
#include "cuda/kernels/ep/config.hpp"
#include "cuda/kernels/ep/params.hpp"

namespace moekit::cuda {
namespace {

unsigned grid_for(std::int64_t items) { return static_cast<unsigned>(std::min<std::int64_t>(items, ep::kMaxGrid)); }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_ep_dispatch(const detail::EpDispatchCall& c) {
  const std::int64_t slots = c.num_tokens * c.top_k;
  // moekit::ep_dispatch checked C >= M*k and ep*C < 2^31 (slot_route is int32).
  const std::size_t smem = static_cast<std::size_t>(c.ep_size) * sizeof(int);
  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  ep::EpPlanParams plan;
  plan.ids = c.topk_ids;
  plan.slots = slots;
  plan.num_experts = c.num_experts_global;
  plan.ep = c.ep_size;
  plan.capacity = c.capacity;
  plan.route = c.slot_route;
  plan.counts = c.send_counts;
  plan.top_k = c.top_k;
  plan.faults = device_fault_record(device);
  ep::run_ep_plan(plan, smem, c.stream);
  if (slots == 0) return;
  const std::int64_t row_bytes = c.hidden_size * 2;
  ep::EpPackParams pack;
  pack.hidden = c.hidden;
  pack.ids = c.topk_ids;
  pack.weights = c.topk_weights;
  pack.route = c.slot_route;
  pack.slots = slots;
  pack.top_k = c.top_k;
  pack.send = c.send_hidden;
  pack.meta = c.send_meta;
  if (row_bytes % 16 == 0 && aligned16(c.hidden) && aligned16(c.send_hidden)) {
    pack.row_vecs = row_bytes / 16;
    ep::run_ep_pack<16>(pack, grid_for(slots), c.stream);
  } else {
    pack.row_vecs = c.hidden_size;
    ep::run_ep_pack<2>(pack, grid_for(slots), c.stream);
  }
}

void launch_ep_unpack(const detail::EpUnpackCall& c) {
  const std::int64_t rows = static_cast<std::int64_t>(c.ep_size) * c.capacity;
  if (rows == 0) return;
  const std::int64_t row_bytes = c.hidden_size * 2;
  ep::EpUnpackParams p;
  p.counts = c.recv_counts;
  p.meta = c.recv_meta;
  p.hidden = c.recv_hidden;
  p.rows = rows;
  p.capacity = c.capacity;
  p.first_expert = c.first_expert;
  p.num_local = c.num_local_experts;
  p.zero_unused = c.zero_unused_rows;
  p.local_ids = c.local_ids;
  p.local_weights = c.local_weights;
  if (row_bytes % 16 == 0 && aligned16(c.recv_hidden)) {
    p.row_vecs = row_bytes / 16;
    ep::run_ep_unpack<16>(p, grid_for(rows), c.stream);
  } else {
    p.row_vecs = c.hidden_size;
    ep::run_ep_unpack<2>(p, grid_for(rows), c.stream);
  }
}

void launch_ep_combine(const detail::EpCombineCall& c) {
  if (c.num_tokens == 0) return;
  // Rounded up to whole 16-byte words: the compiler reads rows[] two at a time (ld.shared.v2),
  // and compute-sanitizer flags the second half past an odd top_k.
  const std::size_t smem = static_cast<std::size_t>((c.top_k + 1) / 2 * 2) * sizeof(std::int64_t);
  ep::EpCombineParams p;
  p.route = c.slot_route;
  p.returned = c.returned;
  p.returned_rows = c.returned_rows;
  p.num_tokens = c.num_tokens;
  p.top_k = c.top_k;
  p.hidden_size = c.hidden_size;
  p.out = c.out;
  if (c.act_dtype == DType::kFp16)
    ep::run_ep_combine<DType::kFp16>(p, grid_for(c.num_tokens), smem, c.stream);
  else
    ep::run_ep_combine<DType::kBf16>(p, grid_for(c.num_tokens), smem, c.stream);
}

}  // namespace moekit::cuda
