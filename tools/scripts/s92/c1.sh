#!/usr/bin/env bash
# Branch s92: Swap-AB GEMM2's direct epilogue (each consumer thread stores its accumulators; no
# shared-memory staging, no CTA barrier a tile). One device call, ~9.5 min, in order of need:
#   1. build; the A/B MOEKIT_SWAPAB_DIRECT=0 -> default at gpt-oss TP8 M = 16..256 (Swap-AB GEMM2),
#      bf16 / fp8_per_tensor / fp8_per_channel, and TP1 gpt-oss / mixtral M = 16, 64;
#   2. GEMM2's kernel time both ways (Nsight Compute, gpt-oss fp8 and bf16 M = 64);
#   3. the Swap-AB tests and memcheck / racecheck on the new one;
#   4. the whole GPU suite (gpu_check.sh's run_tests), then the TP8 grid if time is left.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
REPS=2 AB_SECONDS=110 ab direct "env MOEKIT_SWAPAB_DIRECT=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16,fp8_per_channel
REPS=2 AB_SECONDS=50 ab direct-tp1 "env MOEKIT_SWAPAB_DIRECT=0 $BB" "$BB" --backend cuda --tp 1 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b,mixtral-8x7b --tokens 16,64 --scheme fp8_per_tensor,bf16
for sch in fp8_per_tensor bf16; do for v in 0 1; do
  MOEKIT_SWAPAB_DIRECT=$v timeout 30 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    -k regex:swapab_sm90_kernel -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme $sch --iters 1 \
    --no-baseline --no-host-time >"$O/ncu-$sch-direct$v.txt" 2>&1
  echo "ncu $sch direct=$v: $(grep -A8 'swapab_sm90_kernel<[A-Za-z0-9]*, 0, 0>' "$O/ncu-$sch-direct$v.txt" | grep -E 'gpu__time' | awk '{print $NF}') us (left $(left)s)"
done; done
run_tests "Sm90SwapAbGemm.*" 120
sanitize memcheck "Sm90SwapAbGemm.Gemm2DirectEpilogueBitwiseEqualToStaged" 60
sanitize racecheck "Sm90SwapAbGemm.Gemm2DirectEpilogueBitwiseEqualToStaged" 70
cp "$O/tests.log" "$O/tests-swapab.log"
if [ $(left) -gt 200 ]; then
  timeout $(( $(left) - 110 )) $B/tests/moekit_cuda_tests >"$O/gpu-suite.log" 2>&1
  echo "gpu suite rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran|SKIPPED \]' "$O/gpu-suite.log" | tr '\n' ' ') (left $(left)s)"
  grep -E "^\[  FAILED" "$O/gpu-suite.log" | head
fi
[ $(left) -gt 100 ] && grid_tp8 bench/results/2026-12-06-1198758-h100-s87-grid-tp8.json
finish
