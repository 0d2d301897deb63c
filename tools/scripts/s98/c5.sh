#!/usr/bin/env bash
# The TP1 grid (bf16 + fp8_per_tensor, M = 1..256) and the TP8 fp8_per_channel / fp8_block128 grid
# at this commit, check on, cuBLAS / cuBLASLt in the same run; reports against the H100's previous
# grids. ~6 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
timeout $(( $(left) - 100 )) $BB --backend cuda --preset all --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1.json" >"$O/grid-tp1.log" 2>&1
echo "grid tp1 rc=$? (left $(left)s)"
python3 tools/scripts/grid_report.py "$O/grid-tp1.json" --previous bench/results/2026-12-06-af999d3-h100-grid-tp1.json \
  --out "$O/grid-tp1-report.md" 2>&1 | head -n 4
timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme fp8_per_channel,fp8_block128 --check --no-host-time --json "$O/grid-tp8-cb.json" >"$O/grid-tp8-cb.log" 2>&1
echo "grid tp8 channel/block128 rc=$? (left $(left)s)"
python3 tools/scripts/grid_report.py "$O/grid-tp8-cb.json" --previous bench/results/2026-12-06-7da2461-h100-s80-grid-tp8-channel-block128.json \
  --out "$O/grid-tp8-cb-report.md" 2>&1 | head -n 4
finish
