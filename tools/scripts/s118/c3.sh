#!/usr/bin/env bash
# s118 c3: the router's expert_mlp slot bounds retuned from c2's same-run sweep (one-CTA from 32 /
# 24 slots, one round of clusters from 40 / 24): this tree's build, the expert_mlp GPU tests (the
# router's boundaries in AutoTakesItInItsRangeAndTheSwitchKeepsItOff), the TP8 grid.
# carry [".deps"]; LIMIT seconds (default 230).
# Prepared in session 80, not yet run (the session's device time ran out); stage on main with
# tools/scripts/stamp_tree.sh. Its PREV is c6e1d5f's grid (the same kernels, the router before the retune).
set -u
LIMIT=${LIMIT:-230}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 75
PREV=bench/results/2026-12-07-c6e1d5f-h100-s118-grid-tp8.json
grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
grid_tp8 "$PREV"
finish
