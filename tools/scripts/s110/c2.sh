#!/usr/bin/env bash
# s110 c2: the TP8 grid (auto, baselines, check on) at this tree against the same GPU's previous
# grid, while LIMIT allows (seconds, default 300); meant for the H200 (run kind nvidia-h200: its last
# grid is 8bedaec's, before two boxes and the warm warp). carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
case "$(cat "$O/gpu.txt")" in
  *H200*) PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json ;;
  *) PREV=bench/results/2026-12-07-3e96004-h100-s111-grid-tp8.json ;;
esac
grid_tp8 "$PREV"
finish
