#!/usr/bin/env bash
# s109 c3: the warm warp's start after the first stage (MOEKIT_EXPERT_MLP_WARM_ACT=2, on warm_bar;
# c2's form waited on the ring's barrier in CTAs without units and hung): the per-expert MLP tests
# (WarmActGivesTheSameBits runs 1 and 2), the A/B 1 against 2 (expert_mlp forced at qwen3-30b TP8,
# M = 4..256, both schemes), racecheck with 2. carry [".deps"].
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 60
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor"
[ "$(left)" -gt 100 ] && AB_SECONDS=$(( $(left) > 200 ? 130 : $(left) - 60 )) REPS=2 ab w1w2 \
  "env MOEKIT_EXPERT_MLP_WARM_ACT=1 $BB" "env MOEKIT_EXPERT_MLP_WARM_ACT=2 $BB" $ARGS
export MOEKIT_EXPERT_MLP_WARM_ACT=2
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
finish
