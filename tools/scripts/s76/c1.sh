#!/usr/bin/env bash
# Branch s76's device call: Swap-AB GEMM2's weights of 8-byte rows (gpt-oss fp8 TP8, 360-byte w2
# rows) through TMA as row pairs, against MOEKIT_SWAPAB_ROWS8_TMA=0 (the producer's 8-byte copies)
# in the same build:
#   1. build; Sm90SwapAbGemm.* (EightByteRowPairsGiveTheCopiesBits: the two forms bit for bit, and
#      every case against the CPU reference); memcheck on the new test;
#   2. A/B copies -> pairs, auto, gpt-oss TP8 M = 16..256, fp8_per_tensor and fp8_per_channel, two
#      repeats (the GEMM2 plans there are Swap-AB at split 1: check the log's plan);
#   3. the kernel times of one call (profile_kernels.sh), both ways, gpt-oss fp8 M = 64.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*" 150
sanitize memcheck "Sm90SwapAbGemm.EightByteRowPairsGiveTheCopiesBits" 90
REPS=2 AB_SECONDS=150 ab gptoss-rows8 "env MOEKIT_SWAPAB_ROWS8_TMA=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,fp8_per_channel
for v in 0 1; do
  [ $(left) -gt 60 ] || break
  MOEKIT_SWAPAB_ROWS8_TMA=$v timeout 50 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum \
    -k regex:swapab $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 \
    --no-baseline --no-host-time >"$O/ncu-rows8-tma-$v.txt" 2>&1
  echo "ncu rows8_tma=$v rc=$? (left $(left)s)"; grep -E "swapab_sm90_kernel|gpu__time|dram__bytes" "$O/ncu-rows8-tma-$v.txt" | head -8
done
finish
