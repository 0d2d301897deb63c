#!/usr/bin/env bash
# s125 c2 of 2 (after c1.sh on the same warm machine; land the change where c1's tests, sanitizers
# and A/Bs hold): a same-run sweep of auto against forced expert_mlp and Swap-AB at gpt-oss TP8
# M = 64..256 (session 81's A/B ran forced expert_mlp at M = 128 / 256 in 175.7 / 185.7 µs against
# auto's Swap-AB 197.8 / 203.4 in c6e1d5f's grid, another run: the router may move there), then the
# TP1 grid (the change's calls; last H100 grid 2f78ff0) and the TP8 grid while time is left.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 540).
set -u
LIMIT=${LIMIT:-540}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
ARGS="--backend cuda --no-baseline --no-host-time --check"
timeout 60 $BB $ARGS --tp 8 --path auto,expert_mlp,swapab --preset gpt-oss-120b --tokens 64,128,256 \
  --scheme bf16,fp8_per_tensor --json "$O/sweep-tp8.json" >"$O/sweep-tp8.log" 2>&1
echo "sweep tp8 rc=$? (left $(left)s)"
timeout $(( $(left) / 2 )) $BB --backend cuda --preset all --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1.json" >"$O/grid-tp1.log" 2>&1
echo "grid tp1 rc=$? (left $(left)s)"
python3 tools/scripts/grid_report.py "$O/grid-tp1.json" --previous bench/results/2026-12-07-2f78ff0-h100-s106-grid-tp1.json \
  --out "$O/grid-tp1-report.md" 2>&1 | head -n 4
[ "$(left)" -gt 150 ] && grid_tp8
finish
