#!/usr/bin/env bash
# Session 63's prepared measurement call (main, no kernel change): where the fp8 chains that stay
# furthest from their targets spend a call, before choosing the next change (METHOD.md: count,
# then measure, then change).
#   1. build (gpu_check.sh configure, build);
#   2. per-kernel times (profile_kernels.sh, Nsight Compute, one call) at TP8 M = 64 of the fp8
#      chains against their bf16 chains: mixtral (token-major; fp8 1.35x of its target on the H100
#      against bf16's 1.08x), gpt-oss (Swap-AB; 1.40x against 1.10x), qwen3-235b (the cluster form);
#   3. warp-stall sampling of the per-expert MLP kernel at qwen3-30b TP8 fp8 M = 64 (the activation's
#      cold code, `no_inst`, and the routing after session 63's quads).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
timeout $(( $(left) - 150 )) bash tools/scripts/profile_kernels.sh "$BB" "mixtral-8x7b 8 64 fp8_per_tensor" \
  "mixtral-8x7b 8 64 bf16" "gpt-oss-120b 8 64 fp8_per_tensor" "gpt-oss-120b 8 64 bf16" \
  "qwen3-235b-a22b 8 64 fp8_per_tensor" >"$O/kernel-times.txt" 2>&1
echo "kernel times rc=$? (left $(left)s)"; grep -E "^###|tokmajor|swapab|kshort|expert_mlp|quant|combine|routing" "$O/kernel-times.txt" | head -60
timeout $(( $(left) - 20 )) bash tools/scripts/stall_sampling.sh "$BB" expert_mlp 1 --preset qwen3-30b-a3b --tp 8 \
  --tokens 64 --scheme fp8_per_tensor --no-baseline --no-host-time >"$O/stalls-expert-mlp-fp8-m64.md" 2>&1
echo "stalls rc=$? (left $(left)s)"; head -40 "$O/stalls-expert-mlp-fp8-m64.md"
finish
