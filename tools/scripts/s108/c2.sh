#!/usr/bin/env bash
# s108's landing call (two w13 boxes a GEMM1 stage by default), as long as LIMIT allows (seconds,
# default 560): the per-expert MLP, fuzz, dispatch and preload tests with the phase table, racecheck
# and memcheck on the small cases (two boxes, the default now), then the TP8 grid (auto, baselines,
# check on) against the same GPU's previous grid. carry [".deps"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' $(( $(left) > 400 ? 150 : 90 ))
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 40
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 40
case "$(cat "$O/gpu.txt")" in
  *H200*) PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json ;;
  *) PREV=bench/results/2026-12-07-2f78ff0-h100-s106-grid-tp8.json ;;
esac
grid_tp8 "$PREV"
finish
