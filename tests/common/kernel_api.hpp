// The kernel-internal host APIs the GPU unit tests call directly (launchers and their plain
// parameter structs), included here and nowhere else in tests/: when a kernel family's files move
// (src/cuda/kernels/<family>/...), this is the one place whose includes change.
#pragma once

#include "core/path_router.hpp"  // the router's Swap-AB split, which the launcher takes
#include "cuda/common/faults.cuh"  // device_fault_record: the record a launcher's params name
#include "cuda/kernels/combine/launch_sm90.hpp"
#include "cuda/kernels/decode/launch_sm90.hpp"
#include "cuda/kernels/decode/params.hpp"
#include "cuda/kernels/gemv/launch_sm90.hpp"
#include "cuda/kernels/gemv/params.hpp"
#include "cuda/kernels/kshort/launch_sm90.hpp"
#include "cuda/kernels/fused_moe/config.hpp"
#include "cuda/kernels/fused_moe/launch_sm90.hpp"
#include "cuda/kernels/gemm_common/params.hpp"
#include "cuda/kernels/mma/launch_sm90.hpp"
#include "cuda/kernels/quant/launch_sm90.hpp"
#include "cuda/kernels/routing/config.hpp"  // kPermuteMultiCtaMinSlots, permute_chunk_count_words
#include "cuda/kernels/routing/launch_sm90.hpp"
#include "cuda/kernels/swapab/launch_sm90.hpp"
#include "cuda/kernels/tokmajor/launch_sm90.hpp"
