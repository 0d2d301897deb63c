#!/usr/bin/env bash
# s104 (session 71), c3 cut to the device time left (~4 min): PLACE_AHEAD's tests, racecheck on the
# small cases and its same-build A/B at c1's 18 points. carry [".deps"].
set -u
LIMIT=${LIMIT:-190}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.IssueOrderSwitchesGiveTheSameBits:Sm90ExpertMlp.SmallForSanitizers:Sm90ExpertMlp.GptOss*:Sm90ExpertMlp.ClusterSlices*' 60
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 30
AB_SECONDS=$(( $(left) - 10 )) REPS=2 ab place-ahead "env MOEKIT_EXPERT_MLP_PLACE_AHEAD=0 $BB" "$BB" --backend cuda --tp 8 \
  --no-baseline --no-host-time --check --path expert_mlp --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 \
  --tokens 16,64,256 --scheme bf16,fp8_per_tensor
finish
