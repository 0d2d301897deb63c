#!/usr/bin/env bash
# Branch s88 (prepared in session 65, compiled, not GPU-run): Swap-AB's clusters walk equal
# ranges of the call's tiles (kernel_sm90.cuh ItemWalk) instead of whole items of T tiles round
# robin. gpt-oss fp8 TP8 GEMM2 at M = 64 has ~1660 items of 3 tiles over 264 CTAs: 7 or 6 items a
# CTA, so the kernel ends with the 7-item CTAs (21 tiles) where an equal range is 19 (Nsight
# Compute at eb9ca55: SM active cycles 86 % of elapsed). ~6 min:
#   1. build; the Swap-AB and gpt-oss preset tests (the new BalancedWalkBitwiseEqualToRoundRobin
#      among them), memcheck on the new test;
#   2. A/B MOEKIT_SWAPAB_BALANCED=0 -> default: gpt-oss TP8 M = 16..256 fp8 per tensor / channel,
#      bf16; gpt-oss and mixtral TP1 M = 16, 64 (other Swap-AB shapes);
#   3. GEMM2's kernel time and SM activity both ways at gpt-oss fp8 M = 64 (Nsight Compute).
# carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:*PresetGptOss120b*" 90
sanitize memcheck "Sm90SwapAbGemm.BalancedWalkBitwiseEqualToRoundRobin" 60
REPS=2 AB_SECONDS=110 ab balanced "env MOEKIT_SWAPAB_BALANCED=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,fp8_per_channel,bf16
REPS=2 AB_SECONDS=60 ab balanced-tp1 "env MOEKIT_SWAPAB_BALANCED=0 $BB" "$BB" --backend cuda --tp 1 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b,mixtral-8x7b --tokens 16,64 --scheme fp8_per_tensor,bf16
for v in 0 1; do
  MOEKIT_SWAPAB_BALANCED=$v timeout 30 ncu --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max \
    -k regex:swapab -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 \
    --no-baseline --no-host-time >"$O/ncu-balanced-$v.txt" 2>&1
  echo "ncu balanced=$v rc=$? (left $(left)s)"; grep -E "swapab_sm90_kernel|gpu__time|sm__cycles|gpc__cycles" "$O/ncu-balanced-$v.txt" | head -8
done
finish
