#!/usr/bin/env bash
# Branch s79's second call, s78 alone (s76's row-pair maps taken out: c1 found its odd-row TMA loads
# an illegal instruction, tools/scripts/s76/README.md):
#   1. gpu_check.sh: configure, build; main's moekit-bench (.ab/mid) in the background; the whole
#      GPU suite, memcheck and racecheck on its subset (SmallForSanitizers' per-channel cases);
#   2. s78's A/B: fp8_per_channel auto -> expert_mlp forced, qwen3-30b TP8 M = 1..256;
#   3. main -> tree, auto, qwen3-30b TP8 bf16 and fp8_per_tensor (the 16-bit one-CTA kernels'
#      code changed with the patch, 220 -> 217 registers).
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh "$O/check" >"$O/check-build.txt" 2>&1
grep -E "^(configure|build) " "$O/check-build.txt"
[ -x "$BB" ] || { echo "no build"; finish; exit 1; }
echo "built (left $(left)s)"
start_main_build
MOEKIT_STEPS=gpu-suite,memcheck,racecheck MOEKIT_T_GPU=260 bash tools/scripts/gpu_check.sh "$O/check" >"$O/check.txt" 2>&1
grep -E "^(gpu-suite|memcheck|racecheck) |gpu suite:|ptxas" "$O/check.txt" | head -8
grep -E "\(Failed\)|\*\*\*Failed|Timeout" "$O/check/gpu_tests.log" | head -10
echo "suite done (left $(left)s)"
REPS=2 AB_SECONDS=110 ab channel "$BB" "env MOEKIT_PATH=expert_mlp $BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme fp8_per_channel
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
REPS=2 AB_SECONDS=$(( $(left) - 15 )) ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b --tokens 8,16,64,256 --scheme bf16,fp8_per_tensor
finish
