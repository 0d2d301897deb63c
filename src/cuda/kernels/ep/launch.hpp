// Host entry points of the expert-parallel bookkeeping kernels (docs/parallel.md): plan + pack of
// a rank's slots by destination rank, the receive-side unpack, and the deterministic combine of
// the returned rows. Arch-generic (kernel.cuh), built with the rest for sm_90a.
#pragma once

#include "core/parallel_backend.hpp"

namespace moekit::cuda {

/// Enqueue plan (one block: slot_route and send_counts) then pack (one block per slot) on
/// call.stream. Matches moekit::ep_dispatch's CPU reference bit for bit.
void launch_ep_dispatch(const detail::EpDispatchCall& call);
/// One block per received row: local ids / weights, optional zeroing of unused rows.
void launch_ep_unpack(const detail::EpUnpackCall& call);
/// out[m] = round_act(sum_j returned[slot_route[m*k + j]]) in j order, fp32.
void launch_ep_combine(const detail::EpCombineCall& call);

}  // namespace moekit::cuda
