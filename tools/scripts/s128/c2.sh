#!/usr/bin/env bash
# s128 c2 (session 83), best right after c1 on the same warm machine (its build reused; a fresh
# machine builds here first): compute-sanitizer on gpu_check.sh's subsets, then s127's questions
# (tools/scripts/s127/c1.sh says why): main against a 2f78ff0 build at qwen3-30b TP8 fp8_per_channel
# M = 8..256, MOEKIT_EXPERT_MLP_TWO_BOXES=0 against the default there, the Swap-AB / auto sweep at
# TP8 M = 1..8, and Nsight Compute's per-kernel times of mixtral fp8 TP8's token-major chain.
# Setup: tools/scripts/ab_base.sh 2f78ff0 .ab/mid; stamp_tree.sh. carry [".deps/googletest", ".ab/mid"].
set -u
LIMIT=${LIMIT:-590}
source tools/scripts/device_call.sh
MID_JOBS=${MID_JOBS:-8} start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
MOEKIT_STEPS=memcheck,racecheck MOEKIT_T_MEMCHECK=150 MOEKIT_T_RACECHECK=100 \
  bash tools/scripts/gpu_check.sh "$O/san" >"$O/san.txt" 2>&1
grep -E "^(memcheck|racecheck) |^memcheck:|^racecheck:" "$O/san.txt"
echo "sanitized (left $(left)s)"
ARGS="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel"
if wait_main_build; then
  AB_SECONDS=100 REPS=2 ab old-main "$MB" "$BB" $ARGS --preset qwen3-30b-a3b --tokens 8,16,32,64,128,256
else
  echo "2f78ff0's build failed"; tail -5 "$O/mid-build.log"
fi
AB_SECONDS=$(( $(left) > 220 ? 90 : $(left) / 3 )) REPS=2 ab two-boxes "env MOEKIT_EXPERT_MLP_TWO_BOXES=0 $BB" "$BB" \
  $ARGS --preset qwen3-30b-a3b --tokens 8,16,32,64,128,256
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) > 120 ? 60 : $(left) - 40 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab \
    --tp 8 --preset mixtral-8x7b,qwen3-235b-a22b,deepseek-v3,qwen3-30b-a3b --tokens 1,2,4,8 \
    --scheme bf16,fp8_per_tensor --json "$O/sweep-swapab-plain.json" >"$O/sweep-swapab-plain.log" 2>&1
  echo "sweep rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-swapab-plain.json" 2>&1 | tail -n 12
fi
if [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 10 )) bash tools/scripts/profile_kernels.sh $BB "mixtral-8x7b 8 64 fp8_per_tensor" \
    "mixtral-8x7b 8 256 fp8_per_tensor" "mixtral-8x7b 8 64 bf16" >"$O/kernels-mixtral-tp8.txt" 2>&1
  echo "kernels rc=$? (left $(left)s)"; cat "$O/kernels-mixtral-tp8.txt" | cut -c1-200 | head -n 40
fi
finish
