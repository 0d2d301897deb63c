#!/usr/bin/env bash
# s115 c1: Swap-AB's staged y alone (s112/stage_y.patch on main) against main, and s114's w13 boxes
# ([gate 96 | up 96], on top of the staged y) against it: session 79's s114 call ran the boxes 0.86-0.97x
# at qwen3-30b TP8 against main (with the staged y off) while the probe streamed the box shape 10-60 %
# faster; this call says which change costs. Builds: this tree (gpu_check), main's moekit-bench (.ab/mid)
# and s114's (.ab/s114), the last two in the background; the expert_mlp tests; A/B main -> tree and
# tree -> s114 (TP8, check on); the expert_mlp kernels' registers and stack in both; racecheck and
# memcheck of the small cases. carry [".deps", ".ab/mid", ".ab/s114"]; LIMIT seconds (default 560).
# Ran in session 79 (H100; bench/results/2026-12-07-f3c5015-h100-s115-stage-y-vs-main.md). To stage it again:
#   git checkout -b s115 main && git apply tools/scripts/s112/stage_y.patch && git commit -qam s115
#   tools/scripts/ab_base.sh main .ab/mid && tools/scripts/ab_base.sh <a commit with both patches> .ab/s114
#   tools/scripts/stamp_tree.sh
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
( cmake -S .ab/s114 -B build/s114 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >"$O/s114-configure.log" 2>&1 && cmake --build build/s114 --target moekit-bench -j 4 >"$O/s114-build.log" 2>&1 ) &
S114_PID=$!
SB=build/s114/tools/bench/moekit-bench
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 120
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
if wait_main_build; then
  [ "$(left)" -gt 200 ] && AB_SECONDS=150 REPS=2 ab stage-y "$MB" "$BB" $ARGS \
    --preset qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3 --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
if wait "$S114_PID" && [ -x "$SB" ]; then
  [ "$(left)" -gt 120 ] && AB_SECONDS=80 REPS=2 ab boxes "$BB" "$SB" $ARGS \
    --preset qwen3-30b-a3b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
  for f in "$BB" "$SB"; do
    echo "== $f" >>"$O/res-usage.txt"
    cuobjdump -res-usage "$f" 2>&1 | grep -A1 expert_mlp_sm90_kernel >>"$O/res-usage.txt"
  done
  grep -c REG "$O/res-usage.txt"
else
  echo "s114's build failed"; tail -5 "$O/s114-build.log"
fi
[ "$(left)" -gt 40 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
[ "$(left)" -gt 30 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
finish
