#!/usr/bin/env bash
# s106, push_halves' landing call, as long as LIMIT allows (seconds, default 420: ~7 min): on the
# branch with tools/scripts/s105/push_halves.patch, main in .ab/mid (tools/scripts/ab_base.sh main
# .ab/mid). In order, each step while time is left: the per-expert MLP, fuzz, dispatch and preload
# tests with the phase table, racecheck and memcheck on the small cases, main against the branch
# at auto's gpt-oss, qwen3-235b, deepseek-v3 TP8 e4m3 M = 4 / 8 / 16 / 64, then the cluster shapes
# with expert_mlp forced. LIMIT below 250: tests and sanitizers only (no main build, no A/B, not
# enough to land on). carry [".deps", ".ab/mid"] (".deps" alone below 250).
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
AB=$([ "$LIMIT" -ge 250 ] && echo 1 || echo 0)
[ "$AB" = 1 ] && start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' $(( $(left) > 165 ? 120 : ($(left) > 55 ? $(left) - 45 : 10) ))
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
grep -E "h stores and pushes|a CTA's weights|^\[ phases \] expert_mlp" "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers $(( $(left) > 200 ? 60 : 20 ))
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers $(( $(left) > 200 ? 60 : 20 ))
[ "$AB" = 1 ] || { finish; exit 0; }
wait_main_build || { echo "no main build"; finish; exit 1; }
AB_SECONDS=$(( $(left) > 110 ? 100 : $(left) - 10 )) REPS=2 ab halves "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 --tokens 4,8,16,64 --scheme fp8_per_tensor
if [ "$(left)" -gt 80 ]; then
  AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab forced "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
    --path expert_mlp --preset qwen3-235b-a22b,gpt-oss-120b --tokens 16,64 --scheme bf16,fp8_per_tensor
fi
finish
