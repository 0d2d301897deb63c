#!/usr/bin/env bash
# s107, fifth call: the short exchange (exchange_partials without the rank loop unrolled inside the
# value loops; c4's phase tables had the first form at ~10 µs a unit, cold code). In order while
# LIMIT allows: build, the split tests, the phase tables at R = 1 / 2 / 4, the A/B of R = 1 against
# 2 and 4 at qwen3-30b TP8 M = 1..16 (expert_mlp forced, both schemes), racecheck and memcheck on
# the small split calls, auto with R sized to the call. carry [".deps"].
set -u
LIMIT=${LIMIT:-240}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"; grep -i "split\|Lb1EEEv" "$O/b/ptxas_spills.txt" | head -5
run_tests 'Sm90ExpertMlp.SplitK*' 40
phase_tables MOEKIT_EXPERT_MLP_SPLIT_K 1 2 4
for v in 2 4; do
  grep -E "CTAs with units|consumers done|GEMM1 incl|activation, h|GEMM2 tiles" "$O/phases-MOEKIT_EXPERT_MLP_SPLIT_K-$v.log" |
    grep -A4 -E "M=(1|8):" | head -15
done
POINTS="--backend cuda --tp 8 --no-baseline --no-host-time --check --preset qwen3-30b-a3b --tokens 1,2,4,8,16 --scheme bf16,fp8_per_tensor"
for r in 2 4; do
  [ "$(left)" -gt 40 ] || break
  AB_SECONDS=$(( $(left) > 60 ? 40 : $(left) - 15 )) REPS=2 ab split$r "env MOEKIT_EXPERT_MLP_SPLIT_K=1 $BB" \
    "env MOEKIT_EXPERT_MLP_SPLIT_K=$r $BB" $POINTS --path expert_mlp
done
[ "$(left)" -gt 30 ] && sanitize racecheck Sm90ExpertMlp.SplitKSmallForSanitizers 25
[ "$(left)" -gt 25 ] && sanitize memcheck Sm90ExpertMlp.SplitKSmallForSanitizers 20
if [ "$(left)" -gt 25 ]; then
  env MOEKIT_EXPERT_MLP_SPLIT_K=auto timeout $(( $(left) - 10 )) $BB $POINTS --path auto,expert_mlp \
    --json "$O/auto-and-split-auto.json" >"$O/auto-and-split-auto.log" 2>&1
  echo "auto and split R=auto rc=$? (left $(left)s)"
fi
finish
