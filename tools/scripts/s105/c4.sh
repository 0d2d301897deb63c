#!/usr/bin/env bash
# s105, the landing call for push_halves.patch (prepared, not run): on the branch with the patch,
# main in .ab/mid (tools/scripts/ab_base.sh main .ab/mid): the per-expert MLP, fuzz, dispatch and
# preload tests with the phase table, racecheck / memcheck on the small cases, main against the
# branch at c3's points (auto) and at the cluster shapes (expert_mlp forced), then the TP8 grid
# where time is left. ~9 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' 180
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
grep -E "h stores and pushes|^\[ phases \] expert_mlp" "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
wait_main_build || { echo "no main build"; finish; exit 1; }
AB_SECONDS=90 REPS=2 ab halves "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 --tokens 4,8,16,64 --scheme fp8_per_tensor
AB_SECONDS=120 REPS=2 ab forced "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --path expert_mlp --preset qwen3-235b-a22b,deepseek-v3,gpt-oss-120b --tokens 16,64,256 --scheme bf16,fp8_per_tensor
if [ "$(left)" -gt 200 ]; then
  if grep -q H200 "$O/gpu.txt"; then grid_tp8 bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  else grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json; fi
fi
finish
