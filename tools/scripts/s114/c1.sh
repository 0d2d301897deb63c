#!/usr/bin/env bash
# s114 c1: a GEMM1 stage's w13 tile as one 192-row box (N = 96 on one CTA) or two 96-row boxes
# ([gate 96 | up 96]; one_box.patch) and Swap-AB's staged y (s112/stage_y.patch, fixed), both
# applied on a branch of main, in one call as long as LIMIT allows (seconds, default 560): main's
# moekit-bench (.ab/mid, staged with `tools/scripts/ab_base.sh main .ab/mid`) built beside this
# tree; the expert_mlp tests (the reference and the bit-equality switches, the staged y's included);
# the TMA stream probe (the patch's box shapes with GEMM1's consumer);
# the A/B main against this tree with the staged y off (the boxes alone), then this tree's
# MOEKIT_EXPERT_MLP_STAGE_Y=0 against its default (the staged y alone), expert_mlp forced at TP8,
# check on; racecheck and memcheck of the small cases. carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 120
# The bare ring's rate a CTA for the patch's stage shapes (one 192-row box, two 96-row boxes) with
# the kernel's GEMM1 consumer.
timeout 40 $B/tools/bench/moekit-tma-stream-probe >"$O/stream-probe.txt" 2>&1
echo "probe rc=$? (left $(left)s)"; grep -E "(192-row box|96-row boxes) \| (none|m64)[^|]*\| 1 \| (1|8|16|32) \|" "$O/stream-probe.txt"
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
if wait_main_build; then
  [ "$(left)" -gt 150 ] && AB_SECONDS=$(( $(left) > 400 ? 150 : $(left) / 3 )) REPS=2 ab boxes \
    "$MB" "env MOEKIT_EXPERT_MLP_STAGE_Y=0 $BB" $ARGS --preset qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3 \
    --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
[ "$(left)" -gt 100 ] && AB_SECONDS=$(( $(left) > 260 ? 130 : $(left) / 2 )) REPS=2 ab stage-y \
  "env MOEKIT_EXPERT_MLP_STAGE_Y=0 $BB" "$BB" $ARGS --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 40 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
[ "$(left)" -gt 30 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
finish
