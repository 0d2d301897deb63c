#!/usr/bin/env bash
# Branch s68's third call: the router retune on the lean gather (48 / 40 slots at N = 96; the
# cluster form's one-round band and N = 256).
#   1. build; Sm90ExpertMlp.* (AutoTakesItInItsRangeAndTheSwitchKeepsItOff: the new bands, the
#      resident clusters read on this GPU) and the dispatch / fuzz suites that run auto;
#   2. main (.ab/mid, 72d7272) -> this tree, auto, at the points the retune moves: qwen3-30b TP8
#      M = 5..10, qwen3-235b TP8 M = 4..16, deepseek-v3 TP8 M = 4..64, both schemes, two repeats;
#   3. the TP8 grid against main's H100 grid of 6b5076c.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid, then tools/scripts/stamp_tree.sh.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:*Dispatch*:*Fuzz*:-Sm90ExpertMlp.PhaseBreakdown" 200
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; }
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
REPS=2 AB_SECONDS=120 ab q30 "$MB" "$BB" $CHK --preset qwen3-30b-a3b --tokens 4,5,6,8,10 --scheme bf16,fp8_per_tensor
REPS=2 AB_SECONDS=120 ab q235 "$MB" "$BB" $CHK --preset qwen3-235b-a22b --tokens 4,8,10,12,16 --scheme bf16,fp8_per_tensor
REPS=2 AB_SECONDS=150 ab ds "$MB" "$BB" $CHK --preset deepseek-v3 --tokens 4,5,8,16,32,64 --scheme bf16,fp8_per_tensor
if [ $(left) -gt 80 ]; then
  timeout $(( $(left) - 20 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json $O/grid-tp8.json >$O/grid-tp8.log 2>&1
  echo "grid tp8 rc=$? (left $(left)s)"
  python3 tools/scripts/grid_report.py $O/grid-tp8.json --previous bench/results/2026-12-06-6b5076c-h100-grid-tp8.json \
    --out $O/grid-tp8-report.md 2>&1 | head -n 4
fi
finish
