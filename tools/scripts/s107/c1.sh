#!/usr/bin/env bash
# s107, GEMM1 split along K over a cluster (MOEKIT_EXPERT_MLP_SPLIT_K=R, branch s107): its first
# GPU run. In order, each step while LIMIT (seconds, default 420) allows: the per-expert MLP tests
# (SplitKMatchesReference, SplitKSmallForSanitizers and the rest), racecheck and memcheck on the
# small split calls, then one build's A/B of R = 1 against 2 and 4 at qwen3-30b TP8 (the one-CTA
# form's shape: expert_mlp forced, M = 1 / 2 / 4 / 8 / 16, bf16 and fp8_per_tensor), then one run
# of auto (gemv at M <= 4) and expert_mlp with R sized to the call (MOEKIT_EXPERT_MLP_SPLIT_K=auto)
# at the same points, for the router's rule.
# carry [".deps"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' $(( $(left) > 250 ? 150 : $(left) - 90 ))
sanitize racecheck Sm90ExpertMlp.SplitKSmallForSanitizers 60
sanitize memcheck Sm90ExpertMlp.SplitKSmallForSanitizers 40
POINTS="--backend cuda --tp 8 --no-baseline --no-host-time --check --preset qwen3-30b-a3b --tokens 1,2,4,8,16 --scheme bf16,fp8_per_tensor"
for r in 2 4; do
  [ "$(left)" -gt 60 ] || break
  AB_SECONDS=$(( $(left) > 110 ? 90 : $(left) - 15 )) REPS=2 ab split$r "env MOEKIT_EXPERT_MLP_SPLIT_K=1 $BB" \
    "env MOEKIT_EXPERT_MLP_SPLIT_K=$r $BB" $POINTS --path expert_mlp
done
if [ "$(left)" -gt 45 ]; then  # auto (gemv at M <= 4; expert_mlp, split too, from 8) and expert_mlp forced, R sized to the call
  env MOEKIT_EXPERT_MLP_SPLIT_K=auto timeout $(( $(left) - 15 )) $BB $POINTS --path auto,expert_mlp \
    --json "$O/auto-and-split-auto.json" >"$O/auto-and-split-auto.log" 2>&1
  echo "auto and split R=auto rc=$? (left $(left)s)"; grep -E "^\| qwen" "$O/auto-and-split-auto.log" | head -24
fi
finish
