#!/usr/bin/env bash
# The TP8 grid at this commit (bf16 + fp8_per_tensor, M = 1..256, cuBLAS / cuBLASLt in the same run,
# check on) and its report against the same GPU's previous grid. ~5 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-580}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
PREV=bench/results/2026-12-06-719576d-h100-s92-grid-tp8.json
grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
grid_tp8 "$PREV"
finish
