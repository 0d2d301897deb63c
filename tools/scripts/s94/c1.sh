#!/usr/bin/env bash
# Branch s94 (session 66; compiled, CPU tests pass, not GPU-run): Swap-AB's per-row values (per-
# channel scales, biases) loaded one tile ahead of their epilogue, and the K block a wide layout's
# last stage holds wholly past K neither copied nor multiplied (tools/scripts/s94/README.md).
# Before the call: git checkout s94 && tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh;
# carry [".deps", ".ab/mid"]. ~9 min:
#   1. build; the Swap-AB tests (the new RowValuesAheadAndPastKBlocksMatchReference among them),
#      memcheck and racecheck on the new test;
#   2. A/B main -> tree at gpt-oss TP8 M = 16..256 (three schemes) and TP1 gpt-oss / mixtral M = 16, 64;
#   3. GEMM1's and GEMM2's kernel times both builds (Nsight Compute, gpt-oss fp8 M = 64);
#   4. the whole GPU suite if time is left.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*" 120
sanitize memcheck "Sm90SwapAbGemm.RowValuesAheadAndPastKBlocksMatchReference" 60
sanitize racecheck "Sm90SwapAbGemm.RowValuesAheadAndPastKBlocksMatchReference" 70
wait_main_build || { echo "no main build"; finish; exit 1; }
REPS=2 AB_SECONDS=110 ab ahead "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16,fp8_per_channel
REPS=2 AB_SECONDS=50 ab ahead-tp1 "$MB" "$BB" --backend cuda --tp 1 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,mixtral-8x7b --tokens 16,64 --scheme fp8_per_tensor,bf16
for b in main tree; do
  bin=$BB; [ $b = main ] && bin=$MB
  timeout 30 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:swapab_sm90_kernel \
    -c 2 $bin --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 --no-baseline \
    --no-host-time >"$O/ncu-$b.txt" 2>&1
  echo "ncu $b: $(grep -A8 'swapab_sm90_kernel<' "$O/ncu-$b.txt" | grep -E 'gpu__time' | awk '{print $NF}' | tr '\n' ' ') us (GEMM1 GEMM2; left $(left)s)"
done
if [ $(left) -gt 240 ]; then
  timeout $(( $(left) - 20 )) $B/tests/moekit_cuda_tests >"$O/gpu-suite.log" 2>&1
  echo "gpu suite rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$O/gpu-suite.log" | tr '\n' ' ') (left $(left)s)"
  grep -E "^\[  FAILED" "$O/gpu-suite.log" | head
fi
finish
