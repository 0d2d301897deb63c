#!/usr/bin/env bash
# s104's next call (prepared in session 71, not run): main with place_ahead.patch and
# act_stamps.patch applied (git apply both; they apply together), main itself in .ab/mid
# (tools/scripts/ab_base.sh main .ab/mid). The per-expert MLP tests with the phase test (the timed
# kernels' new activation stamps must leave the output's bits alone), racecheck / memcheck on the
# small cases, PLACE_AHEAD's same-build A/B, the phase table both ways (the e4m3 activation split
# into its values, its absmax exchange, the h_empty wait, the stores and the h_full wait), main
# against the tree (the three points the H200 grid read 5-6 % slower, gpt-oss). ~7 min;
# carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' 180
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases-default.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
AB_SECONDS=120 REPS=2 ab place-ahead "env MOEKIT_EXPERT_MLP_PLACE_AHEAD=0 $BB" "$BB" --backend cuda --tp 8 \
  --no-baseline --no-host-time --check --path expert_mlp --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 \
  --tokens 16,64,256 --scheme bf16,fp8_per_tensor
phase_tables MOEKIT_EXPERT_MLP_PLACE_AHEAD 0
if wait_main_build && [ "$(left)" -gt 60 ]; then
  AB_SECONDS=$(( $(left) - 20 )) REPS=2 ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time \
    --check --preset qwen3-30b-a3b,qwen3-235b-a22b,gpt-oss-120b --tokens 4,8,16,64 --scheme bf16,fp8_per_tensor
fi
finish
