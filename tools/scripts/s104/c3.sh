#!/usr/bin/env bash
# s104 (session 71), third call: MOEKIT_EXPERT_MLP_PLACE_AHEAD (the consumers place the next unit's
# slot list at a unit's start, so the producer finds it placed when it gets there: c1's phase table
# had gpt-oss TP8 e4m3 M = 64's producer waiting ~7.5 µs a CTA for slot lists). The tests
# (IssueOrderSwitchesGiveTheSameBits with it), racecheck / memcheck on the small cases (several
# units a CTA reuse the list buffers), the same-build A/B at c1's 18 points, the phase table both
# ways, the TP8 grid. carry [".deps"].
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:-Sm90ExpertMlp.PhaseBreakdown' 120
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
AB_SECONDS=150 REPS=2 ab place-ahead "env MOEKIT_EXPERT_MLP_PLACE_AHEAD=0 $BB" "$BB" --backend cuda --tp 8 \
  --no-baseline --no-host-time --check --path expert_mlp --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 \
  --tokens 16,64,256 --scheme bf16,fp8_per_tensor
phase_tables MOEKIT_EXPERT_MLP_PLACE_AHEAD 0 1
if [ "$(left)" -gt 70 ]; then
  if grep -q H200 "$O/gpu.txt"; then grid_tp8 bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  else grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json; fi
fi
finish
