#!/usr/bin/env bash
# s106/c1.sh cut to ~5 min (the device budget left after failed starts): build, the per-expert
# MLP and fuzz tests with the phase table, racecheck on the small cases, main (.ab/mid) against
# the branch at auto's gpt-oss, qwen3-235b, deepseek-v3 TP8 e4m3 M = 4 / 8 / 16 / 64.
# carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-280}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*' 80
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
grep -E "h stores and pushes|a CTA's weights|^\[ phases \] expert_mlp" "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 40
wait_main_build || { echo "no main build"; finish; exit 1; }
AB_SECONDS=$(( $(left) - 12 )) REPS=2 ab halves "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 --tokens 4,8,16,64 --scheme fp8_per_tensor
finish
