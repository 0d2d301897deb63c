#!/usr/bin/env bash
# s104 (session 71), third call: MOEKIT_EXPERT_MLP_PLACE_AHEAD (the consumers place the next unit's
# slot list at a unit's start, so the producer finds it placed when it gets there: c1's phase table
# had gpt-oss TP8 e4m3 M = 64's producer waiting ~7.5 µs a CTA for slot lists). The tests
# (IssueOrderSwitchesGiveTheSameBits with it), racecheck / memcheck on the small cases (several
# units a CTA reuse the list buffers), the same-build A/B at c1's 18 points, then main (aa36d0d,
# .ab/mid, built beside) against this tree where the H200 grid read 5-6 % slower than f75d4b1's
# (one unit a CTA, where neither change acts) and at gpt-oss. carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:-Sm90ExpertMlp.PhaseBreakdown' 120
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
AB_SECONDS=100 REPS=2 ab place-ahead "env MOEKIT_EXPERT_MLP_PLACE_AHEAD=0 $BB" "$BB" --backend cuda --tp 8 \
  --no-baseline --no-host-time --check --path expert_mlp --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 \
  --tokens 16,64,256 --scheme bf16,fp8_per_tensor
if wait_main_build && [ "$(left)" -gt 40 ]; then
  AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time \
    --check --preset qwen3-30b-a3b,qwen3-235b-a22b,gpt-oss-120b --tokens 4,8,16,64 --scheme bf16,fp8_per_tensor
fi
[ "$(left)" -gt 30 ] && sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 25
finish
