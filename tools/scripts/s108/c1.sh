#!/usr/bin/env bash
# s108: one build, two A/Bs (branch s108-ab = main + tools/scripts/s107/split_k.patch, then
# tools/scripts/s108/two_boxes.patch). In order while LIMIT allows (seconds, default 420):
# the per-expert MLP tests (SplitK*, TwoBoxesGiveTheSameBits and the rest), the phase tables with
# MOEKIT_EXPERT_MLP_TWO_BOXES=0 / 1 and MOEKIT_EXPERT_MLP_SPLIT_K=1 / 2 / 4, the A/B of six against
# two w13 boxes a stage (expert_mlp forced at its TP8 shapes, both schemes), the A/B of R = 1
# against 2 and 4 (the short exchange) at qwen3-30b TP8 M = 1..16, racecheck and memcheck on the
# small calls of both. carry [".deps"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"; grep -c . "$O/b/ptxas_spills.txt" 2>/dev/null
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' $(( $(left) > 300 ? 120 : $(left) / 3 ))
phase_tables MOEKIT_EXPERT_MLP_TWO_BOXES 0 1
phase_tables MOEKIT_EXPERT_MLP_SPLIT_K 1 2 4
for f in "$O"/phases-*.log; do
  echo "-- $(basename "$f")"
  grep -E "CTAs with units|GEMM1 incl|activation, h|GEMM2 tiles|consumers done" "$f" | grep -A4 -E "TP8 (fp8 )?M=(1|8|64):" | head -15
done
BASE="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 200 ? 110 : $(left) / 2 )) REPS=2 ab boxes \
  "env MOEKIT_EXPERT_MLP_TWO_BOXES=0 $BB" "env MOEKIT_EXPERT_MLP_TWO_BOXES=1 $BB" $BASE \
  --preset qwen3-30b-a3b,qwen3-235b-a22b,gpt-oss-120b,deepseek-v3 --tokens 4,8,16,64 --scheme bf16,fp8_per_tensor
for r in 2 4; do
  [ "$(left)" -gt 50 ] || break
  AB_SECONDS=$(( $(left) > 100 ? 40 : $(left) - 20 )) REPS=2 ab split$r "env MOEKIT_EXPERT_MLP_SPLIT_K=1 $BB" \
    "env MOEKIT_EXPERT_MLP_SPLIT_K=$r $BB" $BASE --preset qwen3-30b-a3b --tokens 1,2,4,8,16 --scheme bf16,fp8_per_tensor
done
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SplitKSmallForSanitizers' 25
[ "$(left)" -gt 25 ] && sanitize memcheck 'Sm90ExpertMlp.SplitKSmallForSanitizers' 20
if [ "$(left)" -gt 30 ]; then
  MOEKIT_EXPERT_MLP_TWO_BOXES=1 timeout 25 compute-sanitizer --tool racecheck $B/tests/moekit_cuda_tests \
    --gtest_filter='Sm90ExpertMlp.SmallForSanitizers' >"$O/racecheck-two-boxes.log" 2>&1
  echo "racecheck two boxes rc=$? $(grep -E 'RACECHECK SUMMARY' "$O/racecheck-two-boxes.log" | tail -1)"
fi
finish
