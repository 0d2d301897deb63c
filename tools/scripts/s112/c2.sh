#!/usr/bin/env bash
# s112 c2: the Swap-AB epilogue's staged y (MOEKIT_EXPERT_MLP_STAGE_Y, on by default in this tree)
# and c1's question in one call, as long as LIMIT allows (seconds, default 560). This tree built
# with its tests and 3a219ec's moekit-bench (.ab/mid, staged with `tools/scripts/ab_base.sh 3a219ec
# .ab/mid`) beside it; the expert_mlp bit-equality tests; the A/B STAGE_Y=0 against the default
# (expert_mlp forced at qwen3-30b TP8, both schemes, check on); the TMA stream probe with GEMM1's
# tensor work a stage; the phase tables with it off and
# on; racecheck and memcheck of the small cases; then 3a219ec's build against this tree's with
# STAGE_Y=0 (c1's question: is qwen3-30b TP8 fp8 slower now than at 3a219ec?).
# carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.StagedY*:Sm90ExpertMlp.G2Swap*:Sm90ExpertMlp.WarmAct*:Sm90ExpertMlp.SmallForSanitizers' 90
# The bare TMA ring with GEMM1's tensor work a stage (math: none, the kernel's m64 form, Swap-AB).
timeout 40 $B/tools/bench/moekit-tma-stream-probe >"$O/stream-probe.txt" 2>&1
echo "probe rc=$? (left $(left)s)"; grep -E "3 x 64-row boxes \| (none|m64|swap)" "$O/stream-probe.txt" | head -24
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
[ "$(left)" -gt 80 ] && AB_SECONDS=$(( $(left) > 330 ? 130 : $(left) / 3 )) REPS=2 ab stage-y \
  "env MOEKIT_EXPERT_MLP_STAGE_Y=0 $BB" "$BB" $ARGS --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 60 ] && phase_tables MOEKIT_EXPERT_MLP_STAGE_Y 0 1
[ "$(left)" -gt 40 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
[ "$(left)" -gt 30 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
if [ "$(left)" -gt 60 ] && wait_main_build; then
  AB_SECONDS=$(( $(left) - 20 )) REPS=2 ab builds "$MB" "env MOEKIT_EXPERT_MLP_STAGE_Y=0 $BB" $ARGS \
    --preset qwen3-30b-a3b --tokens 4,16,64,256 --scheme bf16,fp8_per_tensor
fi
finish
