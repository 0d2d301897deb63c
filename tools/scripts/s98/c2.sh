#!/usr/bin/env bash
# After s98 landed (session 68): Swap-AB GEMM2's tiles in the kernel's own copy pattern
# (moekit-launch-floor --only-gemm2-tiles, ~40 s), then the TP8 grid at this commit. ~6 min;
# carry [".deps"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_bench || exit 1
cmake --build build/bench --target moekit-launch-floor -j 16 >>"$O/build.log" 2>&1
echo "built (left $(left)s)"
timeout 90 build/bench/tools/bench/moekit-launch-floor --only-gemm2-tiles --json "$O/gemm2-tiles.json" >"$O/gemm2-tiles.txt" 2>&1
echo "gemm2 tiles rc=$? (left $(left)s)"; grep -E "TB/s" "$O/gemm2-tiles.txt"
PREV=bench/results/2026-12-06-719576d-h100-s92-grid-tp8.json
grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
grid_tp8 "$PREV"
finish
