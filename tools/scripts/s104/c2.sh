#!/usr/bin/env bash
# s104 (session 71), second call: MOEKIT_EXPERT_MLP_L2_AHEAD (lane 0 asks the TMA engine for the
# stages past the one it waits to fill, into L2, so the weight stream goes on while the ring is
# full: c1's phase table put gpt-oss TP8 e4m3's activation at 8-10 µs a unit with the ring full).
# The tests (IssueOrderSwitchesGiveTheSameBits), the same-build A/B of D = 0 against 4, 8 and 12 at
# the multi-unit shapes (expert_mlp forced), the phase table at the best, sanitizers. carry [".deps"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown' 120
for d in 4 8 12; do
  AB_SECONDS=110 REPS=2 ab l2-ahead-$d "env MOEKIT_EXPERT_MLP_L2_AHEAD=0 $BB" "env MOEKIT_EXPERT_MLP_L2_AHEAD=$d $BB" \
    --backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp \
    --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 --tokens 16,64,256 --scheme bf16,fp8_per_tensor | head -n 3
done
phase_tables MOEKIT_EXPERT_MLP_L2_AHEAD 8
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
MOEKIT_EXPERT_MLP_L2_AHEAD=8 sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
finish
