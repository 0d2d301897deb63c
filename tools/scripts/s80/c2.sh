#!/usr/bin/env bash
# Branch s80's second call: the router takes fp8_per_channel onto the cluster form (32..2048 slots,
# c1's A/B) and the one-CTA per-channel layout is main's again (red_cluster's rows on clusters only;
# c1's main -> tree read 0.98-0.99x at qwen3-30b):
#   1. main's moekit-bench (.ab/mid) beside; build; Sm90ExpertMlp.*, Sm90Dispatch.*, Sm90Fuzz.*;
#      memcheck on SmallForSanitizers;
#   2. main -> tree, auto, fp8_per_channel, qwen3-30b TP8 M = 8..256 (the one-CTA form: same code
#      and layout as main) and qwen3-235b TP8 M = 4..256 (the cluster form in auto);
#   3. the TP8 grids: bf16 + fp8_per_tensor against 8a8c341's, fp8_per_channel + fp8_block128
#      against 8a8c341's.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:Sm90Dispatch.*:Sm90Fuzz.*:-Sm90ExpertMlp.PhaseBreakdown" 150
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 90
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
echo "main built (left $(left)s)"
REPS=2 AB_SECONDS=150 ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b,qwen3-235b-a22b --tokens 4,8,16,64,256 --scheme fp8_per_channel
grid_tp8 bench/results/2026-12-06-8a8c341-h100-s79-grid-tp8.json
timeout 120 $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme fp8_per_channel,fp8_block128 --check --no-host-time --json "$O/grid-tp8-channel-block128.json" >"$O/grid-tp8-channel-block128.log" 2>&1
echo "grid channel/block128 rc=$? (left $(left)s)"
python3 tools/scripts/grid_report.py "$O/grid-tp8-channel-block128.json" \
  --previous bench/results/2026-12-06-8a8c341-h100-s79-grid-tp8-channel-block128.json --out "$O/grid-tp8-channel-block128-report.md" 2>&1 | head -n 4
finish
